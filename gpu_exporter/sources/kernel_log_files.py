"""The kernel log opened for reading, one record at a time: `/dev/kmsg`, or a regular
file or FIFO of records in its format (tests, a copy of another host's log), opened by
path or passed open by systemd.

`/dev/kmsg` hands out one record per read(2), from the oldest still in the ring, and
answers EPIPE when records were overwritten before this reader got to them (it then
continues with the oldest left) and EINVAL for a buffer too small for the record. A
file or FIFO holds one record per line; continuation lines (they start with a space)
are skipped, and a line longer than `MAX_RECORD_BYTES` is cut there.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time
from typing import Protocol

from gpu_exporter.sources.kernel_log_records import MAX_RECORD_BYTES

# CONSOLE_EXT_LOG_MAX (8192) is the most one /dev/kmsg read returns; twice that never
# answers EINVAL on the kernels we know.
DEVICE_READ_BYTES = 2 * MAX_RECORD_BYTES
FILE_CHUNK_BYTES = 65536
FILE_POLL_SECONDS = 0.1  # how often a file or FIFO at its end is looked at again


class RecordFile(Protocol):
    """An open kernel log (the seam the tests replace)."""

    def read_record(self) -> bytes | None:
        """The next record, or None when none is waiting now. Raises OSError: EPIPE when
        records were overwritten before they were read (reading goes on after them)."""

    def wait(self, seconds: float) -> None:
        """Return when a record may be waiting, or after at most `seconds`."""

    def close(self) -> None: ...


def open_kernel_log(path: str) -> RecordFile:
    """Open `path` without blocking (a FIFO with no writer yet included); OSError when
    it cannot be (EACCES or EPERM without the right, ENOENT, or not a log)."""
    return _record_file(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), path)


def open_inherited_kernel_log(fd: int) -> RecordFile:
    """The kernel log systemd opened for the exporter (file descriptor `fd`, which stays
    open), read as opening the path again would be: from its oldest record.

    The reader gets a copy (dup(2)) to close when it stops, so a reader started again
    (a SIGHUP turning the collector off and on) copies it again. The copy shares the
    open file's position, so it is moved to the start: lseek(0, SEEK_SET) is
    /dev/kmsg's oldest record still in the ring (a FIFO stays where it is). Non-blocking:
    systemd clears O_NONBLOCK on the files it passes (NonBlocking=no). OSError (EBADF
    when `fd` is not open) as for `open_kernel_log`.
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
    return _record_file(copy, f"file descriptor {fd}")


def _record_file(fd: int, name: str) -> RecordFile:
    """The open `fd` read as a kernel log; closed and OSError when it is none."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISCHR(mode):
        return DeviceLog(fd)
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return LineLog(fd)
    os.close(fd)
    raise OSError(errno.EINVAL, "not /dev/kmsg, a file or a FIFO", name)


class DeviceLog:
    """/dev/kmsg: a read returns one record."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def read_record(self) -> bytes | None:
        try:
            return os.read(self._fd, DEVICE_READ_BYTES) or None
        except BlockingIOError:
            return None

    def wait(self, seconds: float) -> None:
        select.select([self._fd], [], [], seconds)

    def close(self) -> None:
        os.close(self._fd)


class LineLog:
    """A regular file or FIFO: one record per line, read in bounded chunks."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._at = 0  # where the unread part of the buffer starts
        self._skipping = False  # inside a line already cut at MAX_RECORD_BYTES

    def read_record(self) -> bytes | None:
        while True:
            record = self._next_line()
            if record is not None:
                return record
            try:
                chunk = os.read(self._fd, FILE_CHUNK_BYTES)
            except BlockingIOError:
                return None
            if not chunk:  # the end, for now: a writer may add more
                return None
            self._buffer = self._buffer[self._at :] + chunk
            self._at = 0

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

    def wait(self, seconds: float) -> None:
        time.sleep(min(seconds, FILE_POLL_SECONDS))

    def close(self) -> None:
        os.close(self._fd)
