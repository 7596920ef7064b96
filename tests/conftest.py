"""Shared pytest fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

import pynvml
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fake_nvml import FakeNvmlLib, Install


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Install:
    """Put a fake library where pynvml keeps its CDLL; monkeypatch restores the globals."""
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)

    def _install(lib: FakeNvmlLib) -> FakeNvmlLib:
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        pynvml._nvmlGetFunctionPointer_cache.clear()
        return lib

    return _install
