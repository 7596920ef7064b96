"""The kernel log opened for reading, one record at a time: `/dev/kmsg`, or a regular
file or FIFO of records in its format (tests, a copy of another host's log), opened by
path or passed open by systemd.

`/dev/kmsg` hands out one record per read(2), from the oldest still in the ring, and
answers EPIPE when records were overwritten before this reader got to them (it then
continues with the oldest left) and EINVAL for a buffer too small for the record. No
other character device is a kernel log (`/dev/null`, `/dev/zero` and `/dev/urandom`
would read as an empty log forever, or as endless junk): only 1:11 is accepted. A read
of 0 bytes from it is the end of what is waiting.

A file or FIFO holds one record per line; continuation lines (they start with a space)
are skipped, and a line longer than `MAX_RECORD_BYTES` is cut there. A line is a record
once its newline is read, or at a definite end: `read_record(at_end=True)` (`--once`),
a file renamed away (its last line is complete), or a last line unchanged for
`SETTLE_SECONDS` (a writer that does not end its last line). A line cut short at the end
of a FIFO (its writer died mid-record) or of a file truncated under it is never glued to
what comes next: it is handed out as `PARTIAL_RECORD`.

A regular file opened by path is followed across rotation: at its end, the path is
looked at again; another file there (renamed away and recreated: logrotate's default)
is opened and read from its start once the old one is read to its end, and a file
truncated in place (logrotate's copytruncate) is read again from its start: one shorter
than what was read, and one written again at once, before the next poll, to as long or
longer, whose first bytes are no longer those read first (`HEAD_BYTES`: the first
record's, with its SEQ). Reading on at the old offset would take the middle of a new
record for one and skip the records before it; the records of the old file are not read
again, so nothing counts twice.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import stat
import time
from typing import Protocol

from gpu_exporter.sources.kernel_log_records import MAX_RECORD_BYTES

log = logging.getLogger(__name__)

# CONSOLE_EXT_LOG_MAX (8192) is the most one /dev/kmsg read returns; twice that never
# answers EINVAL on the kernels we know.
DEVICE_READ_BYTES = 2 * MAX_RECORD_BYTES
FILE_CHUNK_BYTES = 65536
FILE_POLL_SECONDS = 0.1  # how often a file or FIFO at its end is looked at again
SETTLE_SECONDS = 1.0  # a file's last line without a newline, unchanged this long, is whole
HEAD_BYTES = 256  # the first bytes of a followed file, kept: the first record (its SEQ)
KMSG_DEVICE = (1, 11)  # major, minor of /dev/kmsg (Documentation/admin-guide/devices.txt)
PARTIAL_RECORD = b""  # a line cut short at an end: never a record (read_record's answer)


class RecordFile(Protocol):
    """An open kernel log (the seam the tests replace)."""

    def read_record(self, *, at_end: bool = False) -> bytes | None:
        """The next record, or None when none is waiting now; `PARTIAL_RECORD` for a line
        cut short. `at_end`: nothing more will be written, so a last line without its
        newline is a record. Raises OSError: EPIPE when records were overwritten before
        they were read (reading goes on after them)."""

    def wait(self, seconds: float | None, wake_fd: int | None = None) -> None:
        """Return when a record may be waiting, when `wake_fd` is readable, or after at
        most `seconds` (None: no limit where the file can be waited on, else a poll)."""

    def close(self) -> None: ...


def open_kernel_log(path: str) -> RecordFile:
    """Open `path` without blocking (a FIFO with no writer yet included); OSError when
    it cannot be (EACCES or EPERM without the right, ENOENT, or not a log)."""
    return _record_file(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), path, path)


def is_kmsg(path: str) -> bool:
    """True when `path` is /dev/kmsg (the device 1:11, or the name where it cannot be
    looked at)."""
    try:
        status = os.stat(path)
    except OSError:
        return path == "/dev/kmsg"
    return stat.S_ISCHR(status.st_mode) and _device(status) == KMSG_DEVICE


def open_inherited_kernel_log(fd: int) -> RecordFile:
    """The kernel log systemd opened for the exporter (file descriptor `fd`, which stays
    open), read as opening the path would be: from its oldest record.

    The reader gets a copy (dup(2)), moved to the start: lseek(0, SEEK_SET) is
    /dev/kmsg's oldest record still in the ring (a FIFO stays where it is). The reader
    keeps it open while the collector is off (SIGHUP), so it is opened once.
    Non-blocking: systemd clears O_NONBLOCK on the files it passes (NonBlocking=no).
    OSError (EBADF when `fd` is not open) as for `open_kernel_log`.
    """
    copy = os.dup(fd)  # close-on-exec, as every file Python opens
    try:
        os.set_blocking(copy, False)
        try:
            os.lseek(copy, 0, os.SEEK_SET)
        except OSError as error:
            if error.errno != errno.ESPIPE:
                raise
    except OSError:
        os.close(copy)
        raise
    return _record_file(copy, f"file descriptor {fd}", None)


def _record_file(fd: int, name: str, path: str | None) -> RecordFile:
    """The open `fd` read as a kernel log (followed across rotation at `path`, where it
    was opened by path); closed and OSError (EINVAL) when it is none."""
    try:
        status = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    mode = status.st_mode
    if stat.S_ISCHR(mode) and _device(status) == KMSG_DEVICE:
        return DeviceLog(fd)
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return LineLog(fd, path if stat.S_ISREG(mode) else None, fifo=stat.S_ISFIFO(mode))
    os.close(fd)
    what = (
        "a character device ({}:{}), not /dev/kmsg (1:11)".format(*_device(status))
        if stat.S_ISCHR(mode)
        else "not /dev/kmsg, a file or a FIFO"
    )
    raise OSError(errno.EINVAL, what, name)


class DeviceLog:
    """/dev/kmsg: a read returns one record."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._ended = False  # a read returned 0 bytes: select(2) would not wait

    def read_record(self, *, at_end: bool = False) -> bytes | None:
        try:
            record = os.read(self._fd, DEVICE_READ_BYTES)
        except BlockingIOError:
            return None
        self._ended = not record
        return record or None

    def wait(self, seconds: float | None, wake_fd: int | None = None) -> None:
        if self._ended:
            time.sleep(_poll_seconds(seconds))
        else:  # blocks in the kernel: no wake-up while no record comes
            select.select([self._fd] if wake_fd is None else [self._fd, wake_fd], [], [], seconds)

    def close(self) -> None:
        os.close(self._fd)


class LineLog:
    """A regular file or FIFO: one record per line, read in bounded chunks; a regular
    file opened by `path` is followed across rotation."""

    def __init__(self, fd: int, path: str | None = None, *, fifo: bool = False) -> None:
        self._fd = fd
        self._path = path
        self._fifo = fifo
        self._buffer = b""
        self._at = 0  # where the unread part of the buffer starts
        self._skipping = False  # inside a line already cut at MAX_RECORD_BYTES
        self._offset = 0  # bytes read from the file open now
        self._identity = _identity(os.fstat(fd))
        self._replaced = False  # another file is at the path: read this one to its end
        self._last_line: tuple[int, float] | None = None  # (offset, since) of an unended line
        self._head = b""  # the file's first bytes as read (HEAD_BYTES at most)
        self._at_end = False  # the last read found the end: look for a rewrite first

    def read_record(self, *, at_end: bool = False) -> bytes | None:
        while True:
            record = self._next_line()
            if record is not None:
                return record
            if self._at_end and self._rewritten():
                if len(self._buffer) > self._at:
                    return self._drop_unended()
                continue  # read again from the start
            try:
                chunk = os.read(self._fd, FILE_CHUNK_BYTES)
            except BlockingIOError:
                return None  # a FIFO's writer has written nothing more yet
            self._at_end = not chunk
            if chunk:
                if self._offset < HEAD_BYTES:
                    self._head += chunk[: HEAD_BYTES - self._offset]
                self._offset += len(chunk)
                self._buffer = self._buffer[self._at :] + chunk
                self._at = 0
                continue
            # the end of the file, for now
            unended = len(self._buffer) > self._at  # a last line without its newline
            if self._fifo:  # every writer has closed: an unended line is one that died
                return self._drop_unended() if unended else None
            if self._path is not None and not self._replaced and self._truncated():
                if unended:
                    return self._drop_unended()
                continue  # read again from the start
            if unended and (at_end or self._replaced or self._settled()):
                self._buffer += b"\n"  # a definite end: the line is whole
                line = self._next_line()
                if line is not None:
                    return line
            if not self._replaced or not self._reopened():
                return None

    def _settled(self) -> bool:
        """True once the unended last line has not grown for SETTLE_SECONDS."""
        now = time.monotonic()
        if self._last_line is None or self._last_line[0] != self._offset:
            self._last_line = (self._offset, now)
            return False
        return now - self._last_line[1] >= SETTLE_SECONDS

    def _drop_unended(self) -> bytes:
        self._buffer, self._at, self._skipping, self._last_line = b"", 0, False, None
        return PARTIAL_RECORD

    def _truncated(self) -> bool:
        """Another file at the path (marked, read on to the end), or this one truncated
        (read again from its start)? True for the latter."""
        assert self._path is not None
        try:
            status = os.stat(self._path)
        except OSError:
            return False  # renamed away, not recreated yet: keep reading this one
        if _identity(status) != self._identity:
            self._replaced = True
            return False
        if status.st_size < self._offset:
            self._from_start("kernel log truncated: reading it again from its start")
            return True
        return False

    def _rewritten(self) -> bool:
        """This file truncated in place and written again before the end was looked at,
        to as long as what was read or longer (copytruncate, then records at once): its
        first bytes are not those read first. True when so (read again from its start)."""
        if self._path is None or self._fifo or self._replaced or not self._head:
            return False
        try:
            first = os.pread(self._fd, len(self._head), 0)
        except OSError:
            return False
        if first == self._head:
            return False
        self._from_start("kernel log truncated and written again: reading it from its start")
        return True

    def _from_start(self, message: str) -> None:
        log.info(message, extra={"path": self._path})
        os.lseek(self._fd, 0, os.SEEK_SET)
        self._offset, self._head, self._at_end = 0, b"", False

    def _reopened(self) -> bool:
        """The old file read to its end: open the one now at the path. False when it
        cannot be (then the old one is followed on, and the path tried again)."""
        assert self._path is not None
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            self._replaced = False
            return False
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            os.close(fd)
            self._replaced = False
            return False
        os.close(self._fd)
        self._fd, self._identity, self._offset, self._replaced = fd, _identity(status), 0, False
        self._buffer, self._at, self._skipping, self._last_line = b"", 0, False, None
        self._head, self._at_end = b"", False
        log.info(
            "kernel log replaced: reading the new file from its start", extra={"path": self._path}
        )
        return True

    def _next_line(self) -> bytes | None:
        while True:
            end = self._buffer.find(b"\n", self._at)
            if end < 0:
                if len(self._buffer) - self._at <= MAX_RECORD_BYTES:
                    return None  # a line still being written
                # a line longer than any record: keep its start, skip the rest
                line = self._buffer[self._at : self._at + MAX_RECORD_BYTES]
                skipped, self._skipping = self._skipping, True
                self._buffer, self._at = b"", 0
            else:
                line = self._buffer[self._at : min(end, self._at + MAX_RECORD_BYTES)]
                skipped, self._skipping = self._skipping, False
                self._at = end + 1
            if line and not skipped and not line.startswith(b" "):
                return line

    def wait(self, seconds: float | None, wake_fd: int | None = None) -> None:
        time.sleep(_poll_seconds(seconds))

    def close(self) -> None:
        os.close(self._fd)


def _poll_seconds(seconds: float | None) -> float:
    """How long a file that cannot be waited on sleeps before it is looked at again."""
    return FILE_POLL_SECONDS if seconds is None else min(seconds, FILE_POLL_SECONDS)


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _device(status: os.stat_result) -> tuple[int, int]:
    return os.major(status.st_rdev), os.minor(status.st_rdev)
