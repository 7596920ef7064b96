"""Shared pytest fixtures."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.certs import Pki, make_pki
from tests.support.exporter import Exporter, start_exporter
from tests.support.fake_nvml import FakeNvmlLib, Install
from tests.support.web import SIMULATE

# The files that take longest (wall seconds on 2 cores, most first), started first: each
# file runs whole on one pytest-xdist worker (`--dist loadfile`), so one that starts last
# is the run's tail. The Makefile's `--no-loadscope-reorder` keeps this order (xdist
# would otherwise start the files with the most tests first). Measured 2026-11-29.
SLOWEST_FILES = (
    "test_rules.py",
    "test_kubelet.py",
    "test_fleet.py",
    "test_nvlink5_e2e.py",
    "test_self_check.py",
    "test_live_page.py",
    "test_web_security.py",
    "test_chargeback_e2e.py",
    "test_alertmanager.py",
    "test_clock_steps_e2e.py",
    "test_config_hostile.py",
    "test_memory_pattern_rules.py",
    "test_cli_errors.py",
    "test_page_charts.py",
    "test_history.py",
    "test_web_floods.py",
    "test_faults_e2e.py",
    "test_packaging.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first (SLOWEST_FILES), the rest in their order."""
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Certificates made once per run by `openssl` (see tests/support/certs.py)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., Exporter]]:
    """start(*args, config=web_config): a simulated exporter, not waited for, stopped after."""
    running: list[Exporter] = []

    def start(*args: str, config: Path | None = None) -> Exporter:
        extra = ["--web.config.file", str(config)] if config is not None else []
        exporter = start_exporter([*SIMULATE, *extra, *args], tmp_path, ready=False)
        running.append(exporter)
        return exporter

    yield start
    for exporter in running:
        exporter.stop()
