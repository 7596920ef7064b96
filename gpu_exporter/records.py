"""`Record`: the base of the package's dataclasses, with the one `__repr__` they share.

`@dataclass` compiles a `__repr__` for each class it decorates, and each stays resident:
0.22 MiB of the daemon's memory for some 110 classes (`benchmarks/README.md`, the tenth
sitting). Each of ours is declared `@dataclass(..., repr=False)` on a `Record`, and this
one method writes what the generated one would, character for character
(`tests/test_records.py`).

`quick_init` gives a frozen record made every interval a quicker `__init__`: dataclasses'
frozen one looks up `object.__setattr__` by name for every field (1.38 us for 8 fields),
this one binds it once per instance (0.99 us), and the sampler fills some 900 fields a
sample at 8 GPUs (`benchmarks/README.md`, the eleventh sitting). Each field still goes
through `object.__setattr__`, so the values stay in the instance's own storage: writing
them into `self.__dict__` instead (0.51 us) made every later read of a field 2.6 times
slower (a dict of its own per instance, where CPython keeps attributes inline), and the
exposition reads them all at each scrape.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any, TypeVar

R = TypeVar("R", bound=type[Any])


class _Factory:
    """The default of a parameter whose field has a `default_factory`: made per instance."""

    def __repr__(self) -> str:
        return "<factory>"  # as dataclasses shows it in the signature


_FACTORY = _Factory()

_GLOBALS: dict[str, Any] = {"_FACTORY": _FACTORY, "_setattr": object.__setattr__}
"""The names a generated `__init__` reads besides its parameters (no field may be one)."""


class Record:
    """A dataclass's base: its `repr()` is `Name(field=value, ...)`, as dataclasses writes it."""

    __slots__ = ()

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        fields: tuple[dataclasses.Field[object], ...] = dataclasses.fields(self)  # type: ignore[arg-type]
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields if f.repr)
        return f"{type(self).__qualname__}({shown})"


def quick_init(cls: R) -> R:
    """Replace a frozen dataclass's `__init__` with one of the same parameters that
    sets each field through `object.__setattr__` bound once to the instance. For plain
    records only: positional fields, no `__post_init__`, no `InitVar`; anything else is
    refused at import."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"{cls.__qualname__}: quick_init is for frozen dataclasses")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__qualname__}: quick_init calls no __post_init__")
    names: list[str] = []
    made: list[str] = []
    env: dict[str, Any] = dict(_GLOBALS)
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only or f.name in ("self", "_set", *_GLOBALS):
            raise TypeError(f"{cls.__qualname__}.{f.name}: quick_init takes plain fields")
        if f.default is not dataclasses.MISSING:
            env[f"_default_{f.name}"] = f.default
            names.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            names.append(f"{f.name}=_FACTORY")
            made.append(f"  if {f.name} is _FACTORY: {f.name} = _factory_{f.name}()")
        else:
            names.append(f.name)
    stores = [f"  _set({f.name!r}, {f.name})" for f in dataclasses.fields(cls)]
    source = "\n".join(
        [
            f"def __init__(self, {', '.join(names)}):",
            *made,
            "  _set = _setattr.__get__(self)",
            *stores,
        ]
    )
    exec(source, env)  # our own field names, as dataclasses does
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.quick = True  # what tests/test_records.py compares with dataclasses' own
    cls.__init__ = init
    return cls
