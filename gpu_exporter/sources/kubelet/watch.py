"""The thread that reads the kubelet every few seconds, so neither a sample nor a scrape
ever waits on it: a slow, restarting or vanished kubelet delays only this thread.

`latest()` gives the last `KubeletReading`; the sampler copies it into each Snapshot.
Each refresh asks List (who holds which device) and, once List answered,
GetAllocatableResources (which devices the device plugins advertise: a time-sliced GPU's
replicas); where the kubelet does not serve the second, the reading says so
(`allocatable_error`) and the weights fall back (attribution/weights.py). Where it fails
after List answered, its last answer is kept as an allocation is (below).

A kubelet blip is not a change of owner. When a read fails, the allocation of the last
answered read is kept (`held_seconds` says how old it is; `gpu_exporter_kubernetes_up`
is 0 meanwhile) for up to `hold_seconds` (--kubernetes.allocation-hold, 5 minutes by
default) after that answer; then it is dropped, and the GPUs are nobody's until the
kubelet answers again. A kubelet restart takes seconds; a GPU's owner changes when a pod
ends, which the kubelet reports once it is back.

The first failure of each kind is logged once, with its cause; the recovery too. After a
failure the next call waits longer each time (`retry_delay`: doubling from the refresh
interval, capped at a minute, with jitter), on a new channel; meanwhile the socket is
looked at every SOCKET_POLL_SECONDS (a stat), and a new socket (a restarted kubelet
makes one: it removes the old file and listens afresh) is read at once, its backoff
started afresh. `stop()` ends the thread and forgets the last reading; `start()` again
begins afresh (a SIGHUP that turns the collector off and on).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from gpu_exporter.model import AllocatableDevices, ContainerDevices, KubeletReading
from gpu_exporter.sources.kubelet.logs import DEFAULT_LOG_ROOT, container_names, pod_names

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS = 5.0
DEFAULT_TIMEOUT_SECONDS = 5.0  # the longest one List call may take: then it "did not answer"
MAX_RETRY_SECONDS = 60.0  # the longest wait after failures, unless the refresh is longer
RETRY_JITTER = 0.2  # each wait is drawn within +-20%, so nodes that failed together spread
DEFAULT_HOLD_SECONDS = 300.0  # how long the last allocation read is kept through failures
SOCKET_POLL_SECONDS = 0.5  # while failing: how often the socket is looked at (a stat)

ListAllocations = Callable[[], tuple[tuple[ContainerDevices, ...], int]]
ListAllocatable = Callable[[], tuple[AllocatableDevices, ...]]


class Client(NamedTuple):
    """One connection's calls (which raise on failure) and its close."""

    list: ListAllocations
    close: Callable[[], None]
    allocatable: ListAllocatable | None = None  # None: not asked (a test's lister)


def retry_delay(failures: int, refresh_seconds: float, jitter: float) -> float:
    """Seconds to wait after `failures` (1 or more) failed reads in a row: the refresh
    interval, doubled for each further failure, capped at MAX_RETRY_SECONDS (or the refresh
    interval if longer), times 1 + `jitter` (a draw in -RETRY_JITTER..+RETRY_JITTER)."""
    cap = max(MAX_RETRY_SECONDS, refresh_seconds)
    return min(cap, refresh_seconds * 2.0 ** min(failures - 1, 32)) * (1.0 + jitter)


def _jitter() -> float:
    import random  # only once the kubelet has failed

    return random.uniform(-RETRY_JITTER, RETRY_JITTER)


class KubeletWatcher:
    """Refreshes the kubelet's allocation and the container names on its own thread."""

    def __init__(
        self,
        socket_path: str,
        *,
        log_root: str = DEFAULT_LOG_ROOT,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        hold_seconds: float = DEFAULT_HOLD_SECONDS,
        list_allocations: ListAllocations | None = None,
        list_allocatable: ListAllocatable | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket_path = socket_path
        self.log_root = log_root
        self.refresh_seconds = refresh_seconds
        self.hold_seconds = hold_seconds
        self._timeout_seconds = timeout_seconds
        self._list = list_allocations  # for tests; else each thread has a client of its own
        self._list_allocatable = list_allocatable  # for tests, with `list_allocations`
        self._monotonic = monotonic
        self._client: Client | None = None  # refresh()'s, kept between calls
        self._lock = threading.Lock()  # a stopped thread's late answer is dropped
        # the last reading, and when (monotonic seconds) the kubelet gave the allocation it
        # carries: at that reading, or at the last answered one before a failure
        self._latest: tuple[KubeletReading, float | None] | None = None
        # the last answer of GetAllocatableResources, and when (monotonic seconds)
        self._allocatable: tuple[tuple[AllocatableDevices, ...], float] | None = None
        self._logged: str | None = ""  # the error last logged ("" : none yet)
        self._logged_allocatable: str | None = ""  # the same, of GetAllocatableResources
        self._dropped_logged = False  # the held allocation's expiry, logged once per outage
        self._socket: tuple[int, int, int] | None = None  # the socket as the last read found it
        self._failures = 0  # failed reads in a row
        self.next_delay_seconds = 0.0  # the wait before the next read, as last decided
        self._stop: threading.Event | None = None  # the running thread's; None: stopped

    def latest(self) -> KubeletReading | None:
        """The last refresh; None before the first one finished (since the last start).
        After a failure, the allocation of the last answered read while it is at most
        `hold_seconds` old (`held_seconds` its age), none once it is older."""
        latest = self._latest
        if latest is None:
            return None
        reading, answered_at = latest
        if reading.error is None or answered_at is None:
            return reading
        age = max(0.0, self._monotonic() - answered_at)
        if age <= self.hold_seconds:
            return replace(reading, held_seconds=age)
        if not self._dropped_logged:
            self._dropped_logged = True
            log.warning(
                "kubernetes attribution: the kubelet has not answered for %gs "
                "(--kubernetes.allocation-hold): its last allocation is dropped",
                self.hold_seconds,
            )
        return replace(reading, allocations=(), pods=0, allocatable=None, allocatable_error=None)

    def start(self) -> None:
        """Start refreshing now, on a thread of its own; no-op while it runs."""
        if self._stop is not None:
            return
        stop = threading.Event()
        self._stop = stop
        threading.Thread(target=self._run, args=(stop,), name="kubelet", daemon=True).start()

    def stop(self) -> None:
        """End the thread and forget the last reading: an allocation read before the
        collector was turned off is not the node's now. A call in flight ends by its own
        deadline and its answer is dropped; the thread is a daemon."""
        with self._lock:
            if self._stop is not None:
                self._stop.set()
                self._stop = None
            self._latest = self._allocatable = None
            self._failures = 0
            self._logged = ""  # on again, a cause still there is logged again
            self._logged_allocatable = ""

    def refresh(self) -> KubeletReading:
        """Read the kubelet and the log layout once, now."""
        if self._client is None:
            self._client = self._new_client()
        reading = self._read(self._client)
        with self._lock:
            self._keep(reading)
        return self.latest() or reading

    def _new_client(self) -> Client:
        if self._list is not None:
            return Client(self._list, lambda: None, self._list_allocatable)
        from gpu_exporter.sources.kubelet.client import PodResourcesClient

        client = PodResourcesClient(self.socket_path, timeout_seconds=self._timeout_seconds)
        return Client(client.list, client.close, client.allocatable)

    def _read(self, client: Client) -> KubeletReading:
        allocations: tuple[ContainerDevices, ...] = ()
        pods = 0
        error: str | None = None
        allocatable: tuple[AllocatableDevices, ...] | None = None
        allocatable_error: str | None = None
        self._socket = _identity(self.socket_path)
        try:
            allocations, pods = client.list()
        except ImportError as missing:
            error = (
                f"{missing.name or 'grpcio'} is not installed: "
                "pip install 'gpu-exporter[kubernetes]'"
            )
        except Exception as failure:  # KubeletUnavailable, or grpc/protobuf missing
            error = str(failure) or type(failure).__name__
        if error is None and client.allocatable is not None:
            try:
                allocatable = client.allocatable()
            except Exception as failure:  # KubeletUnavailable: an older kubelet, or a gate off
                allocatable_error = str(failure) or type(failure).__name__
        return KubeletReading(
            allocations=allocations,
            pods=pods,
            error=error,
            containers=container_names(self.log_root),
            pod_names=pod_names(self.log_root),
            allocatable=allocatable,
            allocatable_error=allocatable_error,
        )

    def _keep(self, reading: KubeletReading) -> None:
        now = self._monotonic()
        self._log(reading.error)
        if reading.error is None:
            if reading.allocatable is not None:
                self._allocatable = (reading.allocatable, now)
            elif self._allocatable is not None and now - self._allocatable[1] <= self.hold_seconds:
                # GetAllocatableResources failed after List answered: a blip too
                reading = replace(reading, allocatable=self._allocatable[0])
            self._latest = (reading, now)
            self._dropped_logged = False
            self._log_allocatable(reading.allocatable_error)
            self._failures = 0
            self.next_delay_seconds = self.refresh_seconds
            return
        answered = self._latest[1] if self._latest is not None else None
        if self._latest is not None and answered is not None:  # keep its allocation
            last = self._latest[0]
            reading = replace(
                reading,
                allocations=last.allocations,
                pods=last.pods,
                allocatable=last.allocatable,
                allocatable_error=last.allocatable_error,
            )
        self._latest = (reading, answered)
        self._failures += 1
        self.next_delay_seconds = retry_delay(self._failures, self.refresh_seconds, _jitter())

    def _log_allocatable(self, error: str | None) -> None:
        if error == self._logged_allocatable:
            return
        if error is not None:
            log.warning(
                "kubernetes attribution: the replicas the device plugins advertise are "
                "unknown (%s): a time-sliced GPU's weight is 1/n of the containers holding it",
                error,
            )
        elif self._logged_allocatable:
            log.info("kubernetes attribution: the kubelet answers GetAllocatableResources again")
        self._logged_allocatable = error

    def _log(self, error: str | None) -> None:
        if error == self._logged:
            return
        if error is not None:
            log.warning("kubernetes attribution unavailable: %s", error)
        elif self._logged:
            log.info("kubernetes attribution: the kubelet answers again on %s", self.socket_path)
        self._logged = error

    def _run(self, stop: threading.Event) -> None:
        delay = 0.0
        client: Client | None = None
        try:
            while not self._wait(stop, delay):
                started = time.monotonic()
                try:
                    client = client or self._new_client()  # grpcio is loaded here
                    reading = self._read(client)
                    with self._lock:
                        if stop.is_set():
                            break  # stopped during the call: its answer is not wanted
                        self._keep(reading)
                except Exception:  # a bug must not end the thread; the next refresh retries
                    log.exception("kubelet refresh failed")
                    self.next_delay_seconds = self.refresh_seconds
                delay = max(0.0, self.next_delay_seconds - (time.monotonic() - started))
        finally:
            if client is not None:
                client.close()  # the channel goes with the thread; a new one connects afresh

    def _wait(self, stop: threading.Event, delay: float) -> bool:
        """Wait `delay` seconds; True once stopped. After a failure, look at the socket
        every SOCKET_POLL_SECONDS meanwhile, and end the wait when it is a new one (a
        restarted kubelet's): its backoff starts afresh."""
        if self._failures == 0:
            return stop.wait(delay)
        deadline = time.monotonic() + delay
        while (remaining := deadline - time.monotonic()) > 0:
            if stop.wait(min(remaining, SOCKET_POLL_SECONDS)):
                return True
            found = _identity(self.socket_path)
            if found is not None and found != self._socket:
                self._failures = 0
                return False
        return stop.is_set()


def _identity(path: str) -> tuple[int, int, int] | None:
    """The socket file's device, inode and change time; None where there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_ctime_ns)
