"""This checkout beside an earlier commit, alternating on one host in one sitting.

A performance round promises that what it does not target gets no worse (issue 52: "the
scrape p99, the default-interval figures"). Figures recorded on other days do not settle
that here: on these shared 2-CPU VMs the same program reads 1.5-3x apart from one day to
the next. This runs both programs, one after the other, on the same stand-in host:

- **the default interval**: each alone at `--collect.interval 5s` on `bench.py`'s stand-in,
  free and charging, at its DEFAULT_INTERVAL_POINTS, with the bench's own
  `default_interval` (the whole process's CPU over 30 s after 5 s of warm-up), in ms/s per
  GPU;
- **the judge's scrape bursts**: each started as the outside judge starts it on its 8 x 0
  host (`../shared/perf-judge/`: its stand-in, GPUs 95% / 0% every 500 ms, no process),
  then `--bursts` bursts of the judge's 200 scrapes on fresh connections, `--idle` seconds
  unscraped before each (`p99_floor.burst`: p50, p99 as the judge takes it, the host's
  steal).

The commit is exported with `git archive` into a temporary directory and run from there by
this venv's Python (`-m gpu_exporter` in that directory: its package, this venv's
dependencies). Prints a JSON object a run and a Markdown table of medians. Measured, never
asserted; keep it out of `make test`.

Usage: python benchmarks/against_commit.py REF [--runs 3] [--bursts 8] [--idle 20]
[--no-default-interval] [--no-bursts]
"""

from __future__ import annotations

import argparse
import compileall
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import bench
import standin
from p99_floor import BAR_MS, JUDGE, SETTLE_SECONDS, as_the_judge_sets_it, burst

REPO = bench.REPO


def short_id(ref: str) -> str:
    """`ref`'s commit, abbreviated as git does."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=REPO, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def export(ref: str, into: Path) -> str:
    """The tree of `ref` written under `into`, its modules compiled; returns the short id."""
    archive = subprocess.run(["git", "archive", ref], cwd=REPO, check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    compileall.compile_dir(into / "gpu_exporter", quiet=1)
    return short_id(ref)


def program(tree: Path) -> list[str]:
    """The exporter of `tree` as a command: this venv's Python, `-m gpu_exporter` in `tree`
    (`-m` puts the working directory first on the path, ahead of this checkout's editable
    install)."""
    return ["sh", "-c", 'cd "$0" && exec "$@"', str(tree), sys.executable, "-m", "gpu_exporter"]


def alternating(trees: dict[str, Path], run: int) -> list[tuple[str, Path]]:
    """The programs in the order they run in `run`: each first in every other run."""
    order = list(trees.items())
    return order if run % 2 == 0 else order[::-1]


def default_interval(trees: dict[str, Path], runs: int, costs: Path) -> dict[str, list[float]]:
    """{"GxP stand-in program": [ms/s per GPU, a run each]}, the programs alternating."""
    out: dict[str, list[float]] = {}
    for run in range(runs):
        for name, tree in alternating(trees, run):
            for point in bench.default_interval(costs, tree=tree):
                for mode, whole in (
                    ("free", point.free_ms_per_gpu),
                    ("charging", point.charging_ms_per_gpu),
                ):
                    key = f"{point.gpus}x{point.per_gpu} {mode} {name}"
                    out.setdefault(key, []).append(whole)
                    figure = {
                        "default_interval": key,
                        "run": run,
                        "ms_per_s_per_gpu": round(whole, 3),
                    }
                    print(json.dumps(figure), flush=True)
    return out


def judge_bursts(
    trees: dict[str, Path], runs: int, bursts: int, idle: float
) -> dict[str, list[dict[str, Any]]]:
    """{program: [burst, ...]}: a fresh process a run, the programs alternating."""
    sys.path.insert(0, str(JUDGE))
    from harness import Running, free_port  # the judge's own client and process handling
    from scenario import Scenario

    out: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with Scenario(8, 0) as host:
        as_the_judge_sets_it(host, 8)
        for run in range(runs):
            for name, tree in alternating(trees, run):
                port = free_port()
                argv = program(tree) + ["--web.listen-address", f"127.0.0.1:{port}"]
                running = Running(argv + ["--collect.interval", "1"], host.env(), port)
                try:
                    running.wait_ready(need="gpu_memory_used_bytes")
                    time.sleep(SETTLE_SECONDS)
                    for index in range(bursts):
                        time.sleep(idle)
                        result = burst(running)
                        out[name].append(result)
                        shown = {k: v for k, v in result.items() if k != "over_1ms"}
                        shown["over_1ms"] = len(result["over_1ms"])
                        print(json.dumps({"program": name, "run": run, "burst": index, **shown}))
                finally:
                    running.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="the earlier commit (any git revision)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each program")
    parser.add_argument("--bursts", type=int, default=8, help="bursts a run")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds unscraped a burst")
    parser.add_argument("--costs", type=Path, default=standin.H200_COSTS)
    parser.add_argument("--no-default-interval", action="store_true")
    parser.add_argument("--no-bursts", action="store_true")
    args = parser.parse_args()
    if not args.no_bursts and not (JUDGE / "harness.py").exists():
        print(f"against_commit: the judge is not at {JUDGE} (or give --no-bursts)", file=sys.stderr)
        return 2
    head = short_id("HEAD")
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = export(args.ref, Path(tmp))
        trees = {base: Path(tmp), f"{head} (this checkout)": REPO}
        if not args.no_default_interval:
            figures = default_interval(trees, args.runs, args.costs.resolve())
            lines += ["| point | stand-in | program | ms/s per GPU, median (runs) |"]
            lines += ["|---|---|---|---|"]
            for key, values in figures.items():
                point, mode, name = key.split(" ", 2)
                runs = ", ".join(f"{v:.3f}" for v in values)
                median = statistics.median(values)
                lines.append(f"| {point} | {mode} | {name} | {median:.3f} ({runs}) |")
            lines.append("")
        if not args.no_bursts:
            results = judge_bursts(trees, args.runs, args.bursts, args.idle)
            lines += ["| program | burst p99 ms, median | bursts under 1 ms | p50 ms, median |"]
            lines += ["|---|---|---|---|"]
            for name, bursts in results.items():
                p99s = [b["p99_ms"] for b in bursts]
                under = sum(1 for v in p99s if v <= BAR_MS)
                p50 = statistics.median(b["p50_ms"] for b in bursts)
                p99 = statistics.median(p99s)
                lines.append(f"| {name} | {p99:.2f} | {under} of {len(p99s)} | {p50:.2f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    os.chdir(REPO)
    sys.exit(main())
