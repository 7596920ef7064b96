"""The kernel-log reader: every Xid (and NVSwitch SXid) the driver logged since boot.

NVML's event API only delivers the Xids that happen while the exporter listens; the
kernel log keeps those logged before it started, or during a restart. The reader opens
`--collector.xid.kernel-log` (default `/dev/kmsg`) when the `xid` collector starts, reads
the ring from its oldest record, then follows new records on its own thread, and counts
by PCI bus id (the sampler maps them to GPUs: `sampling/xid_merge.py`).

- **Only the driver's records.** A record whose syslog facility is not 0 was written
  from userspace (logger, a unit's `StandardOutput=kmsg`, a container with /dev/kmsg
  writable): one that reads as an Xid is never counted, only counted apart
  (`userspace_records`), so a spoof shows.
- **One count per Xid.** Once the kernel log has given a record in /dev/kmsg's format
  (`up`), it alone counts Xids and NVML's events are not counted
  (`XidListener(counting=...)`): the driver logs every Xid it posts as an event. Until
  then (an empty file, a FIFO no one writes) the log is not yet up and the events count.
  A kernel log that could not be opened (a character device other than /dev/kmsg
  included), whose first `NOT_A_LOG_AFTER` lines are no records, or that failed while
  read, is not tried again until the exporter restarts, so the events, counted instead
  from then on, never overlap what it counts. A SIGHUP that turns the collector off
  keeps the file open; turned on again, the reader goes on from where it stopped.
- **The first count is whole.** No Xid or SXid count is served until the backlog (what
  the log held when it was opened) has been read to its end, or `MAX_BACKLOG_BYTES` of
  it, so a restart never shows 3, then 1, 2, 3 (`backlog_read`).
- **Time.** Every Xid is dated by its record: boot time + USEC, where boot time is now
  minus CLOCK_MONOTONIC: the kernel's printk clock and CLOCK_MONOTONIC both leave out
  suspend, but the printk clock is not disciplined by NTP, so the date is off by the
  drift between the two since boot (dmesg(1) warns of the same): typically under a
  second a day (a few ppm), never later than now. An Xid read late (after a storm,
  logged while the collector was off) keeps the time it was logged.
- **Loss and SEQ.** Records overwritten before they were read (EPIPE: the ring wrapped,
  or they were gone before the exporter started) are counted from the gaps in SEQ, so a
  count that misses Xids says so: `gpu_exporter_xid_kernel_log_lost_records_total`. A
  line in no record's format had a SEQ too: its gap is not called lost. A SEQ that goes
  back, or leaps further than a ring holds without EPIPE (a file holding two boots),
  starts the numbering again at that record, said in the log and in `seq_resets`; no
  record is ever skipped.
- **Bounded.** Labels are capped (`kernel_log_counts`), one pass reads at most
  `PASS_BYTES`, and the per-Xid log lines are limited (`log_limit`: 10 each 10 s, then
  one line saying how many were not logged), so a storm costs CPU per Xid, not MB of log.
- **Permission.** Where `kernel.dmesg_restrict` is 1, reading `/dev/kmsg` needs
  CAP_SYSLOG (EPERM without); a container needs the device too. Without it the reader
  says so once in the log, `gpu_exporter_xid_kernel_log_up` is 0, and Xids are counted
  from NVML's events alone, since the exporter started.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable

from gpu_exporter.model import KernelLogState
from gpu_exporter.sources.kernel_log_counts import KernelLogCounts
from gpu_exporter.sources.kernel_log_files import (
    PARTIAL_RECORD,
    RecordFile,
    is_kmsg,
    open_kernel_log,
)
from gpu_exporter.sources.kernel_log_records import (
    DriverError,
    KernelRecord,
    Unparsed,
    parse_driver_error,
    parse_record,
)
from gpu_exporter.sources.log_limit import LogLimit
from gpu_exporter.sources.xid import xid_meaning

log = logging.getLogger(__name__)

# While a summary line is owed (a storm's lines withheld), a following read waits at most
# this long, so the line comes on time; else it blocks until a record comes or it is told
# to stop (a pipe closed): an idle reader never wakes (two wake-ups a second cost 0.3-0.5
# ms/s of CPU on a virtual machine, benchmarks/README.md).
WAIT_SECONDS = 0.5
MAX_REFUSED_IN_A_ROW = 16  # EPIPE or EINVAL with no record between: give the log up
PASS_BYTES = 1 << 20  # one pass reads at most this much, then looks around (stop, log lines)
MAX_BACKLOG_BYTES = 256 << 20  # the backlog is read at its end, or after this much
NOT_A_LOG_AFTER = 16  # lines in no record's format before any record: not a kernel log
# No ring holds more records than this (LOG_BUF_LEN_MAX, 2 GiB, over 32 bytes a record,
# printk's own average): a longer leap without EPIPE is no wrap, but another numbering.
MAX_RING_RECORDS = 2**26
WAITING = "no record in /dev/kmsg's format read yet (an empty file, or a FIFO no one writes)"


class NotAKernelLog(Exception):
    """What the path holds is not a kernel log (the message says why)."""


def describe(error: OSError, path: str) -> str:
    """Why `path` cannot be read, for the log and the live page."""
    if error.errno in (errno.EACCES, errno.EPERM):
        if not is_kmsg(path):
            return f"permission denied on {path}: the exporter's user may not read it"
        return (
            f"permission denied on {path}: reading the kernel log needs CAP_SYSLOG where "
            "kernel.dmesg_restrict is 1 (and the device in a container)"
        )
    if error.errno == errno.ENOENT:
        return f"{path} does not exist"
    return f"{path}: {error.strerror or error}"


class KernelLogReader:
    """Reads the kernel log on its own thread; `state()` is what it has counted."""

    def __init__(
        self,
        path: str,
        *,
        opener: Callable[[str], RecordFile] = open_kernel_log,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._opener = opener
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._counts = KernelLogCounts()
        self._lost = 0
        self._malformed = 0
        self._userspace = 0
        self._seq_resets = 0
        self._last_seq: int | None = None
        self._overwritten = False  # EPIPE since the last record: its SEQ gap is a loss
        self._unread = 0  # lines in no record's format since the last record
        self._file: RecordFile | None = None  # kept open while the collector is off
        self._has_record = False  # a record in /dev/kmsg's format was read: up
        self._reason: str | None = "not started"
        self._given_up = False  # could not be read once: never again (no double counting)
        self._backlog_read = False  # read to its end (or MAX_BACKLOG_BYTES) once
        self._backlog_bytes = 0
        self._backlog_xids = 0
        self._xid_lines = LogLimit(log, "Xid errors not logged one by one (counted)")
        self._reset_lines = LogLimit(log, "kernel log SEQ restarts not logged one by one")
        self._state: KernelLogState | None = None  # the last state() answer, until a change
        self._run_stop: threading.Event | None = None
        self._run_wake: int | None = None  # the write end of the run's wake pipe
        self._thread: threading.Thread | None = None

    @property
    def up(self) -> bool:
        """True once the kernel log gave a record, while it is read: it then counts every
        Xid (NVML's events count until then)."""
        return self._has_record and not self._given_up

    def state(self) -> KernelLogState:
        with self._lock:
            if self._state is None:
                served = self._backlog_read or self._given_up  # never a partial first count
                self._state = KernelLogState(
                    path=self.path,
                    up=self.up,
                    reason=self._reason,
                    xids=self._counts.xids() if served else {},
                    sxids=self._counts.sxids() if served else {},
                    lost_records=self._lost,
                    malformed_records=self._malformed,
                    userspace_records=self._userspace,
                    seq_resets=self._seq_resets,
                    capped_records=self._counts.capped,
                    backlog_read=self._backlog_read,
                )
            return self._state

    def start(self) -> None:
        """Open the log (now, so `up` is known before any NVML event) and follow it on a
        thread, from where it stopped when started again. Does nothing while running, or
        once the log could not be read."""
        if self._run_stop is not None or self._given_up:
            return
        previous = self._thread
        if previous is not None and previous.is_alive():
            previous.join(2 * WAIT_SECONDS)  # told to stop and woken: it ends at once
            if previous.is_alive():
                log.warning("kernel log reader still stopping; not started again")
                return
        file = self._file or self._open()
        if file is None:
            return
        stop = self._run_stop = threading.Event()
        wake_fd, self._run_wake = os.pipe()  # closing the write end wakes the run
        self._thread = threading.Thread(
            target=self._run, args=(file, stop, wake_fd), name="kernel-log", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_seconds: float = 1.0) -> bool:
        """Stop following (the file stays open: started again, the reader goes on from
        where it stopped); True when the thread has ended within `timeout_seconds`."""
        stop, self._run_stop = self._run_stop, None
        wake, self._run_wake = self._run_wake, None
        if stop is not None:
            stop.set()
        if wake is not None:
            os.close(wake)  # its read end turns readable: the wait returns
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout_seconds)
        return not thread.is_alive()

    def catch_up(self) -> None:
        """Read what the log holds now, to its end, without a thread (`--once`): a last
        line without its newline is a record, and at most MAX_BACKLOG_BYTES are read."""
        file = None if self._given_up else (self._file or self._open())
        if file is None:
            return
        stop, budget = threading.Event(), MAX_BACKLOG_BYTES
        try:
            while not self._read_pass(file, stop, at_end=True) and budget > 0:
                budget -= PASS_BYTES
        except OSError as error:
            self._give_up(describe(error, self.path))
        except NotAKernelLog as error:
            self._give_up(str(error))
        finally:
            self._close()

    def _open(self) -> RecordFile | None:
        try:
            file = self._opener(self.path)
        except OSError as error:
            self._give_up(describe(error, self.path))
            return None
        self._file = file
        if not self._has_record:
            self._set_reason(WAITING)
        return file

    def _close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def _give_up(self, reason: str) -> None:
        self._given_up = True
        self._set_reason(reason)
        log.warning(
            "cannot read the kernel log: Xids are counted from NVML events alone, since the "
            "exporter started",
            extra={"path": self.path, "reason": reason},
        )

    def _set_reason(self, reason: str | None) -> None:
        with self._lock:
            self._reason, self._state = reason, None

    def _run(self, file: RecordFile, stop: threading.Event, wake_fd: int) -> None:
        try:
            while not stop.is_set():
                ended = self._read_pass(file, stop)
                now = self._monotonic()
                self._xid_lines.flush(now)
                self._reset_lines.flush(now)
                if ended and not stop.is_set():
                    owed = self._xid_lines.withheld or self._reset_lines.withheld
                    file.wait(WAIT_SECONDS if owed else None, wake_fd)
        except OSError as error:
            self._give_up(describe(error, self.path))
            self._close()
        except NotAKernelLog as error:
            self._give_up(str(error))
            self._close()
        except Exception:  # a bug: say so, and let NVML's events count
            log.exception("kernel log reader failed")
            self._give_up("the reader failed (a bug; see the log)")
            self._close()
        finally:
            os.close(wake_fd)

    def _read_pass(self, file: RecordFile, stop: threading.Event, *, at_end: bool = False) -> bool:
        """Take the records waiting now, up to PASS_BYTES; True when none is left."""
        refused = 0
        read = 0
        ended = False
        while not stop.is_set() and read < PASS_BYTES:
            try:
                raw = file.read_record(at_end=at_end)
            except OSError as error:
                # EPIPE: overwritten, the next record's SEQ gap counts them; EINVAL: a
                # record too long for the buffer, which the kernel skips
                if error.errno in (errno.EPIPE, errno.EINVAL) and refused < MAX_REFUSED_IN_A_ROW:
                    refused += 1
                    self._overwritten = True
                    continue
                raise
            if raw is None:
                ended = True
                break
            refused = 0
            read += len(raw) + 1
            self._take(raw)
        if not self._backlog_read:
            self._backlog_bytes += read
            if ended or self._backlog_bytes >= MAX_BACKLOG_BYTES:
                self._finish_backlog(whole=ended)
        return ended

    def _finish_backlog(self, *, whole: bool) -> None:
        """The records logged before the exporter started are read: serve the counts."""
        with self._lock:
            self._backlog_read, self._state = True, None
        extra = {"path": self.path, "xids": self._backlog_xids, "lost": self._lost}
        if whole:
            following = "; following it" if self._run_stop is not None else ""
            log.info(f"kernel log read since boot{following}", extra=extra)
        else:
            log.warning(
                "kernel log backlog larger than the bound: counts served from here, reading on",
                extra={**extra, "bound_bytes": MAX_BACKLOG_BYTES},
            )

    def _take(self, raw: bytes) -> None:
        record = parse_record(raw) if raw != PARTIAL_RECORD else None
        if record is None:
            self._not_a_record(raw)
            return
        if not self._has_record:
            self._has_record = True
            self._set_reason(None)
        gap = self._gap(record)
        found = parse_driver_error(record.message)
        if found is None and not gap:
            return
        if gap:
            with self._lock:
                self._lost += gap
                self._state = None
        if found is None:
            return
        if not record.from_kernel:  # written by a program, quoting the driver or spoofing it
            with self._lock:
                self._userspace += 1
                self._state = None
            log.debug(
                "a program's record that reads as an Xid, not counted", extra={"seq": record.seq}
            )
        elif isinstance(found, Unparsed):
            self._count_malformed(found.reason)
        else:
            self._count(found, record.usec)

    def _not_a_record(self, raw: bytes) -> None:
        """A line in no record's format (or cut short): counted malformed, not lost."""
        self._unread += 1
        if raw == PARTIAL_RECORD:
            self._count_malformed("a line cut short at the end of the file")
        else:
            self._count_malformed("a record whose header is not PRIORITY,SEQ,USEC,FLAGS;")
        if not self._has_record and self._malformed >= NOT_A_LOG_AFTER:
            raise NotAKernelLog(
                f"{self.path} is not a kernel log: its first {NOT_A_LOG_AFTER} lines are not "
                "/dev/kmsg records (PRIORITY,SEQ,USEC,FLAGS;MESSAGE; a syslog file is not one)"
            )

    def _gap(self, record: KernelRecord) -> int:
        """Records missed before `record` (lost), from the SEQ it follows; a SEQ that goes
        back, or leaps further than a ring holds without EPIPE, starts the numbering again
        at `record` (another boot in a file, a record not the kernel's): said, not lost."""
        previous, self._last_seq = self._last_seq, record.seq
        overwritten, self._overwritten = self._overwritten, False
        unread, self._unread = self._unread, 0
        gap = record.seq - (previous + 1 if previous is not None else 0)
        if previous is not None and (gap < 0 or (gap > MAX_RING_RECORDS and not overwritten)):
            with self._lock:
                self._seq_resets += 1
                self._state = None
            if self._reset_lines.allow(self._monotonic()):
                log.warning(
                    "kernel log SEQ went back or leapt: reading on from this record",
                    extra={"path": self.path, "seq": record.seq, "after": previous},
                )
            return 0
        return max(0, gap - unread)  # a line that could not be read had its SEQ

    def _count_malformed(self, reason: str) -> None:
        with self._lock:
            self._malformed += 1
            self._state = None
        log.debug("kernel log record not read", extra={"reason": reason})

    def _count(self, error: DriverError, usec: int) -> None:
        """Count `error`, dated by its record: boot time (now less CLOCK_MONOTONIC) plus
        USEC, never later than now."""
        now = self._clock()
        when = min(now, now - self._monotonic() + usec / 1e6)
        with self._lock:
            counted = self._counts.add(error, when)
            self._state = None
        if not counted:
            if self._counts.capped == 1:
                log.warning(
                    "kernel log counts full: Xids of a new bus id, NVSwitch or code are not "
                    "counted (gpu_exporter_xid_kernel_log_capped_records_total)",
                    extra={"path": self.path},
                )
            return
        if not self._backlog_read:
            self._backlog_xids += error.kind == "xid"
            return
        if not self._xid_lines.allow(self._monotonic()):
            return
        log.error(
            "Xid error" if error.kind == "xid" else "SXid error",
            extra={
                "pci_bus_id": error.pci_bus_id,
                error.kind: error.code,
                **({"meaning": xid_meaning(error.code)} if error.kind == "xid" else {}),
                **({"nvswitch": error.nvswitch} if error.nvswitch is not None else {}),
            },
        )
