"""Framework memory traces played through the exporter's per-interval judgement.

The simulated host's traces (`gpu_exporter.sources.simulated_memory`) give each process's
memory; `play` builds each interval's DeviceSample (a whole GPU, or one MIG instance of a
MIG GPU), runs it through `MemoryPatterns` on a fast clock at the default 5 s interval, and
returns the samples as the sampler would publish them. `exposition_series` turns them into
the series a scrape at 15 s or 60 s would have stored, rendered by the real catalogue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from benchmarks.history_memory import snapshot, static
from gpu_exporter.metrics.render import text
from gpu_exporter.metrics.specs import RenderOptions
from gpu_exporter.model import (
    Attribution,
    DeviceReading,
    DeviceSample,
    MemoryReading,
    MigDevice,
    MigInstanceReading,
    MigReading,
    ProcessSample,
)
from gpu_exporter.sampling.memory_patterns import MemoryPatterns
from gpu_exporter.sources.simulated_memory import share

GIB = 1024**3
GPU_TOTAL = 80 * GIB
INSTANCE = 2  # the MIG GPU instance the MIG traces run on
INSTANCE_TOTAL = 40 * GIB
INTERVAL = 5.0  # the default --collect.interval
WALL0 = 1_800_000_000.0
COLLECTORS = frozenset({"memory", "mig", "process"})


@dataclass(frozen=True)
class Traced:
    """A process playing a trace: listed from `start` to `end` seconds (it starts after
    the exporter, as a job does); from `dies` on it is a dead owner (NVML lists it, its
    memory stays, it is no live process)."""

    pid: int
    trace: str
    level: float
    start: float = 10.0
    end: float | None = None
    dies: float | None = None
    process: str = "python"
    user: str = "alice"
    namespace: str = "ml"
    pod: str = "train-0"

    def listed(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


def device_at(t: float, procs: Sequence[Traced], *, mig: bool = False) -> DeviceSample:
    """GPU 0 at `t` seconds: its memory what the listed processes hold (on MIG instance
    INSTANCE, of INSTANCE_TOTAL, when `mig`)."""
    total = INSTANCE_TOTAL if mig else GPU_TOTAL
    held = {p.pid: int(share(p.trace, t - p.start, p.level) * total) for p in procs if p.listed(t)}
    used = sum(held.values())
    live = [
        ProcessSample(
            pid=str(p.pid),
            process=p.process,
            user=p.user,
            context="compute",
            gpu_instance=str(INSTANCE) if mig else "",
            compute_instance="0" if mig else "",
            namespace=p.namespace,
            pod=p.pod,
            memory_used_bytes=held[p.pid],
        )
        for p in procs
        if p.listed(t) and (p.dies is None or t < p.dies)
    ]
    base = snapshot(0.0, [static(0)]).devices[0]
    if mig:
        reading = DeviceReading(
            memory=MemoryReading(total_bytes=GPU_TOTAL, used_bytes=used),
            mig=MigReading(
                devices=(MigDevice("MIG-2", INSTANCE, 0, "3g.40gb"),),
                instances={INSTANCE: MigInstanceReading(INSTANCE_TOTAL, used)},
            ),
        )
    else:
        reading = DeviceReading(memory=MemoryReading(total_bytes=GPU_TOTAL, used_bytes=used))
    attribution = Attribution(
        processes=tuple(live), unattributed_memory_bytes=0, process_count=len(live)
    )
    return replace(base, reading=reading, attribution=attribution)


def play(
    procs: Sequence[Traced], seconds: float, *, mig: bool = False, step: float = INTERVAL
) -> list[tuple[float, DeviceSample]]:
    """Every interval's (time, judged device) over `seconds`."""
    patterns = MemoryPatterns()
    out: list[tuple[float, DeviceSample]] = []
    n = int(seconds / step) + 1
    for i in range(n):
        t = i * step
        (judged,) = patterns.observe([device_at(t, procs, mig=mig)], now=t, wall=WALL0 + t)
        out.append((t, judged))
    return out


def pattern(device: DeviceSample) -> str | None:
    """The pattern of the GPU, or of its MIG instance INSTANCE."""
    if device.memory_pattern is not None:
        return device.memory_pattern.pattern
    found = device.mig_memory_patterns.get(INSTANCE)
    return found.pattern if found is not None else None


def exposition(t: float, device: DeviceSample) -> str:
    """The text a scrape at `t` reads: the real catalogue's rendering of the sample."""
    base = snapshot(WALL0 + t, [static(0)])
    sample = replace(base, devices=(device,), collectors=COLLECTORS)
    return text(sample, RenderOptions(kubernetes=True))


def scraped(
    played: Sequence[tuple[float, DeviceSample]], scrape: float, names: Sequence[str]
) -> dict[str, list[str]]:
    """Per series (as promtool writes it, instance and job added) the values a scrape every
    `scrape` seconds stores, '_' where the series was absent; only metrics in `names`."""
    points = [(t, d) for t, d in played if t % scrape == 0]
    series: dict[str, list[str]] = {}
    for n, (t, device) in enumerate(points):
        for line in exposition(t, device).splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            if name not in names:
                continue
            key = _with_target(name_labels)
            series.setdefault(key, ["_"] * len(points))[n] = value
    return series


def _with_target(name_labels: str) -> str:
    target = 'instance="node-1:9872",job="gpu-exporter"'
    if "{" not in name_labels:
        return f"{name_labels}{{{target}}}"
    head, rest = name_labels.split("{", 1)
    return f"{head}{{{target},{rest}"
