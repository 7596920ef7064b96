"""Reading an operator's YAML file without letting it crash, hang or mislead the exporter.

Config files, web config files and scenario files are all read here, so every one of
them is refused the same way, with one line naming the problem:

- larger than MAX_BYTES: refused before parsing;
- bytes that are not UTF-8 (or UTF-16 with a byte order mark), and control characters:
  refused, naming the byte and its offset;
- aliases (`*name`): refused. A "billion laughs" file of a kilobyte expands to gigabytes
  through them, and a self-referencing alias builds a structure that recursion never
  leaves; settings never need them;
- mappings and lists nested deeper than MAX_DEPTH levels, or more than MAX_NODES values
  (the pure-Python parser needs seconds for a long list): refused;
- an integer written with more than MAX_NUMBER_CHARS characters: refused;
- a key given twice in one mapping: refused (Go's strict yaml.v2 decoding does the
  same), rather than the last one silently winning;
- anything else that is not one YAML document: the line and column of the problem.

Only the safe loader's types are built (no `!!python/...` objects). With `keep_text`, a
plain scalar that YAML reads as a number, boolean or date becomes a `Scalar`: a `str`
holding the text as written, with the typed value beside it. Go decodes into typed
fields, so `X-XSS-Protection: 1` is the string "1" there; `Scalar` lets the web config
read a file as exporter-toolkit does.

PyYAML is imported on the first parse, so an exporter started without a file never
loads it.
"""

from __future__ import annotations

import functools
from typing import Any

# PyYAML's pure-Python scanner reads about 5 characters a microsecond: 64 KiB is the most
# it reads in about 10 ms (a 1 MiB file took 0.2 s), and ten times the largest config,
# web config or scenario file we ship or test
MAX_BYTES = 64 * 1024
MAX_DEPTH = 32  # mappings and lists inside each other; the deepest file we read needs 4
MAX_NODES = 2_000  # keys, values and list items in one document: 1,000 users of a web config
MAX_NUMBER_CHARS = 64  # of an integer as written: no setting needs more, and Python refuses
# to read an integer of more than 4300 digits (an exception no caller would expect)
_MERGE = "tag:yaml.org,2002:merge"


class YamlFileError(ValueError):
    """A YAML file that cannot be used; the message is one line, without the file name."""


class Scalar(str):
    """A plain scalar that YAML resolves to a number, boolean or date.

    As a `str` it is the scalar's text, as written; `value` is what YAML resolves it to
    (`int`, `float`, `bool`, `datetime.date` or `datetime.datetime`).
    """

    value: object

    def __new__(cls, text: str, value: object) -> Scalar:
        scalar = super().__new__(cls, text)
        scalar.value = value
        return scalar


def one_line(text: str) -> str:
    """`text` on one line, for messages quoting what a file holds."""
    return " ".join(text.split())


def _invalid(where: Any, problem: str) -> YamlFileError:
    mark = where.start_mark
    return YamlFileError(f"invalid YAML: line {mark.line + 1} column {mark.column + 1}: {problem}")


@functools.cache
def _loaders() -> tuple[Any, Any]:
    """(the strict loader, the loader that keeps scalar text), built on first use."""
    import yaml
    from yaml.constructor import SafeConstructor
    from yaml.nodes import MappingNode, Node, ScalarNode

    class _Loader(yaml.SafeLoader):
        """The safe loader, refusing aliases, deep nesting, long documents and repeated keys."""

        def __init__(self, stream: bytes) -> None:
            super().__init__(stream)
            self._depth = 0
            self._nodes = 0

        def compose_node(self, parent: Node | None, index: Any) -> Node | None:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.AliasEvent):
                raise _invalid(event, "YAML aliases (*name) are not allowed")
            self._depth += 1
            self._nodes += 1
            try:
                if self._nodes > MAX_NODES:
                    raise _invalid(event, f"more than {MAX_NODES} values")
                if self._depth > MAX_DEPTH:
                    raise _invalid(event, f"nested more than {MAX_DEPTH} levels deep")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[object] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
                    continue  # a list or mapping as a key is refused below; merges are flattened
                key = self.construct_object(key_node)
                if key in seen:
                    raise _invalid(key_node, f"key {key_node.value!r} is given twice")
                seen.add(key)
            return super().construct_mapping(node, deep)

    def _int(loader: Any, node: ScalarNode) -> Any:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _invalid(node, f"an integer of {len(node.value)} characters is too long")
        return SafeConstructor.construct_yaml_int(loader, node)

    _Loader.add_constructor("tag:yaml.org,2002:int", _int)

    class _TextLoader(_Loader):
        """`_Loader`, keeping each typed plain scalar's text as a `Scalar`."""

    def _keep_text(construct: Any) -> Any:
        def constructor(loader: SafeConstructor, node: ScalarNode) -> Scalar:
            return Scalar(node.value, construct(loader, node))

        return constructor

    for _tag, _construct in (
        ("bool", SafeConstructor.construct_yaml_bool),
        ("int", _int),
        ("float", SafeConstructor.construct_yaml_float),
        ("timestamp", SafeConstructor.construct_yaml_timestamp),
    ):
        _TextLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _keep_text(_construct))

    return _Loader, _TextLoader


def parse_yaml(data: bytes, *, keep_text: bool = False) -> Any:
    """The one YAML document in `data`; None for an empty one; raises YamlFileError."""
    if len(data) > MAX_BYTES:
        raise YamlFileError(f"larger than {MAX_BYTES} bytes")
    import yaml

    strict, text = _loaders()
    loader: Any = None
    try:
        loader = (text if keep_text else strict)(data)  # reads the first bytes already
        return loader.get_single_data()
    except YamlFileError:
        raise
    except yaml.reader.ReaderError as error:
        if error.encoding != "unicode":  # the bytes do not decode
            raise YamlFileError(
                f"invalid YAML: not {error.encoding} text: byte {error.character:#04x} at "
                f"offset {error.position} ({error.reason})"
            ) from None
        raise YamlFileError(
            f"invalid YAML: character {error.character:#06x} at offset {error.position} is "
            f"not allowed ({error.reason})"
        ) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        context = f"{error.context}, " if error.context and error.problem else ""
        problem = error.problem or error.context
        raise YamlFileError(one_line(f"invalid YAML: {where}{context}{problem}")) from None
    except yaml.YAMLError as error:
        raise YamlFileError(one_line(f"invalid YAML: {error}")) from None
    except RecursionError:
        raise YamlFileError(f"invalid YAML: nested more than {MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str, *, keep_text: bool = False) -> Any:
    """The YAML document in the file at `path`; raises YamlFileError (OSError included)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise YamlFileError(f"cannot read: {error.strerror or error}") from None
    return parse_yaml(data, keep_text=keep_text)
