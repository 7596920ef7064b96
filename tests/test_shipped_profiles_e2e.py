"""The holder, dead-owner, process and busy scenarios under the privileges we ship.

The DaemonSet runs the exporter as uid 0 with every capability dropped (SYSLOG aside,
which reads no process), the systemd unit as a user of its own (DynamicUser=) with an
empty CapabilityBoundingSet=, the image as uid 10001. The processes on a real GPU node
are root's, with root's capabilities. So each case here starts the real program on the
stand-in driver (`benchmarks/fake_nvml_site`: the real NVML backend, so the real holder
scan) under one profile, beside processes this test starts as root with every
capability, scrapes it over HTTP, and asserts what /metrics, the live page and the
shipped GPUMemoryLeaked alert (promtool on the shipped rules) say:

- GPU 0: a job that forked a worker and died; the driver keeps listing it, the worker
  holds the GPU's device file (the stand-in's GPU 0 is /dev/random, char 1:8);
- GPU 1: a job that died and left nothing open: a leak nobody holds;
- GPU 2: a live job with two workers.

Full root is the reference: the holder is named. uid 0 without capabilities and a
non-root user cannot read root's descriptors: the exporter must say so (scan incomplete,
reason denied), name the worker as a candidate by the dead owner's process group, give
the fuser command, and never say "reset the GPU".
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.support.alerts import firing
from tests.support.exporter import (
    REPO,
    Exporter,
    Samples,
    fake_library_env,
    free_port,
    series,
    serving,
    values,
)

pytestmark = pytest.mark.e2e

SETPRIV = shutil.which("setpriv")
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
NOBODY = 65534
DEVICES = "1:8,1:6,1:4"  # GPU 0 is /dev/random, 1 and 2 devices no process holds
HELD = "/dev/random"
PROFILES = {
    "root": [],
    "uid0-no-capabilities": [
        "--reuid=0",
        "--regid=0",
        "--init-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
    ],
    "non-root": [
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
    ],
}
FORK_AND_DIE = (
    "import os, sys, time\n"
    "held = [open(path, 'rb') for path in sys.argv[1:]]  # its context's device files\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    time.sleep(600)  # a DataLoader worker that never touches CUDA\n"
    "    os._exit(0)\n"
    "print(child, flush=True)\n"
)
TREE = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "        for _ in range(2)]\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)
LEAK_FAMILIES = (
    "gpu_memory_used_bytes",
    "gpu_processes",
    "gpu_memory_dead_owner_info",
    "gpu_memory_holder",
    "gpu_exporter_holder_scan_",
)
FUSER = "sudo fuser -v /dev/nvidia*"


@dataclass
class Node:
    """The processes of the three GPUs, all root's with root's capabilities."""

    crashed: int  # GPU 0's dead owner (its own process group and session)
    worker: int  # its forked child, holding GPU 0's device file
    vanished: int  # GPU 1's dead owner
    job: psutil.Process  # GPU 2's live job
    worker_name: str


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    if os.geteuid() != 0 or SETPRIV is None:
        pytest.skip("needs root with capabilities (the node's processes) and setpriv")
    crashed = subprocess.Popen(
        [sys.executable, "-c", FORK_AND_DIE, HELD],
        stdout=subprocess.PIPE,
        start_new_session=True,  # as a shell's job or a container's command
    )
    assert crashed.stdout is not None
    worker = int(crashed.stdout.readline())
    crashed.wait(30)
    crashed.stdout.close()
    vanished = subprocess.Popen([sys.executable, "-c", "pass"])
    vanished.wait(30)
    tree = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE)
    assert tree.stdout is not None and tree.stdout.readline().strip() == b"ready"
    job = psutil.Process(tree.pid)
    try:
        assert os.getpgid(worker) == crashed.pid
        yield Node(crashed.pid, worker, vanished.pid, job, psutil.Process(worker).name())
    finally:
        for child in job.children(recursive=True):
            child.kill()
        tree.kill()
        tree.wait(10)
        tree.stdout.close()
        os.kill(worker, 9)


def start(profile: str, node: Node, tmp_path: Path) -> Exporter:
    """The real program on the stand-in driver, under `profile`, at the default interval."""
    port = free_port()
    env = fake_library_env(3)
    env["FAKE_NVML_PIDS"] = f"{node.crashed},{node.vanished},{node.job.pid}"
    env["FAKE_NVML_DEVICES"] = DEVICES
    env["PYTHONUNBUFFERED"] = "1"
    python = sys.executable
    if profile == "non-root":
        # the test's interpreter may live under /root; the system's of the same version
        # runs the same packages, which nobody may read from the checkout's .venv
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            pytest.skip(f"no {SYSTEM_PYTHON} for the non-root profile")
        python = SYSTEM_PYTHON
        site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        env["PYTHONPATH"] += os.pathsep + str(site / "site-packages")
    prefix = [SETPRIV, *PROFILES[profile]] if PROFILES[profile] else []
    assert SETPRIV is not None
    log_path = tmp_path / f"exporter-{profile}.log"
    args = ["--web.listen-address", f"127.0.0.1:{port}", "--collector.process"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*prefix, python, "-m", "gpu_exporter", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
        )
    return serving(Exporter(process, port, log_path, args), timeout=60.0, interval=0.1)


def scanned(s: Samples) -> bool:
    """A holder scan has answered for both leaked GPUs (it runs after the first sample
    that sees the leak, on its own thread; the next sample at 5 s carries it)."""
    return bool(
        values(s, "gpu_exporter_holder_scan_complete")
        and values(s, "gpu_memory_holders", gpu="0")
        and values(s, "gpu_memory_holders", gpu="1")
    )


def denied_as_root_here() -> int:
    """How many processes' descriptors full root itself may not read on this machine (a
    sandbox's init may hold a capability even root lacks): the reference's expectation."""
    denied = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{name}/fd"):
                try:
                    os.stat(f"/proc/{name}/fd/{fd}")
                except PermissionError:
                    denied += 1
                    break
                except OSError:
                    continue
        except PermissionError:
            denied += 1
        except OSError:
            continue
    return denied


@pytest.mark.parametrize("profile", list(PROFILES))
def test_what_each_shipped_profile_sees_and_says(profile: str, node: Node, tmp_path: Path) -> None:
    exporter = start(profile, node, tmp_path)
    try:
        s = exporter.wait_for(scanned, timeout=60.0, interval=0.5)
        page = json.loads(exporter.get("/api/overview").text)
        page_html = exporter.get("/").text
    finally:
        exporter.stop()
    verdicts = {
        str(g["index"]): {v["name"]: v["summary"] for v in g["verdicts"]} for g in page["gpus"]
    }
    alerts = {
        a["labels"]["gpu"]: a["annotations"]["description"]
        for a in firing(s, "GPUMemoryLeaked", LEAK_FAMILIES, tmp_path)
    }
    worker = f"{node.worker} ({node.worker_name})"

    # the process scenario: every profile names the live job and counts its workers
    # (/proc/PID/stat, status and cgroup need no privilege)
    labels = {"gpu": "2", "pid": str(node.job.pid)}
    (found,) = [x for x in series(s, "gpu_process_memory_used_bytes") if x["pid"] == labels["pid"]]
    assert (found["process"], found["user"]) == (node.job.name(), "root")
    assert values(s, "gpu_process_workers", **labels) == [2]
    assert values(s, "gpu_processes", gpu="2") == [1]
    assert "memory-leaked" not in verdicts["2"] and "2" not in alerts

    # the busy scenario: the driver's utilization buffers need no privilege, so every
    # profile counts the live job's GPU busy, and admits what it could not read
    assert values(s, "gpu_busy_seconds_total", gpu="2")[0] > 0
    assert len(values(s, "gpu_busy_uncovered_seconds_total", gpu="2")) == 1

    # the dead owners: gone from /proc for every profile
    assert values(s, "gpu_processes", gpu="0") == [0] == values(s, "gpu_processes", gpu="1")
    assert values(s, "gpu_memory_dead_owner_info", gpu="0", pid=str(node.crashed)) == [1]
    assert values(s, "gpu_memory_dead_owner_info", gpu="1", pid=str(node.vanished)) == [1]

    denied = values(s, "gpu_exporter_holder_scan_denied_processes")[0]
    budget = values(s, "gpu_exporter_holder_scan_incomplete", reason="budget")
    assert budget == [0]  # a few hundred processes: well within 5 s
    if profile == "root":
        # the reference: the worker is named a holder
        holders = [x["pid"] for x in series(s, "gpu_memory_holder_info") if x["gpu"] == "0"]
        assert holders == [str(node.worker)]
        assert values(s, "gpu_memory_holders", gpu="0") == [1]
        assert values(s, "gpu_memory_holder_candidates", gpu="0") == [0]
        assert verdicts["0"]["memory-leaked"] == (
            f"pid {node.crashed} exited; pid {worker} still holds /dev/nvidia8: end it."
        )
        assert alerts["0"].endswith(
            f"pid {node.crashed} exited (gone). pid {worker} still holds its device file. End it."
        )
        if denied_as_root_here() == 0:  # a real host: the scan read every process
            assert values(s, "gpu_exporter_holder_scan_complete") == [1]
            assert verdicts["1"]["memory-leaked"] == (
                f"pid {node.vanished} exited; no process holds the device files: reset the GPU."
            )
            assert alerts["1"].endswith("No process holds the device files: reset the GPU.")
            return
        # this machine's init holds a capability even root lacks: nothing proves absence
        assert denied >= 1
    else:
        # the shipped profiles: the root worker's descriptors answer EACCES
        assert denied >= 3  # the worker, the live job and its workers at least
        assert not [x for x in series(s, "gpu_memory_holder_info") if x["gpu"] == "0"]
        assert values(s, "gpu_memory_holders", gpu="0") == [0]
        (candidate,) = [x for x in series(s, "gpu_memory_holder_candidate_info") if x["gpu"] == "0"]
        assert (candidate["pid"], candidate["process"], candidate["user"]) == (
            str(node.worker),
            node.worker_name,
            "root",
        )
        assert values(s, "gpu_memory_holder_candidates", gpu="0") == [1]
        assert verdicts["0"]["memory-leaked"] == (
            f"pid {node.crashed} exited; no holder found, but the exporter may not read every "
            f"process's descriptors ({denied:.0f} denied); pid {worker}, in a dead owner's process "
            f"group or session, probably holds /dev/nvidia8: check with {FUSER}."
        )
        assert alerts["0"].endswith(
            f"pid {node.crashed} exited (gone). pid {worker} is in a dead owner's process group "
            f"or session and probably holds it. The exporter may not read every process's "
            f"descriptors ({denied:.0f} denied). Find who holds it with fuser -v /dev/nvidia* "
            "on the node."
        )
    # GPU 1 (nobody holds it) as far as a denied scan can tell: no reset, the fuser command
    assert values(s, "gpu_exporter_holder_scan_complete") == [0]
    assert values(s, "gpu_exporter_holder_scan_incomplete", reason="denied") == [1]
    assert values(s, "gpu_memory_holders", gpu="1") == [0]
    assert verdicts["1"]["memory-leaked"] == (
        f"pid {node.vanished} exited; no holder found, but the exporter may not read every "
        f"process's descriptors ({denied:.0f} denied): find the holder with {FUSER}."
    )
    assert alerts["1"].endswith(
        f"pid {node.vanished} exited (gone). The exporter may not read every process's "
        f"descriptors ({denied:.0f} denied). Find who holds it with fuser -v /dev/nvidia* "
        "on the node."
    )
    for text in (*verdicts["0"].values(), *verdicts["1"].values(), *alerts.values()):
        assert "reset" not in text
    # the live page shows the same words
    for text in (verdicts["0"]["memory-leaked"], verdicts["1"]["memory-leaked"]):
        assert html.escape(text) in page_html
