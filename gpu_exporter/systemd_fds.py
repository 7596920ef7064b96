"""The files systemd opened for the exporter (sd_listen_fds(3)'s protocol, no libsystemd).

A unit that names a socket unit in `Sockets=` starts the program with that unit's files
already open, from file descriptor 3 on, and says so in three environment variables:

- `LISTEN_PID`: the process they are for (a child inheriting the environment is not);
- `LISTEN_FDS`: how many, at 3, 4, ...;
- `LISTEN_FDNAMES`: their names (`FileDescriptorName=`), separated by colons; without
  it every one is named "unknown".

`deploy/systemd/gpu-exporter-kmsg.socket` passes `/dev/kmsg` so, named `kmsg`: systemd
opens it as root, and the service reads the kernel log without CAP_SYSLOG
(`daemon.make_kernel_log` decides when it is read). The variables are taken once, then
unset, as `sd_listen_fds(unset_environment=1)` does; a malformed one is ignored with one
log line, and the files are then left alone.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import MutableMapping

log = logging.getLogger(__name__)

LISTEN_FDS_START = 3  # SD_LISTEN_FDS_START: the first file descriptor passed
MAX_LISTEN_FDS = 64  # more than any unit passes; a larger count is taken as malformed
MAX_FDNAME_CHARS = 255  # systemd's FDNAME_MAX
MAX_PID_DIGITS = 10  # pid_max is at most 4194304
VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")
UNNAMED = "unknown"  # a file's name when LISTEN_FDNAMES is not set


def _count(value: str, max_digits: int) -> int | None:
    """A decimal number in ASCII digits, or None for anything else."""
    if not value or len(value) > max_digits or not (value.isascii() and value.isdigit()):
        return None
    return int(value)


def parse_listen_fds(
    listen_pid: str | None, listen_fds: str | None, names: str | None, pid: int
) -> dict[str, int]:
    """{name: file descriptor} passed to process `pid`; the first of a repeated name wins.

    Empty when none is passed to `pid` (no variables, or LISTEN_PID names another
    process). Raises ValueError, saying which variable, when one is malformed.
    """
    if listen_pid is None and listen_fds is None:
        return {}
    owner = _count(listen_pid or "", MAX_PID_DIGITS)
    if owner is None:
        raise ValueError(f"LISTEN_PID={listen_pid!r:.40} is not a process id")
    if owner != pid:
        return {}
    count = _count(listen_fds or "", 3)
    if count is None or count > MAX_LISTEN_FDS:
        raise ValueError(f"LISTEN_FDS={listen_fds!r:.40} is not a count of 0 to {MAX_LISTEN_FDS}")
    if names is None:
        listed = [UNNAMED] * count
    else:
        if len(names) > MAX_LISTEN_FDS * (MAX_FDNAME_CHARS + 1):
            raise ValueError(f"LISTEN_FDNAMES is {len(names)} characters long")
        listed = names.split(":") if count else []
        if len(listed) != count:
            raise ValueError(f"LISTEN_FDNAMES holds {len(listed)} names for {count} files")
        if any(len(name) > MAX_FDNAME_CHARS or not name.isprintable() for name in listed):
            raise ValueError("LISTEN_FDNAMES holds a name too long or not printable")
    passed: dict[str, int] = {}
    for offset, name in enumerate(listed):
        passed.setdefault(name, LISTEN_FDS_START + offset)
    return passed


def take_listen_fds(environ: MutableMapping[str, str], pid: int) -> dict[str, int]:
    """The files passed to `pid` by name, with the variables removed from `environ`; each
    one is kept from the programs the exporter runs (close-on-exec). Empty when none is
    passed, or when a variable is malformed (logged once) or a file is not open."""
    listen_pid, listen_fds, names = (environ.pop(name, None) for name in VARIABLES)
    try:
        passed = parse_listen_fds(listen_pid, listen_fds, names, pid)
    except ValueError as error:
        log.warning("ignoring the files systemd passed", extra={"reason": str(error)})
        return {}
    try:
        for fd in passed.values():
            os.set_inheritable(fd, False)
    except OSError as error:
        log.warning("ignoring the files systemd passed", extra={"reason": str(error)})
        return {}
    return passed


@functools.cache
def inherited_fds() -> dict[str, int]:
    """This process's files from systemd, taken from `os.environ` on the first call."""
    return take_listen_fds(os.environ, os.getpid())
