"""The live page's history: its memory for 8 GPUs with 12 hours kept.

Fills a `History` (`gpu_exporter.sampling.history`) with synthetic snapshots of 8 GPUs,
4 processes each, and the host: 11 hours at one sample a minute, then the last hour at
one sample every 10 seconds and its last 6 minutes at one a second, so that every tier is
full (1-second points for 6 minutes, 10-second means for an hour, 1-minute means for 12
hours). Measures what the History holds with tracemalloc (the
Python heap it allocated and still holds after the fill) and exits 1 above the 8 MiB
bound of issue 13. `make bench-history` runs it and writes the figure to
benchmarks/README.md; `tests/test_history.py` runs it too.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from datetime import date

from gpu_exporter.docs import write_section
from gpu_exporter.model import (
    ActivityTotals,
    Attribution,
    DeviceReading,
    DeviceSample,
    DeviceStatic,
    HostSample,
    MemoryReading,
    PowerReading,
    ProcessSample,
    Snapshot,
    TemperatureReading,
    UtilizationReading,
)
from gpu_exporter.sampling.history import History

GPUS = 8
PROCESSES_PER_GPU = 4
HOURS = 12
LIMIT_MIB = 8.0
START = 1_700_000_000.0


def static(index: int) -> DeviceStatic:
    return DeviceStatic(
        index=index,
        uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id=None,
        serial=None,
        vbios_version=None,
        compute_capability="9.0",
        max_clocks_hertz={},
        slowdown_temperature_celsius=87.0,
        shutdown_temperature_celsius=92.0,
        pcie_max_generation=None,
        pcie_max_width=None,
    )


def snapshot(t: float, statics: list[DeviceStatic]) -> Snapshot:
    """A plausible sample at `t` seconds after START."""
    devices = []
    for s in statics:
        processes = tuple(
            ProcessSample(
                pid=str(1000 + s.index * 10 + k),
                process="python",
                user="alice",
                context="compute",
                memory_used_bytes=2 * 1024**3,
                cpu_seconds=t * 1.5,
                workers=2,
            )
            for k in range(PROCESSES_PER_GPU)
        )
        devices.append(
            DeviceSample(
                index=s.index,
                static=s,
                up=True,
                reading=DeviceReading(
                    utilization=UtilizationReading(gpu_ratio=(t % 7) / 7),
                    memory=MemoryReading(total_bytes=80 * 1024**3, used_bytes=40 * 1024**3),
                    temperature=TemperatureReading(gpu_celsius=60.0 + t % 5),
                    power=PowerReading(watts=300.0 + t % 50, limit_watts=700.0),
                ),
                busy_seconds=t * 0.5,
                activity=ActivityTotals(graphics_engine_seconds=t * 0.5, sm_seconds=t * 0.3),
                attribution=Attribution(
                    processes=processes,
                    unattributed_memory_bytes=0,
                    process_count=PROCESSES_PER_GPU,
                ),
            )
        )
    return Snapshot(
        timestamp_seconds=START + t,
        duration_seconds=0.01,
        samples_total=0,
        backend="simulated",
        nvml_up=True,
        devices=tuple(devices),
        host=HostSample(
            cpu_busy_seconds=t * 3.0,
            cpu_iowait_seconds=None,
            cpus=16,
            memory_total_bytes=128 * 1024**3,
            memory_available_bytes=100 * 1024**3,
            load1=1.0,
        ),
    )


def fill(history: History, gpus: int = GPUS, hours: int = HOURS) -> int:
    """Feed `hours` of samples, a minute apart, then 10 seconds apart for the last hour
    (the 10-second tier's span) and a second apart for its last 6 minutes (the 1-second
    tier's): every tier full with the fewest samples; returns how many were added."""
    statics = [static(i) for i in range(gpus)]
    last_hour, fine = (hours - 1) * 3600.0, hours * 3600.0 - 360
    times = [60.0 * k for k in range((hours - 1) * 60)]
    times += [last_hour + 10.0 * k for k in range(324)]
    times += [fine + k for k in range(360)]
    for t in times:
        history.add(snapshot(t, statics))
    return len(times)


def measure() -> dict[str, float]:
    """Bytes the filled History holds, as tracemalloc counts them."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    history = History()
    samples = fill(history)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return {
        "gpus": GPUS,
        "hours": HOURS,
        "samples": samples,
        "kept_gpus": history.gpus_kept(),
        "bytes": held,
        "mib": held / 1024**2,
        "limit_mib": LIMIT_MIB,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="README", help="write the figure between markers")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = measure()
    ok = figures["mib"] <= LIMIT_MIB
    if args.json:
        print(json.dumps(figures))
    result = (
        f"History ({date.today().isoformat()}): {GPUS} GPUs with {HOURS} hours kept "
        f"({figures['samples']:.0f} samples: 1-minute for 11 hours, then 10-second, then"
        " 1-second for 6 minutes), "
        f"{PROCESSES_PER_GPU} processes per GPU: {figures['mib']:.2f} MiB held "
        f"(tracemalloc), limit {LIMIT_MIB:.0f} MiB. {'PASS' if ok else 'FAIL'}."
    )
    if not args.json:
        print(result)
    if args.write:
        write_section(args.write, "history", result)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
