"""The Xid listener: a thread that waits on NVML's event API and counts Xid errors.

`nvmlEventSetWait` blocks until a device reports a critical Xid or ECC event, so the
listener never polls the driver. It is armed when NVML initialises (and re-armed after
every re-initialisation), stops cleanly, and stays off, after saying so once, where the
devices do not support events (some virtual GPUs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from gpu_exporter.model import DeviceEvent, XidState
from gpu_exporter.sources.backend import Backend, EventSet, NvmlUnavailable
from gpu_exporter.sources.log_limit import LogLimit

log = logging.getLogger(__name__)

RESTART_BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)  # after a run fails unexpectedly

WAIT_MS = 2000
"""How long one `nvmlEventSetWait` waits (ms). An event ends the wait at once, whatever
its length; what the length sets is how often the listener calls the driver and wakes
for nothing (each wait is an NVML call: one every 2 s, 0.06 per GPU of 8 a second, 0.5
of one GPU's budget of 16), and how late it sees what it checks between waits: its stop
(not waited for when the exporter exits), a re-arm after NVML re-initialised, and a
storm's summary line."""
STOP_SLACK_SECONDS = 0.1  # after a wait ends, what the thread takes to end

XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception: usually an application bug (illegal instruction or address)",
    31: "GPU memory page fault: an application accessed an illegal address",
    43: "GPU stopped processing: a user application faulted",
    45: "preemptive cleanup after a previous error: a process was killed or ended",
    48: "double-bit ECC error: the GPU needs a reset; check the ECC counters",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt: reset the GPU",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping recording FAILED: the GPU needs service",
    74: "NVLink error: check the links and the neighbouring GPU",
    79: "GPU has fallen off the bus: reset or reboot, check power and seating",
    92: "high single-bit ECC error rate",
    94: "contained ECC error: the affected application was stopped",
    95: "uncontained ECC error: every application on the GPU is affected, reset it",
    119: "GSP RPC timeout: the GPU firmware stopped answering",
    120: "GSP error: the GPU firmware reported a fault",
}


def xid_meaning(xid: int) -> str:
    return XID_MEANINGS.get(xid, "see NVIDIA's Xid catalogue")


class XidTally:
    """One GPU's Xids, counted in place (a storm of new codes costs no copy per Xid);
    `frozen()` is the immutable `XidState` a sample keeps."""

    def __init__(self, old: XidState | None = None) -> None:
        self.counts: dict[int, int] = dict(old.counts) if old is not None else {}
        self._last: dict[int, float] = dict(old.last_timestamps) if old is not None else {}
        self._newest: float | None = old.last_timestamp_seconds if old is not None else None
        self._newest_xid: int | None = old.last_xid if old is not None else None

    def add(self, xid: int, timestamp_seconds: float) -> None:
        """One more Xid `xid` at `timestamp_seconds` (Unix time); the last one is the
        latest in time, whatever the order they are read in."""
        self.counts[xid] = self.counts.get(xid, 0) + 1
        self._last[xid] = max(timestamp_seconds, self._last.get(xid, timestamp_seconds))
        if self._newest is None or timestamp_seconds >= self._newest:
            self._newest, self._newest_xid = timestamp_seconds, xid

    def frozen(self) -> XidState:
        return XidState(
            counts=dict(self.counts),
            last_timestamp_seconds=self._newest,
            last_xid=self._newest_xid,
            last_timestamps=dict(self._last),
        )


def add_xid(old: XidState | None, xid: int, timestamp_seconds: float) -> XidState:
    """`old` with one more Xid `xid` at `timestamp_seconds` (Unix time): `XidTally.add`
    on a copy, for a table that changes one Xid at a time (NVML's events)."""
    tally = XidTally(old)
    tally.add(xid, timestamp_seconds)
    return tally.frozen()


class XidListener:
    """Counts Xid errors per GPU from a backend's event set, on its own thread.

    An event is counted only while `counting()` is true: the daemon makes that "the
    kernel log is not being read", since the kernel log holds the same Xid (the driver
    logs every Xid it posts as an event) and counts it, so no Xid is counted twice.

    `start()` and `stop()` may be called any number of times (SIGHUP turns the `xid`
    collector on and off); the counts are kept across, so they stay "since the exporter
    started". Each run of the thread has its own stop signal, so a run still blocked in
    the driver when a new one starts never records an event twice.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        clock: Callable[[], float] = time.time,
        wait_ms: int = WAIT_MS,
        counting: Callable[[], bool] = lambda: True,
    ) -> None:
        self._backend = backend
        self._counting = counting  # False while the kernel log counts every Xid instead
        self._clock = clock
        self._wait_ms = wait_ms
        self._lock = threading.Lock()
        self._state: dict[str, XidState] = {}
        self._run_stop: threading.Event | None = None  # the current run's stop signal
        self._arm = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsupported_logged = False
        self._listening: threading.Event | None = None  # the run that has a set open
        # one line per Xid, but not a storm's worth (sources/log_limit.py)
        self._lines = LogLimit(log, "Xid errors not logged one by one (counted)")

    @property
    def running(self) -> bool:
        return self._run_stop is not None

    @property
    def listening(self) -> bool:
        """True while the current run has an event set open and waits on it."""
        return self._listening is not None and self._listening is self._run_stop

    def start(self, *, armed: bool = False) -> None:
        """Start the thread (again). It opens an event set when armed: at once with
        `armed` (NVML is already up), else on the next `rearm()` (NVML initialised)."""
        if self._run_stop is not None:
            return
        stop = self._run_stop = threading.Event()
        if armed:
            self._arm.set()
        else:
            self._arm.clear()
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name="xid-listener", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_seconds: float | None = None) -> bool:
        """Stop listening; True when the thread has ended within `timeout_seconds`
        (None: one wait of the driver's and a little more, time for it to end)."""
        if timeout_seconds is None:
            timeout_seconds = self._wait_ms / 1000 + STOP_SLACK_SECONDS
        stop, self._run_stop = self._run_stop, None
        if stop is not None:
            stop.set()
            self._arm.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout_seconds)
        return not thread.is_alive()

    def rearm(self) -> None:
        """Open a fresh event set: NVML was (re-)initialised."""
        self._arm.set()

    def state(self) -> Mapping[str, XidState]:
        with self._lock:
            return dict(self._state)

    def _run(self, stop: threading.Event) -> None:
        """Open, listen, repeat. An unexpected failure (a bug, a backend that raises what
        it should not) is logged and the listener opens a fresh event set after a
        backoff, so no failure ends the thread while the exporter runs."""
        failures = 0
        while not stop.is_set():
            self._arm.wait()
            if stop.is_set():
                return
            self._arm.clear()
            try:
                self._open_and_listen(stop)
                failures = 0
            except Exception:
                backoff = RESTART_BACKOFF_SECONDS[min(failures, len(RESTART_BACKOFF_SECONDS) - 1)]
                failures += 1
                log.exception(
                    "Xid listener failed; restarting", extra={"retry_in_seconds": backoff}
                )
                if stop.wait(backoff):
                    return
                self._arm.set()

    def _open_and_listen(self, stop: threading.Event) -> None:
        events = self._open()
        if events is None:
            return
        log.debug("Xid listener waiting on NVML events")
        try:
            self._listening = stop
            self._listen(events, stop)
        finally:
            if self._listening is stop:
                self._listening = None
            events.close()

    def _open(self) -> EventSet | None:
        try:
            events = self._backend.open_events()
        except NvmlUnavailable as error:
            log.debug("Xid listener not armed", extra={"reason": error.reason})
            return None
        if events is None and not self._unsupported_logged:
            self._unsupported_logged = True
            log.warning("NVML events are not supported on these GPUs: Xid errors are not counted")
        return events

    def _listen(self, events: EventSet, stop: threading.Event) -> None:
        while not stop.is_set() and not self._arm.is_set():
            try:
                event = events.wait(self._wait_ms)
            except NvmlUnavailable as error:
                log.debug("Xid listener stopped until NVML is back", extra={"reason": error.reason})
                return
            if event is not None and not stop.is_set():
                self.record(event)
            self._lines.flush(time.monotonic())

    def record(self, event: DeviceEvent) -> None:
        if event.kind != "xid" or event.xid is None:
            log.warning("GPU event", extra={"uuid": event.uuid, "event": event.kind})
            return
        if not self._counting():
            log.debug(
                "Xid event left to the kernel log, which counts it",
                extra={"uuid": event.uuid, "xid": event.xid},
            )
            return
        now = self._clock()
        with self._lock:
            self._state[event.uuid] = add_xid(self._state.get(event.uuid), event.xid, now)
        if not self._lines.allow(time.monotonic()):
            return
        log.error(
            "Xid error",
            extra={"uuid": event.uuid, "xid": event.xid, "meaning": xid_meaning(event.xid)},
        )
