"""Sampling the installed fake NVML library through the real sampler, on a fake clock."""

from __future__ import annotations

from gpu_exporter.model import Snapshot
from gpu_exporter.sampling.sampler import Sampler, XidView
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.clock import FakeClock
from tests.support.fake_nvml import FakeGpu, FakeNvmlLib, Install


def sample_fake(collectors: set[str], n: int = 3, xid: XidView | None = None) -> Snapshot:
    """The `n`th one-second sample of the installed fake library, on a fake clock."""
    clock = FakeClock()
    backend = PynvmlBackend(monotonic=clock.monotonic)
    sampler = one_second_sampler(backend, clock, frozenset(collectors), xid)
    for _ in range(n):
        snapshot = sampler.sample_once()
        clock.now += 1
    sampler.stop(0)
    return snapshot


def started(
    install: Install, *gpus: FakeGpu, driver_version: str | None = None
) -> tuple[FakeNvmlLib, PynvmlBackend, FakeClock]:
    """The fake library installed with `gpus` (on the fake's default driver, or
    `driver_version`), and a backend on a fake clock, initialised."""
    lib = install(
        FakeNvmlLib(list(gpus), **({"driver_version": driver_version} if driver_version else {}))
    )
    clock = FakeClock()
    backend = PynvmlBackend(monotonic=clock.monotonic)
    backend.init()
    return lib, backend, clock


def one_second_sampler(
    backend: PynvmlBackend,
    clock: FakeClock,
    collectors: frozenset[str],
    xid: XidView | None = None,
) -> Sampler:
    """A sampler at a 1 s interval on the fake clock (the test calls `sample_once`)."""
    return Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=collectors,
        xid=xid,
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
