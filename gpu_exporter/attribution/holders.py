"""Who holds each GPU's device file: the processes `fuser -v /dev/nvidia*` lists.

A job that dies while a process it forked (a DataLoader worker, a shell it started) keeps
the device files it inherited leaves its GPU memory taken: the driver keeps listing the
dead owner, and only the survivor holds the memory. That survivor holds `/dev/nvidiaN`,
N being the GPU's minor number (`nvmlDeviceGetMinorNumber`), and is found as `fuser`
finds it: by the device a descriptor opens, not by the text of its link. `stat()` of
`/proc/PID/fd/M` follows the link to the open file, whose `st_rdev` is NVIDIA's char
major 195 with minor N: a container's `/dev/nvidia0` may be the host's `/dev/nvidia3`,
and a node deleted since it was opened (`/dev/nvidia0 (deleted)`) is still the device.
`/dev/nvidiactl` (minor 255), `/dev/nvidia-modeset` (254) and `/dev/nvidia-uvm` (its own
major) name no GPU (every CUDA process holds them) and decide nothing.

The scan reads every descriptor of every process (a host with 5,000 processes may have
500,000), so it never runs on the sampling path: `HolderScanner.request` starts it on its
own thread (at the lowest CPU priority), at most once per `every_seconds`, and the
attributor uses the last answer (`latest`). A scan stops at `budget_seconds`, marked
incomplete (`HolderScanState.complete` False).

Reading another process's descriptors takes ptrace read access, which the kernel gives a
caller with the target's uid whose capabilities include all of the target's, or one with
CAP_SYS_PTRACE; listing another user's `/proc/PID/fd` also takes that uid or
CAP_DAC_READ_SEARCH. As shipped (uid 0 with no capabilities, or a user of its own) nearly
every process on a GPU node answers EACCES: root's processes hold capabilities the
exporter lacks. Such a process is *denied*, never "holds nothing"
(`HolderScanState.denied_processes`, `gpu_exporter_holder_scan_denied_processes`), and
said once in the log. What needs no privilege still points at the holder: `/proc/PID/stat`
gives every process's process group and session, and a crashed job's forked workers keep
the dead owner's. The attributor names the groups of its dead owners in `request`; a
denied process in one of them is a *candidate* (`HolderScan.candidates`), never a holder.

Per GPU at most `MAX_HOLDERS` holders (and candidates) are named, the oldest first (the
job's first survivor before its own children), with the count of all of them beside:
one process that forked 2,000 workers gives 5 names and the number 2,001, not 2,001
series.
"""

from __future__ import annotations

import logging
import os
import stat as stat_mode
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from gpu_exporter.attribution.identity import FileReader, UserName, identify, read_file, user_name
from gpu_exporter.attribution.proctree import ProcStat, parse_stat
from gpu_exporter.model import DeviceHolder, HolderScanState
from gpu_exporter.records import Record

log = logging.getLogger(__name__)

SCAN_EVERY_SECONDS = 60.0
"""At most one scan a minute on a host: the holders of a leak change slowly."""
SCAN_BUDGET_SECONDS = 5.0
"""A scan stops after this long, incomplete, however many descriptors are left."""
NVIDIA_MAJOR = 195
"""The char major of NVIDIA's /dev/nvidiaN (minor N), /dev/nvidiactl (255) and
/dev/nvidia-modeset (254), as the driver registers them (`/proc/devices`: 195 nvidia)."""
MAX_GPU_MINOR = 253
"""Minors above this are the driver's control and modeset nodes, which name no GPU."""
MAX_HOLDERS = 5
"""Holders (and candidates) named per GPU, the oldest first; the count says how many in
all. Five: enough for a job and a few of its workers, short enough to page with."""
SCAN_NICE = 19
"""The scan thread's nice value: on a busy host the sampling thread runs first."""


def lower_thread_priority() -> None:
    """Make the calling thread background work (Linux: nice applies per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SCAN_NICE)
    except (OSError, AttributeError):
        pass  # not Linux, or not permitted: the scan still runs


@dataclass(frozen=True, repr=False)
class Named(Record):
    """Processes of one kind (holders of a GPU, candidates of a group): the oldest
    `MAX_HOLDERS`, oldest first, and every PID."""

    oldest: tuple[tuple[int, DeviceHolder], ...] = ()  # (start ticks after boot, holder)
    pids: frozenset[int] = frozenset()

    @property
    def named(self) -> tuple[DeviceHolder, ...]:
        return tuple(h for _start, h in self.oldest)

    def merge(self, other: Named, leave_out: Collection[int] = ()) -> Named:
        """Both together (a GPU whose dead owners led several groups), without `leave_out`."""
        seen = {h.pid: (start, h) for start, h in (*self.oldest, *other.oldest)}
        oldest = sorted(
            (v for pid, v in seen.items() if pid not in leave_out), key=lambda v: (v[0], v[1].pid)
        )
        pids = (self.pids | other.pids) - frozenset(leave_out)
        return Named(tuple(oldest[:MAX_HOLDERS]), pids)


@dataclass(frozen=True, repr=False)
class HolderScan(Record):
    """One scan's answer: the holders of each GPU's device file, by minor number, and the
    candidates of each process group or session the attributor asked about."""

    holders: Mapping[int, Named]  # by N of /dev/nvidiaN
    state: HolderScanState
    # by process group or session id: denied processes in it (not read, so not holders)
    candidates: Mapping[int, Named] = field(default_factory=dict)


class HolderScanner:
    """Scans /proc for the holders of /dev/nvidiaN on a thread of its own.

    `proc_root`, `device_major` (the char major whose minor N is GPU N: a test uses the
    kernel's memory devices, major 1, /dev/full being minor 7), `read`, `name_of` and the
    clocks are seams for tests.
    """

    def __init__(
        self,
        *,
        proc_root: str = "/proc",
        device_major: int | None = None,
        every_seconds: float = SCAN_EVERY_SECONDS,
        budget_seconds: float = SCAN_BUDGET_SECONDS,
        read: FileReader = read_file,
        name_of: UserName = user_name,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._proc_root = proc_root
        self._major = NVIDIA_MAJOR if device_major is None else device_major
        self._every = every_seconds
        self._budget = budget_seconds
        self._read = read
        self._name_of = name_of
        self._monotonic = monotonic
        self._clock = clock
        self._done = threading.Condition()
        self._running = False
        self._started: float | None = None  # monotonic seconds the last scan started
        self._latest: HolderScan | None = None
        self._groups: frozenset[int] = frozenset()
        self._warned: set[str] = set()

    # The worker ----------------------------------------------------------------------

    def request(self, groups: Iterable[int] = ()) -> None:
        """Start a scan on its own thread, unless one runs or one started less than
        `every_seconds` ago. `groups`: process group and session ids whose denied
        processes are candidates (a dead owner's). Never waits."""
        with self._done:
            self._groups = frozenset(g for g in groups if g > 1)  # 0: kernel, 1: init's
            now = self._monotonic()
            if self._running or (self._started is not None and now - self._started < self._every):
                return
            self._running = True
            self._started = now
        threading.Thread(target=self._run, name="holder-scan", daemon=True).start()

    def latest(self) -> HolderScan | None:
        """The last finished scan; None before the first."""
        with self._done:
            return self._latest

    def wait(self, timeout: float) -> HolderScan | None:
        """The last finished scan, waiting up to `timeout` seconds for a running one."""
        with self._done:
            self._done.wait_for(lambda: not self._running, timeout)
            return self._latest

    def _run(self) -> None:
        lower_thread_priority()
        scan: HolderScan | None = None
        with self._done:
            groups = self._groups
        try:
            scan = self.scan(groups)
        except Exception:  # a bug: the samples go on without holders
            log.exception("holder scan failed")
        with self._done:
            if scan is not None:
                self._latest = scan
            self._running = False
            self._done.notify_all()
        if scan is not None:
            self._say_once(scan.state)

    def _say_once(self, state: HolderScanState) -> None:
        if state.denied_processes and "denied" not in self._warned:
            self._warned.add("denied")
            log.warning(
                "holder scan: could not read the descriptors of %d processes (reading "
                "another process's /proc/PID/fd needs its uid and all its capabilities, or "
                "CAP_SYS_PTRACE): holders of the GPUs' device files among them are not "
                "named, only candidates by process group and session; "
                "`sudo fuser -v /dev/nvidia*` finds them all",
                state.denied_processes,
            )
        if not state.complete and "budget" not in self._warned:
            self._warned.add("budget")
            log.warning(
                "holder scan: stopped at its budget of %.1f s before reading every process",
                self._budget,
            )

    # One scan ------------------------------------------------------------------------

    def scan(self, groups: Collection[int] = ()) -> HolderScan:
        """Read every process's descriptors once (on the calling thread); a denied
        process whose process group or session is in `groups` is a candidate."""
        start = self._monotonic()
        deadline = start + self._budget
        found: dict[int, set[int]] = {}
        by_group: dict[int, list[ProcStat]] = {}
        denied = 0
        complete = True
        try:
            root = os.open(self._proc_root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            root = None
            complete = False
        if root is not None:
            try:
                for name in os.listdir(root):
                    if not name.isdigit():
                        continue
                    if self._monotonic() > deadline:
                        complete = False
                        break
                    minors, was_denied = self._minors_held(root, name)
                    for minor in minors:
                        found.setdefault(minor, set()).add(int(name))
                    if was_denied:
                        denied += 1
                        if groups:
                            self._group(int(name), groups, by_group)
            finally:
                os.close(root)
        holders = {minor: self._named(pids) for minor, pids in sorted(found.items())}
        candidates = {group: self._named_from(stats) for group, stats in sorted(by_group.items())}
        state = HolderScanState(
            finished_seconds=self._clock(),
            duration_seconds=self._monotonic() - start,
            denied_processes=denied,
            complete=complete,
        )
        return HolderScan(holders, state, candidates)

    def _minors_held(self, root: int, pid: str) -> tuple[set[int], bool]:
        """The N of every /dev/nvidiaN the process holds, and whether reading its
        descriptors was refused (EACCES, EPERM): then what was read before stands, and the
        rest is unknown, never "holds nothing". Empty when it holds none or exited."""
        try:
            fds = os.open(f"{pid}/fd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=root)
        except PermissionError:
            return set(), True
        except OSError:
            return set(), False  # exited, or a kernel thread
        major = self._major
        minors: set[int] = set()
        try:
            for fd in os.listdir(fds):
                try:
                    opened = os.stat(fd, dir_fd=fds)  # follows the link to the open file
                except PermissionError:  # ptrace read access refused: not "closed"
                    return minors, True
                except OSError:
                    continue  # closed since the listing
                rdev = opened.st_rdev
                if (
                    stat_mode.S_ISCHR(opened.st_mode)
                    and os.major(rdev) == major
                    and os.minor(rdev) <= MAX_GPU_MINOR
                ):
                    minors.add(os.minor(rdev))
        except PermissionError:
            return minors, True
        except OSError:
            pass  # exited during the listing: what was read stands
        finally:
            os.close(fds)
        return minors, False

    def _group(
        self, pid: int, groups: Collection[int], by_group: dict[int, list[ProcStat]]
    ) -> None:
        """File a denied process under the wanted groups it is in (its stat needs no
        privilege)."""
        stat = self._stat(pid)
        if stat is None:
            return
        for group in {stat.pgrp, stat.session}:
            if group in groups:
                by_group.setdefault(group, []).append(stat)

    def _stat(self, pid: int) -> ProcStat | None:
        try:
            return parse_stat(self._read(f"{self._proc_root}/{pid}/stat"))
        except (OSError, ValueError, IndexError):
            return None

    def _named(self, pids: set[int]) -> Named:
        """The oldest MAX_HOLDERS of `pids` described; one that exited sorts last."""
        stats = [s for s in map(self._stat, pids) if s is not None]
        named = self._named_from(stats)
        return Named(named.oldest, frozenset(pids))

    def _named_from(self, stats: list[ProcStat]) -> Named:
        stats.sort(key=lambda s: (s.start_ticks, s.pid))
        oldest = tuple((s.start_ticks, self._holder(s)) for s in stats[:MAX_HOLDERS])
        return Named(oldest, frozenset(s.pid for s in stats))

    def _holder(self, stat: ProcStat) -> DeviceHolder:
        """Name, user and cgroup labels of a process; its stat and status need no
        privilege."""
        identity, _complete = identify(
            self._proc_root,
            stat.pid,
            stat.comm,
            cmdline=False,
            read=self._read,
            name_of=self._name_of,
        )
        return DeviceHolder(
            pid=stat.pid, process=identity.process, user=identity.user, labels=identity.labels
        )

    @property
    def state(self) -> HolderScanState | None:
        """The last finished scan's state; None before the first."""
        scan = self.latest()
        return scan.state if scan is not None else None
