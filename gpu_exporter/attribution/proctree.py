"""One walk of /proc per read: every visible process's parent, CPU time and memory.

Listing /proc and knowing the parent of each process gives the descendants of any
number of GPU processes from one walk instead of one per process. The stat lines of the
GPU process trees are read at every walk (their CPU counters must be fresh) through
files kept open between walks. A process seen before whose parent is still alive is
not re-read: its parent cannot have changed, except when its PID was reused, which a
full re-read every FULL_WALK_EVERY walks corrects. A process that exits during the
walk is simply not in the table.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable
from dataclasses import dataclass

from gpu_exporter.records import Record

MAX_KEPT_FILES = 1024  # open stat files kept between samples, at most
FULL_WALK_EVERY = 12  # walks; in between, a process whose parent lives is not re-read


class StatFiles:
    """Reads `/proc/PID/stat`, keeping the files of the processes asked about open.

    A kept file is re-read with one `pread` instead of open, read and close: the
    processes whose CPU is read every sample (GPU process trees) cost a third of the
    system calls. A kept file of a process that exited answers ESRCH, even if its PID
    was reused, so a reused PID is never mistaken for the old process. The number of
    kept files is bounded well below the open-file limit.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._kept: dict[int, int] = {}  # pid -> fd
        self.parents: dict[int, int] = {}  # pid -> parent pid, as last read
        self._walks = 0
        if limit is None:
            soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            limit = MAX_KEPT_FILES if soft == resource.RLIM_INFINITY else soft // 4
        self._limit = min(limit, MAX_KEPT_FILES)

    def full_walk_due(self) -> bool:
        """True every FULL_WALK_EVERY walks: re-read every process's parent."""
        due = self._walks % FULL_WALK_EVERY == 0
        self._walks += 1
        return due

    def is_kept(self, pid: int) -> bool:
        return pid in self._kept

    def read(self, root_fd: int, pid: int) -> bytes | None:
        """The stat line of `pid`, or None when it cannot be read (exited, hidden)."""
        fd = self._kept.get(pid)
        if fd is not None:
            try:
                return os.pread(fd, 4096, 0)
            except OSError:  # the process we kept is gone; the PID may name a new one
                os.close(self._kept.pop(pid))
        return _read_stat(f"{pid}/stat", root_fd)

    def keep(self, root_fd: int, pids: Iterable[int]) -> None:
        """Keep these processes' files open for the next samples; close the others."""
        wanted = set(pids)
        for pid in [p for p in self._kept if p not in wanted]:
            os.close(self._kept.pop(pid))
        for pid in wanted:
            if len(self._kept) >= self._limit:
                break
            if pid not in self._kept:
                try:
                    self._kept[pid] = os.open(f"{pid}/stat", os.O_RDONLY, dir_fd=root_fd)
                except OSError:
                    continue

    def close(self) -> None:
        for fd in self._kept.values():
            os.close(fd)
        self._kept.clear()


@dataclass(frozen=True, repr=False)
class ProcStat(Record):
    """The fields of `/proc/PID/stat` the exporter uses, in the kernel's units."""

    pid: int
    comm: str  # command name, at most 15 characters
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime, in clock ticks (SC_CLK_TCK)
    start_ticks: int  # start time in clock ticks after boot
    rss_pages: int  # resident set size in pages (SC_PAGE_SIZE)
    state: str = "R"  # proc(5) field 3: R, S, D, ..., Z (zombie), X (dead)
    pgrp: int = 0  # process group (field 5); 0 unknown
    session: int = 0  # session (field 6); 0 unknown or a kernel thread

    @property
    def dead(self) -> bool:
        """A zombie (exited, not yet waited for) or dead task: no longer a process."""
        return self.state in ("Z", "X")


def parse_stat(data: bytes) -> ProcStat:
    """Parse the content of one `/proc/PID/stat`; raises ValueError on a malformed one.

    The command name is in parentheses and may itself hold spaces and parentheses,
    so the fields are counted from the last ')'.
    """
    open_paren = data.find(b"(")
    close_paren = data.rfind(b")")
    if open_paren < 0 or close_paren < open_paren:
        raise ValueError("malformed stat line")
    fields = data[close_paren + 2 :].split(None, 23)
    # fields[0] is field 3 (state) of proc(5): utime is 14, starttime 22, rss 24
    return ProcStat(
        pid=int(data[:open_paren]),
        comm=data[open_paren + 1 : close_paren].decode("utf-8", "replace"),
        ppid=int(fields[1]),
        cpu_ticks=int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14]),
        start_ticks=int(fields[19]),
        rss_pages=int(fields[21]),
        state=fields[0].decode("ascii", "replace"),
        pgrp=int(fields[2]),
        session=int(fields[3]),
    )


class ProcTable:
    """Every process visible under a /proc root at one moment.

    The walk keeps each stat line as read and parses only the parent PID of every process;
    the other fields are parsed for the few processes asked about (GPU processes and their
    descendants), which keeps a sample cheap on hosts with thousands of processes.
    """

    def __init__(self, stats: Iterable[ProcStat] = ()) -> None:
        self.stats: dict[int, ProcStat] = {s.pid: s for s in stats}
        self._raw: dict[int, bytes] = {}
        self._ppid: dict[int, int] = {s.pid: s.ppid for s in self.stats.values()}
        self._children: dict[int, list[int]] | None = None
        self._root: str | None = None  # where to read a stat line the walk skipped

    @classmethod
    def scan(
        cls,
        proc_root: str = "/proc",
        files: StatFiles | None = None,
        keep: Iterable[int] = (),
    ) -> ProcTable:
        """Read `PROC_ROOT/*/stat` once; unreadable or vanished entries are skipped.

        With `files`, the stat files of `keep` (last sample's process trees) stay open
        for the next walk.
        """
        table = cls()
        table._root = proc_root
        files = files if files is not None else StatFiles(limit=0)
        try:
            root = os.open(proc_root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return table
        try:
            pids = [int(name) for name in os.listdir(root) if name.isdigit()]
            alive = set(pids)
            full = files.full_walk_due()
            known = files.parents
            for pid in pids:
                if not full and not files.is_kept(pid):
                    parent = known.get(pid)
                    if parent is not None and (parent in alive or parent == 0):
                        table._ppid[pid] = parent  # unchanged; its stat is read if asked
                        continue
                data = files.read(root, pid)
                if data is None:
                    continue  # exited during the walk or hidden from us
                try:
                    close_paren = data.rfind(b")")
                    ppid = int(data[close_paren + 2 :].split(b" ", 2)[1])
                except (ValueError, IndexError):
                    continue  # malformed
                table._raw[pid] = data
                table._ppid[pid] = ppid
            files.parents = dict(table._ppid)
            files.keep(root, keep)
        finally:
            os.close(root)
        return table

    def __contains__(self, pid: int) -> bool:
        return pid in self._ppid

    def get(self, pid: int) -> ProcStat | None:
        """The parsed stat line of `pid`, or None when the walk did not see it."""
        stat = self.stats.get(pid)
        if stat is None:
            raw = self._raw.get(pid)
            if raw is None and self._root is not None and pid in self._ppid:
                raw = _read_stat(f"{self._root}/{pid}/stat")
            if raw is None:
                return None
            try:
                stat = self.stats[pid] = parse_stat(raw)
            except (ValueError, IndexError):
                return None
        return stat

    def descendants(self, pid: int) -> list[int]:
        """PIDs of every descendant of `pid` (children, grandchildren, ...)."""
        if self._children is None:
            children: dict[int, list[int]] = {}
            for child, parent in self._ppid.items():
                children.setdefault(parent, []).append(child)
            self._children = children
        out: list[int] = []
        stack = list(self._children.get(pid, ()))
        seen = {pid}
        while stack:
            child = stack.pop()
            if child in seen:  # a PID reused mid-walk could fake a cycle
                continue
            seen.add(child)
            out.append(child)
            stack.extend(self._children.get(child, ()))
        return out

    def tree_cpu_ticks(self, pid: int, descendants: Iterable[int]) -> int:
        """CPU ticks of `pid` and the given descendants (each counts its reaped children).

        A descendant's line as read by the walk is parsed for its four CPU fields only:
        the whole `ProcStat` of hundreds of workers is not needed every sample."""
        total = 0
        raw = self._raw
        for member in (pid, *descendants):
            stat = self.stats.get(member)
            if stat is not None:
                total += stat.cpu_ticks
                continue
            data = raw.get(member)
            ticks = _cpu_ticks(data) if data is not None else None
            if ticks is None:
                stat = self.get(member)
                ticks = stat.cpu_ticks if stat is not None else 0
            total += ticks
        return total


def _cpu_ticks(data: bytes) -> int | None:
    """utime + stime + cutime + cstime of one stat line; None when it is malformed."""
    try:
        fields = data[data.rindex(b")") + 2 :].split(None, 16)
        return int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    except (ValueError, IndexError):
        return None


def _read_stat(path: str, dir_fd: int | None = None) -> bytes | None:
    """One stat line, or None when the process is gone or hidden."""
    try:
        fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def boot_time_seconds(proc_root: str = "/proc") -> float | None:
    """When the host booted, in Unix seconds (`btime` of `/proc/stat`); None when unread.

    A process's start time is its stat line's start ticks after this."""
    try:
        with open(f"{proc_root}/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
