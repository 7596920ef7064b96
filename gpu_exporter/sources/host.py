"""Host context next to the GPUs (collector `host`): CPU, memory and load via psutil.

With the process CPU counters this shows an input pipeline that cannot keep the GPU
fed. Turn it off with `--no-collector.host` where node_exporter already runs.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Any

import psutil

from gpu_exporter.model import HostSample

log = logging.getLogger(__name__)

# /proc/stat fields that are not busy time: idle, iowait, and guest time (already in user)
_NOT_BUSY = frozenset({"idle", "iowait", "guest", "guest_nice"})
LOG_EVERY_SECONDS = 300.0


class HostReader:
    """Reads one `HostSample` per call; None (series left out) when psutil fails."""

    def __init__(
        self,
        psutil_module: ModuleType | Any = psutil,
        monotonic: Any = time.monotonic,
    ) -> None:
        self._psutil = psutil_module
        self._monotonic = monotonic
        self._logged_at: float | None = None

    def __call__(self) -> HostSample | None:
        ps = self._psutil
        try:
            times = ps.cpu_times()
            cpus = ps.cpu_count(logical=True)
            memory = ps.virtual_memory()
            load1 = float(ps.getloadavg()[0])
        except (OSError, AttributeError, RuntimeError) as error:
            self._log_failure(error)
            return None
        if cpus is None:  # psutil could not tell: no count is better than a made-up one
            self._log_failure(RuntimeError("CPU count unknown"))
            return None
        busy = sum(float(value) for name, value in times._asdict().items() if name not in _NOT_BUSY)
        iowait = getattr(times, "iowait", None)
        return HostSample(
            cpu_busy_seconds=busy,
            cpu_iowait_seconds=float(iowait) if iowait is not None else None,
            cpus=int(cpus),
            memory_total_bytes=int(memory.total),
            memory_available_bytes=int(memory.available),
            load1=load1,
        )

    def _log_failure(self, error: Exception) -> None:
        now = self._monotonic()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY_SECONDS:
            self._logged_at = now
            log.warning("reading host CPU and memory failed", extra={"error": str(error)})
