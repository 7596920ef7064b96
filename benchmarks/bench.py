"""Measure the exporter's cost, side by side with nvitop-exporter, and record it in
benchmarks/README.md.

Two parts, in one run:

1. Side by side (issue 14): gpu-exporter (its real NVML backend) and nvitop-exporter
   1.7.2 (pip-installed into benchmarks/.venv-nvitop on first use) against the same
   simulated host: the fake libnvidia-ml of the tests (`tests/support/fake_host.py`: 8
   busy H100s with GPM and 18 NVLink links), put in pynvml's place in each program by
   `benchmarks/fake_nvml_site/sitecustomize.py`, with the 64 real processes below as
   the GPU processes. For each: CPU at a 1 s interval with no scrapes, resident memory
   after warm-up, scrape latency p50/p99, series count, NVML calls per GPU per second
   (counted by the fake, read through SIGUSR1), and the time from SIGTERM to exit.
2. The simulated host (`--simulate 8`, issues 2 and 12) with 64 real processes (8 per
   GPU, each a parent with 4 children) placed on the GPUs through a scenario file:
   scrape latency (p50, p99, max) over 1000 scrapes on loopback, one keep-alive client;
   sampler CPU; resident memory; series; with `--compat.dcgm` the scrape p99 and the
   extra render cost per sample, rendering the same snapshot in-process.

Targets (issue 2): p99 <= 2 ms, sampler CPU <= 1% of a core, RSS <= 40 MiB; issue 12:
scrape p99 <= 2 ms in compat mode; issue 14: <= 8 ms CPU per sample, <= 16 NVML calls
per GPU per interval, RSS <= 28 MiB, idle SIGTERM to exit <= 0.3 s.
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

import psutil

REPO = Path(__file__).resolve().parents[1]
NVITOP_VENV = REPO / "benchmarks" / ".venv-nvitop"
NVITOP_VERSION = "1.7.2"
FAKE_SITE = REPO / "benchmarks" / "fake_nvml_site"
GPUS = 8
PROCESSES_PER_GPU = 8
CHILDREN_PER_PROCESS = 4
SCRAPES = 1000
CPU_WINDOW_SECONDS = 20.0
PROMETHEUS_EVERY_SECONDS = 15.0  # Prometheus's default scrape interval
PROMETHEUS_HEADERS = {  # what Prometheus 2.x sends by default
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
NVLINK_LINKS = 18  # of each fake H100 (tests/support/fake_host.py)

CHILD_TREE = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])"
    f" for _ in range({CHILDREN_PER_PROCESS})]\n"
    "time.sleep(3600)\n"
)


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


def spawn_jobs() -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-c", CHILD_TREE])
        for _ in range(GPUS * PROCESSES_PER_GPU)
    ]


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


def exporter_command(port: int, *extra: str) -> list[str]:
    """gpu-exporter at a 1 s interval on 127.0.0.1:`port`, logging only errors."""
    return [
        sys.executable,
        "-m",
        "gpu_exporter",
        "--collect.interval",
        "1s",
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


def cpu_share(proc: psutil.Process, seconds: float) -> float:
    """CPU seconds the process used per wall second, over `seconds`."""
    cpu0 = proc.cpu_times()
    wall0 = time.monotonic()
    time.sleep(seconds)
    cpu1 = proc.cpu_times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
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


def scrape_latencies(port: int) -> tuple[list[float], bytes]:
    """SCRAPES scrapes over one keep-alive connection: sorted latencies in ms, last body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    latencies: list[float] = []
    body = b""
    for _ in range(SCRAPES):
        t0 = time.perf_counter()
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read()
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
    """One program's figures on the fake NVML host."""

    name: str
    cpu_cores: float
    fake_cpu_cores: float  # of cpu_cores: inside the fake library's answers
    scraped_cpu_cores: float  # scraped as Prometheus does (cpu_share_scraped)
    rss_mib: float
    scrape_p50_ms: float
    scrape_p99_ms: float
    series: int
    nvml_calls_per_gpu_per_second: float
    nvml_missing_per_gpu_per_second: float  # lookups of functions the fake lacks
    sigterm_exit_seconds: float

    @property
    def cpu_ms(self) -> float:
        """CPU milliseconds per 1 s interval."""
        return 1000 * self.cpu_cores

    @property
    def own_cpu_ms(self) -> float:
        """CPU milliseconds per 1 s interval less the fake's answers (the driver's part)."""
        return 1000 * (self.cpu_cores - self.fake_cpu_cores)

    @property
    def fake_cpu_ms(self) -> float:
        return 1000 * self.fake_cpu_cores

    @property
    def scraped_cpu_ms(self) -> float:
        return 1000 * self.scraped_cpu_cores


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


def fake_env(pids: Sequence[int], calls_file: Path) -> dict[str, str]:
    """The environment that puts the fake host into a Python program (sitecustomize)."""
    return dict(
        os.environ,
        PYTHONPATH=str(FAKE_SITE),
        FAKE_NVML_GPUS=str(GPUS),
        FAKE_NVML_REPO=str(REPO),
        FAKE_NVML_PIDS=",".join(str(p) for p in pids),
        FAKE_NVML_CALLS=str(calls_file),
    )


def nvml_calls(proc: psutil.Process, calls_file: Path) -> tuple[float, int, int, float]:
    """(monotonic time, calls answered, lookups of missing functions, CPU seconds spent
    inside the fake's answers) of the program."""
    calls_file.unlink(missing_ok=True)
    at = time.monotonic()
    proc.send_signal(signal.SIGUSR1)
    deadline = at + 10
    while not calls_file.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{proc.pid} wrote no NVML call counts")
        time.sleep(0.02)
    counts = json.loads(calls_file.read_text())
    return at, int(counts["answered"]), int(counts["missing"]), float(counts["fake_cpu_seconds"])


def measure_side(
    name: str, command: Sequence[str], port: int, env: dict[str, str], ready_path: str
) -> Side:
    calls_file = Path(env["FAKE_NVML_CALLS"])
    program = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_ready(port, path=ready_path)
        proc = psutil.Process(program.pid)
        time.sleep(3.0)  # warm-up
        t0, answered0, missing0, fake0 = nvml_calls(proc, calls_file)
        share = cpu_share(proc, CPU_WINDOW_SECONDS)
        t1, answered1, missing1, fake1 = nvml_calls(proc, calls_file)
        rss = proc.memory_info().rss / 2**20
        scraped = cpu_share_scraped(proc, port)
        latencies, body = scrape_latencies(port)
        time.sleep(1.5)  # idle again, mid-interval
        stop = time.monotonic()
        program.send_signal(signal.SIGTERM)
        program.wait(10)
        exit_seconds = time.monotonic() - stop
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()
    per = GPUS * (t1 - t0)
    return Side(
        name=name,
        cpu_cores=share,
        fake_cpu_cores=(fake1 - fake0) / (t1 - t0),
        scraped_cpu_cores=scraped,
        rss_mib=rss,
        scrape_p50_ms=statistics.median(latencies),
        scrape_p99_ms=p99(latencies),
        series=series_in(body),
        nvml_calls_per_gpu_per_second=(answered1 - answered0) / per,
        nvml_missing_per_gpu_per_second=(missing1 - missing0) / per,
        sigterm_exit_seconds=exit_seconds,
    )


def side_by_side(pids: Sequence[int], tmp: Path) -> tuple[Side, Side]:
    """gpu-exporter and nvitop-exporter, one after the other, on the same fake host."""
    nvitop = ensure_nvitop()
    port = free_port()
    ours = measure_side(
        "gpu-exporter",
        exporter_command(port),
        port,
        fake_env(pids, tmp / "calls-ours.json"),
        ready_path="/healthz",
    )
    port = free_port()
    theirs = measure_side(
        f"nvitop-exporter {NVITOP_VERSION}",
        [str(nvitop), "--bind-address", "127.0.0.1", "--port", str(port), "--interval", "1.0"],
        port,
        fake_env(pids, tmp / "calls-nvitop.json"),
        ready_path="/metrics",  # it has no probe; it renders on every scrape anyway
    )
    return ours, theirs


def measure() -> tuple[Figures, Side, Side]:
    jobs = spawn_jobs()
    time.sleep(1.0)  # let the children start, so the trees are complete
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        scenario_path = Path(tmp) / "scenario.json"
        scenario_path.write_text(json.dumps(scenario(jobs)))
        exporter = None
        try:
            ours, theirs = side_by_side([job.pid for job in jobs], Path(tmp))
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
    figures = Figures(
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
    return figures, ours, theirs


def side_by_side_table(ours: Side, theirs: Side) -> list[str]:
    """The side-by-side table, with ratios (ours / theirs: below 1 is cheaper)."""
    rows: list[tuple[str, str, str, bool]] = [  # figure, Side field, format, with a ratio
        ("CPU at a 1 s interval, no scrapes (cores)", "cpu_cores", "{:.4f}", True),
        ("CPU per interval (ms)", "cpu_ms", "{:.2f}", True),
        ("of which inside the fake library's answers (ms)", "fake_cpu_ms", "{:.2f}", True),
        ("CPU per interval less the fake's answers (ms)", "own_cpu_ms", "{:.2f}", True),
        (
            f"CPU per interval, scraped every {PROMETHEUS_EVERY_SECONDS:g} s as Prometheus "
            "does (ms, fake's answers included)",
            "scraped_cpu_ms",
            "{:.2f}",
            True,
        ),
        ("NVML calls per GPU per second", "nvml_calls_per_gpu_per_second", "{:.2f}", True),
        (
            "NVML lookups of functions the fake lacks, per GPU per second",
            "nvml_missing_per_gpu_per_second",
            "{:.2f}",
            False,
        ),
        ("resident memory after warm-up and the CPU window (MiB)", "rss_mib", "{:.1f}", True),
        (f"scrape latency p50 ({SCRAPES} scrapes, ms)", "scrape_p50_ms", "{:.3f}", True),
        ("scrape latency p99 (ms)", "scrape_p99_ms", "{:.3f}", True),
        ("series in one exposition", "series", "{}", False),
        ("idle SIGTERM to exit (s)", "sigterm_exit_seconds", "{:.3f}", False),
    ]
    lines = [f"| figure | {ours.name} | {theirs.name} | ratio |", "|---|---|---|---|"]
    for figure, name, fmt, with_ratio in rows:
        a, b = getattr(ours, name), getattr(theirs, name)
        ratio = f"{a / b:.2f}" if with_ratio and b else ""
        lines.append(f"| {figure} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")
    return lines


def report(f: Figures, ours: Side, theirs: Side) -> str:
    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    return "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d')} on {machine}.",
            "",
            f"**Side by side** on one fake NVML host ({GPUS} busy H100s with GPM and "
            f"{NVLINK_LINKS} NVLink links, the {GPUS * PROCESSES_PER_GPU} processes below as "
            "GPU processes; the tests' fake libnvidia-ml in pynvml's place in both programs, "
            "so its Python cost is in both CPU figures):",
            "",
            *side_by_side_table(ours, theirs),
            "",
            f"Issue 14 targets for gpu-exporter: CPU per interval <= 8 ms: "
            f"{verdict(ours.cpu_cores <= 0.008)} ({ours.own_cpu_ms:.1f} ms less the fake's "
            f"answers, {ours.scraped_cpu_ms:.1f} ms scraped every "
            f"{PROMETHEUS_EVERY_SECONDS:g} s); NVML calls per GPU per interval <= 16: "
            f"{verdict(ours.nvml_calls_per_gpu_per_second <= 16)}; RSS <= 28 MiB: "
            f"{verdict(ours.rss_mib <= 28)}; idle SIGTERM to exit <= 0.3 s: "
            f"{verdict(ours.sigterm_exit_seconds <= 0.3)}; scrape p99 <= 1 ms: "
            f"{verdict(ours.scrape_p99_ms <= 1)}.",
            "",
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
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", metavar="README", help="record the figures in this file")
    args = parser.parse_args()
    table = report(*measure())
    print(table)
    if args.write:
        from gpu_exporter.docs import write_section

        write_section(args.write, "bench", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
