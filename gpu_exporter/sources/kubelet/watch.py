"""The thread that reads the kubelet every few seconds, so neither a sample nor a scrape
ever waits on it: a slow, restarting or vanished kubelet delays only this thread.

`latest()` gives the last `KubeletReading`; the sampler copies it into each Snapshot.
The first failure of each kind is logged once, with its cause; the recovery too. After a
failure the next call waits longer each time (`retry_delay`: doubling from the refresh
interval, capped at a minute, with jitter), on a new channel. `stop()` ends the thread and
forgets the last reading; `start()` again begins afresh (a SIGHUP that turns the
collector off and on).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from gpu_exporter.model import ContainerDevices, KubeletReading
from gpu_exporter.sources.kubelet.logs import DEFAULT_LOG_ROOT, container_names, pod_names

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS = 5.0
DEFAULT_TIMEOUT_SECONDS = 5.0  # the longest one List call may take: then it "did not answer"
MAX_RETRY_SECONDS = 60.0  # the longest wait after failures, unless the refresh is longer
RETRY_JITTER = 0.2  # each wait is drawn within +-20%, so nodes that failed together spread

ListAllocations = Callable[[], tuple[tuple[ContainerDevices, ...], int]]


class Client(NamedTuple):
    """One connection's List call (which raises on failure) and its close."""

    list: ListAllocations
    close: Callable[[], None]


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
        list_allocations: ListAllocations | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.log_root = log_root
        self.refresh_seconds = refresh_seconds
        self._timeout_seconds = timeout_seconds
        self._list = list_allocations  # for tests; else each thread has a client of its own
        self._client: Client | None = None  # refresh()'s, kept between calls
        self._lock = threading.Lock()  # a stopped thread's late answer is dropped
        self._latest: KubeletReading | None = None
        self._logged: str | None = ""  # the error last logged ("" : none yet)
        self._failures = 0  # failed reads in a row
        self.next_delay_seconds = 0.0  # the wait before the next read, as last decided
        self._stop: threading.Event | None = None  # the running thread's; None: stopped

    def latest(self) -> KubeletReading | None:
        """The last refresh; None before the first one finished (since the last start)."""
        return self._latest

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
            self._latest = None
            self._failures = 0
            self._logged = ""  # on again, a cause still there is logged again

    def refresh(self) -> KubeletReading:
        """Read the kubelet and the log layout once, now."""
        if self._client is None:
            self._client = self._new_client()
        reading = self._read(self._client)
        with self._lock:
            self._keep(reading)
        return reading

    def _new_client(self) -> Client:
        if self._list is not None:
            return Client(self._list, lambda: None)
        from gpu_exporter.sources.kubelet.client import PodResourcesClient

        client = PodResourcesClient(self.socket_path, timeout_seconds=self._timeout_seconds)
        return Client(client.list, client.close)

    def _read(self, client: Client) -> KubeletReading:
        allocations: tuple[ContainerDevices, ...] = ()
        pods = 0
        error: str | None = None
        try:
            allocations, pods = client.list()
        except ImportError as missing:
            error = (
                f"{missing.name or 'grpcio'} is not installed: "
                "pip install 'gpu-exporter[kubernetes]'"
            )
        except Exception as failure:  # KubeletUnavailable, or grpc/protobuf missing
            error = str(failure) or type(failure).__name__
        return KubeletReading(
            allocations=allocations,
            pods=pods,
            error=error,
            containers=container_names(self.log_root),
            pod_names=pod_names(self.log_root),
        )

    def _keep(self, reading: KubeletReading) -> None:
        self._latest = reading
        self._log(reading.error)
        if reading.error is None:
            self._failures = 0
            self.next_delay_seconds = self.refresh_seconds
        else:
            self._failures += 1
            self.next_delay_seconds = retry_delay(self._failures, self.refresh_seconds, _jitter())

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
            while not stop.wait(delay):
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
