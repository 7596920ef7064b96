"""Deterministic snapshots of a simulated host, for golden files and renderer tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from benchmarks.history_memory import snapshot, static
from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.model import (
    Attribution,
    DeviceReading,
    GpmReading,
    MemoryReading,
    MigDevice,
    MigInstanceReading,
    MigReading,
    ProcessSample,
    Snapshot,
)
from gpu_exporter.sampling.sampler import KernelLogView, Sampler
from gpu_exporter.sources.fabric_daemons import FabricDaemonWatch
from gpu_exporter.sources.scenario import Faults
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock


def fixed_snapshot(
    gpus: int,
    faults: Faults | None = None,
    kernel_log: KernelLogView | None = None,
    hardware: str = "hgx-h100",
) -> Snapshot:
    """The second sample of a fixed-clock simulated host (of `hardware`, a
    `simulated_hardware.HARDWARE` name): every device collector on, the fabric daemons
    looked for among the simulated host's, and `xid` with a kernel log."""
    clock = FakeClock()
    backend = SimulatedBackend(gpus, clock=clock.wall, faults=faults, hardware=hardware)
    all_collectors = frozenset(c.name for c in COLLECTORS) - {"process", "host", "xid"}
    sampler = Sampler(
        backend,
        fabric_daemons=FabricDaemonWatch(backend.daemons_running, monotonic=clock.monotonic),
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=all_collectors | ({"xid"} if kernel_log is not None else set()),
        kernel_log=kernel_log,
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    sampler.sample_once()
    # 12 s on: the sample buffers are due again (read before they wrap, buffer_reads.py)
    clock.now += 12.0
    snapshot = sampler.sample_once()
    sampler.stop(0)
    return snapshot


def mig_snapshot(
    instances: Mapping[int, tuple[str, int, int, float]], processes: tuple[ProcessSample, ...]
) -> Snapshot:
    """The history benchmark's one GPU, MIG-partitioned: per GPU-instance id its profile,
    memory used and total (bytes) and graphics-engine activity (0..1), compute instance 0
    each; with `processes` (their `gpu_instance` set) attributed."""
    mig = MigReading(
        devices=tuple(
            MigDevice(f"MIG-{gi}", gi, 0, profile) for gi, (profile, *_) in instances.items()
        ),
        instances={
            gi: MigInstanceReading(total, used, GpmReading(1.0, graphics_engine_ratio=active))
            for gi, (_, used, total, active) in instances.items()
        },
    )
    base = snapshot(0.0, [static(0)])
    device = replace(
        base.devices[0],
        reading=DeviceReading(
            memory=MemoryReading(total_bytes=80 * 1024**3, used_bytes=40 * 1024**3), mig=mig
        ),
        attribution=Attribution(
            processes=processes, unattributed_memory_bytes=0, process_count=len(processes)
        ),
    )
    return replace(base, devices=(device,))
