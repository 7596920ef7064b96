"""Who a process is, read from /proc once per (pid, start time): name, user, command line.

The rules are psutil's, read straight from the files so the exporter
does not load psutil (about 1 MiB resident) for three small files:

- the name is the kernel's command name (`comm`, from the stat line the walk already
  read), which the kernel cuts at 15 characters; a cut name is completed from the first
  word of the command line when that word's base name starts with it;
- the user is the name of the real UID (`Uid:` in `/proc/PID/status`), or the number
  when no account has it;
- the command line is `/proc/PID/cmdline`, its NUL-separated words joined by spaces
  (a program that rewrote its title with spaces instead of NULs is split on spaces);
- the executable's file name (the base name of the `/proc/PID/exe` link), read only for
  a process in no container and no pod: a process renames itself at will (`comm`,
  `prctl(PR_SET_NAME)`, `exec -a`), its executable only by being another file. Reading
  the link takes the exporter's uid or CAP_SYS_PTRACE; where it is not permitted the
  executable stays unknown ("").

A file that cannot be read for permission leaves that part empty; a file that is gone
means the process exited, and the identity is marked incomplete so it is not cached.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gpu_exporter.attribution.cgroups import parse_cgroup
from gpu_exporter.model import CgroupLabels
from gpu_exporter.records import Record

CMDLINE_MAX_CHARS = 1024  # kept; its label is cut shorter, with a marker (`metrics.text`)
MAX_READ_BYTES = 65536  # of any one file; a longer command line is cut
COMM_MAX_CHARS = 15  # TASK_COMM_LEN - 1: the kernel cuts longer names here

FileReader = Callable[[str], bytes]
"""Reads a whole file; raises OSError as `open` does (a seam for tests)."""

UserName = Callable[[int], str]
"""The account name of a UID (a seam for tests)."""

LinkReader = Callable[[str], str]
"""Reads a symbolic link's target; raises OSError as `os.readlink` does (a seam for tests)."""

DELETED = " (deleted)"  # what the kernel adds to /proc/PID/exe of a replaced executable

T = TypeVar("T")


@dataclass(frozen=True, repr=False)
class Identity(Record):
    """The slow-changing facts of one (pid, start time)."""

    process: str  # command name, completed from the command line when the kernel cut it
    user: str  # account name of the real UID, its number without an account, "" unread
    cmdline: str | None  # None when not asked for, unreadable or empty (kernel threads)
    labels: CgroupLabels
    executable: str = ""  # base name of /proc/PID/exe; "" unread, not permitted, or in a container


def read_file(path: str) -> bytes:
    """The first MAX_READ_BYTES of a file: a command line can be megabytes long, and only
    its first CMDLINE_MAX_CHARS characters are ever kept."""
    with open(path, "rb") as handle:
        return handle.read(MAX_READ_BYTES)


def user_name(uid: int) -> str:
    """The account name of `uid`, or the number as text when no account has it. A name
    that is not UTF-8 in the account database is read with replacement characters."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class _Gone(Exception):
    """The process exited while it was being read."""


def identify(
    proc_root: str,
    pid: int,
    comm: str,
    *,
    cmdline: bool,
    read: FileReader = read_file,
    name_of: UserName = user_name,
    readlink: LinkReader = os.readlink,
) -> tuple[Identity, bool]:
    """The identity of `pid`, whose stat line named it `comm`, and whether it is complete
    enough to cache (not when the process exited half-way)."""
    base = f"{proc_root}/{pid}"
    complete = True
    words: list[str] | None = None
    if cmdline or len(comm) >= COMM_MAX_CHARS:
        try:
            words = _read_part(read, f"{base}/cmdline", split_cmdline)
        except _Gone:
            complete = False
    name = comm
    if words and len(comm) >= COMM_MAX_CHARS:
        full = os.path.basename(words[0])
        if full.startswith(comm):
            name = full
    line = (" ".join(words)[:CMDLINE_MAX_CHARS] or None) if cmdline and words else None
    user = ""
    try:
        uid = _read_part(read, f"{base}/status", real_uid)
        if uid is not None:
            user = name_of(uid)
    except _Gone:
        complete = False
    labels = CgroupLabels()
    try:
        labels = _read_part(read, f"{base}/cgroup", _cgroup) or CgroupLabels()
    except _Gone:
        complete = False
    executable = ""
    if not (labels.container_id or labels.pod_uid):
        try:
            executable = _executable(readlink(f"{base}/exe"))
        except OSError:  # not permitted, a kernel thread (ENOENT) or gone: unknown
            pass
    return Identity(name, user, line, labels, executable), complete


def _executable(target: str) -> str:
    """The file name of an executable from its /proc/PID/exe link's target."""
    return os.path.basename(target.removesuffix(DELETED))


def _read_part(read: FileReader, path: str, parse: Callable[[bytes], T]) -> T | None:
    """`parse` of the file; None when it cannot be read or parsed, _Gone when it vanished."""
    try:
        data = read(path)
    except (FileNotFoundError, ProcessLookupError) as error:
        raise _Gone(path) from error
    except OSError:  # not permitted, or another failure: that part stays unknown
        return None
    try:
        return parse(data)
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def split_cmdline(data: bytes) -> list[str]:
    """The words of a `/proc/PID/cmdline` file, as psutil splits them; [] when empty."""
    text = data.decode("utf-8", "replace")
    if not text:
        return []
    cut = len(data) >= MAX_READ_BYTES  # its end was not read: NULs inside tell the separator
    sep = "\x00" if text.endswith("\x00") or (cut and "\x00" in text) else " "
    if text.endswith(sep):
        text = text[:-1]
    words = text.split(sep)
    if sep == "\x00" and len(words) == 1 and " " in text:  # a title rewritten with spaces
        words = text.split(" ")
    return words


def real_uid(data: bytes) -> int | None:
    """The real UID from the `Uid:` line of a `/proc/PID/status` file."""
    for line in data.splitlines():
        if line.startswith(b"Uid:"):
            return int(line.split()[1])
    return None


def _cgroup(data: bytes) -> CgroupLabels:
    return parse_cgroup(data.decode("utf-8"))
