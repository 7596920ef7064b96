"""The daemon's cap on glibc malloc arenas (its effect on memory: `make bench`)."""

from __future__ import annotations

import ctypes

import pytest

from gpu_exporter import malloc_arenas


def test_glibc_takes_the_arena_cap() -> None:
    assert malloc_arenas.limit_malloc_arenas() is True


def test_an_operators_malloc_arena_max_is_left_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert malloc_arenas.limit_malloc_arenas() is False


def test_a_c_library_without_mallopt_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoMallopt:
        def __init__(self, _name: object) -> None:
            pass

        def __getattr__(self, name: str) -> object:
            raise AttributeError(name)

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    assert malloc_arenas.limit_malloc_arenas() is False
