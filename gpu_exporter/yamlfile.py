"""Reading an operator's YAML file without letting it crash or hang the exporter.

Config files, web config files and scenario files are all read here, so every one of
them is refused the same way, with one line naming the problem:

- not UTF-8 text (binary garbage, Latin-1 bytes, UTF-16): refused, naming the byte;
- aliases (`*name`): refused. A "billion laughs" file of a kilobyte expands to gigabytes
  through them, and a self-referencing alias builds a structure that recursion never
  leaves; settings never need them;
- nesting deeper than MAX_DEPTH, or a file larger than MAX_BYTES: refused;
- invalid YAML: the line and column of the problem.

Only the safe loader's types are built (no `!!python/...` objects).
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64


class YamlFileError(ValueError):
    """A YAML file that cannot be used; the message is one line, without the file name."""


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing aliases and deep nesting while it composes."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed", self._mark()
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", self._mark()
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def _mark(self) -> Any:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        return event.start_mark


def one_line(text: str) -> str:
    """`text` on one line, for messages quoting what a file holds."""
    return " ".join(text.split())


def parse_yaml(data: bytes) -> Any:
    """The YAML document in `data`; raises YamlFileError with one line."""
    if len(data) > MAX_BYTES:
        raise YamlFileError(f"larger than {MAX_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise YamlFileError(
            f"not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from None
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: safe types only
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        problem = error.problem or error.context or "invalid YAML"
        raise YamlFileError(one_line(f"invalid YAML: {where}{problem}")) from None
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise YamlFileError(one_line(f"invalid YAML: {first}")) from None
    except RecursionError:
        raise YamlFileError(f"invalid YAML: nested deeper than {MAX_DEPTH} levels") from None


def read_yaml(path: str) -> Any:
    """The YAML document in the file at `path`; raises YamlFileError (OSError included)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise YamlFileError(f"cannot read: {error.strerror or error}") from None
    return parse_yaml(data)
