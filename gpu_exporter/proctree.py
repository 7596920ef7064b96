"""One walk of /proc per sample: every visible process's parent, CPU time and memory.

Reading `/proc/PID/stat` of every process once gives the parent of each, so the
descendants of any number of GPU processes come from one walk instead of one per
process, and the same read gives the CPU counters, which must be fresh every sample.
A process that exits during the walk is simply not in the table.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcStat:
    """The fields of `/proc/PID/stat` the exporter uses, in the kernel's units."""

    pid: int
    comm: str  # command name, at most 15 characters
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime, in clock ticks (SC_CLK_TCK)
    start_ticks: int  # start time in clock ticks after boot
    rss_pages: int  # resident set size in pages (SC_PAGE_SIZE)


def parse_stat(data: bytes) -> ProcStat:
    """Parse the content of one `/proc/PID/stat`; raises ValueError on a malformed one.

    The command name is in parentheses and may itself hold spaces and parentheses,
    so the fields are counted from the last ')'.
    """
    open_paren = data.find(b"(")
    close_paren = data.rfind(b")")
    if open_paren < 0 or close_paren < open_paren:
        raise ValueError("malformed stat line")
    fields = data[close_paren + 2 :].split()
    # fields[0] is field 3 (state) of proc(5): utime is 14, starttime 22, rss 24
    return ProcStat(
        pid=int(data[:open_paren]),
        comm=data[open_paren + 1 : close_paren].decode("utf-8", "replace"),
        ppid=int(fields[1]),
        cpu_ticks=int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14]),
        start_ticks=int(fields[19]),
        rss_pages=int(fields[21]),
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

    @classmethod
    def scan(cls, proc_root: str = "/proc") -> ProcTable:
        """Read `PROC_ROOT/*/stat` once; unreadable or vanished entries are skipped."""
        table = cls()
        try:
            root = os.open(proc_root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return table
        try:
            names = os.listdir(root)
            for name in names:
                if not name.isdigit():
                    continue
                try:
                    fd = os.open(name + "/stat", os.O_RDONLY, dir_fd=root)
                    try:
                        data = os.read(fd, 4096)
                    finally:
                        os.close(fd)
                    close_paren = data.rfind(b")")
                    ppid = int(data[close_paren + 2 :].split(b" ", 2)[1])
                except (OSError, ValueError, IndexError):
                    continue  # exited during the walk, hidden from us, or malformed
                pid = int(name)
                table._raw[pid] = data
                table._ppid[pid] = ppid
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
        """CPU ticks of `pid` and the given descendants (each counts its reaped children)."""
        total = 0
        for member in (pid, *descendants):
            stat = self.get(member)
            if stat is not None:
                total += stat.cpu_ticks
        return total
