"""What the scan for the holders of the GPUs' device files costs, and what it costs a sample.

A synthetic /proc on disk (a temporary directory) of `PROCESSES` processes with
`DESCRIPTORS` descriptor links in all (sockets, pipes, log files, the control and UVM
nodes every CUDA process holds, and a GPU's node held by a few), read by the exporter's
own `HolderScanner` through its injectable /proc root. The scan matches a descriptor by
the device it opens (`stat()` through the link, as on a real /proc), so the links point
at real device nodes: the kernel's /dev/full (char 1:7) stands for GPU 7's /dev/nvidia7
(the scanner told major 1), /dev/tty and /dev/ptmx (major 5) for /dev/nvidiactl and
/dev/nvidia-uvm, which name no GPU. Printed: the wall time of one scan (median of
`RUNS`) and its CPU time, and how late a stand-in for the sampling thread (a loop that
wakes every 5 ms and does 1 ms of Python work, as a sample's own code does) runs its
ticks while a scan runs on its own thread, beside the same loop with no scan: the scan
shares the GIL, so that is what it can cost a sample. stat() through a real
/proc/PID/fd link costs about what it costs through a file system's symlink (procfs
resolves the open file rather than a path); the figure is an order of magnitude, not a
promise.

    make bench-holders
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_exporter.attribution.holders import (
    SCAN_BUDGET_SECONDS,
    HolderScanner,
    lower_thread_priority,
)
from gpu_exporter.docs import write_section

PROCESSES = 5_000
DESCRIPTORS = 500_000
RUNS = 5
HOLDERS = 3  # processes that hold GPU 7's node (a leak's survivors, and the live jobs)
DEVICE_MAJOR, GPU = 1, 7  # /dev/full stands for /dev/nvidia7
TICK_SECONDS = 0.005
WORK_SECONDS = 0.001


def build(root: Path) -> None:
    """PROCESSES entries of stat, status, cgroup and fd/ with DESCRIPTORS links in all."""
    per = DESCRIPTORS // PROCESSES
    targets = [
        str(root / "stat"),  # a regular file
        "pipe:[4026531840]",
        "socket:[123456]",
        "/var/log/job.log",
        "anon_inode:[eventfd]",
    ]
    (root / "stat").write_text("cpu  1 2 3 4\nbtime 1700000000\n")
    for i in range(PROCESSES):
        pid = 1000 + i
        d = root / str(pid)
        fd = d / "fd"
        fd.mkdir(parents=True)
        rest = " ".join(["S", "1"] + ["0"] * 17 + ["100", "0", "0"] + ["0"] * 20)
        (d / "stat").write_text(f"{pid} (python3) {rest}\n")
        (d / "status").write_text("Name:\tpython3\nUid:\t0\t0\t0\t0\n")
        (d / "cgroup").write_text("0::/\n")
        cuda = i % 10 == 0  # a tenth are CUDA processes
        for n in range(per):
            if cuda and n == 3:
                target = "/dev/tty"  # stands for /dev/nvidiactl
            elif cuda and n == 4:
                target = "/dev/ptmx"  # stands for /dev/nvidia-uvm
            elif n == 5 and i < HOLDERS:
                target = "/dev/full"  # stands for /dev/nvidia7
            else:
                target = targets[n % len(targets)]
            os.symlink(target, fd / str(n))


def ticks(stop: threading.Event) -> list[float]:
    """How late each tick of the stand-in sampling loop ran, in seconds."""
    late: list[float] = []
    due = time.perf_counter()
    while not stop.is_set():
        due += TICK_SECONDS
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        late.append(max(0.0, time.perf_counter() - due))
        end = time.perf_counter() + WORK_SECONDS
        while time.perf_counter() < end:  # a sample's own Python work, holding the GIL
            pass
    return late


def lateness(scanner: HolderScanner | None, seconds: float) -> list[float]:
    """Tick lateness over `seconds`, with scans back to back on their own thread."""
    stop = threading.Event()

    def scans() -> None:
        lower_thread_priority()  # as the scanner's own thread does
        while not stop.is_set():
            assert scanner is not None
            scanner.scan()

    worker = threading.Thread(target=scans) if scanner is not None else None
    if worker is not None:
        worker.start()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    late = ticks(stop)
    if worker is not None:
        worker.join()
    return late


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="README", help="write the figures between markers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="holder-scan-") as tmp:
        root = Path(tmp) / "proc"
        root.mkdir()
        t = time.perf_counter()
        build(root)
        built = time.perf_counter() - t
        print(f"built {PROCESSES:,} processes, {DESCRIPTORS:,} links in {built:.1f} s")
        scanner = HolderScanner(proc_root=str(root), device_major=DEVICE_MAJOR, budget_seconds=60.0)
        walls: list[float] = []
        cpus: list[float] = []
        for _ in range(RUNS):
            c, w = time.process_time(), time.perf_counter()
            scan = scanner.scan()
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
            held = scan.holders.get(GPU)
            assert scan.state.complete and held is not None and len(held.pids) == HOLDERS
        window = max(3.0, 2 * max(walls))
        quiet = lateness(None, window)
        busy = lateness(scanner, window)
        shutil.rmtree(root)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    text = (
        f"Holder scan ({datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}): {PROCESSES:,} processes with {DESCRIPTORS:,} "
        f"descriptor links in a synthetic /proc: one scan takes {wall:.2f} s wall, "
        f"{cpu:.2f} s CPU (median of {RUNS}), under its {SCAN_BUDGET_SECONDS:.0f} s budget, "
        "on its own thread at most once a minute while a GPU has a leak.\n\n"
        f"| stand-in sampling loop (a {TICK_SECONDS * 1000:.0f} ms tick, "
        f"{WORK_SECONDS * 1000:.0f} ms of Python work) | ticks | late p50 (ms) | "
        "late p99 (ms) | late max (ms) |\n|---|---|---|---|---|\n"
        f"| alone | {len(quiet)} | {p(quiet, 0.5) * 1000:.2f} | {p(quiet, 0.99) * 1000:.2f} | "
        f"{max(quiet) * 1000:.2f} |\n"
        f"| while scans run back to back | {len(busy)} | {p(busy, 0.5) * 1000:.2f} | "
        f"{p(busy, 0.99) * 1000:.2f} | {max(busy) * 1000:.2f} |"
    )
    print(text)
    if args.write:
        write_section(args.write, "holders", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
