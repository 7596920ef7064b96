"""Measure the exporter's cost, side by side with nvitop-exporter, and record it in
benchmarks/README.md.

Three parts, in one run:

1. Side by side (issues 14 and 24), a scale matrix: gpu-exporter (its real NVML
   backend) and nvitop-exporter 1.7.2 (pip-installed into benchmarks/.venv-nvitop on
   first use) against the same simulated host: a compiled stand-in libnvidia-ml
   (`benchmarks/standin_nvml/standin_nvml.c`, built by `standin.py` with the system
   compiler; the host of the tests' `tests/support/fake_host.py`: busy H100s with GPM
   and 18 NVLink links), loaded by each program's pynvml through LD_LIBRARY_PATH as a
   driver is (issue 38: nothing patched, every call a ctypes foreign call), with
   real process trees (a parent with 4 children each) as the GPU processes. Each call
   charges what a real driver's does (issue 42): the stand-in burns each call's cost
   from a cost file (`--costs`, default `nvml_costs/h200-r580.txt`, one H200's; `--free`:
   every call free, to profile our own Python) on the calling thread's CPU, so the
   driver's time counts where a GPU host pays it, in the program's CPU. At each
   point of POINTS (GPUs x processes per GPU), REPETITIONS pairs, ours then
   nvitop-exporter in each (issue 31's method): the whole process's CPU at a 1 s
   interval with no scrapes (the headline), per thread from schedstat, after
   WARM_UP_SECONDS, and how much of each thread's went into the stand-in's answers (timed
   inside the library on the calling thread's CPU clock, CLOCK_THREAD_CPUTIME_ID: the
   driver's cost, the charges included), so each program's own CPU; resident memory;
   scrape latency
   p50/p99 on a keep-alive connection and on a fresh connection each; series count;
   NVML calls per GPU per second, every call and by function (counted by the stand-in in
   a file it maps), and the time from SIGTERM to exit. Ratios are the median of the
   pairs' ratios; the tables give the min and median of each figure. Then ours alone
   at the default 5 s interval (DEFAULT_INTERVAL_POINTS), free and charging: CPU per GPU.
2. MIG hosts (issue 38): ours alone on GPUS stand-in H100s with 1, 3 or 7 MIG devices
   each (MIG_LAYOUTS), busy and idle: NVML calls per GPU per interval against the budget
   of CALLS_PER_GPU plus CALLS_PER_MIG_DEVICE per MIG device.
3. The simulated host (`--simulate 8`, issues 2 and 12) with 64 real processes (8 per
   GPU, each a parent with 4 children) placed on the GPUs through a scenario file:
   scrape latency (p50, p99, max) over 1000 scrapes on loopback, one keep-alive client;
   sampler CPU; resident memory; series; with `--compat.dcgm` the scrape p99 and the
   extra render cost per sample, rendering the same snapshot in-process.

Targets (issue 2): p99 <= 2 ms, sampler CPU <= 1% of a core, RSS <= 40 MiB; issue 12:
scrape p99 <= 2 ms in compat mode; issue 42 (side by side, charging stand-in): the whole
process's CPU <= 1.0x nvitop-exporter's at 1 x 0 and on an idle host (8 x 0), <= 0.3x at
8 x 8, <= 0.2x at 8 x 40; issue 31: RSS <= 0.85x; <= 16 NVML calls per GPU per interval,
plus <= 4 per MIG device (issue 38);
scrape p99 on a fresh connection <= 1 ms at 8 x 0 and 8 x 8; idle SIGTERM to exit
<= 0.3 s.
`make bench` prints the figures and writes them between the markers of README.md.
Figures are measured, never asserted in tests.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cost_file
import psutil
import standin

REPO = Path(__file__).resolve().parents[1]
NVITOP_VENV = REPO / "benchmarks" / ".venv-nvitop"
NVITOP_VERSION = "1.7.2"
GPUS = 8
PROCESSES_PER_GPU = 8
CHILDREN_PER_PROCESS = 4
POINTS: tuple[tuple[int, int], ...] = ((1, 0), (8, 0), (8, 8), (8, 40), (16, 8))
REPETITIONS = 3
SCRAPES = 1000
# Side by side, back-to-back scrapes for at least SIDE_SCRAPE_SECONDS and SIDE_SCRAPES:
# several samples fall among them, so the p99 counts the scrapes that meet a sample as
# often as a scraper at a random moment does (300 scrapes of 0.1 ms took 40 ms: a sample
# fell among them or not, and the p99 swung between 0.3 and 2 ms on that alone)
SIDE_SCRAPES = 300
SIDE_SCRAPE_SECONDS = 5.0
CPU_WINDOW_SECONDS = 20.0
WARM_UP_SECONDS = 5.0  # after the program answers, before the CPU window
# the whole process's CPU on the charging stand-in, ours / nvitop-exporter's: the median of
# the pairs' ratios (issue 42)
CPU_TARGETS = {(1, 0): 1.0, (8, 0): 1.0, (8, 8): 0.3, (8, 40): 0.2}
# ours alone at the default interval, free and charging (issue 42: ms/s per GPU)
DEFAULT_INTERVAL = "5s"
DEFAULT_INTERVAL_POINTS: tuple[tuple[int, int], ...] = ((8, 0), (8, 8))
DEFAULT_INTERVAL_WINDOW_SECONDS = 30.0  # six intervals
FRESH_SCRAPE_P99_TARGET_MS = 1.0  # at 8 x 0 and 8 x 8 (issue 31)
FRESH_SCRAPES = 300  # each on a new connection, as Prometheus's first scrape of a target
PROMETHEUS_EVERY_SECONDS = 15.0  # Prometheus's default scrape interval
PROMETHEUS_HEADERS = {  # what Prometheus 2.x sends by default
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
NVLINK_LINKS = 18  # of each stand-in H100 (standin_nvml/standin_nvml.c)
# the NVML call budget (issue 38): per GPU per interval, and on top per MIG device
CALLS_PER_GPU = 16
CALLS_PER_MIG_DEVICE = 4
MIG_LAYOUTS = (1, 3, 7)  # MIG devices per GPU (standin_nvml.c: 7g; 3g+3g+1g; 7 x 1g)
MIG_WINDOW_SECONDS = 10.0

# a shell with sleeping children: a tree of CHILDREN_PER_PROCESS + 1 light processes
CHILD_TREE = " ".join(["sleep 3600 &"] * CHILDREN_PER_PROCESS) + " wait"


@dataclass
class Figures:
    scrape_p50_ms: float
    scrape_p99_ms: float
    scrape_max_ms: float
    sampler_cpu_percent: float
    sampler_cpu_ms_per_sample: float
    sampler_cpu_percent_without_processes: float
    rss_mib_warm: float
    rss_mib_after_scrapes: float
    series: int
    exposition_bytes: int
    compat_scrape_p99_ms: float
    compat_series: int
    render_ms: float
    compat_render_ms: float


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_jobs(count: int = GPUS * PROCESSES_PER_GPU) -> list[subprocess.Popen[bytes]]:
    """`count` process trees (a parent and CHILDREN_PER_PROCESS children each)."""
    return [subprocess.Popen(["sh", "-c", CHILD_TREE]) for _ in range(count)]


def stop_jobs(jobs: list[subprocess.Popen[bytes]]) -> None:
    """Kill the process trees `spawn_jobs` started, children first."""
    for job in jobs:
        for child in psutil.Process(job.pid).children(recursive=True):
            child.kill()
        job.kill()
        job.wait()


def scenario(jobs: list[subprocess.Popen[bytes]]) -> dict[str, object]:
    processes = []
    for i, job in enumerate(jobs):
        gpu = i % GPUS
        processes.append(
            {
                "gpu": gpu,
                "pid": job.pid,
                "memory_bytes": (1 + i % 5) * 1024**3,
                "sm_ratio": round(0.1 * (i % 8), 2),
            }
        )
    return {"processes": processes}


def wait_ready(port: int, timeout: float = 20.0, path: str = "/healthz") -> None:
    """Until `path` answers 200. gpu-exporter's readiness probe is not a scrape, so the
    exporter has seen no scraper when the measurements start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("exporter did not start")


def exporter_command(port: int, *extra: str, interval: str = "1s") -> list[str]:
    """gpu-exporter at `interval` on 127.0.0.1:`port`, logging only errors."""
    return [
        sys.executable,
        "-m",
        "gpu_exporter",
        "--collect.interval",
        interval,
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--log.level",
        "error",
        *extra,
    ]


def start_exporter(scenario_path: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    """The simulated host with the benchmark's processes placed by `scenario_path`."""
    simulated = ["--simulate", str(GPUS), "--simulate.scenario", str(scenario_path)]
    return subprocess.Popen(exporter_command(port, *simulated, *extra), cwd=REPO)


def cpu_share_scraped(proc: psutil.Process, port: int) -> float:
    """CPU seconds per wall second while scraped as Prometheus does: every
    PROMETHEUS_EVERY_SECONDS, asking for OpenMetrics first and gzip. The window starts
    after two scrapes (a scraper's period is known from its second) and holds two more."""
    stop = threading.Event()

    def scrape() -> None:
        while True:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics", headers=PROMETHEUS_HEADERS)
            conn.getresponse().read()
            conn.close()
            if stop.wait(PROMETHEUS_EVERY_SECONDS):
                return

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    try:
        time.sleep(PROMETHEUS_EVERY_SECONDS + 5.0)
        return cpu_share(proc, 2 * PROMETHEUS_EVERY_SECONDS)
    finally:
        stop.set()
        scraper.join()


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid` (by native thread id) now, to the nanosecond:
    the kernel's run time of each (`/proc/PID/task/TID/schedstat`), where psutil's
    cpu_times counts 10 ms ticks (over a 20 s window, 0.5 ms per interval either way, a
    tenth of an idle exporter's CPU). A thread that ends inside a window takes its time
    with it; neither program's do."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                out[tid] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):  # the thread ended
            continue
    return out


def cpu_seconds(pid: int) -> float:
    """CPU seconds of all the threads of `pid` now (`thread_cpu_seconds`)."""
    return sum(thread_cpu_seconds(pid).values())


def cpu_share(proc: psutil.Process, seconds: float) -> float:
    """CPU seconds the process used per wall second, over `seconds`."""
    cpu0 = cpu_seconds(proc.pid)
    wall0 = time.monotonic()
    time.sleep(seconds)
    cpu = cpu_seconds(proc.pid) - cpu0
    return cpu / (time.monotonic() - wall0)


def cpu_without_processes(scenario_path: Path) -> float:
    """The same host with the process and host collectors off."""
    port = free_port()
    exporter = start_exporter(scenario_path, port, "--no-collector.process", "--no-collector.host")
    try:
        wait_ready(port)
        time.sleep(3.0)
        return cpu_share(psutil.Process(exporter.pid), CPU_WINDOW_SECONDS)
    finally:
        exporter.terminate()
        exporter.wait(10)


def scrape_latencies(
    port: int, scrapes: int = SCRAPES, seconds: float = 0.0, *, fresh: bool = False
) -> tuple[list[float], bytes]:
    """At least `scrapes` scrapes, and for at least `seconds`, over one keep-alive
    connection (with `fresh`, each on a new connection, its connect counted in its
    latency): sorted latencies in ms, last body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies: list[float] = []
    body = b""
    until = time.monotonic() + seconds
    while len(latencies) < scrapes or time.monotonic() < until:
        t0 = time.perf_counter()
        if fresh:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read()
        if fresh:
            conn.close()
        latencies.append((time.perf_counter() - t0) * 1000)
    conn.close()
    latencies.sort()
    return latencies, body


def p99(latencies: list[float]) -> float:
    return latencies[int(len(latencies) * 0.99) - 1]


def series_in(body: bytes) -> int:
    return sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))


def compat_scrapes(scenario_path: Path) -> tuple[float, int]:
    """Scrape p99 (ms) and series count of the same host with --compat.dcgm."""
    port = free_port()
    exporter = start_exporter(scenario_path, port, "--compat.dcgm")
    try:
        wait_ready(port)
        time.sleep(3.0)
        latencies, body = scrape_latencies(port)
        return p99(latencies), series_in(body)
    finally:
        exporter.terminate()
        exporter.wait(10)


def render_cost(scenario_path: Path, *extra: str, renders: int = 200) -> float:
    """Mean ms to render one sample's exposition (text, gzip as a scraper asks for it),
    in-process, alternating between two samples taken a second apart, so each render
    writes afresh the families that changed between samples, as in production."""
    from gpu_exporter.config import load_settings
    from gpu_exporter.daemon import make_backend, make_sampler, render

    settings = load_settings(
        ["--simulate", str(GPUS), "--simulate.scenario", str(scenario_path), *extra]
    )
    sampler = make_sampler(settings, make_backend(settings))
    try:
        first = sampler.sample_once()
        time.sleep(1.0)
        snapshots = (first, sampler.sample_once())
        for snapshot in snapshots:  # warm
            render(snapshot, settings).body(openmetrics=False, compressed=True)
        t0 = time.perf_counter()
        for i in range(renders):
            render(snapshots[i % 2], settings).body(openmetrics=False, compressed=True)
        return (time.perf_counter() - t0) * 1000 / renders
    finally:
        sampler.stop(0)


@dataclass
class Side:
    """One program's figures on the stand-in NVML host, one repetition."""

    name: str
    gpus: int
    cpu_cores: float
    standin_cpu_cores: float  # of cpu_cores: inside the stand-in library's answers
    # thread name -> (CPU, of it inside the stand-in) ms/s
    threads: dict[str, tuple[float, float]]
    scraped_cpu_cores: float | None  # scraped as Prometheus does (cpu_share_scraped)
    rss_mib: float
    scrape_p50_ms: float
    scrape_p99_ms: float
    scrapes: int
    fresh_scrape_p50_ms: float  # each scrape on a new connection
    fresh_scrape_p99_ms: float
    series: int
    nvml_calls_per_gpu_per_second: float  # for one GPU: on its handle, GPM metrics
    nvml_library_calls_per_second: float  # the others: device count, event waits
    nvml_by_function: dict[str, float]  # calls per second of each function
    # CPU microseconds per second inside each function (the stand-in's, not the program's)
    nvml_cpu_us_by_function: dict[str, float]
    sigterm_exit_seconds: float

    @property
    def nvml_all_calls_per_gpu_per_second(self) -> float:
        """Every call the program made, the library's own included, per GPU."""
        return self.nvml_calls_per_gpu_per_second + self.nvml_library_calls_per_second / self.gpus

    @property
    def cpu_ms(self) -> float:
        """CPU milliseconds per 1 s interval."""
        return 1000 * self.cpu_cores

    @property
    def own_cpu_ms(self) -> float:
        """CPU milliseconds per 1 s interval less the stand-in's answers (the driver's
        part)."""
        return 1000 * (self.cpu_cores - self.standin_cpu_cores)

    @property
    def standin_cpu_ms(self) -> float:
        return 1000 * self.standin_cpu_cores

    @property
    def scraped_cpu_ms(self) -> float | None:
        return None if self.scraped_cpu_cores is None else 1000 * self.scraped_cpu_cores


def ensure_nvitop() -> Path:
    """nvitop-exporter in its own venv (made once, gitignored); its program's path."""
    program = NVITOP_VENV / "bin" / "nvitop-exporter"
    if not program.exists():
        subprocess.run([sys.executable, "-m", "venv", str(NVITOP_VENV)], check=True)
        pip = NVITOP_VENV / "bin" / "pip"
        subprocess.run(
            [str(pip), "install", "--quiet", f"nvitop-exporter=={NVITOP_VERSION}"], check=True
        )
    return program


def per_thread(
    cpu0: dict[str, float],
    cpu1: dict[str, float],
    c0: standin.Counts,
    c1: standin.Counts,
    names: dict[str, str],
    seconds: float,
) -> dict[str, tuple[float, float]]:
    """Thread name -> (CPU, of it inside the stand-in's answers) in ms per second between
    two readings; threads of one name (none, in either program) are summed."""
    out: dict[str, tuple[float, float]] = {}
    for tid, cpu in cpu1.items():
        name = names.get(tid, f"thread {tid}")
        ran = (cpu - cpu0.get(tid, 0.0)) / seconds * 1000
        inside = c1.cpu_by_thread.get(tid, 0.0) - c0.cpu_by_thread.get(tid, 0.0)
        before = out.get(name, (0.0, 0.0))
        out[name] = (before[0] + ran, before[1] + inside / seconds * 1000)
    return out


def measure_side(
    name: str,
    command: Sequence[str],
    port: int,
    env: dict[str, str],
    ready_path: str,
    *,
    scraped: bool,
) -> Side:
    """One program on the stand-in host: CPU not scraped, then (with `scraped`) scraped as
    Prometheus does, then back-to-back scrapes, then SIGTERM when idle."""
    calls_file = Path(env["FAKE_NVML_CALLS"])
    names_file = Path(env["BENCH_THREAD_NAMES"])
    gpus = int(env["FAKE_NVML_GPUS"])
    program = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_ready(port, timeout=60.0, path=ready_path)
        proc = psutil.Process(program.pid)
        time.sleep(WARM_UP_SECONDS)  # start-up done, steady state
        c0 = standin.read_counts(calls_file)
        cpu0, wall0 = thread_cpu_seconds(proc.pid), time.monotonic()
        time.sleep(CPU_WINDOW_SECONDS)
        cpu1, wall1 = thread_cpu_seconds(proc.pid), time.monotonic()
        c1 = standin.read_counts(calls_file)
        names = standin.thread_names(proc.pid, names_file)
        threads = per_thread(cpu0, cpu1, c0, c1, names, wall1 - wall0)
        share = sum(cpu for cpu, _ in threads.values()) / 1000
        rss = proc.memory_info().rss / 2**20
        scraped_share = cpu_share_scraped(proc, port) if scraped else None
        latencies, body = scrape_latencies(port, SIDE_SCRAPES, SIDE_SCRAPE_SECONDS)
        fresh, _ = scrape_latencies(port, FRESH_SCRAPES, fresh=True)
        time.sleep(1.5)  # idle again, mid-interval
        stop = time.monotonic()
        program.send_signal(signal.SIGTERM)
        program.wait(10)
        exit_seconds = time.monotonic() - stop
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()
    seconds = c1.at - c0.at
    per = gpus * seconds
    return Side(
        name=name,
        gpus=gpus,
        cpu_cores=share,
        standin_cpu_cores=sum(inside for _, inside in threads.values()) / 1000,
        threads=threads,
        scraped_cpu_cores=scraped_share,
        rss_mib=rss,
        scrape_p50_ms=statistics.median(latencies),
        scrape_p99_ms=p99(latencies),
        scrapes=len(latencies),
        fresh_scrape_p50_ms=statistics.median(fresh),
        fresh_scrape_p99_ms=p99(fresh),
        series=series_in(body),
        nvml_calls_per_gpu_per_second=(c1.on_gpus - c0.on_gpus) / per,
        nvml_library_calls_per_second=((c1.answered - c1.on_gpus) - (c0.answered - c0.on_gpus))
        / seconds,
        nvml_by_function={
            function: (n - c0.calls.get(function, 0)) / seconds
            for function, n in c1.calls.items()
            if n > c0.calls.get(function, 0)
        },
        nvml_cpu_us_by_function={
            function: (cpu - c0.cpu_seconds.get(function, 0.0)) / seconds * 1e6
            for function, cpu in c1.cpu_seconds.items()
            if c1.calls[function] > c0.calls.get(function, 0)
        },
        sigterm_exit_seconds=exit_seconds,
    )


def ours(env: dict[str, str], *, scraped: bool) -> Side:
    port = free_port()
    return measure_side(
        "gpu-exporter", exporter_command(port), port, env, "/healthz", scraped=scraped
    )


def nvitop(env: dict[str, str], *, scraped: bool) -> Side:
    port = free_port()
    command = [str(ensure_nvitop()), "--bind-address", "127.0.0.1", "--port", str(port)]
    return measure_side(
        f"nvitop-exporter {NVITOP_VERSION}",
        [*command, "--interval", "1.0"],
        port,
        env,
        "/metrics",  # it has no probe; it renders on every scrape anyway
        scraped=scraped,
    )


@dataclass
class Point:
    """One point of the matrix: every repetition of both programs."""

    gpus: int
    per_gpu: int
    ours: list[Side]
    theirs: list[Side]

    def ratios(self, name: str) -> list[float]:
        """Ours / theirs of the figure `name` in each pair."""
        return [
            getattr(a, name) / getattr(b, name)
            for a, b in zip(self.ours, self.theirs, strict=True)
            if getattr(b, name)
        ]


def measure_point(
    gpus: int,
    per_gpu: int,
    repetitions: int,
    tmp: Path,
    costs: Path | None,
    unlisted_busy: bool = True,
) -> Point:
    """Both programs on one stand-in host of `gpus` GPUs with `per_gpu` process trees each,
    every call charging what `costs` says (None: free), a GPU with no process listed busy
    half of each second with `unlisted_busy`: `repetitions` pairs, ours then
    nvitop-exporter in each, so the pairs alternate between the two. CPU while scraped is
    measured at 8 x 8 in the first pair only (it takes 50 s per program)."""
    jobs = spawn_jobs(gpus * per_gpu)
    time.sleep(1.0)  # let the children start, so the trees are complete
    point = Point(gpus, per_gpu, [], [])
    try:
        pids = [job.pid for job in jobs]
        env = standin.environment(
            pids,
            tmp / "calls.bin",
            tmp / "names.json",
            gpus,
            costs=costs,
            unlisted_busy=unlisted_busy,
        )
        for r in range(repetitions):
            scraped = (gpus, per_gpu) == (GPUS, PROCESSES_PER_GPU) and r == 0
            point.ours.append(ours(env, scraped=scraped))
            point.theirs.append(nvitop(env, scraped=scraped))
            print(
                f"{gpus}x{per_gpu} pair {r + 1}: CPU {point.ours[-1].cpu_ms:.2f} / "
                f"{point.theirs[-1].cpu_ms:.2f} ms per second "
                f"(own, the stand-in's answers left out: {point.ours[-1].own_cpu_ms:.2f} / "
                f"{point.theirs[-1].own_cpu_ms:.2f})",
                file=sys.stderr,
                flush=True,
            )
    finally:
        stop_jobs(jobs)
    return point


def matrix(
    points: Sequence[tuple[int, int]],
    repetitions: int,
    costs: Path | None,
    unlisted_busy: bool = True,
) -> list[Point]:
    ensure_nvitop()
    standin.build()
    with tempfile.TemporaryDirectory() as tmp:
        return [
            measure_point(g, p, repetitions, Path(tmp), costs, unlisted_busy) for g, p in points
        ]


def cpu_alone(
    env: dict[str, str], interval: str, seconds: float, *, tree: Path = REPO
) -> tuple[float, float]:
    """Ours alone on the stand-in host of `env` at `interval`: the whole process's CPU and,
    of it, the stand-in's answers, in ms per second over `seconds` after WARM_UP_SECONDS.
    `tree`: the checkout whose package runs (`against_commit.py` gives an earlier commit's)."""
    calls_file = Path(env["FAKE_NVML_CALLS"])
    port = free_port()
    program = subprocess.Popen(
        exporter_command(port, interval=interval),
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(port, timeout=60.0)
        time.sleep(WARM_UP_SECONDS)
        c0, cpu0, wall0 = (
            standin.read_counts(calls_file),
            cpu_seconds(program.pid),
            time.monotonic(),
        )
        time.sleep(seconds)
        c1, cpu1, wall1 = (
            standin.read_counts(calls_file),
            cpu_seconds(program.pid),
            time.monotonic(),
        )
    finally:
        program.terminate()
        program.wait(10)
    inside = c1.total_cpu_seconds - c0.total_cpu_seconds
    return 1000 * (cpu1 - cpu0) / (wall1 - wall0), 1000 * inside / (wall1 - wall0)


@dataclass
class DefaultIntervalPoint:
    """Ours alone at DEFAULT_INTERVAL on `gpus` GPUs with `per_gpu` processes each: the
    whole process's CPU per GPU, ms per second, on the free and the charging stand-in."""

    gpus: int
    per_gpu: int
    free_ms_per_gpu: float
    charging_ms_per_gpu: float
    charged_ms_per_gpu: float  # of charging_ms_per_gpu, inside the stand-in's answers


def default_interval(costs: Path, *, tree: Path = REPO) -> list[DefaultIntervalPoint]:
    """DEFAULT_INTERVAL_POINTS, ours alone at the default interval, free then charging.
    `tree`: the checkout whose package runs (`against_commit.py` gives an earlier commit's)."""
    standin.build()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus, per_gpu in DEFAULT_INTERVAL_POINTS:
            jobs = spawn_jobs(gpus * per_gpu)
            time.sleep(1.0)  # let the children start, so the trees are complete
            try:
                pids = [job.pid for job in jobs]
                figures = []
                for charged in (None, costs):
                    env = standin.environment(
                        pids, Path(tmp) / "calls.bin", Path(tmp) / "names.json", gpus, costs=charged
                    )
                    figures.append(
                        cpu_alone(env, DEFAULT_INTERVAL, DEFAULT_INTERVAL_WINDOW_SECONDS, tree=tree)
                    )
            finally:
                stop_jobs(jobs)
            (free, _), (charging, charged_part) = figures
            out.append(
                DefaultIntervalPoint(
                    gpus, per_gpu, free / gpus, charging / gpus, charged_part / gpus
                )
            )
            print(
                f"{gpus}x{per_gpu} at {DEFAULT_INTERVAL}: {free / gpus:.2f} ms/s per GPU free, "
                f"{charging / gpus:.2f} charging",
                file=sys.stderr,
                flush=True,
            )
    return out


@dataclass
class MigHost:
    """Our NVML calls on a stand-in host whose every GPU has `devices` MIG devices."""

    devices: int
    busy: bool  # a process on every MIG device (else on none)
    calls_per_gpu: float  # per interval, for one GPU (its handle, its MIG devices' handles)
    all_calls_per_gpu: float  # every call, the library's own shared out
    by_function: dict[str, float]  # per GPU per interval

    @property
    def budget(self) -> int:
        return CALLS_PER_GPU + CALLS_PER_MIG_DEVICE * self.devices


def mig_host(devices: int, busy: bool, tmp: Path) -> MigHost:
    """Ours alone on GPUS GPUs with `devices` MIG devices each: NVML calls over
    MIG_WINDOW_SECONDS after WARM_UP_SECONDS."""
    calls_file = tmp / f"mig-{devices}-{busy}.bin"
    env = standin.environment(
        [], calls_file, tmp / "names.json", GPUS, mig=devices, mig_idle=not busy
    )
    port = free_port()
    program = subprocess.Popen(exporter_command(port), cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    try:
        wait_ready(port, timeout=60.0)
        time.sleep(WARM_UP_SECONDS)
        c0 = standin.read_counts(calls_file)
        time.sleep(MIG_WINDOW_SECONDS)
        c1 = standin.read_counts(calls_file)
    finally:
        program.terminate()
        program.wait(10)
    seconds = c1.at - c0.at
    return MigHost(
        devices,
        busy,
        (c1.on_gpus - c0.on_gpus) / GPUS / seconds,
        (c1.answered - c0.answered) / GPUS / seconds,
        {
            f: (n - c0.calls.get(f, 0)) / GPUS / seconds
            for f, n in c1.calls.items()
            if n > c0.calls.get(f, 0)
        },
    )


def mig_hosts() -> list[MigHost]:
    """Each MIG layout of MIG_LAYOUTS, busy and idle."""
    standin.build()
    with tempfile.TemporaryDirectory() as tmp:
        return [mig_host(n, busy, Path(tmp)) for n in MIG_LAYOUTS for busy in (True, False)]


def simulated() -> Figures:
    """Part 2: the simulated host with 64 real process trees."""
    jobs = spawn_jobs()
    time.sleep(1.0)  # let the children start, so the trees are complete
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        scenario_path = Path(tmp) / "scenario.json"
        scenario_path.write_text(json.dumps(scenario(jobs)))
        exporter = None
        try:
            exporter = start_exporter(scenario_path, port)
            wait_ready(port)
            proc = psutil.Process(exporter.pid)
            time.sleep(3.0)  # warm-up: caches filled, first samples done
            rss_warm = proc.memory_info().rss / 2**20

            share = cpu_share(proc, CPU_WINDOW_SECONDS)

            latencies, body = scrape_latencies(port)
            rss_after = proc.memory_info().rss / 2**20
            exporter.terminate()
            exporter.wait(10)
            share_without = cpu_without_processes(scenario_path)
            compat_p99, compat_series = compat_scrapes(scenario_path)
            render_ms = render_cost(scenario_path)
            compat_render_ms = render_cost(scenario_path, "--compat.dcgm")
        finally:
            if exporter is not None and exporter.poll() is None:
                exporter.terminate()
                exporter.wait(10)
            stop_jobs(jobs)
    return Figures(
        scrape_p50_ms=statistics.median(latencies),
        scrape_p99_ms=p99(latencies),
        scrape_max_ms=latencies[-1],
        sampler_cpu_percent=100 * share,
        sampler_cpu_ms_per_sample=1000 * share,  # one sample a second
        sampler_cpu_percent_without_processes=100 * share_without,
        rss_mib_warm=rss_warm,
        rss_mib_after_scrapes=rss_after,
        series=series_in(body),
        exposition_bytes=len(body),
        compat_scrape_p99_ms=compat_p99,
        compat_series=compat_series,
        render_ms=render_ms,
        compat_render_ms=compat_render_ms,
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def min_median(values: Sequence[float]) -> tuple[float, float]:
    return min(values), statistics.median(values)


# figure, Side field, format (rows of each point's detail table)
DETAIL_ROWS: tuple[tuple[str, str, str], ...] = (
    ("CPU per second, not scraped (ms)", "cpu_ms", "{:.2f}"),
    ("of which inside the stand-in library's answers (ms)", "standin_cpu_ms", "{:.2f}"),
    (
        "CPU per second less the stand-in's answers, the program's own (ms)",
        "own_cpu_ms",
        "{:.2f}",
    ),
    (
        f"CPU per interval, scraped every {PROMETHEUS_EVERY_SECONDS:g} s as Prometheus does "
        "(ms, stand-in's answers included)",
        "scraped_cpu_ms",
        "{:.2f}",
    ),
    (
        "NVML calls per GPU per second, every call (the library's own shared out)",
        "nvml_all_calls_per_gpu_per_second",
        "{:.2f}",
    ),
    (
        "NVML calls per GPU per second for one GPU (its handle, GPM metrics)",
        "nvml_calls_per_gpu_per_second",
        "{:.2f}",
    ),
    (
        "NVML calls per second not on a GPU (device count, event waits)",
        "nvml_library_calls_per_second",
        "{:.2f}",
    ),
    ("resident memory after warm-up and the CPU window (MiB)", "rss_mib", "{:.1f}"),
    (
        f"scrape latency p50 (back-to-back for {SIDE_SCRAPE_SECONDS:g} s and at least "
        f"{SIDE_SCRAPES} scrapes, ms)",
        "scrape_p50_ms",
        "{:.3f}",
    ),
    ("scrapes in that time", "scrapes", "{:.0f}"),
    ("scrape latency p99 (ms)", "scrape_p99_ms", "{:.3f}"),
    (
        f"scrape latency p50, each of {FRESH_SCRAPES} on a fresh connection (ms)",
        "fresh_scrape_p50_ms",
        "{:.3f}",
    ),
    ("scrape latency p99, fresh connection (ms)", "fresh_scrape_p99_ms", "{:.3f}"),
    ("series in one exposition", "series", "{:.0f}"),
    ("idle SIGTERM to exit (s)", "sigterm_exit_seconds", "{:.3f}"),
)


def figure(sides: Sequence[Side], name: str) -> tuple[float, float] | None:
    values = [v for v in (getattr(side, name) for side in sides) if v is not None]
    return min_median(values) if values else None


def detail_table(point: Point) -> list[str]:
    """Min and median of each figure for both programs; ratio of the medians."""
    lines = [
        f"| figure | {point.ours[0].name} min / median | {point.theirs[0].name} min / median "
        "| ratio of medians |",
        "|---|---|---|---|",
    ]
    for title, name, fmt in DETAIL_ROWS:
        a, b = figure(point.ours, name), figure(point.theirs, name)
        if a is None or b is None:
            continue
        ratio = f"{a[1] / b[1]:.2f}" if b[1] else ""
        cells = [" / ".join(fmt.format(v) for v in pair) for pair in (a, b)]
        lines.append(f"| {title} | {cells[0]} | {cells[1]} | {ratio} |")
    return lines


def median_of(sides: Sequence[Side], name: str) -> float:
    return float(statistics.median(getattr(side, name) for side in sides))


def ratio_cell(point: Point, name: str) -> str:
    """The median of the pairs' ratios, and their range."""
    ratios = point.ratios(name)
    if not ratios:
        return ""
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def summary_table(points: Sequence[Point], *, charging: bool) -> list[str]:
    """One row per point: the medians of the pairs' ratios and issues 42's and 31's
    verdicts (issue 42's CPU targets judged on the charging stand-in only)."""
    lines = [
        "| GPUs x processes | CPU ms/s, whole process, ours / nvitop (medians) | CPU ratio, "
        "median of pairs (range) | target | own CPU ms/s (the stand-in's answers left out), "
        "ours / nvitop | own CPU ratio | RSS ratio "
        "(<= 0.85) | scrape p99 ms, fresh connection, ours / nvitop | keep-alive p99 ms, "
        "ours / nvitop | NVML calls per GPU per interval, all / for the GPU (<= 16) "
        "| SIGTERM s (<= 0.3) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        cpu, their_cpu = median_of(p.ours, "cpu_ms"), median_of(p.theirs, "cpu_ms")
        own, their_own = median_of(p.ours, "own_cpu_ms"), median_of(p.theirs, "own_cpu_ms")
        cpu_ratio = statistics.median(p.ratios("cpu_ms"))
        rss = statistics.median(p.ratios("rss_mib"))
        fresh = median_of(p.ours, "fresh_scrape_p99_ms")
        fresh_theirs = median_of(p.theirs, "fresh_scrape_p99_ms")
        p99_ours = median_of(p.ours, "scrape_p99_ms")
        p99_theirs = median_of(p.theirs, "scrape_p99_ms")
        calls = median_of(p.ours, "nvml_all_calls_per_gpu_per_second")
        gpu_calls = median_of(p.ours, "nvml_calls_per_gpu_per_second")
        sigterm = max(side.sigterm_exit_seconds for side in p.ours)
        target = CPU_TARGETS.get((p.gpus, p.per_gpu))
        judged = "" if target is None else f"<= {target:g}"
        if target is not None:
            judged += f": {verdict(cpu_ratio <= target)}" if charging else " (free: not judged)"
        fresh_judged = ""
        if (p.gpus, p.per_gpu) in ((GPUS, 0), (GPUS, PROCESSES_PER_GPU)):
            ok = fresh <= FRESH_SCRAPE_P99_TARGET_MS
            fresh_judged = f" (<= {FRESH_SCRAPE_P99_TARGET_MS:g}: {verdict(ok)})"
        lines.append(
            f"| {p.gpus} x {p.per_gpu} | {cpu:.2f} / {their_cpu:.2f} "
            f"| {ratio_cell(p, 'cpu_ms')} | {judged} | {own:.2f} / {their_own:.2f} "
            f"| {ratio_cell(p, 'own_cpu_ms')} "
            f"| {rss:.2f}: {verdict(rss <= 0.85)} "
            f"| {fresh:.3f} / {fresh_theirs:.3f}{fresh_judged} "
            f"| {p99_ours:.3f} / {p99_theirs:.3f} "
            f"| {calls:.2f} / {gpu_calls:.2f}: {verdict(calls <= CALLS_PER_GPU)} "
            f"| {sigterm:.3f}: {verdict(sigterm <= 0.3)} |"
        )
    return lines


def thread_table(point: Point) -> list[str]:
    """Each thread's CPU, the stand-in's part of it and the thread's own: medians of the
    pairs, in ms per second."""
    lines = [
        "| program | thread | CPU ms/s | of it the stand-in's answers | own |",
        "|---|---|---|---|---|",
    ]
    for sides in (point.ours, point.theirs):
        for name in sorted({name for side in sides for name in side.threads}):
            ran = [side.threads.get(name, (0.0, 0.0)) for side in sides]
            cpu = statistics.median(c for c, _ in ran)
            inside = statistics.median(f for _, f in ran)
            own = statistics.median(c - f for c, f in ran)
            lines.append(f"| {sides[0].name} | {name} | {cpu:.2f} | {inside:.2f} | {own:.2f} |")
    return lines


def calls_table(point: Point) -> list[str]:
    """Each NVML function's calls per GPU per second, medians, both programs."""
    sides = (*point.ours, *point.theirs)
    functions = sorted({f for side in sides for f in side.nvml_by_function})
    lines = [
        f"| NVML function, per GPU per second | {point.ours[0].name} calls "
        f"| CPU inside, us | {point.theirs[0].name} calls | CPU inside, us |",
        "|---|---|---|---|---|",
    ]
    for function in functions:
        cells = [
            statistics.median(getattr(side, figure).get(function, 0.0) for side in program)
            / point.gpus
            for program in (point.ours, point.theirs)
            for figure in ("nvml_by_function", "nvml_cpu_us_by_function")
        ]
        lines.append(
            f"| `{function}` | {cells[0]:.2f} | {cells[1]:.0f} | {cells[2]:.2f} | {cells[3]:.0f} |"
        )
    return lines


def costs_note(costs: Path | None) -> str:
    """Which stand-in the figures were measured on."""
    if costs is None:
        return "the **free** stand-in (every call free: our own Python profiled, no driver cost)"
    name = costs.relative_to(REPO) if costs.is_relative_to(REPO) else costs
    return (
        f"the **charging** stand-in: each call burns what `{name}` says a driver charges "
        f"({cost_file.origin(costs)}) on the calling thread's CPU"
    )


def matrix_report(
    points: Sequence[Point], repetitions: int, costs: Path | None, unlisted_busy: bool = True
) -> list[str]:
    unlisted = (
        "busy in the first half of each second where none is listed (95% / 0% every 500 ms: "
        "work NVML does not list, as the outside judge's host)"
        if unlisted_busy
        else "idle where none is listed"
    )
    lines = [
        f"**Side by side**, a scale matrix on {costs_note(costs)}. One stand-in NVML host "
        f"(H100s with GPM and {NVLINK_LINKS} NVLink links on an R580 driver, busy where a "
        f"process runs, {unlisted}; a compiled stand-in libnvidia-ml loaded by both "
        "programs' pynvml through LD_LIBRARY_PATH, its in-call CPU (charges included) timed "
        "on the calling thread's CPU clock: the whole process's CPU is the headline, the "
        "program's own leaves the stand-in's part out), GPU processes each a "
        f"shell with {CHILDREN_PER_PROCESS} "
        f"children, a 1 s interval, {repetitions} pairs per point (ours then "
        f"nvitop-exporter), CPU from each thread's schedstat over {CPU_WINDOW_SECONDS:g} s "
        f"after {WARM_UP_SECONDS:g} s of warm-up, not scraped; ratios are the median of "
        "the pairs' ratios:",
        "",
        *summary_table(points, charging=costs is not None),
    ]
    for point in points:
        lines += [
            "",
            f"{point.gpus} GPUs x {point.per_gpu} processes:",
            "",
            *detail_table(point),
            "",
            *thread_table(point),
        ]
        if (point.gpus, point.per_gpu) == (GPUS, 0):
            lines += ["", *calls_table(point)]
    return lines


def default_interval_report(rows: Sequence[DefaultIntervalPoint], costs: Path) -> list[str]:
    """Ours at the default interval: CPU per GPU, free and charging."""
    lines = [
        f"**At the default interval** (`--collect.interval {DEFAULT_INTERVAL}`), ours alone, "
        f"the whole process's CPU over {DEFAULT_INTERVAL_WINDOW_SECONDS:g} s after "
        f"{WARM_UP_SECONDS:g} s of warm-up, not scraped, one run each; on the free and on "
        f"{costs_note(costs)}.",
        "",
        "| GPUs x processes | free stand-in, ms/s per GPU | charging stand-in, ms/s per GPU "
        "| of it the driver's charges |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.gpus} x {r.per_gpu} | {r.free_ms_per_gpu:.2f} | {r.charging_ms_per_gpu:.2f} "
            f"| {r.charged_ms_per_gpu:.2f} |"
        )
    return lines


def mig_report(hosts: Sequence[MigHost]) -> list[str]:
    """Our calls on each MIG host against the budget, and the costliest functions."""
    lines = [
        f"**MIG hosts** (issue 38's budget: {CALLS_PER_GPU} NVML calls per GPU per interval "
        f"plus at most {CALLS_PER_MIG_DEVICE} per MIG device): gpu-exporter alone on "
        f"{GPUS} stand-in H100s with MIG on, the same MIG layout on each, a 1 s interval, "
        f"calls counted over {MIG_WINDOW_SECONDS:g} s after {WARM_UP_SECONDS:g} s of warm-up; "
        "busy: a process on every MIG device; idle: on none.",
        "",
        "| MIG devices per GPU | processes | calls per GPU per interval, for the GPU "
        "| every call (the library's own shared out) | budget | main calls per GPU |",
        "|---|---|---|---|---|---|",
    ]
    for h in hosts:
        top = sorted(h.by_function.items(), key=lambda item: -item[1])[:5]
        named = ", ".join(f"`{f}` {n:.1f}" for f, n in top)
        lines.append(
            f"| {h.devices} | {'busy' if h.busy else 'idle'} | {h.calls_per_gpu:.2f} "
            f"| {h.all_calls_per_gpu:.2f} | {h.budget}: {verdict(h.calls_per_gpu <= h.budget)} "
            f"| {named} |"
        )
    return lines


def simulated_report(f: Figures) -> list[str]:
    return [
        f"**Simulated host** (`--simulate {GPUS}`): "
        f"{GPUS * PROCESSES_PER_GPU} real processes ({PROCESSES_PER_GPU} per GPU, "
        f"{CHILDREN_PER_PROCESS} children each), `--collect.interval 1s`.",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| scrape latency p50 | {f.scrape_p50_ms:.3f} ms | |",
        f"| scrape latency p99 ({SCRAPES} scrapes, loopback, keep-alive) | "
        f"{f.scrape_p99_ms:.3f} ms | <= 2 ms: {verdict(f.scrape_p99_ms <= 2)} |",
        f"| scrape latency max | {f.scrape_max_ms:.3f} ms | |",
        f"| sampler CPU at 1 s interval (no scrapes) | "
        f"{f.sampler_cpu_percent:.2f}% of one core "
        f"| <= 1%: {verdict(f.sampler_cpu_percent <= 1)} |",
        f"| CPU per sample | {f.sampler_cpu_ms_per_sample:.2f} ms | |",
        "| sampler CPU, process and host collectors off | "
        f"{f.sampler_cpu_percent_without_processes:.2f}% of one core "
        f"| <= 1%: {verdict(f.sampler_cpu_percent_without_processes <= 1)} |",
        f"| resident memory after warm-up | {f.rss_mib_warm:.1f} MiB "
        f"| <= 40 MiB: {verdict(f.rss_mib_warm <= 40)} |",
        f"| resident memory after {SCRAPES} scrapes | {f.rss_mib_after_scrapes:.1f} MiB "
        f"| <= 40 MiB: {verdict(f.rss_mib_after_scrapes <= 40)} |",
        f"| series in one exposition | {f.series} | |",
        f"| exposition size | {f.exposition_bytes / 1024:.1f} KiB | |",
        f"| render per sample (text + gzip, in-process) | {f.render_ms:.2f} ms | |",
        f"| render per sample with `--compat.dcgm` | {f.compat_render_ms:.2f} ms "
        f"(+{f.compat_render_ms - f.render_ms:.2f} ms) | |",
        f"| scrape latency p99 with `--compat.dcgm` | {f.compat_scrape_p99_ms:.3f} ms "
        f"| <= 2 ms: {verdict(f.compat_scrape_p99_ms <= 2)} |",
        f"| series with `--compat.dcgm` | {f.compat_series} | |",
    ]


def parse_points(text: str) -> list[tuple[int, int]]:
    """`8x0,8x8` -> [(8, 0), (8, 8)]."""
    out = []
    for item in text.split(","):
        gpus, _, per_gpu = item.strip().partition("x")
        out.append((int(gpus), int(per_gpu)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", metavar="README", help="record the figures in this file")
    parser.add_argument(
        "--points",
        default=",".join(f"{g}x{p}" for g, p in POINTS),
        help="GPUs x processes per GPU, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--repetitions", type=int, default=REPETITIONS)
    parser.add_argument(
        "--no-simulated", action="store_true", help="leave out part 2 (the simulated host)"
    )
    parser.add_argument("--no-mig", action="store_true", help="leave out the MIG hosts")
    parser.add_argument(
        "--costs",
        type=Path,
        default=standin.H200_COSTS,
        metavar="PATH",
        help="the cost file the stand-in charges (NAME MICROSECONDS lines; default: %(default)s)",
    )
    parser.add_argument(
        "--free",
        action="store_true",
        help="side by side on the free stand-in (every call free: our own Python profiled)",
    )
    parser.add_argument(
        "--unlisted-idle",
        action="store_true",
        help="side by side, a GPU with no process listed reads idle (default: busy half of "
        "each second, 95%% / 0%% every 500 ms, as the outside judge's host)",
    )
    parser.add_argument(
        "--no-default-interval",
        action="store_true",
        help=f"leave out ours at the default interval ({DEFAULT_INTERVAL}), free and charging",
    )
    args = parser.parse_args()
    costs = args.costs.resolve()
    standin.build()
    entries = standin.check_costs(costs)  # a refused file ends the run here, saying why
    print(f"{costs}: {entries} costs ({cost_file.origin(costs)})", file=sys.stderr)
    started = time.monotonic()
    unlisted_busy = not args.unlisted_idle
    points = matrix(
        parse_points(args.points), args.repetitions, None if args.free else costs, unlisted_busy
    )
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    lines = [f"Measured {time.strftime('%Y-%m-%d')} on {machine}.", ""]
    lines += matrix_report(points, args.repetitions, None if args.free else costs, unlisted_busy)
    if not args.no_default_interval:
        lines += ["", *default_interval_report(default_interval(costs), costs)]
    if not args.no_mig:
        lines += ["", *mig_report(mig_hosts())]
    if not args.no_simulated:
        lines += ["", *simulated_report(simulated())]
    minutes = (time.monotonic() - started) / 60
    lines += ["", f"The run took {minutes:.0f} minutes."]
    table = "\n".join(lines)
    print(table)
    if args.write:
        from gpu_exporter.docs import write_section

        write_section(args.write, "bench", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
