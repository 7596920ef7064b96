"""What judging the memory patterns costs a sample: CPU time per GPU and interval, and the
state it keeps.

`MemoryPatterns.observe` (`gpu_exporter/sampling/memory_patterns.py`) runs once per sample
on the sampler's thread. Here it judges an hour of the default 5 s interval (720 samples)
of 8 GPUs, each with 4 processes playing the simulated host's framework traces (PyTorch
under pressure, TensorFlow's reservation, two flat sharers), plus one MIG GPU of 7
instances: the median CPU time of a sample over `RUNS` runs, per GPU (or instance), and
the state held at the end (tracemalloc). Pure Python, no driver, no I/O: it does not touch
the idle host's figures (no NVML call, no /proc read, no thread).

    make bench-memory-patterns
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.history_memory import snapshot, static
from gpu_exporter.docs import write_section
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

GPUS = 8
PROCESSES = 4
INSTANCES = 7
INTERVAL = 5.0
SAMPLES = 720  # an hour at the default interval
RUNS = 5
GIB = 1024**3
TRACES = (("pytorch-pressure", 0.0), ("tensorflow", 0.24), ("flat", 0.3), ("flat", 0.3))


def idle_at(t: float) -> list[DeviceSample]:
    """An idle host's 8 GPUs: no process, 1% of the memory used (the driver's own)."""
    return [
        replace(
            snapshot(0.0, [static(i)]).devices[0],
            reading=DeviceReading(memory=MemoryReading(total_bytes=80 * GIB, used_bytes=GIB)),
            attribution=Attribution((), 0, 0),
        )
        for i in range(GPUS)
    ]


def devices_at(t: float) -> list[DeviceSample]:
    """The 8 GPUs and the MIG GPU at `t` seconds."""
    out = []
    total = 80 * GIB
    for index in range(GPUS):
        held = [int(share(trace, t, level) * total / PROCESSES) for trace, level in TRACES]
        processes = tuple(
            ProcessSample(
                pid=str(1000 + 10 * index + k),
                process="python",
                user="alice",
                context="compute",
                memory_used_bytes=m,
            )
            for k, m in enumerate(held)
        )
        base = snapshot(0.0, [static(index)]).devices[0]
        out.append(
            replace(
                base,
                reading=DeviceReading(
                    memory=MemoryReading(total_bytes=total, used_bytes=sum(held))
                ),
                attribution=Attribution(processes, 0, len(processes)),
            )
        )
    instance_total = 10 * GIB
    used = int(share("pytorch-pressure", t, 0.0) * instance_total)
    mig = MigReading(
        devices=tuple(MigDevice(f"MIG-{gi}", gi, 0, "1g.10gb") for gi in range(INSTANCES)),
        instances={gi: MigInstanceReading(instance_total, used) for gi in range(INSTANCES)},
    )
    processes = tuple(
        ProcessSample(
            pid=str(2000 + gi),
            process="python",
            user="bob",
            context="compute",
            gpu_instance=str(gi),
            compute_instance="0",
            memory_used_bytes=used,
        )
        for gi in range(INSTANCES)
    )
    base = snapshot(0.0, [static(GPUS)]).devices[0]
    out.append(
        replace(
            base,
            reading=DeviceReading(
                memory=MemoryReading(total_bytes=80 * GIB, used_bytes=7 * used), mig=mig
            ),
            attribution=Attribution(processes, 0, len(processes)),
        )
    )
    return out


def run() -> tuple[float, int]:
    """(CPU seconds of one sample's judgement, median over the hour; bytes held at the end)."""
    samples = [devices_at(k * INTERVAL) for k in range(SAMPLES)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    patterns = MemoryPatterns()
    times = []
    for k, devices in enumerate(samples):
        t0 = time.process_time()
        patterns.observe(devices, now=k * INTERVAL, wall=k * INTERVAL)
        times.append(time.process_time() - t0)
    del samples, devices  # the inputs (and what reading them materialised) go: the state stays
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    return statistics.median(times), held


def timed(host: Callable[[float], list[DeviceSample]]) -> float:
    """The median sample's wall seconds without tracemalloc (which slows allocation)."""
    samples = [host(k * INTERVAL) for k in range(SAMPLES)]
    per_run = []
    for _ in range(RUNS):
        patterns = MemoryPatterns()
        times = []
        for k, devices in enumerate(samples):
            t0 = time.perf_counter()
            patterns.observe(devices, now=k * INTERVAL, wall=k * INTERVAL)
            times.append(time.perf_counter() - t0)
        per_run.append(statistics.median(times))
    return statistics.median(per_run)


def measure() -> dict[str, float]:
    _, held = run()
    seconds = timed(devices_at)
    idle = timed(idle_at)
    judged = GPUS + INSTANCES
    return {
        "idle_per_gpu_us": idle * 1e6 / GPUS,
        "gpus": GPUS,
        "instances": INSTANCES,
        "processes_per_gpu": PROCESSES,
        "sample_us": seconds * 1e6,
        "per_gpu_us": seconds * 1e6 / judged,
        "per_gpu_share_of_interval": seconds / judged / INTERVAL,
        "held_kib": held / 1024,
    }


def summary(m: dict[str, float]) -> str:
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    return (
        f"Memory patterns ({day}, {platform.python_implementation()} "
        f"{platform.python_version()}): {m['gpus']:.0f} GPUs with {m['processes_per_gpu']:.0f} "
        f"processes each and a MIG GPU of {m['instances']:.0f} instances, an hour at the 5 s "
        f"interval: {m['sample_us']:.0f} us a sample, {m['per_gpu_us']:.1f} us per GPU or "
        f"instance and interval ({m['per_gpu_share_of_interval'] * 1e6:.1f} us of the sampler's "
        f"time a second per GPU at 5 s, wall time on a shared machine); state held after the "
        f"hour {m['held_kib']:.0f} KiB. An idle "
        f"host's GPU (no process, memory not near full): {m['idle_per_gpu_us']:.1f} us per "
        "interval."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--write", metavar="FILE")
    args = parser.parse_args()
    m = measure()
    if args.json:
        print(json.dumps(m))
    else:
        print(summary(m))
    if args.write:
        write_section(args.write, "memory-patterns", summary(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
