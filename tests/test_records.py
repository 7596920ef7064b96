"""Every dataclass of the package shares `Record.__repr__`, which writes what the
dataclasses module would (`gpu_exporter/records.py`: 0.22 MiB of resident memory); the
records a sample makes have `quick_init`'s `__init__`, which makes what dataclasses'
frozen one makes."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from typing import Any

import pytest

import gpu_exporter
from gpu_exporter.model import DeviceReading, DeviceSample, Snapshot
from gpu_exporter.records import Record, quick_init


def package_dataclasses() -> list[type[Any]]:
    """Every dataclass defined in a module of the package (the extras' modules too)."""
    found = []
    for module_info in pkgutil.walk_packages(gpu_exporter.__path__, "gpu_exporter."):
        if module_info.name.endswith("__main__"):
            continue
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and dataclasses.is_dataclass(value)
                and value.__module__ == module.__name__
            ):
                found.append(value)
    return found


CLASSES = package_dataclasses()


def test_the_package_has_its_hundred_dataclasses_each_a_record_with_no_repr_of_its_own() -> None:
    assert len(CLASSES) > 100
    own = [c.__qualname__ for c in CLASSES if c.__repr__ is not Record.__repr__]
    assert own == [], "declare each @dataclass(..., repr=False) on a Record"


def filled(cls: type[Any], values: list[object]) -> object:
    """An instance of `cls` with `values` in its fields, made without its __init__."""
    instance = object.__new__(cls)
    for f, value in zip(dataclasses.fields(cls), values, strict=True):
        object.__setattr__(instance, f.name, value)
    return instance


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_the_shared_repr_writes_what_dataclasses_writes(cls: type[Any]) -> None:
    fields = dataclasses.fields(cls)
    twin = dataclasses.make_dataclass(
        cls.__name__,
        [(f.name, object, dataclasses.field(repr=f.repr)) for f in fields],
    )
    twin.__qualname__ = cls.__qualname__
    values: list[object] = [
        (n, "a'b", 1.5e-3, None, (1, "x"), frozenset(), {"k": [2]})[n % 7]
        for n in range(len(fields))
    ]
    assert repr(filled(cls, values)) == repr(twin(*values))


def test_a_record_inside_itself_is_written_as_dataclasses_write_it() -> None:
    @dataclasses.dataclass(repr=False)
    class Node(Record):
        name: str
        children: list[object]

    @dataclasses.dataclass
    class Twin:
        name: str
        children: list[object]

    node, twin = Node("a", []), Twin("a", [])
    node.children.append(node)
    twin.children.append(twin)
    assert (
        repr(node)
        == repr(twin).replace("Twin", "Node")
        == (
            "test_a_record_inside_itself_is_written_as_dataclasses_write_it.<locals>.Node"
            "(name='a', children=[...])"
        )
    )


QUICK = [c for c in CLASSES if getattr(c.__init__, "quick", False)]


def test_the_records_each_sample_makes_have_the_quick_init() -> None:
    assert {DeviceReading, DeviceSample, Snapshot} <= set(QUICK)
    assert len(QUICK) >= 30


def twin_of(cls: type[Any]) -> type[Any]:
    """`cls`'s fields, their defaults and factories, as a frozen dataclass of its own."""
    specs: list[Any] = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            specs.append((f.name, object, dataclasses.field(default=f.default)))
        elif f.default_factory is not dataclasses.MISSING:
            specs.append((f.name, object, dataclasses.field(default_factory=f.default_factory)))
        else:
            specs.append((f.name, object))
    return dataclasses.make_dataclass(cls.__name__, specs, frozen=True)


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_the_quick_init_makes_what_the_dataclass_init_makes(cls: type[Any]) -> None:
    twin = twin_of(cls)
    ours, theirs = inspect.signature(cls), inspect.signature(twin)
    assert [(p.name, p.kind, repr(p.default)) for p in ours.parameters.values()] == [
        (p.name, p.kind, repr(p.default)) for p in theirs.parameters.values()
    ]
    fields = dataclasses.fields(cls)
    values = [f"value of {f.name}" for f in fields]
    assert vars(cls(*values)) == vars(twin(*values))
    assert vars(cls(**dict(zip([f.name for f in fields], values, strict=True)))) == vars(
        twin(*values)
    )
    required = [
        f"value of {f.name}"
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    made, made_again = cls(*required), cls(*required)
    assert vars(made) == vars(twin(*required))
    for f in fields:  # a factory's value is made per instance, as dataclasses makes it
        if f.default_factory is not dataclasses.MISSING:
            assert getattr(made, f.name) is not getattr(made_again, f.name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.index = 1  # still frozen
    with pytest.raises(TypeError):
        cls(*values, "one too many")


def test_quick_init_refuses_what_it_cannot_copy() -> None:
    @dataclasses.dataclass(repr=False)
    class Open(Record):
        a: int

    @dataclasses.dataclass(frozen=True, repr=False)
    class Checked(Record):
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
    class Named(Record):
        a: int

    for cls in (Open, Checked, Named):
        with pytest.raises(TypeError):
            quick_init(cls)
