"""A wall clock that steps, under the real program (issue 48 item 4).

NTP, chrony, PTP, a VM resume or an operator's `date` step a host's wall clock. The
exporter judged a listed PID's liveness by its start time (a boot time read once, plus
the start ticks) against the wall time it was first seen: after a step back, every job
started afterwards was a dead owner (`gpu_memory_dead_owner_info{state="gone"}`,
`gpu_processes 0`), and `GPUMemoryLeaked` fired, for the job's whole life.

Here the real program runs on one simulated GPU whose process, a real one, is placed
through a `--simulate.scenario` file, at the default 5 s interval, with its wall clock
stepped back and forward by minutes (`tests/support/stepped_clock_site`: `time.time`
of the whole program moves, nothing else does), as root and as shipped (uid 0 with no
capabilities). After each step a job started afterwards must be a live process on
`/metrics`, and the shipped `GPUMemoryLeaked` must stay silent through promtool.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support.exporter import Exporter, Samples, values
from tests.support.privileges import PROFILES, start_as
from tests.test_process_e2e import Trees, write_scenario
from tests.test_rules import RULES, promtool

pytestmark = pytest.mark.e2e

GIB = 2**30
SITE = Path(__file__).resolve().parent / "support" / "stepped_clock_site"


@pytest.fixture
def trees() -> Iterator[Trees]:
    t = Trees()
    yield t
    t.close()


def start(tmp_path: Path, profile: str, step_file: Path, scenario: Path) -> Exporter:
    """The real program on one simulated GPU at the default interval, its wall clock
    stepped by what `step_file` says."""
    path = os.pathsep.join(p for p in (str(SITE), os.environ.get("PYTHONPATH")) if p)
    exporter = start_as(
        profile,
        ["--simulate", "1", "--simulate.scenario", str(scenario)],
        tmp_path,
        env={"STEPPED_CLOCK_FILE": str(step_file), "PYTHONPATH": path},
    )
    exporter.wait_for(lambda s: bool(values(s, "gpu_exporter_samples_total")), timeout=30)
    return exporter


def one_value(samples: Samples, name: str, **labels: str) -> float:
    (value,) = values(samples, name, **labels)
    return value


def step_to(step_file: Path, seconds: float) -> None:
    """Step the program's wall clock to `seconds` off the real one (atomically)."""
    tmp = step_file.with_suffix(".tmp")
    tmp.write_text(f"{seconds}\n")
    tmp.replace(step_file)


def samples_taken(s: Samples) -> float:
    return sum(values(s, "gpu_exporter_samples_total"))


def after_two_more_samples(exporter: Exporter) -> Samples:
    """A scrape two whole samples (at 5 s) after this moment."""
    seen = samples_taken(exporter.scrape())
    return exporter.wait_for(lambda s: samples_taken(s) >= seen + 2, timeout=30)


def leaked_alerts(samples: Samples, tmp_path: Path, processes: float | None = None) -> str:
    """promtool's output for the shipped GPUMemoryLeaked with these samples held for 15
    minutes and no alert expected; `processes` overrides gpu_processes (a check that the
    case can fire at all)."""
    wanted = ("gpu_memory_used_bytes", "gpu_processes", "gpu_memory_dead_owner_info")
    wanted += ("gpu_memory_holder_info", "gpu_exporter_holder_scan_denied_processes")
    series = []
    for (name, labels), value in samples.items():
        if name not in wanted:
            continue
        if name == "gpu_processes" and processes is not None:
            value = processes
        pairs = [("instance", "node-1:9872"), ("job", "gpu-exporter"), *labels]
        text = ",".join(f'{k}="{v}"' for k, v in pairs)
        series.append({"series": f"{name}{{{text}}}", "values": f"{value:.0f}x20"})
    spec = {
        "rule_files": [str(RULES / "gpu-alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"alertname": "GPUMemoryLeaked", "eval_time": "15m", "exp_alerts": []}
                ],
            }
        ],
    }
    path = tmp_path / "leaked.test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = promtool("test", "rules", str(path))
    return "" if result.returncode == 0 else result.stdout + result.stderr


def test_a_live_job_stays_a_live_process_when_the_wall_clock_steps_back_and_forward(
    trees: Trees, tmp_path: Path
) -> None:
    """Each profile's program on its own clock, side by side (the steps are minutes of
    the program's clock, but each wait is real seconds at the default 5 s interval)."""
    workdirs = {profile: tmp_path / profile.replace(" ", "-") for profile in PROFILES}
    for workdir in workdirs.values():
        workdir.mkdir()
    with ThreadPoolExecutor(len(workdirs)) as pool:
        runs = {p: pool.submit(steps_under, p, trees, w) for p, w in workdirs.items()}
        for profile, run in runs.items():
            try:
                run.result()
            except AssertionError as failed:
                raise AssertionError(f"{profile}: {failed}") from failed


def steps_under(profile: str, trees: Trees, tmp_path: Path) -> None:
    """The clock stepped back and forward under `profile`; each step's checks."""
    step_file, scenario = tmp_path / "step", tmp_path / "scenario.json"
    step_to(step_file, 0.0)
    write_scenario(scenario, [])
    exporter = start(tmp_path, profile, step_file, scenario)
    try:
        uncovered = values(after_two_more_samples(exporter), "gpu_busy_uncovered_seconds_total")
        jobs: list[psutil.Process] = []
        sm_seconds = 0.0
        for step in (-300.0, 300.0):  # back 5 minutes, then 5 minutes ahead of real time
            step_to(step_file, step)
            after_two_more_samples(exporter)  # the program lives on the stepped clock
            jobs.append(trees.spawn(0))  # a job started after the step
            placed = [
                {"gpu": 0, "pid": j.pid, "memory_bytes": 4 * GIB, "sm_ratio": 0.5} for j in jobs
            ]
            write_scenario(scenario, placed)
            exporter.wait_for(
                lambda s, pid=jobs[-1].pid: bool(values(s, "gpu_process_workers", pid=str(pid))),
                timeout=30,
            )
            s = after_two_more_samples(exporter)
            assert values(s, "gpu_memory_dead_owner_info") == [], (step, exporter.log())
            assert values(s, "gpu_processes", gpu="0") == [len(jobs)], step
            for job in jobs:
                assert values(s, "gpu_process_memory_used_bytes", pid=str(job.pid)) == [4 * GIB]
                started = values(s, "gpu_process_start_time_seconds", pid=str(job.pid))
                assert started == [pytest.approx(job.create_time(), abs=2.0)]  # the kernel's
            assert values(s, "gpu_memory_used_bytes", gpu="0")[0] > GIB  # the alert's case
            assert leaked_alerts(s, tmp_path) == ""  # GPUMemoryLeaked stays silent
            # the same series with no live process would page: the check can fail
            assert "GPUMemoryLeaked" in leaked_alerts(s, tmp_path, processes=0)
            # the driver's samples are stamped on the wall clock too: a step is no gap
            assert values(s, "gpu_busy_uncovered_seconds_total") == uncovered
            counted = one_value(s, "gpu_process_sm_seconds_total", pid=str(jobs[0].pid))
            assert counted > sm_seconds  # the first job's SM seconds go on across the steps
            sm_seconds = counted
    finally:
        exporter.stop()
