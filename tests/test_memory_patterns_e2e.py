"""Framework memory traces through the real program at the default 5 s interval.

The simulated host plays each trace (`--simulate.scenario`, `memory_trace`) on real
processes (children of this test, so attribution reads them in /proc); the exporter runs
as root and as shipped (uid 0 without capabilities), both at once, and its /metrics and
live page show the patterns, the counters and the verdicts: a TensorFlow reservation is
shown, not at risk; two processes near full share the GPU; a PyTorch allocator's drops
and re-rises are counted; a job that ends on a full MIG instance is named; a dead owner's
memory stays leaked. The hour-long traces are tests/test_memory_pattern_rules.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.exporter import REPO, Exporter, Samples, free_port, values

pytestmark = pytest.mark.e2e

SHIPPED = ["setpriv", "--reuid=0", "--inh-caps=-all", "--bounding-set=-all"]
DEADLINE_SECONDS = 75.0


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"])


@pytest.fixture(scope="module")
def processes() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    made = {name: sleeper() for name in ("tf", "a", "b", "torch", "ends", "dies")}
    try:
        yield made
    finally:
        for p in made.values():
            p.kill()
            p.wait()


def scenario(pids: dict[str, int]) -> dict[str, Any]:
    """--simulate 5: GPU 0 TensorFlow's reservation, GPU 1 two processes at 55% + 42%,
    GPU 2 PyTorch under pressure, GPU 3 (MIG) a job at 98% of instance 2 that ends at 25 s,
    GPU 4 a reservation whose owner the test kills."""
    return {
        "processes": [
            {"gpu": 0, "pid": pids["tf"], "memory_trace": "tensorflow", "memory_ratio": 0.99}
            | {"start_seconds": 6},
            {"gpu": 1, "pid": pids["a"], "memory_trace": "flat", "memory_ratio": 0.55},
            {"gpu": 1, "pid": pids["b"], "memory_trace": "flat", "memory_ratio": 0.42},
            {"gpu": 2, "pid": pids["torch"], "memory_trace": "pytorch-pressure", "memory_ratio": 0},
            {"gpu": 3, "pid": pids["ends"], "gpu_instance": 2, "memory_trace": "flat"}
            | {"memory_ratio": 0.98, "start_seconds": 6, "end_seconds": 25},
            {"gpu": 4, "pid": pids["dies"], "memory_trace": "tensorflow", "memory_ratio": 0.98}
            | {"start_seconds": 6},
        ]
    }


def start(prefix: list[str], scenario_path: Path, log_dir: Path) -> Exporter:
    port = free_port()
    args = ["--simulate", "5", "--simulate.scenario", str(scenario_path)]
    args += ["--web.listen-address", f"127.0.0.1:{port}"]
    log_path = log_dir / f"exporter-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "gpu_exporter", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    return Exporter(process, port, log_path, args)


def pattern(samples: Samples, gpu: str, gpu_instance: str = "") -> str | None:
    name = "gpu_mig_memory_pattern" if gpu_instance else "gpu_memory_pattern"
    for (n, labels), v in samples.items():
        found = dict(labels)
        if n == name and found["gpu"] == gpu and found.get("gpu_instance", "") == gpu_instance:
            return found["pattern"] if v == 1 else None
    return None


def verdicts(exporter: Exporter) -> dict[str, dict[str, str]]:
    """GPU index (or "3/2" for MIG instance 2 of GPU 3) -> {verdict: summary}."""
    doc = json.loads(exporter.get("/api/overview").text)
    out: dict[str, dict[str, str]] = {}
    for gpu in doc["gpus"]:
        out[str(gpu["index"])] = {v["name"]: v["summary"] for v in gpu["verdicts"]}
        for m in gpu["mig"]:
            key = f"{gpu['index']}/{m['gpu_instance']}"
            out[key] = {v["name"]: v["summary"] for v in m["verdicts"]}
    return out


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_the_real_program_shows_each_pattern_as_root_and_as_shipped(
    processes: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    path = tmp_path / "scenario.yml"
    path.write_text(yaml.safe_dump(scenario({k: p.pid for k, p in processes.items()})))
    exporters = {"root": start([], path, tmp_path), "shipped": start(SHIPPED, path, tmp_path)}
    killed = False
    seen: dict[str, dict[str, Any]] = {name: {} for name in exporters}
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            time.sleep(1.0)
            for name, exporter in exporters.items():
                assert exporter.process.poll() is None, exporter.log()
                try:
                    samples = exporter.scrape()
                except (OSError, AssertionError):
                    continue
                got = seen[name]
                for gpu in ("0", "1", "2", "4"):
                    got.setdefault(f"pattern{gpu}", set()).add(pattern(samples, gpu))
                got.setdefault("pattern3/2", set()).add(pattern(samples, "3", "2"))
                got["drops2"] = values(samples, "gpu_memory_near_full_drops_total", gpu="2")
                got["exits3"] = values(
                    samples, "gpu_mig_memory_likely_oom_exits_total", gpu="3", gpu_instance="2"
                )
                got["exits4"] = values(samples, "gpu_memory_likely_oom_exits_total", gpu="4")
                got["exit_info"] = [
                    dict(labels)
                    for (n, labels), _ in samples.items()
                    if n == "gpu_memory_likely_oom_exit_info"
                ]
                if "reserved" in got["pattern4"] and not killed:
                    processes["dies"].kill()  # its memory stays listed: a dead owner
                    processes["dies"].wait()
                    killed = True
                if got.get("exit_info") and "unowned" in got["pattern4"]:
                    got["verdicts"] = verdicts(exporter)
            if all(
                got.get("verdicts") and got["drops2"] and got["drops2"][0] >= 1
                for got in seen.values()
            ):
                break
        for name, got in seen.items():
            log = exporters[name].log()
            # TensorFlow's 99% at start, held flat: reserved, shown at info level
            assert got["pattern0"] - {None, "not_full"} == {"reserved"}, (name, got, log)
            shown = got["verdicts"]["0"]
            assert set(shown) == {"memory-reserved"}, (name, shown)
            tf = processes["tf"].pid
            assert shown["memory-reserved"].startswith(
                f"pid {tf} (sleep) reserved 79 GiB (99%) at start and holds it flat"
            ), shown
            # 55% + 42%: shared, near-oom
            assert got["pattern1"] == {"sharing"}, (name, got)
            assert "shared by pid " in got["verdicts"]["1"]["near-oom"]
            # PyTorch's drops and re-rises, counted from every 5 s interval
            assert got["drops2"] and got["drops2"][0] >= 1, (name, got)
            # a job at 98% of MIG instance 2 ended: counted and named
            assert got["exits3"] == [1.0], (name, got)
            [info] = got["exit_info"]
            assert info["pid"] == str(processes["ends"].pid) and info["gpu_instance"] == "2"
            ended = got["verdicts"]["3/2"]["ended-on-full-memory"]
            assert ended.startswith("A job ended while this instance was 98% full: pid "), ended
            # the killed owner's memory stays held: unowned and leaked, no death counted
            assert "unowned" in got["pattern4"], (name, got)
            assert got["exits4"] == [0.0], (name, got)
            assert "memory-leaked" in got["verdicts"]["4"], got["verdicts"]["4"]
            assert "near-oom" not in got["verdicts"]["4"]
    finally:
        for exporter in exporters.values():
            exporter.stop()
