"""Dead owners and the holders of the device files, with real processes and the real /proc.

What a real H200 (R580) showed: a job that allocated memory forked a child and died; the
driver kept listing the dead PID with the memory, and the child, which never touched CUDA,
held the device files it inherited. Each test spawns the processes of one such case:
a zombie owner (a child the test does not wait for), an owner whose PID is gone (waited
for), a reused PID (a live process started after the PID was first seen listed), a holder
of a file that stands for /dev/nvidia0 (a regular file in a tmp "dev" directory), and a
live owner beside them, which must not change.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_exporter.attribution.holders import HolderScanner
from gpu_exporter.attribution.namespace import sees_host_pid_namespace
from gpu_exporter.attribution.processes import ProcessAttributor, since_boot
from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import (
    DeviceRaw,
    DeviceReading,
    GpuProcess,
    MemoryReading,
)
from gpu_exporter.sampling.history import History
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sampling.verdicts import judge
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.exporter import parse_samples, values
from tests.support.fake_nvml import FakeNvmlLib, Install, h100
from tests.test_processes import STATIC

GIB = 2**30
HOLD = (
    "import sys, time\n"
    "files = [open(path) for path in sys.argv[1:]]\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)

pytestmark = pytest.mark.skipif(
    not sees_host_pid_namespace("/proc"), reason="needs the host's PID namespace in /proc"
)


class Spawned:
    """Processes a test starts; every one is killed and reaped at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def sleeper(self, *open_files: Path) -> subprocess.Popen[bytes]:
        """A live process holding `open_files` open."""
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, *map(str, open_files)], stdout=subprocess.PIPE
        )
        self.procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        return proc

    def zombie(self) -> int:
        """A child that exited and is not waited for: state Z until the end of the test."""
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        self.procs.append(proc)
        deadline = time.monotonic() + 30
        while _state(proc.pid) != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        return proc.pid

    def gone(self) -> int:
        """The PID of a process that exited and was reaped."""
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        assert not os.path.exists(f"/proc/{proc.pid}")
        return proc.pid

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def _state(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return data[data.rindex(b")") + 2 :].split()[0].decode()


@pytest.fixture
def spawned() -> Iterator[Spawned]:
    s = Spawned()
    yield s
    s.close()


def listed(pids: dict[int, int], used: int) -> dict[int, DeviceRaw]:
    """GPU 0 (minor 0) as NVML lists it: each PID with its memory."""
    return {
        0: DeviceRaw(
            replace(STATIC, minor_number=0),
            DeviceReading(memory=MemoryReading(total_bytes=141 * GIB, used_bytes=used)),
            None,
            None,
            [GpuProcess(pid, "compute", memory) for pid, memory in pids.items()],
            [],
        )
    }


def test_dead_owners_are_no_processes_and_the_holder_of_the_device_file_is_named(
    spawned: Spawned, tmp_path: Path
) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_bytes(b"")
    live = spawned.sleeper(dev / "nvidia0", dev / "nvidiactl", dev / "nvidia-uvm")
    holder = spawned.sleeper(dev / "nvidia0", dev / "nvidiactl")  # the forked survivor
    other_gpu = spawned.sleeper(dev / "nvidia1", dev / "nvidiactl")
    every_cuda = spawned.sleeper(dev / "nvidiactl", dev / "nvidia-uvm")  # decides nothing
    zombie, gone = spawned.zombie(), spawned.gone()
    reused = spawned.sleeper()  # its PID was listed before it started (faked by the clock)
    now = since_boot()
    seen = [now - 3600.0]  # the first sample an hour ago, then now
    scanner = HolderScanner(dev_root=str(dev))
    attributor = ProcessAttributor(since_boot=lambda: seen.pop() if seen else now, holders=scanner)

    # an hour ago NVML listed the PID the sleeper now has: it is not that owner
    first = attributor(listed({reused.pid: GIB}, GIB))[0]  # not above 1 GiB: no scan
    assert first.processes == () and first.process_count == 0
    assert [(o.pid, o.state) for o in first.dead_owners] == [(reused.pid, "gone")]

    memory = {live.pid: GIB, zombie: 4 * GIB, gone: 2 * GIB, reused.pid: GIB // 2}
    out = attributor(listed(memory, 8 * GIB))[0]
    ((p,),) = (out.processes,)
    assert (p.pid, p.process.startswith("python"), p.memory_used_bytes) == (
        str(live.pid),
        True,
        GIB,
    )
    assert out.process_count == 1
    assert sorted((o.pid, o.state, o.memory_used_bytes) for o in out.dead_owners) == sorted(
        [(zombie, "zombie", 4 * GIB), (gone, "gone", 2 * GIB), (reused.pid, "gone", GIB // 2)]
    )
    assert out.unattributed_memory_bytes == 7 * GIB  # the dead owners' memory, and the rest

    scan = scanner.wait(30)
    assert scan is not None and scan.state.complete
    after = attributor(listed(memory, 8 * GIB))[0]
    assert after.holders is not None
    holders = {h.pid: h for h in after.holders}
    assert set(holders) == {live.pid, holder.pid}  # /dev/nvidia0's, not nvidiactl's alone
    assert holders[holder.pid].process.startswith("python")
    assert holders[holder.pid].user == pwd.getpwuid(os.getuid()).pw_name
    assert other_gpu.pid not in holders and every_cuda.pid not in holders
    assert [h.pid for h in scan.holders[1]] == [other_gpu.pid]
    # the live owner beside them did not change
    assert after.processes == out.processes and after.process_count == 1


def test_holders_are_scanned_only_above_the_threshold_and_at_most_once_a_minute(
    spawned: Spawned, tmp_path: Path
) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_bytes(b"")
    live = spawned.sleeper(dev / "nvidia0")
    monotonic = [1000.0]
    scanner = HolderScanner(dev_root=str(dev), monotonic=lambda: monotonic[0])
    attributor = ProcessAttributor(holders=scanner)
    accounted = attributor(listed({live.pid: GIB}, GIB + GIB // 2))[0]
    assert accounted.unattributed_memory_bytes == GIB // 2 and accounted.holders is None
    assert scanner.wait(5) is None  # half a GiB unaccounted: no scan
    gone = spawned.gone()
    attributor(listed({live.pid: GIB, gone: 2 * GIB}, 3 * GIB))
    first = scanner.wait(30)
    assert first is not None and [h.pid for h in first.holders[0]] == [live.pid]
    late = spawned.sleeper(dev / "nvidia0")
    monotonic[0] += 59.0
    attributor(listed({live.pid: GIB, gone: 2 * GIB}, 3 * GIB))
    assert scanner.wait(30) is first  # within the minute: the last answer stands
    monotonic[0] += 2.0
    attributor(listed({live.pid: GIB, gone: 2 * GIB}, 3 * GIB))
    second = scanner.wait(30)
    assert second is not first and second is not None
    assert [h.pid for h in second.holders[0]] == sorted([live.pid, late.pid])


def test_without_permission_the_scan_counts_what_it_could_not_read(tmp_path: Path) -> None:
    """Non-root without CAP_SYS_PTRACE: another user's /proc/PID/fd answers EACCES."""
    if os.geteuid() == 0:
        script = (
            "import sys\n"
            "from gpu_exporter.attribution.holders import HolderScanner\n"
            "state = HolderScanner(dev_root=sys.argv[1]).scan().state\n"
            "print(state.denied_processes, state.complete)\n"
        )
        repo = Path(__file__).resolve().parents[1]
        result = None
        for python in (sys.executable, "/usr/bin/python3"):  # one that nobody may run
            try:
                result = subprocess.run(
                    [python, "-c", script, str(tmp_path)],
                    user=65534,
                    group=65534,
                    extra_groups=[],
                    cwd="/",
                    env={"PYTHONPATH": str(repo)},
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                break
            except (PermissionError, FileNotFoundError):
                continue
        if result is None:
            pytest.skip("cannot start a Python as nobody here")
        if result.returncode != 0 and "ModuleNotFoundError" in result.stderr:
            pytest.skip("the checkout is not readable by nobody")
        assert result.returncode == 0, result.stderr
        denied, complete = result.stdout.split()
        assert int(denied) > 0 and complete == "True"  # PID 1 and kthreadd at least
    else:
        state = HolderScanner(dev_root=str(tmp_path)).scan().state
        assert state.denied_processes > 0 and state.complete


def test_a_scan_that_runs_out_of_budget_says_it_is_incomplete(tmp_path: Path) -> None:
    ticks = iter(float(t) for t in range(10_000))
    scanner = HolderScanner(
        dev_root=str(tmp_path), budget_seconds=3.0, monotonic=lambda: next(ticks)
    )
    state = scanner.scan().state
    assert not state.complete and state.duration_seconds > 3.0


FORK_AND_DIE = (
    "import os, sys, time\n"
    "held = [open(path) for path in sys.argv[1:]]  # the device files its context opened\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    time.sleep(120)  # a DataLoader worker that never touches CUDA\n"
    "    os._exit(0)\n"
    "print(child, flush=True)\n"
)


def test_the_h200_case_through_the_driver_wrappers_the_sampler_and_the_exposition(
    install: Install, tmp_path: Path
) -> None:
    """A job allocated 4.5 GiB, forked a child and died; the driver keeps listing it (the
    stand-in NVML's default, as R580's), the child holds the device files."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_bytes(b"")
    files = [str(dev / name) for name in ("nvidia0", "nvidiactl", "nvidia-uvm")]
    job = subprocess.Popen([sys.executable, "-c", FORK_AND_DIE, *files], stdout=subprocess.PIPE)
    assert job.stdout is not None
    child = int(job.stdout.readline())
    try:
        used = 4_831_838_208
        gpu = h100(0)
        gpu.minor = 0
        total, reserved, _used, _free = gpu.memory_bytes or (0, 0, 0, 0)
        gpu.memory_bytes = (total, reserved, used, total - reserved - used)
        gpu.compute_processes = [(job.pid, used)]
        install(FakeNvmlLib([gpu]))
        job.wait(30)  # the job died, and was reaped: its PID is gone from /proc
        gpu.process_exited(job.pid)
        assert gpu.compute_processes == [(job.pid, used)]  # still listed, as on R580
        scanner = HolderScanner(dev_root=str(dev))
        sampler = Sampler(
            PynvmlBackend(),
            interval_seconds=1.0,
            timeout_seconds=5.0,
            collectors=frozenset({"memory", "process"}),
            attribute_processes=ProcessAttributor(holders=scanner),
        )
        sampler.sample_once()
        assert scanner.wait(30) is not None
        snapshot = sampler.sample_once()
        sampler.stop(0)
        device = snapshot.devices[0]
        assert device.attribution is not None and device.attribution.process_count == 0
        verdicts = {v.name: v.summary for v in judge(device, History())}
        comm = Path(f"/proc/{child}/comm").read_text().strip()
        assert verdicts["memory-leaked"] == (
            f"pid {job.pid} exited; pid {child} ({comm}) still holds /dev/nvidia0: end it."
        )
        samples = parse_samples(
            Exposition(snapshot).body(openmetrics=False, compressed=False).decode()
        )
        assert values(samples, "gpu_processes", gpu="0") == [0]
        assert values(samples, "gpu_process_memory_used_bytes") == []
        assert values(samples, "gpu_memory_unattributed_bytes", gpu="0") == [used]
        assert values(samples, "gpu_memory_dead_owner_info", pid=str(job.pid), state="gone") == [1]
        (holder,) = [ls for (n, ls) in samples if n == "gpu_memory_holder_info"]
        assert (dict(holder)["pid"], dict(holder)["process"]) == (str(child), comm)
        assert values(samples, "gpu_exporter_holder_scan_denied_processes") == [
            snapshot.holder_scan.denied_processes if snapshot.holder_scan else -1
        ]
        # the driver lets go once the child ends: no dead owner, no holder, no leak
        os.kill(child, signal.SIGKILL)
        gpu.process_exited(job.pid, released=True)
        assert gpu.compute_processes == []
    finally:
        job.stdout.close()
        if os.path.exists(f"/proc/{child}"):
            os.kill(child, signal.SIGKILL)
