"""Real processes on simulated GPUs: the program's process series checked over HTTP.

Each test spawns real process trees (a parent with CPU-burning children, or sleepers),
places their PIDs on the GPUs through a `--simulate.scenario` file, and scrapes the
real program. Waits are loops on what the exporter reports, never fixed sleeps, and
CPU rates are compared with psutil's own view of the same tree over the same window.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.exporter import (
    Exporter,
    Samples,
    parse_samples,
    series,
    start_exporter,
    values,
)

pytestmark = pytest.mark.e2e

GIB = 2**30
INTERVAL = ["--collect.interval", "0.2s"]
TREE = (
    "import subprocess, sys, time\n"
    "n = int(sys.argv[1])\n"
    "burn = 'while True: pass'\n"
    "kids = [subprocess.Popen([sys.executable, '-c', burn]) for _ in range(n)]\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


class Trees:
    """Spawns process trees and kills every one of them at the end of the test."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, burners: int = 0, *extra_args: str) -> psutil.Process:
        # argv[0] the interpreter's name, not its path: a command line whose length does
        # not depend on where the checkout is (the cmdline label is cut at 256 bytes)
        argv0 = os.path.basename(sys.executable)
        proc = subprocess.Popen(
            [argv0, "-c", TREE, str(burners), *extra_args],
            executable=sys.executable,
            stdout=subprocess.PIPE,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        tree = psutil.Process(proc.pid)
        settled(tree, burners)
        return tree

    def kill(self, process: psutil.Process) -> None:
        for child in process.children(recursive=True):
            child.kill()
        process.kill()
        for proc in self.procs:
            if proc.pid == process.pid:
                proc.wait(10)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    self.kill(psutil.Process(proc.pid))
                except psutil.NoSuchProcess:
                    pass


def settled(tree: psutil.Process, children: int, timeout: float = 30.0) -> None:
    """Wait for the tree the test built: `children` children named python, none with
    children of its own. Where `python` on the PATH is a pyenv shim (the tree's own
    sys.executable is looked up there), each child starts as bash and forks for a few
    hundred milliseconds before it becomes Python: a sample taken then rightly counts
    those processes too."""
    deadline = time.monotonic() + timeout
    shape: list[tuple[str, int]] = []
    while time.monotonic() < deadline:
        try:
            kids = tree.children()
            shape = [(k.name(), len(k.children())) for k in kids]
        except psutil.NoSuchProcess:
            shape = []
        if len(shape) == children and all(
            name.startswith("python") and not grandchildren for name, grandchildren in shape
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"the tree never settled: {shape}")


@pytest.fixture
def trees() -> Iterator[Trees]:
    t = Trees()
    yield t
    t.close()


def write_scenario(path: Path, processes: list[dict[str, Any]]) -> None:
    """Replace the scenario atomically, so the exporter never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"processes": processes}))
    tmp.replace(path)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Callable[..., Exporter]]:
    """start(processes, *args): the program on 2 simulated GPUs with these processes."""
    started: list[Exporter] = []
    scenario = tmp_path / "scenario.json"

    def start(processes: list[dict[str, Any]], *args: str) -> Exporter:
        write_scenario(scenario, processes)
        exporter = start_exporter(
            ["--simulate", "2", "--simulate.scenario", str(scenario), *INTERVAL, *args], tmp_path
        )
        started.append(exporter)
        return exporter

    start.scenario = scenario  # type: ignore[attr-defined]
    yield start
    for exporter in started:
        exporter.stop()


def has_pid(pid: int, name: str = "gpu_process_memory_used_bytes") -> Callable[[Samples], bool]:
    return lambda s: bool(values(s, name, pid=str(pid)))


def one(samples: Samples, name: str, **labels: str) -> float:
    found = values(samples, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return found[0]


def tree_cpu_seconds(process: psutil.Process) -> float:
    """psutil's view of the CPU time of a process and its descendants."""
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def test_process_series_match_the_real_process(trees: Trees, run: Callable[..., Exporter]) -> None:
    job = trees.spawn(2)
    exporter = run(
        [
            {
                "gpu": 0,
                "pid": job.pid,
                "memory_bytes": 3 * GIB,
                "sm_ratio": 0.4,
                "memory_controller_ratio": 0.2,
            }
        ]
    )
    s = exporter.wait_for(has_pid(job.pid, "gpu_process_workers"))
    labels = {"pid": str(job.pid), "gpu": "0"}
    (found,) = [x for x in series(s, "gpu_process_memory_used_bytes") if x["pid"] == str(job.pid)]
    assert found["process"] == job.name()
    assert found["user"] == job.username()
    assert found["context"] == "compute"
    assert "cmdline" not in found  # off unless --collector.process.cmdline
    assert one(s, "gpu_process_memory_used_bytes", **labels) == 3 * GIB
    assert one(s, "gpu_process_utilization_ratio", **labels) == pytest.approx(0.4)
    assert one(s, "gpu_process_memory_controller_utilization_ratio", **labels) == pytest.approx(0.2)
    assert one(s, "gpu_process_workers", **labels) == 2
    assert one(s, "gpu_process_start_time_seconds", **labels) == pytest.approx(
        job.create_time(), abs=1.0
    )
    rss = one(s, "gpu_process_resident_memory_bytes", **labels)
    assert 0.5 * job.memory_info().rss <= rss <= 2 * job.memory_info().rss
    assert one(s, "gpu_processes", gpu="0") == 1 and one(s, "gpu_processes", gpu="1") == 0
    used = one(s, "gpu_memory_used_bytes", gpu="0")
    assert one(s, "gpu_memory_unattributed_bytes", gpu="0") == used - 3 * GIB
    assert one(s, "gpu_memory_unattributed_bytes", gpu="1") == one(
        s, "gpu_memory_used_bytes", gpu="1"
    )
    assert one(s, "gpu_host_cpus") == psutil.cpu_count()
    assert one(s, "gpu_host_memory_total_bytes") == psutil.virtual_memory().total


def test_a_process_placed_on_a_mig_instance_is_exported_with_it(
    trees: Trees, run: Callable[..., Exporter]
) -> None:
    """The scenario can put a process on an instance of the simulated MIG GPU (GPU 3:
    instances 2, 3 and 9, only 2 busy): its series carry the instance, the instance's
    memory holds it, and the idle instance now has a process (the MIG idle rule's case)."""
    job = trees.spawn(0)
    placed = {"gpu": 3, "pid": job.pid, "memory_bytes": 2 * GIB, "gpu_instance": 3}
    exporter = run([placed], "--simulate", "4")
    s = exporter.wait_for(has_pid(job.pid))
    labels = {"pid": str(job.pid), "gpu": "3"}
    (found,) = [x for x in series(s, "gpu_process_memory_used_bytes") if x["pid"] == str(job.pid)]
    assert (found["gpu_instance"], found["compute_instance"]) == ("3", "0")
    assert one(s, "gpu_process_memory_used_bytes", **labels) == 2 * GIB
    instance = one(s, "gpu_mig_memory_used_bytes", gpu="3", gpu_instance="3")
    idle = one(s, "gpu_mig_memory_used_bytes", gpu="3", gpu_instance="9")
    assert instance == idle + 2 * GIB  # both hold 13 MiB of their own
    assert one(s, "gpu_processes", gpu="3") == 1
    assert one(s, "gpu_memory_used_bytes", gpu="3") == sum(
        values(s, "gpu_mig_memory_used_bytes", gpu="3")
    )


def test_tree_cpu_counter_rises_with_the_busy_children(
    trees: Trees, run: Callable[..., Exporter]
) -> None:
    job = trees.spawn(2)
    exporter = run([{"gpu": 0, "pid": job.pid, "memory_bytes": GIB}])
    name = "gpu_process_cpu_seconds_total"
    first = one(exporter.wait_for(has_pid(job.pid, name)), name, pid=str(job.pid))
    truth0, t0 = tree_cpu_seconds(job), time.monotonic()
    deadline = t0 + 3.0
    while time.monotonic() < deadline:  # scraped as a scraper does, so the /proc
        exporter.scrape()  # counters are read for it (serving/scrape_clock.py)
        time.sleep(0.5)
    last = one(exporter.scrape(), name, pid=str(job.pid))
    truth1, t1 = tree_cpu_seconds(job), time.monotonic()
    rate, truth = (last - first) / (t1 - t0), (truth1 - truth0) / (t1 - t0)
    # the parent sleeps: a rate well above 0 can only come from its children (on a
    # loaded machine the two burning children got 0.23 of a core between them, not 2)
    assert rate > 0.1, (rate, truth)
    assert rate == pytest.approx(truth, rel=0.35, abs=0.3), (rate, truth)


def test_cap_keeps_the_largest_and_rolls_the_rest_into_other(
    trees: Trees, run: Callable[..., Exporter]
) -> None:
    jobs = [trees.spawn(0) for _ in range(4)]
    exporter = run(
        [{"gpu": 0, "pid": j.pid, "memory_bytes": (i + 1) * GIB} for i, j in enumerate(jobs)],
        "--collector.process.limit",
        "2",
    )
    s = exporter.wait_for(lambda s: bool(values(s, "gpu_process_memory_used_bytes", gpu="0")))
    pids = {x["pid"] for x in series(s, "gpu_process_memory_used_bytes") if x["gpu"] == "0"}
    assert pids == {str(jobs[2].pid), str(jobs[3].pid), ""}
    assert one(s, "gpu_process_memory_used_bytes", process="other", pid="") == 1 * GIB + 2 * GIB
    assert values(s, "gpu_process_cpu_seconds_total", process="other") == []
    assert one(s, "gpu_processes", gpu="0") == 4  # every process counts, capped or not
    used = one(s, "gpu_memory_used_bytes", gpu="0")
    assert one(s, "gpu_memory_unattributed_bytes", gpu="0") == used - 10 * GIB


def test_an_owner_that_exits_while_listed_is_a_dead_owner_not_a_process(
    trees: Trees, run: Callable[..., Exporter]
) -> None:
    """The real driver keeps listing an owner that died while a child holds the device
    files: it leaves the process series and gpu_processes, and its memory is unattributed."""
    stays, leaves = trees.spawn(0), trees.spawn(1)
    entries = [
        {"gpu": 0, "pid": stays.pid, "memory_bytes": GIB},
        {"gpu": 1, "pid": leaves.pid, "memory_bytes": 2 * GIB, "sm_ratio": 0.3},
    ]
    exporter = run(entries)
    s = exporter.wait_for(has_pid(leaves.pid, "gpu_process_workers"))
    assert one(s, "gpu_processes", gpu="1") == 1
    attributed = one(s, "gpu_memory_unattributed_bytes", gpu="1")
    # it exits (reaped: gone from /proc) while the driver still lists it; a sample taken
    # between the kill and the reap sees it a zombie first, rightly
    trees.kill(leaves)
    s = exporter.wait_for(
        lambda s: bool(values(s, "gpu_memory_dead_owner_info", gpu="1", state="gone"))
    )
    assert one(s, "gpu_memory_dead_owner_info", gpu="1", pid=str(leaves.pid), state="gone") == 1
    assert not any(str(leaves.pid) in str(k) for k in s if k[0].startswith("gpu_process_"))
    assert one(s, "gpu_processes", gpu="1") == 0
    leaked = one(s, "gpu_memory_unattributed_bytes", gpu="1")
    assert leaked >= 2 * GIB and leaked > attributed
    assert one(s, "gpu_process_workers", pid=str(stays.pid)) == 0  # the live one unchanged
    assert one(s, "gpu_processes", gpu="0") == 1
    # the driver lets go of it: every series of it disappears from the next scrapes
    write_scenario(run.scenario, entries[:1])  # type: ignore[attr-defined]
    s = exporter.wait_for(lambda s: not any(str(leaves.pid) in str(k) for k in s))
    assert one(s, "gpu_processes", gpu="1") == 0
    assert one(s, "gpu_processes", gpu="0") == 1


def test_a_listed_pid_that_is_not_in_proc_is_a_gone_owner(
    trees: Trees, run: Callable[..., Exporter]
) -> None:
    job = trees.spawn(0)
    gone = 4_194_000  # near PID_MAX_LIMIT: no process of this host
    assert not psutil.pid_exists(gone)
    exporter = run(
        [
            {"gpu": 0, "pid": gone, "memory_bytes": GIB, "sm_ratio": 0.7},
            {"gpu": 0, "pid": job.pid, "memory_bytes": GIB},
        ]
    )
    s = exporter.wait_for(has_pid(job.pid, "gpu_process_workers"))
    assert values(s, "gpu_process_memory_used_bytes", pid=str(gone)) == []
    assert values(s, "gpu_process_utilization_ratio", pid=str(gone)) == []
    assert one(s, "gpu_memory_dead_owner_info", pid=str(gone), state="gone") == 1
    assert one(s, "gpu_processes", gpu="0") == 1
    assert one(s, "gpu_process_workers", pid=str(job.pid)) == 0


def test_command_line_only_when_enabled_and_truncated(
    trees: Trees, run: Callable[..., Exporter]
) -> None:
    secret = "--token=" + "s" * 400
    job = trees.spawn(0, secret)
    entry = [{"gpu": 0, "pid": job.pid, "memory_bytes": GIB}]
    plain = run(entry)
    s = plain.wait_for(has_pid(job.pid, "gpu_process_workers"))
    assert all("cmdline" not in x for x in series(s, "gpu_process_memory_used_bytes"))
    assert "sssssss" not in plain.get("/metrics").text
    with_cmdline = run(entry, "--collector.process.cmdline")
    s = with_cmdline.wait_for(has_pid(job.pid, "gpu_process_workers"))
    (found,) = [x for x in series(s, "gpu_process_memory_used_bytes") if x["pid"] == str(job.pid)]
    # cut to 256 bytes: the start, the marker that says so and a digest of the whole line
    line = " ".join(job.cmdline())
    digest = hashlib.sha256(line.encode()).hexdigest()[:32]
    assert found["cmdline"] == line[:221] + "\u2026" + digest
    assert len(found["cmdline"].encode()) == 256


def test_a_command_line_that_is_not_utf8_is_exported_with_replacement_characters(
    trees: Trees, run: Callable[..., Exporter]
) -> None:
    """Arguments are bytes to the kernel: a label value must still be UTF-8, and the
    scrape must not fail over one process's argument."""
    job = trees.spawn(0, os.fsdecode(b"--name=caf\xe9-latin1"))
    exporter = run([{"gpu": 0, "pid": job.pid, "memory_bytes": GIB}], "--collector.process.cmdline")
    s = exporter.wait_for(has_pid(job.pid, "gpu_process_workers"))
    (found,) = [x for x in series(s, "gpu_process_memory_used_bytes") if x["pid"] == str(job.pid)]
    assert found["cmdline"].endswith(" --name=caf\ufffd-latin1")
    assert exporter.get("/metrics").status == 200


def test_no_host_series_with_the_host_collector_off(run: Callable[..., Exporter]) -> None:
    exporter = run([], "--no-collector.host")
    s = exporter.wait_for(lambda s: bool(values(s, "gpu_processes")))
    assert not any(name.startswith("gpu_host_") for name, _labels in s)
    assert one(s, "gpu_processes", gpu="0") == 0


def test_in_a_private_pid_namespace_no_unrelated_process_is_attributed(tmp_path: Path) -> None:
    """`docker run` without --pid=host: PID 1 of the container is the exporter itself."""
    unshare = shutil.which("unshare")
    probe = subprocess.run(
        [unshare or "unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True
    )
    if unshare is None or probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {probe.stderr.decode().strip()}")
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"processes": [{"gpu": 0, "pid": 1, "memory_bytes": 2**30}]}))
    once = [sys.executable, "-m", "gpu_exporter", "--simulate", "1", "--once"]
    once += ["--simulate.scenario", str(scenario)]

    host = subprocess.run(once, capture_output=True, text=True, timeout=60)
    inside = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", *once],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert host.returncode == 0 and inside.returncode == 0, host.stderr + inside.stderr
    on_host, in_container = parse_samples(host.stdout), parse_samples(inside.stdout)
    assert values(on_host, "gpu_exporter_host_pid_namespace") == [1.0]
    (seen,) = series(on_host, "gpu_process_memory_used_bytes")
    assert seen["process"] == Path("/proc/1/comm").read_text().strip()  # the host's PID 1
    assert values(in_container, "gpu_exporter_host_pid_namespace") == [0.0]
    (kept,) = series(in_container, "gpu_process_memory_used_bytes")
    # not "python", the exporter that is PID 1 in there: nothing is known, nothing made up
    assert (kept["pid"], kept["process"], kept["user"]) == ("1", "", "")
    assert values(in_container, "gpu_process_memory_used_bytes") == [2.0**30]
    assert not values(in_container, "gpu_process_cpu_seconds_total")
    assert inside.stderr.count("not in the host's PID namespace") == 1


def test_sm_seconds_count_each_process_share_and_stop_with_the_process(
    trees: Trees, run: Callable[..., Exporter]
) -> None:
    """gpu_process_sm_seconds_total integrates the driver's per-process samples: two
    processes sharing GPU 0 at 60% and 20% of its SMs gain SM seconds 3 to 1, at those
    shares of the wall time; a process that leaves the GPU leaves with its series."""
    a, b = trees.spawn(), trees.spawn()
    placed = [
        {"gpu": 0, "pid": a.pid, "memory_bytes": GIB, "sm_ratio": 0.6},
        {"gpu": 0, "pid": b.pid, "memory_bytes": GIB, "sm_ratio": 0.2},
    ]
    exporter = run(placed)
    name = "gpu_process_sm_seconds_total"

    def counted(s: Samples) -> bool:
        return all(values(s, name, pid=str(p.pid)) for p in (a, b))

    first = exporter.wait_for(counted)
    started = time.monotonic()
    a0, b0 = one(first, name, pid=str(a.pid)), one(first, name, pid=str(b.pid))
    later = exporter.wait_for(lambda s: counted(s) and one(s, name, pid=str(a.pid)) >= a0 + 1.8)
    elapsed = time.monotonic() - started
    da, db = one(later, name, pid=str(a.pid)) - a0, one(later, name, pid=str(b.pid)) - b0
    assert da / db == pytest.approx(3.0, rel=0.02)  # the same periods, each its share
    assert da / elapsed == pytest.approx(0.6, rel=0.2)  # wall time, read to a sample or two
    assert {s["context"] for s in series(later, name)} == {"compute"}
    # b leaves the GPU: its series goes; a's counter goes on from where it was
    write_scenario(run.scenario, placed[:1])  # type: ignore[attr-defined]
    gone = exporter.wait_for(lambda s: not values(s, name, pid=str(b.pid)))
    assert one(gone, name, pid=str(a.pid)) >= a0 + da
