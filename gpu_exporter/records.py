"""`Record`: the base of the package's dataclasses, with the one `__repr__` they share.

`@dataclass` compiles a `__repr__` for each class it decorates, and each stays resident:
0.22 MiB of the daemon's memory for some 110 classes (`benchmarks/README.md`, the tenth
sitting). Each of ours is declared `@dataclass(..., repr=False)` on a `Record`, and this
one method writes what the generated one would, character for character
(`tests/test_records.py`).
"""

from __future__ import annotations

import dataclasses
import reprlib


class Record:
    """A dataclass's base: its `repr()` is `Name(field=value, ...)`, as dataclasses writes it."""

    __slots__ = ()

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        fields: tuple[dataclasses.Field[object], ...] = dataclasses.fields(self)  # type: ignore[arg-type]
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields if f.repr)
        return f"{type(self).__qualname__}({shown})"
