"""The daemon's glibc malloc settings (their effect on memory: `make bench`)."""

from __future__ import annotations

import ctypes

import pytest

from gpu_exporter import malloc_settings


@pytest.fixture(autouse=True)
def no_operator_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, _value in malloc_settings.SETTINGS.values():
        monkeypatch.delenv(variable, raising=False)


def test_glibc_takes_both_settings() -> None:
    assert malloc_settings.tune_malloc() == ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"]


def test_an_operators_setting_is_left_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert malloc_settings.tune_malloc() == ["MALLOC_MMAP_THRESHOLD_"]


def test_a_c_library_without_mallopt_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoMallopt:
        def __init__(self, _name: object) -> None:
            pass

        def __getattr__(self, name: str) -> object:
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    assert malloc_settings.tune_malloc() == []
