"""Sampling the installed fake NVML library through the real sampler, on a fake clock."""

from __future__ import annotations

from gpu_exporter.model import Snapshot
from gpu_exporter.sampling.sampler import Sampler, XidView
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.clock import FakeClock


def sample_fake(collectors: set[str], n: int = 3, xid: XidView | None = None) -> Snapshot:
    """The `n`th one-second sample of the installed fake library, on a fake clock."""
    clock = FakeClock()
    sampler = Sampler(
        PynvmlBackend(monotonic=clock.monotonic),
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=frozenset(collectors),
        xid=xid,
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    for _ in range(n):
        snapshot = sampler.sample_once()
        clock.now += 1
    sampler.stop(0)
    return snapshot
