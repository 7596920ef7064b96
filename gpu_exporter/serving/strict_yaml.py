"""YAML for the web config: safe, bounded, and with Go's idea of a string.

`load` reads a document the way exporter-toolkit's strict yaml.v2 decoding would see it,
and refuses what could make a small file expensive or ambiguous:

- aliases (`*name`) are refused, so a file cannot expand into a huge structure ("billion
  laughs") or one that contains itself; nothing in a web config needs them;
- mappings and lists nested deeper than MAX_DEPTH levels, and documents of more than
  MAX_NODES values, are refused (the pure-Python parser needs seconds for a long list);
- a key given twice in one mapping is refused (yaml.v2's strict mode does the same),
  rather than the last one silently winning;
- a plain scalar that YAML reads as a number, boolean or date becomes a `Scalar`: a
  `str` holding the text as written, with the typed value beside it. Go decodes into
  typed fields, so `X-XSS-Protection: 1` is the string "1" there, and `http2: yes` is
  true; `Scalar` lets the caller do the same.

Every error is a `YamlError` with one line of text.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode

MAX_DEPTH = 32  # mappings and lists inside each other; a web config needs 3
MAX_NODES = 10_000  # keys, values and list items in one document


class YamlError(Exception):
    """The document cannot be read; the message is one line, with line and column."""


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


def _where(node_or_event: Any) -> str:
    mark = node_or_event.start_mark
    return f"line {mark.line + 1} column {mark.column + 1}"


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise YamlError(f"{_where(event)}: YAML aliases (*name) are not allowed here")
        self._depth += 1
        self._nodes += 1
        try:
            if self._nodes > MAX_NODES:
                raise YamlError(f"{_where(event)}: more than {MAX_NODES} values")
            if self._depth > MAX_DEPTH:
                raise YamlError(f"{_where(event)}: nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a list or mapping as a key is refused below; merges are flattened
            key = self.construct_object(key_node)
            if key in seen:
                raise YamlError(f"{_where(key_node)}: key {key_node.value!r} is given twice")
            seen.add(key)
        return super().construct_mapping(node, deep)


def _keep_text(construct: Any) -> Any:
    def constructor(loader: SafeConstructor, node: ScalarNode) -> Scalar:
        return Scalar(node.value, construct(loader, node))

    return constructor


for _tag, _construct in (
    ("bool", SafeConstructor.construct_yaml_bool),
    ("int", SafeConstructor.construct_yaml_int),
    ("float", SafeConstructor.construct_yaml_float),
    ("timestamp", SafeConstructor.construct_yaml_timestamp),
):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _keep_text(_construct))


def load(data: bytes) -> Any:
    """The one YAML document in `data` (UTF-8, or UTF-16 with a byte order mark).

    Returns None for an empty document; raises YamlError.
    """
    loader: _Loader | None = None
    try:
        loader = _Loader(data)  # reads the first bytes already
        return loader.get_single_data()
    except YamlError:
        raise
    except yaml.reader.ReaderError as error:
        if error.encoding != "unicode":  # the bytes do not decode
            raise YamlError(
                f"not {error.encoding} text: byte {error.character:#04x} at offset "
                f"{error.position} ({error.reason})"
            ) from None
        raise YamlError(
            f"character {error.character:#06x} at offset {error.position} is not allowed "
            f"in YAML ({error.reason})"
        ) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        context = f"{error.context}, " if error.context and error.problem else ""
        raise YamlError(f"{where}{context}{error.problem or error.context}") from None
    except yaml.YAMLError as error:
        raise YamlError(str(error)) from None
    except RecursionError:
        raise YamlError(f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()
