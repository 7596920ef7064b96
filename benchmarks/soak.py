"""Soak: 2000 samples at a 10 ms interval with new PIDs every sample.

Drives the production sampler (`cli.make_sampler`, process attribution included) and the
exposition renderer in-process on a simulated host of 8 GPUs, giving every GPU new
processes each sample, and records that resident memory grows by less than 5 MiB and
the thread count stays flat between the warm-up (sample 200) and the end. Exits 1 when
either does not hold. `make soak` runs it and writes the result to benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from gpu_exporter.config import load_settings
from gpu_exporter.daemon import make_backend, make_sampler, render
from gpu_exporter.docs import write_section

SAMPLES = 2000
WARM_UP = 200
INTERVAL_SECONDS = 0.010
GPUS = 8
PROCESSES_PER_GPU = 4
MAX_GROWTH_MIB = 5.0


def write_scenario(path: Path, sample: int, real_pids: list[int]) -> None:
    """New PIDs every sample: most do not exist (exited), a few are real processes."""
    processes = []
    for gpu in range(GPUS):
        for k in range(PROCESSES_PER_GPU):
            pid = 4_000_000 + (sample * GPUS * PROCESSES_PER_GPU + gpu * PROCESSES_PER_GPU + k)
            if k == 0:
                pid = real_pids[(sample + gpu) % len(real_pids)]
            processes.append({"gpu": gpu, "pid": pid, "memory_bytes": 2**30, "sm_ratio": 0.3})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"processes": processes}))
    os.replace(tmp, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", metavar="README", help="record the result in this file")
    args = parser.parse_args()
    me = psutil.Process()
    real_pids = [p.pid for p in psutil.process_iter()][:64] or [os.getpid()]
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "scenario.json"
        write_scenario(scenario, 0, real_pids)
        settings = load_settings(
            ["--simulate", str(GPUS), "--simulate.scenario", str(scenario), "--log.level", "error"]
        )
        backend = make_backend(settings)
        sampler = make_sampler(settings, backend)
        rss_warm = threads_warm = 0.0
        started = time.monotonic()
        for sample in range(1, SAMPLES + 1):
            write_scenario(scenario, sample, real_pids)
            render(sampler.sample_once(), settings).body(openmetrics=False, compressed=True)
            if sample == WARM_UP:
                rss_warm = me.memory_info().rss / 2**20
                threads_warm = threading.active_count()
            time.sleep(INTERVAL_SECONDS)
        elapsed = time.monotonic() - started
        rss_end = me.memory_info().rss / 2**20
        threads_end = threading.active_count()
        sampler.stop(0)
    growth = rss_end - rss_warm
    ok = growth < MAX_GROWTH_MIB and threads_end <= threads_warm
    result = (
        f"Soak ({time.strftime('%Y-%m-%d')}): {SAMPLES} samples "
        f"at {INTERVAL_SECONDS * 1000:.0f} ms "
        f"on {GPUS} simulated GPUs with {GPUS * PROCESSES_PER_GPU} new PIDs every sample, "
        f"{elapsed:.0f} s: resident memory {rss_warm:.1f} MiB after {WARM_UP} samples, "
        f"{rss_end:.1f} MiB at the end (growth {growth:+.2f} MiB, limit {MAX_GROWTH_MIB:.0f} MiB); "
        f"threads {threads_warm:.0f} -> {threads_end}. {'PASS' if ok else 'FAIL'}."
    )
    print(result)
    if args.write:
        write_section(args.write, "soak", result)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
