"""The kernel-log reader: every Xid (and NVSwitch SXid) the driver logged since boot.

NVML's event API only delivers the Xids that happen while the exporter listens; the
kernel log keeps those logged before it started, or during a restart. The reader opens
`--collector.xid.kernel-log` (default `/dev/kmsg`) when the `xid` collector starts, reads
the ring from its oldest record, then follows new records on its own thread, and counts
by PCI bus id (the sampler maps them to GPUs: `sampling/xid_merge.py`).

- **One count per Xid.** While the kernel log is read (`up`), it alone counts Xids and
  NVML's events are not counted (`XidListener(counting=...)`): the driver logs every Xid
  it posts as an event. A kernel log that could not be opened, or that failed while
  read, is not tried again until the exporter restarts, so the events, counted instead
  from then on, never overlap what it counts. A SIGHUP that turns the collector off and
  on reopens it and skips the records already read (by SEQ).
- **Time.** A record read from the ring's backlog is dated boot time + USEC, where boot
  time is now minus CLOCK_MONOTONIC: the kernel's printk clock and CLOCK_MONOTONIC both
  leave out suspend, but the printk clock is not disciplined by NTP, so the date is off
  by the drift between the two since boot (dmesg(1) warns of the same): typically under
  a second a day (a few ppm), never later than now. A record read while following (after
  the backlog) is dated when it is read, within a poll (0.5 s) of being logged.
- **Loss.** Records overwritten before they were read (EPIPE: the ring wrapped, or they
  were gone before the exporter started) are counted from the gaps in SEQ, so a count
  that misses Xids says so: `gpu_exporter_xid_kernel_log_lost_records_total`.
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

from gpu_exporter.model import KernelLogState, XidState
from gpu_exporter.sources.kernel_log_files import RecordFile, open_kernel_log
from gpu_exporter.sources.kernel_log_records import (
    DriverError,
    Unparsed,
    parse_driver_error,
    parse_record,
)
from gpu_exporter.sources.xid import add_xid, xid_meaning

log = logging.getLogger(__name__)

WAIT_SECONDS = 0.5  # the longest a following read waits before it looks at its stop signal
MAX_REFUSED_IN_A_ROW = 16  # EPIPE or EINVAL with no record between: give the log up


def describe(error: OSError, path: str) -> str:
    """Why `path` cannot be read, for the log and the live page."""
    if error.errno in (errno.EACCES, errno.EPERM):
        return (
            f"permission denied on {path}: reading the kernel log needs CAP_SYSLOG where "
            "kernel.dmesg_restrict is 1 (and the device in a container)"
        )
    if error.errno == errno.ENOENT:
        return f"{path} does not exist"
    return f"{path}: {os.strerror(error.errno) if error.errno else error}"


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
        self._xids: dict[str, XidState] = {}
        self._sxids: dict[int, dict[int, int]] = {}
        self._lost = 0
        self._malformed = 0
        self._last_seq: int | None = None
        self._up = False
        self._reason: str | None = "not started"
        self._given_up = False  # could not be read once: never again (no double counting)
        self._following = False  # the backlog has been read
        self._backlog_xids = 0
        self._state: KernelLogState | None = None  # the last state() answer, until a change
        self._run_stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def up(self) -> bool:
        """True while the kernel log is read: it then counts every Xid."""
        return self._up

    def state(self) -> KernelLogState:
        with self._lock:
            if self._state is None:
                self._state = KernelLogState(
                    path=self.path,
                    up=self._up,
                    reason=self._reason,
                    xids=dict(self._xids),
                    sxids={n: dict(codes) for n, codes in self._sxids.items()},
                    lost_records=self._lost,
                    malformed_records=self._malformed,
                )
            return self._state

    def start(self) -> None:
        """Open the log (now, so `up` is known before any NVML event) and follow it on a
        thread. Does nothing while running, or once the log could not be read."""
        if self._run_stop is not None or self._given_up:
            return
        file = self._open()
        if file is None:
            return
        stop = self._run_stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(file, stop), name="kernel-log", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_seconds: float = 1.0) -> bool:
        """Stop following; True when the thread has ended within `timeout_seconds`."""
        stop, self._run_stop = self._run_stop, None
        if stop is not None:
            stop.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout_seconds)
        return not thread.is_alive()

    def catch_up(self) -> None:
        """Read what the log holds now, without a thread (`--once`)."""
        file = None if self._given_up else self._open()
        if file is None:
            return
        try:
            self._read_waiting(file, threading.Event())
        except OSError as error:
            self._give_up(describe(error, self.path))
        finally:
            file.close()

    def _open(self) -> RecordFile | None:
        try:
            file = self._opener(self.path)
        except OSError as error:
            self._give_up(describe(error, self.path))
            return None
        self._set(up=True, reason=None)
        return file

    def _give_up(self, reason: str) -> None:
        self._given_up = True
        self._set(up=False, reason=reason)
        log.warning(
            "cannot read the kernel log: Xids are counted from NVML events alone, since the "
            "exporter started",
            extra={"path": self.path, "reason": reason},
        )

    def _set(self, *, up: bool, reason: str | None) -> None:
        with self._lock:
            self._up, self._reason, self._state = up, reason, None

    def _run(self, file: RecordFile, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self._read_waiting(file, stop)
                if not self._following:
                    self._following = True
                    log.info(
                        "kernel log read since boot; following it",
                        extra={"path": self.path, "xids": self._backlog_xids, "lost": self._lost},
                    )
                file.wait(WAIT_SECONDS)
        except OSError as error:
            self._give_up(describe(error, self.path))
        except Exception:  # a bug: say so, and let NVML's events count
            log.exception("kernel log reader failed")
            self._give_up("the reader failed (a bug; see the log)")
        finally:
            file.close()

    def _read_waiting(self, file: RecordFile, stop: threading.Event) -> None:
        """Take every record waiting now."""
        refused = 0
        while not stop.is_set():
            try:
                raw = file.read_record()
            except OSError as error:
                # EPIPE: overwritten, the next record's SEQ gap counts them; EINVAL: a
                # record too long for the buffer, which the kernel skips
                if error.errno in (errno.EPIPE, errno.EINVAL) and refused < MAX_REFUSED_IN_A_ROW:
                    refused += 1
                    continue
                raise
            if raw is None:
                return
            refused = 0
            self._take(raw)

    def _take(self, raw: bytes) -> None:
        record = parse_record(raw)
        if record is None:
            self._count_malformed("a record whose header is not PRIORITY,SEQ,USEC,FLAGS;")
            return
        expected = 0 if self._last_seq is None else self._last_seq + 1
        if record.seq < expected:
            return  # read before (the log reopened after a SIGHUP)
        self._last_seq = record.seq
        found = parse_driver_error(record.message)
        if found is None and record.seq == expected:
            return
        with self._lock:
            self._lost += record.seq - expected
            self._state = None
        if isinstance(found, Unparsed):
            self._count_malformed(found.reason)
        elif isinstance(found, DriverError):
            self._count(found, record.usec)

    def _count_malformed(self, reason: str) -> None:
        with self._lock:
            self._malformed += 1
            self._state = None
        log.debug("kernel log record not read", extra={"reason": reason})

    def _count(self, error: DriverError, usec: int) -> None:
        now = self._clock()
        if self._following:
            when = now
        else:
            when = min(now, now - self._monotonic() + usec / 1e6)
            self._backlog_xids += error.kind == "xid"
        with self._lock:
            if error.kind == "xid":
                self._xids[error.pci_bus_id] = add_xid(
                    self._xids.get(error.pci_bus_id), error.code, when
                )
            elif error.nvswitch is not None:
                codes = self._sxids.setdefault(error.nvswitch, {})
                codes[error.code] = codes.get(error.code, 0) + 1
            self._state = None
        if self._following:
            log.error(
                "Xid error" if error.kind == "xid" else "SXid error",
                extra={
                    "pci_bus_id": error.pci_bus_id,
                    error.kind: error.code,
                    **({"meaning": xid_meaning(error.code)} if error.kind == "xid" else {}),
                    **({"nvswitch": error.nvswitch} if error.nvswitch is not None else {}),
                },
            )
