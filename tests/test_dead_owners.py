"""Dead owners and the holders of the device files, with real processes and the real /proc.

What a real H200 (R580) showed: a job that allocated memory forked a child and died; the
driver kept listing the dead PID with the memory, and the child, which never touched CUDA,
held the device files it inherited. Each test spawns the processes of one such case:
a zombie owner (a child the test does not wait for), an owner whose PID is gone (waited
for), a reused PID (a live process started after the PID was first seen listed), a holder
of a device that stands for /dev/nvidia7, and a live owner beside them, which must not
change. The scan matches a descriptor by the device it opens, as fuser does (char major
195, minor N); the tests point it at the kernel's memory devices, major 1, whose
/dev/full is minor 7 and /dev/zero minor 5: real devices any process may open, which no
service on a test machine holds.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_exporter.attribution.holders import MAX_HOLDERS, HolderScan, HolderScanner, Named
from gpu_exporter.attribution.namespace import sees_host_pid_namespace
from gpu_exporter.attribution.processes import ProcessAttributor, since_boot
from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import (
    DeviceHolder,
    DeviceRaw,
    DeviceReading,
    GpuProcess,
    HolderScanState,
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
MEM_MAJOR = 1  # the kernel's memory devices: /dev/full is 1:7, /dev/zero 1:5
GPU = 7  # the GPU whose device stands as /dev/full
OTHER_GPU = 5  # /dev/zero
FULL, ZERO = Path("/dev/full"), Path("/dev/zero")
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

    def sleeper(self, *open_files: Path, session: bool = False) -> subprocess.Popen[bytes]:
        """A live process holding `open_files` open; with `session`, leading its own session
        and process group (as a job started by a shell or a container runtime)."""
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, *map(str, open_files)],
            stdout=subprocess.PIPE,
            start_new_session=session,
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
    """GPU 0 (minor 7, /dev/full) as NVML lists it: each PID with its memory."""
    return {
        0: DeviceRaw(
            replace(STATIC, minor_number=GPU),
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
    lookalike = tmp_path / "dev" / "nvidia7"  # a regular file: its name decides nothing
    lookalike.parent.mkdir()
    lookalike.write_bytes(b"")
    live = spawned.sleeper(FULL, lookalike)
    holder = spawned.sleeper(FULL)  # the forked survivor
    other_gpu = spawned.sleeper(ZERO)
    every_cuda = spawned.sleeper(lookalike, Path("/dev/null"))  # decides nothing for GPU 7
    zombie, gone = spawned.zombie(), spawned.gone()
    reused = spawned.sleeper()  # its PID was listed before it started (faked by the clock)
    mine = {p.pid for p in spawned.procs}
    now = since_boot()
    seen = [now - 3600.0]  # the first sample an hour ago, then now
    scanner = HolderScanner(device_major=MEM_MAJOR)
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
    assert set(holders) & mine == {live.pid, holder.pid}  # /dev/full's, not a lookalike's
    assert after.holder_count == len(holders)
    assert holders[holder.pid].process.startswith("python")
    assert holders[holder.pid].user == pwd.getpwuid(os.getuid()).pw_name
    assert other_gpu.pid not in holders and every_cuda.pid not in holders
    assert other_gpu.pid in scan.holders[OTHER_GPU].pids
    # the live owner beside them did not change
    assert after.processes == out.processes and after.process_count == 1


def test_holders_are_scanned_only_above_the_threshold_and_at_most_once_a_minute(
    spawned: Spawned,
) -> None:
    live = spawned.sleeper(FULL)
    monotonic = [1000.0]
    scanner = HolderScanner(device_major=MEM_MAJOR, monotonic=lambda: monotonic[0])
    attributor = ProcessAttributor(holders=scanner)
    accounted = attributor(listed({live.pid: GIB}, GIB + GIB // 2))[0]
    assert accounted.unattributed_memory_bytes == GIB // 2 and accounted.holders is None
    assert scanner.wait(5) is None  # half a GiB unaccounted: no scan
    gone = spawned.gone()
    attributor(listed({live.pid: GIB, gone: 2 * GIB}, 3 * GIB))
    first = scanner.wait(30)
    assert first is not None and live.pid in first.holders[GPU].pids
    late = spawned.sleeper(FULL)
    monotonic[0] += 59.0
    attributor(listed({live.pid: GIB, gone: 2 * GIB}, 3 * GIB))
    assert scanner.wait(30) is first  # within the minute: the last answer stands
    monotonic[0] += 2.0
    attributor(listed({live.pid: GIB, gone: 2 * GIB}, 3 * GIB))
    second = scanner.wait(30)
    assert second is not first and second is not None
    assert {live.pid, late.pid} <= second.holders[GPU].pids


def test_a_descriptor_is_matched_by_the_device_it_opens_not_by_its_name(
    spawned: Spawned, tmp_path: Path
) -> None:
    """A container's /dev/nvidia0 may be the host's /dev/nvidia5, and a node deleted since
    it was opened ("/dev/nvidia7 (deleted)") is still the device: fuser's way, st_rdev."""
    if os.geteuid() != 0:
        pytest.skip("creating device nodes needs root (CAP_MKNOD)")
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "nvidia0", 0o600 | stat.S_IFCHR, os.makedev(MEM_MAJOR, OTHER_GPU))
    os.mknod(dev / "nvidia7", 0o600 | stat.S_IFCHR, os.makedev(MEM_MAJOR, GPU))
    renamed = spawned.sleeper(dev / "nvidia0")  # "nvidia0" in its namespace, GPU 5 here
    deleted = spawned.sleeper(dev / "nvidia7")
    (dev / "nvidia7").unlink()
    links = [os.readlink(f) for f in Path(f"/proc/{deleted.pid}/fd").iterdir()]
    assert any(link.endswith("nvidia7 (deleted)") for link in links), links
    scan = HolderScanner(device_major=MEM_MAJOR).scan()
    assert renamed.pid in scan.holders[OTHER_GPU].pids
    assert deleted.pid in scan.holders[GPU].pids
    assert renamed.pid not in scan.holders.get(0, Named()).pids


def test_many_holders_name_the_oldest_few_and_count_them_all(spawned: Spawned) -> None:
    """One job that forked many workers: MAX_HOLDERS named, oldest first, all counted."""
    job = spawned.sleeper(FULL)
    workers = [spawned.sleeper(FULL) for _ in range(MAX_HOLDERS + 3)]
    scan = HolderScanner(device_major=MEM_MAJOR).scan()
    held = scan.holders[GPU]
    assert {job.pid, *(w.pid for w in workers)} <= held.pids
    named = [h.pid for h in held.named]
    assert len(named) == MAX_HOLDERS
    assert named[0] == job.pid  # the oldest: started first
    assert workers[-1].pid not in named


def test_without_permission_the_scan_counts_what_it_could_not_read(tmp_path: Path) -> None:
    """Non-root without CAP_SYS_PTRACE: another user's /proc/PID/fd answers EACCES."""
    if os.geteuid() == 0:
        script = (
            "import sys\n"
            "from gpu_exporter.attribution.holders import HolderScanner\n"
            "state = HolderScanner().scan().state\n"
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
        state = HolderScanner().scan().state
        assert state.denied_processes > 0 and state.complete


SETPRIV = shutil.which("setpriv")
NO_CAPABILITIES = [
    "--reuid=0",
    "--regid=0",
    "--init-groups",
    "--inh-caps=-all",
    "--ambient-caps=-all",
    "--bounding-set=-all",
]
"""uid 0 with every capability dropped: the DaemonSet's securityContext and the unit's
CapabilityBoundingSet= (`setpriv` ships with util-linux)."""
SCAN_AS_SHIPPED = (
    "import json, sys\n"
    "from gpu_exporter.attribution.holders import HolderScanner\n"
    "group = int(sys.argv[1])\n"
    "scan = HolderScanner(device_major=1).scan([group])\n"
    "held = scan.holders.get(7)\n"
    "found = scan.candidates.get(group)\n"
    "print(json.dumps({'holders': sorted(held.pids) if held else [],\n"
    "    'candidates': sorted(found.pids) if found else [],\n"
    "    'names': [h.process for h in found.named] if found else [],\n"
    "    'denied': scan.state.denied_processes, 'reasons': scan.state.incomplete_reasons}))\n"
)


def test_as_uid_0_without_capabilities_a_root_holder_is_denied_and_a_candidate(
    spawned: Spawned,
) -> None:
    """uid 0 owns a root process's /proc/PID/fd, so listing it works, but reading an entry
    takes ptrace access, refused to a caller without all the target's capabilities: EACCES
    makes the process denied (never "holds nothing"), and its process group names it a
    candidate. On the old code this holder was skipped and the scan said complete."""
    if os.geteuid() != 0 or SETPRIV is None:
        pytest.skip("needs root with capabilities and setpriv")
    holder = spawned.sleeper(FULL, session=True)  # root, with root's capabilities
    assert os.getpgid(holder.pid) == holder.pid
    repo = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [SETPRIV, *NO_CAPABILITIES, sys.executable, "-c", SCAN_AS_SHIPPED, str(holder.pid)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert holder.pid not in seen["holders"]
    assert seen["denied"] > 0 and "denied" in seen["reasons"]
    assert seen["candidates"] == [holder.pid] and seen["names"][0].startswith("python")
    # the same scan as full root names it a holder
    full = HolderScanner(device_major=MEM_MAJOR).scan([holder.pid])
    assert holder.pid in full.holders[GPU].pids
    assert holder.pid not in full.candidates.get(holder.pid, Named()).pids


def test_a_scan_that_runs_out_of_budget_says_it_is_incomplete(tmp_path: Path) -> None:
    ticks = iter(float(t) for t in range(10_000))
    scanner = HolderScanner(budget_seconds=3.0, monotonic=lambda: next(ticks))
    state = scanner.scan().state
    assert not state.complete and state.duration_seconds > 3.0
    assert "budget" in state.incomplete_reasons


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
    files = [str(FULL), "/dev/null"]  # its GPU's device (GPU 7's stand-in) and another
    job = subprocess.Popen([sys.executable, "-c", FORK_AND_DIE, *files], stdout=subprocess.PIPE)
    assert job.stdout is not None
    child = int(job.stdout.readline())
    try:
        used = 4_831_838_208
        gpu = h100(0)
        gpu.minor = GPU
        total, reserved, _used, _free = gpu.memory_bytes or (0, 0, 0, 0)
        gpu.memory_bytes = (total, reserved, used, total - reserved - used)
        gpu.compute_processes = [(job.pid, used)]
        install(FakeNvmlLib([gpu]))
        job.wait(30)  # the job died, and was reaped: its PID is gone from /proc
        gpu.process_exited(job.pid)
        assert gpu.compute_processes == [(job.pid, used)]  # still listed, as on R580
        scanner = HolderScanner(device_major=MEM_MAJOR)
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
            f"pid {job.pid} exited; pid {child} ({comm}) still holds /dev/nvidia7: end it."
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


LEADER = (
    "import subprocess, sys, time\n"
    "job = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(job.pid, flush=True)\n"
    "job.wait()  # reaped at once when it dies: its PID is gone\n"
    "time.sleep(600)\n"
)


class StubScanner:
    """Stands for `HolderScanner`: records the groups asked about, answers one scan."""

    def __init__(self, scan: HolderScan) -> None:
        self.scan = scan
        self.groups: set[int] = set()

    def request(self, groups: Iterable[int] = ()) -> None:
        self.groups = set(groups)

    def latest(self) -> HolderScan:
        return self.scan

    @property
    def state(self) -> HolderScanState:
        return self.scan.state


def test_a_dead_owner_seen_alive_names_the_denied_processes_of_its_group_as_candidates() -> None:
    """The owner was not its group's leader (a shell's job, a container's command): the
    exporter remembers its process group and session while it lives, and asks the scan
    for them once it is dead; a denied process in them is a candidate, never a holder."""
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert leader.stdout is not None
        owner = int(leader.stdout.readline())
        assert os.getpgid(owner) == leader.pid != owner
        candidate = DeviceHolder(leader.pid, "python3", "root")
        scan = HolderScan(
            holders={},
            state=HolderScanState(
                finished_seconds=0.0, duration_seconds=0.1, denied_processes=80, complete=True
            ),
            candidates={leader.pid: Named(((0, candidate),), frozenset({leader.pid}))},
        )
        stub = StubScanner(scan)
        attributor = ProcessAttributor(holders=stub)  # type: ignore[arg-type]
        alive = attributor(listed({owner: 4 * GIB}, 4 * GIB))[0]
        assert alive.process_count == 1 and alive.holders is None  # no leak: no scan
        os.kill(owner, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{owner}"):
            assert time.monotonic() < deadline, "the owner was never reaped"
            time.sleep(0.01)
        dead = attributor(listed({owner: 4 * GIB}, 4 * GIB))[0]
        assert [(o.pid, o.state) for o in dead.dead_owners] == [(owner, "gone")]
        assert {owner, leader.pid} <= stub.groups  # its own PID, and its remembered group
        assert dead.holders == () and dead.holder_count == 0
        assert dead.holder_candidates == (candidate,) and dead.holder_candidate_count == 1
        assert not dead.holders_complete and dead.holders_incomplete == ("denied",)
        assert dead.denied_processes == 80
    finally:
        leader.kill()
        leader.wait()
        if leader.stdout is not None:
            leader.stdout.close()


def test_the_alert_counts_the_holders_beyond_those_the_exporter_names() -> None:
    """GPUMemoryLeaked's "So do N more" subtracts the number of series the exporter
    names per GPU: the same number as MAX_HOLDERS."""
    rules = (
        Path(__file__).resolve().parents[1] / "deploy/prometheus/rules/gpu-alerts.yml"
    ).read_text()
    named = re.findall(r"gpu_memory_holder(?:s|_candidates)\{[^}]*\} - (\d+) > 0", rules)
    assert named and {int(n) for n in named} == {MAX_HOLDERS}
