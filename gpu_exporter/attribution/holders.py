"""Who holds each GPU's device file: the processes `fuser -v /dev/nvidia*` lists.

A job that dies while a process it forked (a DataLoader worker, a shell it started) keeps
the device files it inherited leaves its GPU memory taken: the driver keeps listing the
dead owner, and only the survivor holds the memory. That survivor holds `/dev/nvidiaN`,
N being the GPU's minor number (`nvmlDeviceGetMinorNumber`), so it is found as `fuser`
finds it: a link in `/proc/PID/fd` whose target is that file. `/dev/nvidiactl` and
`/dev/nvidia-uvm` name no GPU (every CUDA process holds them) and decide nothing.

The scan reads every descriptor of every process (a host with 5,000 processes may have
500,000), so it never runs on the sampling path: `HolderScanner.request` starts it on its
own thread (at the lowest CPU priority), at most once per `every_seconds`, and the
attributor uses the last answer (`latest`). A scan stops at `budget_seconds`, marked
incomplete. Another user's descriptors can be read only by root or with CAP_SYS_PTRACE:
a process whose `/proc/PID/fd` answers EACCES is counted as denied
(`HolderScanState.denied_processes`, the metric
`gpu_exporter_holder_scan_denied_processes`) and said once in the log.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpu_exporter.attribution.identity import FileReader, UserName, identify, read_file, user_name
from gpu_exporter.attribution.proctree import parse_stat
from gpu_exporter.model import DeviceHolder, HolderScanState

log = logging.getLogger(__name__)

SCAN_EVERY_SECONDS = 60.0
"""At most one scan a minute on a host: the holders of a leak change slowly."""
SCAN_BUDGET_SECONDS = 5.0
"""A scan stops after this long, incomplete, however many descriptors are left."""
MAX_MINOR_DIGITS = 6  # the N of /dev/nvidiaN: a longer number is no GPU's
SCAN_NICE = 19
"""The scan thread's nice value: on a busy host the sampling thread runs first."""


def lower_thread_priority() -> None:
    """Make the calling thread background work (Linux: nice applies per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SCAN_NICE)
    except (OSError, AttributeError):
        pass  # not Linux, or not permitted: the scan still runs


@dataclass(frozen=True)
class HolderScan:
    """One scan's answer: the holders of each GPU's device file, by minor number."""

    holders: Mapping[int, tuple[DeviceHolder, ...]]  # by N of /dev/nvidiaN, by PID
    state: HolderScanState


class HolderScanner:
    """Scans /proc for the holders of /dev/nvidiaN on a thread of its own.

    `proc_root`, `dev_root` (where the device files are: a test points it at a directory
    with a regular file `nvidia0`), `read`, `name_of` and the clocks are seams for tests.
    """

    def __init__(
        self,
        *,
        proc_root: str = "/proc",
        dev_root: str = "/dev",
        every_seconds: float = SCAN_EVERY_SECONDS,
        budget_seconds: float = SCAN_BUDGET_SECONDS,
        read: FileReader = read_file,
        name_of: UserName = user_name,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._proc_root = proc_root
        self._prefix = f"{dev_root.rstrip('/')}/nvidia"
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
        self._warned: set[str] = set()

    # The worker ----------------------------------------------------------------------

    def request(self) -> None:
        """Start a scan on its own thread, unless one runs or one started less than
        `every_seconds` ago. Never waits."""
        with self._done:
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
        try:
            scan = self.scan()
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
                "holder scan: could not read the descriptors of %d processes (another user's "
                "/proc/PID/fd needs root or CAP_SYS_PTRACE): holders of the GPUs' device "
                "files among them are not named; `sudo fuser -v /dev/nvidia*` finds them all",
                state.denied_processes,
            )
        if not state.complete and "budget" not in self._warned:
            self._warned.add("budget")
            log.warning(
                "holder scan: stopped at its budget of %.1f s before reading every process",
                self._budget,
            )

    # One scan ------------------------------------------------------------------------

    def scan(self) -> HolderScan:
        """Read every process's descriptors once (on the calling thread)."""
        start = self._monotonic()
        deadline = start + self._budget
        found: dict[int, set[int]] = {}
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
                    minors = self._minors_held(root, name)
                    if minors is None:
                        denied += 1
                    for minor in minors or ():
                        found.setdefault(minor, set()).add(int(name))
            finally:
                os.close(root)
        holders = {
            minor: tuple(self._holder(pid) for pid in sorted(pids))
            for minor, pids in sorted(found.items())
        }
        state = HolderScanState(
            finished_seconds=self._clock(),
            duration_seconds=self._monotonic() - start,
            denied_processes=denied,
            complete=complete,
        )
        return HolderScan(holders, state)

    def _minors_held(self, root: int, pid: str) -> set[int] | None:
        """The N of every /dev/nvidiaN the process holds; None when its descriptors may
        not be read; empty when it holds none or exited."""
        try:
            fds = os.open(f"{pid}/fd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=root)
        except PermissionError:
            return None
        except OSError:
            return set()  # exited, or a kernel thread
        prefix = self._prefix
        minors: set[int] = set()
        try:
            for fd in os.listdir(fds):
                try:
                    target = os.readlink(fd, dir_fd=fds)
                except OSError:
                    continue  # closed since the listing
                if target.startswith(prefix):
                    number = target[len(prefix) :]
                    if number.isdigit() and len(number) <= MAX_MINOR_DIGITS:
                        minors.add(int(number))
        except PermissionError:
            return None
        except OSError:
            pass  # exited during the listing: what was read stands
        finally:
            os.close(fds)
        return minors

    def _holder(self, pid: int) -> DeviceHolder:
        """Name, user and cgroup labels of a holder; "" where it exited meanwhile."""
        try:
            stat = parse_stat(self._read(f"{self._proc_root}/{pid}/stat"))
        except (OSError, ValueError, IndexError):
            return DeviceHolder(pid=pid, process="", user="")
        identity, _complete = identify(
            self._proc_root, pid, stat.comm, cmdline=False, read=self._read, name_of=self._name_of
        )
        return DeviceHolder(
            pid=pid, process=identity.process, user=identity.user, labels=identity.labels
        )

    @property
    def state(self) -> HolderScanState | None:
        """The last finished scan's state; None before the first."""
        scan = self.latest()
        return scan.state if scan is not None else None
