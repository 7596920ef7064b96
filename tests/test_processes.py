"""Process attribution over a fake /proc root: trees, caching, identity, failures, cap."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu_exporter.attribution.identity import CMDLINE_MAX_CHARS
from gpu_exporter.attribution.processes import ProcessAttributor
from gpu_exporter.attribution.proctree import ProcTable, parse_stat
from gpu_exporter.model import (
    CgroupLabels,
    DeviceRaw,
    DeviceReading,
    DeviceStatic,
    GpuProcess,
    HostProcess,
    MemoryReading,
    ProcessSample,
    ProcessUtilization,
)
from tests.support.clock import FakeClock

TICKS = 100
PAGE = 4096
BOOT = 1_700_000_000.0
CONTAINER = "ab" * 32


# A fake /proc ------------------------------------------------------------------------------


@dataclass
class FakeProc:
    pid: int
    ppid: int
    comm: str
    cpu_ticks: tuple[int, int, int, int] = (0, 0, 0, 0)  # utime, stime, cutime, cstime
    start_ticks: int = 1000
    rss_pages: int = 0
    user: str = "alice"
    cmdline: list[str] = field(default_factory=list)
    cgroup: str = "0::/\n"
    deny: frozenset[str] = frozenset()  # files we may not read ("status", "cmdline")
    vanish: bool = False  # its identity files are gone (it exited after the walk)


class FakeHost:
    """Writes a /proc tree, and reads its files for the attributor (`read`), counting
    identity lookups and playing permission errors and processes that exit mid-read."""

    def __init__(self, root: Path, *, host_namespace: bool = True) -> None:
        root.mkdir()
        self.root = root
        (root / "stat").write_text(f"cpu  1 2 3 4\nbtime {BOOT:.0f}\nprocesses 5\n")
        self.procs: dict[int, FakeProc] = {}
        self.lookups: list[int] = []  # PIDs whose identity was read, in order
        self.users: dict[int, str] = {}  # uid -> account name
        if host_namespace:  # the kernel's threads are visible in the host's PID namespace
            self.add(FakeProc(pid=2, ppid=0, comm="kthreadd", user="root"))

    def add(self, proc: FakeProc) -> FakeProc:
        self.procs[proc.pid] = proc
        d = self.root / str(proc.pid)
        d.mkdir(parents=True, exist_ok=True)
        u, s, cu, cs = proc.cpu_ticks
        rest = ["S", str(proc.ppid)] + ["0"] * 9 + [str(u), str(s), str(cu), str(cs)]
        rest += ["20", "0", "1", "0", str(proc.start_ticks), "1000000", str(proc.rss_pages)]
        rest += ["0"] * 20
        (d / "stat").write_text(f"{proc.pid} ({proc.comm}) {' '.join(rest)}\n")
        (d / "cgroup").write_text(proc.cgroup)
        uid = self.uid(proc.user)
        (d / "status").write_text(f"Name:\t{proc.comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (d / "cmdline").write_bytes(b"".join(w.encode() + b"\0" for w in proc.cmdline))
        return proc

    def uid(self, user: str) -> int:
        for uid, name in self.users.items():
            if name == user:
                return uid
        uid = 1000 + len(self.users)
        self.users[uid] = user
        return uid

    def remove(self, pid: int) -> None:
        del self.procs[pid]
        for f in (self.root / str(pid)).iterdir():
            f.unlink()
        (self.root / str(pid)).rmdir()

    # the attributor's seams ---------------------------------------------------------

    def read(self, path: str) -> bytes:
        parts = Path(path).relative_to(self.root).parts
        proc = self.procs.get(int(parts[0])) if parts[0].isdigit() else None
        if proc is not None and parts[1] == "status":
            self.lookups.append(proc.pid)
        if proc is not None and proc.vanish:
            raise FileNotFoundError(path)
        if proc is not None and parts[1] in proc.deny:
            raise PermissionError(path)
        return Path(path).read_bytes()

    def name_of(self, uid: int) -> str:
        return self.users.get(uid, str(uid))


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    h = FakeHost(tmp_path / "proc")
    h.add(FakeProc(1, 0, "systemd", user="root"))
    return h


def attributor(host: FakeHost, **kwargs: object) -> ProcessAttributor:
    return ProcessAttributor(
        proc_root=str(host.root),
        read=host.read,
        name_of=host.name_of,
        clock_ticks=TICKS,
        page_size=PAGE,
        **kwargs,  # type: ignore[arg-type]
    )


STATIC = DeviceStatic(
    index=0,
    uuid="GPU-0",
    name="x",
    pci_bus_id=None,
    serial=None,
    vbios_version=None,
    compute_capability=None,
    max_clocks_hertz={},
    slowdown_temperature_celsius=None,
    shutdown_temperature_celsius=None,
    pcie_max_generation=None,
    pcie_max_width=None,
)


def raw(
    processes: Sequence[GpuProcess] | None,
    utilization: Sequence[ProcessUtilization] | None = (),
    used: int | None = 10 * 2**30,
) -> DeviceRaw:
    return DeviceRaw(
        STATIC,
        DeviceReading(memory=MemoryReading(used_bytes=used)),
        None,
        None,
        processes,
        utilization,
    )


def gpu(pid: int, memory: int | None = 2**30, context: str = "compute") -> GpuProcess:
    return GpuProcess(pid, context, memory)  # type: ignore[arg-type]


def by_pid(samples: Sequence[ProcessSample]) -> dict[str, ProcessSample]:
    return {s.pid: s for s in samples}


# /proc/PID/stat and the walk --------------------------------------------------------------


def test_stat_parse_survives_spaces_and_parentheses_in_the_command_name() -> None:
    rest = "S 7 " + " ".join(["0"] * 9) + " 10 20 30 40 0 0 1 0 555 0 9 " + " ".join(["0"] * 20)
    stat = parse_stat(f"42 (my (odd) name) {rest}".encode())
    assert (stat.pid, stat.comm, stat.ppid) == (42, "my (odd) name", 7)
    assert (stat.cpu_ticks, stat.start_ticks, stat.rss_pages) == (100, 555, 9)


def test_walk_finds_every_generation_of_descendants(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    host.add(FakeProc(11, 10, "pt_data_worker"))
    host.add(FakeProc(12, 10, "pt_data_worker"))
    host.add(FakeProc(13, 12, "sh"))
    host.add(FakeProc(20, 1, "other"))
    table = ProcTable.scan(str(host.root))
    assert sorted(table.descendants(10)) == [11, 12, 13]
    assert table.descendants(20) == []
    assert table.descendants(999) == []


def test_tree_cpu_of_workers_with_odd_names_is_read_from_the_walk(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python", (300, 100, 50, 50)))
    host.add(FakeProc(11, 10, "a) b (c", (7, 6, 5, 4)))  # ")" and spaces in the name
    host.add(FakeProc(12, 11, "w", (1, 0, 0, 0)))
    table = ProcTable.scan(str(host.root))
    assert table.tree_cpu_ticks(10, table.descendants(10)) == 500 + 22 + 1
    assert table.tree_cpu_ticks(10, [*table.descendants(10), 999]) == 523  # gone: nothing


def test_walk_of_a_missing_root_is_empty(tmp_path: Path) -> None:
    assert ProcTable.scan(str(tmp_path / "nope")).stats == {}


# The tree CPU counter and host values -----------------------------------------------------


def test_process_series_carry_the_tree_cpu_workers_rss_and_start_time(host: FakeHost) -> None:
    host.add(
        FakeProc(
            10,
            1,
            "python",
            (300, 100, 50, 50),
            start_ticks=5000,
            rss_pages=1000,
            cgroup=f"0::/system.slice/docker-{CONTAINER}.scope\n",
        )
    )
    host.add(FakeProc(11, 10, "pt_data_worker", (200, 0, 0, 0)))
    host.add(FakeProc(12, 10, "pt_data_worker", (200, 0, 0, 0)))
    host.add(FakeProc(13, 12, "sh", (100, 0, 0, 0)))
    host.add(FakeProc(20, 1, "unrelated", (9999, 0, 0, 0)))
    out = attributor(host)({0: raw([gpu(10)])})
    (p,) = out[0].processes
    assert p.pid == "10" and p.process == "python" and p.user == "alice"
    assert p.container_id == CONTAINER and p.context == "compute"
    assert p.cpu_seconds == pytest.approx((500 + 200 + 200 + 100) / TICKS)
    assert p.workers == 3
    assert p.resident_memory_bytes == 1000 * PAGE
    assert p.start_time_seconds == pytest.approx(BOOT + 5000 / TICKS)
    assert p.memory_used_bytes == 2**30


def test_one_proc_walk_per_sample_whatever_the_number_of_processes(
    host: FakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    for pid in range(10, 18):
        host.add(FakeProc(pid, 1, "python"))
    scans: list[str] = []
    real = ProcTable.scan

    def counting(root: str = "/proc", *args: object, **kwargs: object) -> ProcTable:
        scans.append(root)
        return real(root, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ProcTable, "scan", staticmethod(counting))
    a = attributor(host)
    raws = {i: raw([gpu(10 + 2 * i), gpu(11 + 2 * i)]) for i in range(4)}
    a(raws)
    assert len(scans) == 1
    a(raws)
    assert len(scans) == 2


def test_no_walk_when_no_gpu_has_a_process(host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ProcTable, "scan", staticmethod(lambda *args, **kwargs: pytest.fail()))
    out = attributor(host)({0: raw([]), 1: raw(None)})
    assert out[0].processes == ()
    assert 1 not in out  # processes unsupported: no gpu_processes, no unattributed memory


# Processes we cannot see ------------------------------------------------------------------


def test_pid_from_another_namespace_keeps_its_gpu_series_with_empty_labels(
    tmp_path: Path,
) -> None:
    host = FakeHost(tmp_path / "container-proc", host_namespace=False)
    out = attributor(host)(
        {0: raw([gpu(4_000_123, 3 * 2**30)], [ProcessUtilization(4_000_123, 5, 0.5, 0.25)])}
    )
    (p,) = out[0].processes
    assert (p.pid, p.process, p.user, p.container_id) == ("4000123", "", "", "")
    assert p.memory_used_bytes == 3 * 2**30 and p.sm_ratio == 0.5
    assert p.memory_controller_ratio == 0.25
    assert p.cpu_seconds is None and p.workers is None and p.start_time_seconds is None
    assert host.lookups == []  # not in the walk: its identity is not even read


def test_process_that_exits_after_the_walk_keeps_what_the_walk_saw(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python", (100, 0, 0, 0), vanish=True))
    a = attributor(host)
    (p,) = a({0: raw([gpu(10)])})[0].processes
    assert (p.process, p.user) == ("python", "")
    assert p.cpu_seconds == pytest.approx(1.0)
    a({0: raw([gpu(10)])})
    assert host.lookups == [10, 10]  # an incomplete identity is not cached


def test_access_denied_leaves_that_label_empty_and_keeps_the_rest(host: FakeHost) -> None:
    host.add(
        FakeProc(10, 1, "python", deny=frozenset({"status", "cmdline"}), cmdline=["python", "x"])
    )
    host.add(
        FakeProc(11, 1, "a_very_long_nam", deny=frozenset({"cmdline"}), cmdline=["x"], user="bob")
    )
    a = attributor(host, cmdline=True)
    out = by_pid(a({0: raw([gpu(10), gpu(11)])})[0].processes)
    assert (out["10"].process, out["10"].user, out["10"].cmdline) == ("python", "", None)
    # the cut name cannot be completed: the kernel's 15 characters are kept
    eleven = out["11"]
    assert (eleven.process, eleven.user, eleven.cmdline) == ("a_very_long_nam", "bob", None)
    a({0: raw([gpu(10), gpu(11)])})
    assert host.lookups == [10, 11]  # what was denied is not asked again every sample


def test_unreadable_cgroup_file_leaves_the_attribution_labels_empty(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    (host.root / "10" / "cgroup").unlink()
    (p,) = attributor(host)({0: raw([gpu(10)])})[0].processes
    assert (p.container_id, p.pod_uid, p.systemd_unit, p.slurm_job_id) == ("", "", "", "")
    assert p.process == "python"


# The cache --------------------------------------------------------------------------------


def test_identity_is_cached_per_pid_and_start_time_but_cpu_is_read_every_sample(
    host: FakeHost,
) -> None:
    host.add(FakeProc(10, 1, "python", (100, 0, 0, 0), start_ticks=500))
    a = attributor(host)
    first = a({0: raw([gpu(10)])})[0].processes[0]
    host.add(FakeProc(10, 1, "python", (250, 0, 0, 0), start_ticks=500, user="changed"))
    second = a({0: raw([gpu(10)])})[0].processes[0]
    assert host.lookups == [10]
    assert (first.user, second.user) == ("alice", "alice")
    assert (first.cpu_seconds, second.cpu_seconds) == (1.0, 2.5)
    # the PID is reused by a new process while NVML still lists it: not the owner
    host.add(FakeProc(10, 1, "bash", start_ticks=900, user="mallory"))
    third = a({0: raw([gpu(10)])})[0]
    assert third.processes == () and third.process_count == 0
    assert [(o.pid, o.state) for o in third.dead_owners] == [(10, "gone")]
    assert host.lookups == [10]


def test_exited_processes_leave_the_cache_and_their_series_vanish(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    host.add(FakeProc(11, 1, "python"))
    a = attributor(host)
    assert len(a({0: raw([gpu(10), gpu(11)])})[0].processes) == 2
    host.remove(11)
    out = a({0: raw([gpu(10)])})[0].processes
    assert [p.pid for p in out] == ["10"]
    assert [pid for pid, _start in a._cache] == [10]


# The command line -------------------------------------------------------------------------


def test_command_line_is_read_only_when_enabled_and_truncated(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python", cmdline=["python", "train.py", "--token=" + "x" * 4000]))
    (off,) = attributor(host)({0: raw([gpu(10)])})[0].processes
    assert off.cmdline is None
    (on,) = attributor(host, cmdline=True)({0: raw([gpu(10)])})[0].processes
    assert on.cmdline is not None and len(on.cmdline) == CMDLINE_MAX_CHARS
    assert on.cmdline.startswith("python train.py --token=xxx")


def test_a_name_the_kernel_cut_is_completed_from_the_command_line(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "tritonserver_lo", cmdline=["/opt/bin/tritonserver_long_name", "-v"]))
    # a command line whose first word does not continue the name leaves the kernel's name
    host.add(FakeProc(11, 1, "python3.11_work", cmdline=["/usr/bin/python3", "w.py"]))
    host.add(FakeProc(12, 1, "short", cmdline=["/usr/bin/shortened"]))  # not cut: kept
    out = by_pid(attributor(host)({0: raw([gpu(10), gpu(11), gpu(12)])})[0].processes)
    assert out["10"].process == "tritonserver_long_name"
    assert out["11"].process == "python3.11_work"
    assert out["12"].process == "short"
    assert all(p.cmdline is None for p in out.values())  # read for the name, not exported


def test_a_uid_without_an_account_is_its_number(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    (host.root / "10" / "status").write_text("Name:\tpython\nUid:\t4321\t0\t0\t0\n")
    (p,) = attributor(host)({0: raw([gpu(10)])})[0].processes
    assert p.user == "4321"  # the real UID, not the effective one


def test_a_wall_clock_step_either_way_makes_no_live_process_a_dead_owner(host: FakeHost) -> None:
    """Issue 48: the PID-reuse judgement compared a cached boot time plus the start ticks
    with the wall time a PID was first seen; after the clock stepped back 5 s every job
    started afterwards was a dead owner (`state="gone"`) for its whole life. Now both
    sides are seconds since boot, which no step moves; the exported start time follows
    the kernel's boot time, which a step does move."""
    clock = FakeClock()

    def set_boot_time() -> None:  # the kernel's btime moves with a step of the wall clock
        btime = clock.wall() - clock.since_boot()
        (host.root / "stat").write_text(f"cpu  1 2 3 4\nbtime {btime:.0f}\nprocesses 5\n")

    def start(pid: int, seconds_ago: float) -> int:
        ticks = round((clock.since_boot() - seconds_ago) * TICKS)
        host.add(FakeProc(pid, 1, "python", start_ticks=ticks))
        return ticks

    set_boot_time()
    attribute = attributor(host, since_boot=clock.since_boot, clock=clock.wall)
    listed = [gpu(10)]
    start(10, 60.0)
    for pid, step in ((11, -300.0), (12, 600.0), (13, -3600.0), (14, 120.0)):
        clock.step(step)  # back 5 minutes, forward 10, back an hour, forward 2 minutes
        set_boot_time()
        clock.now += 5
        start(pid, 2.0)  # a job started after the step
        listed.append(gpu(pid))
        for _ in range(3):
            out = attribute({0: raw(listed, used=64 * 2**30)})[0]
            assert out.dead_owners == ()
            assert sorted(p.pid for p in out.processes) == [str(g.pid) for g in listed]
            assert out.process_count == len(listed)
            clock.now += 5
        started_at = by_pid(out.processes)[str(pid)].start_time_seconds
        assert started_at == pytest.approx(clock.wall() - 3 * 5 - 2.0, abs=1.0)  # today's time
    # a PID that names a later process than the one first listed is still told apart:
    # first listed now, its /proc entry started 30 s later (the owner died, PID reused)
    start(15, -30.0)
    first = attribute({0: raw([*listed, gpu(15)], used=64 * 2**30)})[0]
    assert [(o.pid, o.state) for o in first.dead_owners] == [(15, "gone")]
    assert first.process_count == len(listed)


def test_start_time_is_left_out_when_the_boot_time_is_unreadable(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python", start_ticks=500))
    (host.root / "stat").write_text("cpu 1 2 3 4\n")
    (p,) = attributor(host)({0: raw([gpu(10)])})[0].processes
    assert p.start_time_seconds is None and p.process == "python"


# Utilization ------------------------------------------------------------------------------


def test_utilization_is_the_newest_sample_and_idle_processes_read_zero(host: FakeHost) -> None:
    for pid in (10, 11):
        host.add(FakeProc(pid, 1, "python"))
    samples = [ProcessUtilization(10, 100, 0.9, 0.3), ProcessUtilization(10, 200, 0.4, 0.1)]
    out = by_pid(attributor(host)({0: raw([gpu(10), gpu(11)], samples)})[0].processes)
    assert (out["10"].sm_ratio, out["10"].memory_controller_ratio) == (0.4, 0.1)
    assert (out["11"].sm_ratio, out["11"].memory_controller_ratio) == (0.0, 0.0)


def test_utilization_unsupported_leaves_the_ratios_out(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    (p,) = attributor(host)({0: raw([gpu(10)], None)})[0].processes
    assert p.sm_ratio is None and p.memory_controller_ratio is None


# The cap ----------------------------------------------------------------------------------


def test_cap_keeps_the_largest_and_sums_the_rest_into_other(host: FakeHost) -> None:
    for pid in range(10, 15):
        host.add(FakeProc(pid, 1, "python", (100, 0, 0, 0), rss_pages=10))
    procs = [gpu(10, 1), gpu(11, 50), gpu(12, 30), gpu(13, 40), gpu(14, 2)]
    util = [ProcessUtilization(10, 1, 0.5, 0.1), ProcessUtilization(14, 1, 0.7, 0.2)]
    out = attributor(host, limit=2)({0: raw(procs, util, used=200)})[0]
    *kept, other = out.processes
    assert [p.pid for p in kept] == ["11", "13"]
    assert (other.pid, other.process, other.user) == ("", "other", "")
    assert other.memory_used_bytes == 1 + 30 + 2
    assert other.sm_ratio == 1.0  # 0.5 + 0.7 + 0.0, a ratio stays in 0..1
    assert other.memory_controller_ratio == pytest.approx(0.3)
    assert other.resident_memory_bytes == 3 * 10 * PAGE and other.workers == 0
    assert other.cpu_seconds is None and other.start_time_seconds is None
    assert out.unattributed_memory_bytes == 200 - 123


def test_each_containers_processes_are_counted_beyond_the_cap(host: FakeHost) -> None:
    """Kubernetes attribution reads these to find GPUs used without allocation, so a
    container whose processes all fall into `other` is still seen."""
    pod = "0::/kubepods/burstable/pod0a1b2c3d-0000-4000-8000-000000000001/" + CONTAINER + "\n"
    host.add(FakeProc(10, 1, "python"))
    host.add(FakeProc(11, 1, "python", cgroup=pod))
    host.add(FakeProc(12, 1, "python", cgroup=pod))
    out = attributor(host, limit=1)({0: raw([gpu(10, 50), gpu(11, 1), gpu(12, 2)])})[0]
    assert [p.pid for p in out.processes] == ["10", ""]  # the pod's two are in `other`
    assert out.containers == {("", CONTAINER, "0a1b2c3d-0000-4000-8000-000000000001"): 2}


def test_no_other_series_under_the_cap(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    out = attributor(host, limit=2)({0: raw([gpu(10)])})[0]
    assert [p.process for p in out.processes] == ["python"]


def test_other_sum_is_left_out_when_a_member_is_unknown(tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "container-proc", host_namespace=False)  # nothing known
    out = attributor(host, limit=0)({0: raw([gpu(10, 5), gpu(11, None)])})[0]
    (other,) = out.processes
    assert other.memory_used_bytes is None and other.resident_memory_bytes is None


# Unattributed memory ----------------------------------------------------------------------


def test_unattributed_memory_is_used_minus_the_processes(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    host.add(FakeProc(11, 1, "python"))
    out = attributor(host)({0: raw([gpu(10, 3 * 2**30), gpu(11, 2**30)], used=10 * 2**30)})
    assert out[0].unattributed_memory_bytes == 6 * 2**30


def test_unattributed_memory_is_never_negative(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    out = attributor(host)({0: raw([gpu(10, 12 * 2**30)], used=10 * 2**30)})
    assert out[0].unattributed_memory_bytes == 0


def test_gpu_with_memory_and_no_process_is_all_unattributed(host: FakeHost) -> None:
    out = attributor(host)({0: raw([], used=30 * 2**30)})
    assert out[0].processes == () and out[0].unattributed_memory_bytes == 30 * 2**30


def test_unattributed_memory_is_unknown_when_any_process_memory_is(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    assert attributor(host)({0: raw([gpu(10, None)])})[0].unattributed_memory_bytes is None
    assert attributor(host)({0: raw([gpu(10)], used=None)})[0].unattributed_memory_bytes is None


def test_a_process_in_both_lists_is_one_series_with_its_memory_once(host: FakeHost) -> None:
    """nvidia-smi's type C+G: NVML lists it in the compute and the graphics list, each
    time with all its memory."""
    host.add(FakeProc(10, 1, "kwin_wayland"))
    host.add(FakeProc(11, 1, "Xwayland"))
    procs = [gpu(10, 2**30, "graphics"), gpu(11, 2**20, "graphics"), gpu(10, 2**30, "compute")]
    out = attributor(host)({0: raw(procs, used=3 * 2**30)})[0]
    assert [(p.pid, p.context, p.memory_used_bytes) for p in out.processes] == [
        ("10", "compute+graphics", 2**30),
        ("11", "graphics", 2**20),
    ]
    assert out.process_count == 2
    assert out.unattributed_memory_bytes == 2 * 2**30 - 2**20  # its memory counted once


def test_a_pid_listed_twice_in_one_context_is_one_series(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python"))
    out = attributor(host)({0: raw([gpu(10, 5), gpu(10, 7)], used=20)})[0]
    (p,) = out.processes
    assert p.memory_used_bytes == 12 and out.unattributed_memory_bytes == 8


# A backend that knows its own processes ---------------------------------------------------


def test_lookup_answers_for_pids_without_a_proc_entry(host: FakeHost) -> None:
    known = HostProcess(
        process="python",
        user="alice",
        cmdline="python train.py",
        labels=CgroupLabels(slurm_job_id="7"),
        cpu_seconds=12.5,
        workers=4,
    )

    def lookup(pid: int) -> HostProcess | None:
        return known if pid == 5_000_001 else None

    (p,) = attributor(host, lookup=lookup)({0: raw([gpu(5_000_001)])})[0].processes
    assert (p.process, p.user, p.slurm_job_id, p.cpu_seconds, p.workers) == (
        "python",
        "alice",
        "7",
        12.5,
        4,
    )
    assert p.cmdline is None  # the command line stays off unless enabled
    (q,) = attributor(host, lookup=lookup, cmdline=True)({0: raw([gpu(5_000_001)])})[0].processes
    assert q.cmdline == "python train.py"


def test_kept_stat_files_read_fresh_values_and_notice_exit(tmp_path: Path) -> None:
    """The real /proc: a kept file re-reads the live counters and reports an exit."""
    import subprocess
    import sys

    from gpu_exporter.attribution.proctree import StatFiles

    burner = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"]
    )
    try:
        files = StatFiles()
        first = ProcTable.scan("/proc", files, keep=[burner.pid])  # opens and keeps the file
        second = ProcTable.scan("/proc", files, keep=[burner.pid])  # reads through it
        time.sleep(0.5)
        third = ProcTable.scan("/proc", files, keep=[burner.pid])
        ticks = [t.get(burner.pid) for t in (first, second, third)]
        assert all(t is not None for t in ticks)
        assert ticks[2].cpu_ticks > ticks[1].cpu_ticks  # type: ignore[union-attr]
    finally:
        burner.kill()
        burner.wait()
    assert burner.pid not in ProcTable.scan("/proc", files, keep=[])
    files.close()


def _fake_stat(root: Path, pid: int, ppid: int, ticks: int = 0) -> None:
    (root / str(pid)).mkdir(exist_ok=True)
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", "0", "0"] + ["0"] * 10
    (root / str(pid) / "stat").write_text(f"{pid} (proc {pid}) {' '.join(fields)}\n")


def test_incremental_walk_rereads_orphans_and_corrects_reused_pids(tmp_path: Path) -> None:
    import shutil

    from gpu_exporter.attribution.proctree import FULL_WALK_EVERY, StatFiles

    _fake_stat(tmp_path, 1, 0)
    _fake_stat(tmp_path, 10, 1)  # a GPU job
    _fake_stat(tmp_path, 11, 10)  # its worker
    _fake_stat(tmp_path, 20, 1)  # an unrelated process
    files = StatFiles()
    table = ProcTable.scan(str(tmp_path), files)
    assert table.descendants(10) == [11]
    # the job dies: its worker is re-parented to init, and the walk notices at once
    shutil.rmtree(tmp_path / "10")
    _fake_stat(tmp_path, 11, 1)
    table = ProcTable.scan(str(tmp_path), files)
    assert sorted(table.descendants(1)) == [11, 20]
    # PID 20 exits and is reused by a child of a new job 30 between two walks: its parent
    # (init) looked alive, so the walk may keep the old parent until the next full walk
    _fake_stat(tmp_path, 30, 1)
    _fake_stat(tmp_path, 20, 30)
    seen = []
    for _ in range(FULL_WALK_EVERY):
        seen.append(ProcTable.scan(str(tmp_path), files).descendants(30))
    assert [20] in seen  # corrected within FULL_WALK_EVERY walks
    # a stat line the walk skipped is still read when asked for
    table = ProcTable.scan(str(tmp_path), files)
    stat = table.get(20)
    assert stat is not None and stat.ppid == 30


# PID namespaces ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pid2",
    [None, FakeProc(2, 1, "bash"), FakeProc(2, 1, "kthreadd")],  # absent, a process, a fake
    ids=["no-pid-2", "container-process", "named-kthreadd-but-not-the-kernels"],
)
def test_outside_the_host_pid_namespace_only_pid_and_memory_are_exported(
    tmp_path: Path, pid2: FakeProc | None, caplog: pytest.LogCaptureFixture
) -> None:
    container = FakeHost(tmp_path / "proc", host_namespace=False)
    if pid2 is not None:
        container.add(pid2)
    # the container's own PID 10: not the host's PID 10 that NVML reports
    container.add(FakeProc(10, 1, "python", user="mallory", cpu_ticks=(500, 0, 0, 0)))
    with caplog.at_level(logging.WARNING):
        a = attributor(container)
    assert not a.sees_host_pid_namespace
    assert caplog.text.count("not in the host's PID namespace") == 1
    for _ in range(2):
        (p,) = a({0: raw([gpu(10)])})[0].processes
        assert (p.pid, p.memory_used_bytes) == ("10", 2**30)
        assert (p.process, p.user, p.container_id) == ("", "", "")
        assert p.cpu_seconds is None and p.workers is None and p.start_time_seconds is None
    assert container.lookups == []  # nothing of the unrelated process was even read
    assert caplog.text.count("not in the host's PID namespace") == 1


def test_in_the_host_pid_namespace_processes_are_attributed(host: FakeHost) -> None:
    host.add(FakeProc(10, 1, "python", user="alice", cpu_ticks=(500, 0, 0, 0)))
    a = attributor(host)
    assert a.sees_host_pid_namespace
    (p,) = a({0: raw([gpu(10)])})[0].processes
    assert (p.process, p.user) == ("python", "alice")
