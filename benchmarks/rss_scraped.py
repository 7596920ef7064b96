"""Resident memory over 10 minutes of Prometheus scrapes: issue 14's "RSS after 10 minutes".

gpu-exporter runs its real NVML backend on the benchmark's compiled stand-in driver
(`standin.py`: 8 H100s with GPM and 18 NVLink links, the 64 process trees of `bench.py` as
GPU processes), at a 1 s interval, scraped every 15 s as Prometheus scrapes (OpenMetrics
first, gzip). Its RSS is printed after warm-up, after the first scrape and every minute,
and the final figure is written between the `rss` markers of README.md. Measured, never
asserted: the target is 28 MiB (set when the host was a Python fake whose own 3.4 MiB
were counted in; the stand-in is C and adds little). `make bench-rss` runs it (about 11
minutes).
"""

from __future__ import annotations

import argparse
import http.client
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import standin
from bench import (
    GPUS,
    PROCESSES_PER_GPU,
    PROMETHEUS_EVERY_SECONDS,
    PROMETHEUS_HEADERS,
    REPO,
    exporter_command,
    free_port,
    spawn_jobs,
    stop_jobs,
    wait_ready,
)

from gpu_exporter.docs import write_section

MINUTES = 10.0
TARGET_MIB = 28.0


def mib(proc: psutil.Process) -> float:
    return float(proc.memory_info().rss) / 2**20


def scrape(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics", headers=PROMETHEUS_HEADERS)
    conn.getresponse().read()
    conn.close()


def measure(minutes: float) -> tuple[float, float, list[tuple[float, float]]]:
    """(RSS after warm-up, after the first scrape, [(minutes, RSS)] each minute) in MiB."""
    jobs = spawn_jobs()
    program: subprocess.Popen[bytes] | None = None
    try:
        time.sleep(1.0)  # let the children start, so the trees are complete
        port = free_port()
        with tempfile.TemporaryDirectory() as tmp:
            env = standin.environment(
                [j.pid for j in jobs], Path(tmp) / "calls.bin", Path(tmp) / "names.json", GPUS
            )
            program = subprocess.Popen(
                exporter_command(port),
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_ready(port)
            proc = psutil.Process(program.pid)
            started = time.monotonic()
            time.sleep(3.0)
            warm = mib(proc)
            scrape(port)
            first = mib(proc)
            print(f"warm-up {warm:.1f} MiB, after the first scrape {first:.1f} MiB", flush=True)
            marks: list[tuple[float, float]] = []
            due = started + 3.0
            while True:
                due += PROMETHEUS_EVERY_SECONDS
                time.sleep(max(0.0, due - time.monotonic()))
                elapsed = (time.monotonic() - started) / 60
                if elapsed > minutes:
                    break
                scrape(port)
                if int(elapsed) > len(marks):
                    marks.append((elapsed, mib(proc)))
                    print(f"{elapsed:4.1f} min {marks[-1][1]:.1f} MiB", flush=True)
            marks.append((elapsed, mib(proc)))
            return warm, first, marks
    finally:
        if program is not None:
            program.send_signal(signal.SIGTERM)
            program.wait(10)
        stop_jobs(jobs)


def report(minutes: float, warm: float, first: float, marks: list[tuple[float, float]]) -> str:
    final = marks[-1][1]
    verdict = "met" if final <= TARGET_MIB else "**missed**"
    every = ", ".join(f"{m:.0f} min {v:.1f}" for m, v in marks[:-1])
    return (
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, "
        f"{psutil.cpu_count()} CPUs, Python {platform.python_version()}: gpu-exporter on the "
        f"stand-in NVML host ({GPUS} H100s, {GPUS * PROCESSES_PER_GPU} process trees), scraped "
        f"every {PROMETHEUS_EVERY_SECONDS:.0f} s as Prometheus does. Resident memory after "
        f"warm-up {warm:.1f} MiB, after the first scrape {first:.1f} MiB, then {every} MiB; "
        f"**after {minutes:.0f} minutes {final:.1f} MiB** (issue 14's target <= "
        f"{TARGET_MIB:.0f} MiB: {verdict})."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=MINUTES)
    parser.add_argument("--write", metavar="README", help="record the figure in this file")
    args = parser.parse_args()
    warm, first, marks = measure(args.minutes)
    line = report(args.minutes, warm, first, marks)
    print(line)
    if args.write:
        write_section(args.write, "rss", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
