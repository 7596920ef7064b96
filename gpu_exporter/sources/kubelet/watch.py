"""The thread that reads the kubelet every few seconds, so neither a sample nor a scrape
ever waits on it: a slow, restarting or vanished kubelet delays only this thread.

`latest()` gives the last `KubeletReading`; the sampler copies it into each Snapshot.
The first failure of each kind is logged once, with its cause; the recovery too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpu_exporter.model import ContainerDevices, KubeletReading
from gpu_exporter.sources.kubelet.logs import DEFAULT_LOG_ROOT, container_names, pod_names

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS = 5.0

ListAllocations = Callable[[], tuple[tuple[ContainerDevices, ...], int]]


class KubeletWatcher:
    """Refreshes the kubelet's allocation and the container names on its own thread."""

    def __init__(
        self,
        socket_path: str,
        *,
        log_root: str = DEFAULT_LOG_ROOT,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        timeout_seconds: float = 5.0,
        list_allocations: ListAllocations | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.log_root = log_root
        self.refresh_seconds = refresh_seconds
        self._timeout_seconds = timeout_seconds
        self._list = list_allocations
        self._latest: KubeletReading | None = None
        self._logged: str | None = ""  # the error last logged ("" : none yet)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def latest(self) -> KubeletReading | None:
        """The last refresh; None before the first one finished."""
        return self._latest

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # a call in flight ends by its own deadline; the thread is a daemon

    def refresh(self) -> KubeletReading:
        """Read the kubelet and the log layout once, now."""
        allocations: tuple[ContainerDevices, ...] = ()
        pods = 0
        error: str | None = None
        try:
            allocations, pods = self._lister()()
        except ImportError as missing:
            error = (
                f"{missing.name or 'grpcio'} is not installed: "
                "pip install 'gpu-exporter[kubernetes]'"
            )
        except Exception as failure:  # KubeletUnavailable, or grpc/protobuf missing
            error = str(failure) or type(failure).__name__
        reading = KubeletReading(
            allocations=allocations,
            pods=pods,
            error=error,
            containers=container_names(self.log_root),
            pod_names=pod_names(self.log_root),
        )
        self._latest = reading
        self._log(error)
        return reading

    def _lister(self) -> ListAllocations:
        if self._list is None:
            from gpu_exporter.sources.kubelet.client import PodResourcesClient

            client = PodResourcesClient(self.socket_path, timeout_seconds=self._timeout_seconds)
            self._list = client.list
        return self._list

    def _log(self, error: str | None) -> None:
        if error == self._logged:
            return
        if error is not None:
            log.warning("kubernetes attribution unavailable: %s", error)
        elif self._logged:
            log.info("kubernetes attribution: the kubelet answers again on %s", self.socket_path)
        self._logged = error

    def _run(self) -> None:
        delay = 0.0 if self._latest is None else self.refresh_seconds
        while not self._stop.wait(delay):
            started = time.monotonic()
            try:
                self.refresh()
            except Exception:  # a bug must not end the thread; the next refresh retries
                log.exception("kubelet refresh failed")
            delay = max(0.0, self.refresh_seconds - (time.monotonic() - started))
