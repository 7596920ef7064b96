"""Deterministic snapshots of a simulated host, for golden files and renderer tests."""

from __future__ import annotations

from gpu_exporter.metrics.catalogue import COLLECTORS
from gpu_exporter.model import Snapshot
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.scenario import Faults
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock


def fixed_snapshot(gpus: int, faults: Faults | None = None) -> Snapshot:
    """The second sample of a fixed-clock simulated host: every device collector on."""
    clock = FakeClock()
    backend = SimulatedBackend(gpus, clock=clock.wall, faults=faults)
    all_collectors = frozenset(c.name for c in COLLECTORS) - {"process", "host", "xid"}
    sampler = Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=all_collectors,
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    sampler.sample_once()
    clock.now += 10.0
    snapshot = sampler.sample_once()
    sampler.stop(0)
    return snapshot
