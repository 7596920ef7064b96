"""Host context next to the GPUs (collector `host`): CPU, memory and load, read from /proc.

With the process CPU counters this shows an input pipeline that cannot keep the GPU
fed. Turn it off with `--no-collector.host` where node_exporter already runs.

The CPU counters are the first line of `/proc/stat` and the memory is `MemTotal` and
`MemAvailable` of `/proc/meminfo`, the same files and fields node_exporter and psutil
read, in their units: CPU seconds (the kernel's ticks over `SC_CLK_TCK`) and bytes.

Both files are kept open and re-read with one `pread` at offset 0, which the kernel
answers with fresh contents: a third of the system calls of open, read and close, and
the kernel's buffer for the file is not allocated again each second (benchmarks/README.md).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from gpu_exporter.model import HostSample

log = logging.getLogger(__name__)

# The fields of the `cpu` line of /proc/stat, in order (proc(5)); older kernels stop early.
CPU_FIELDS: tuple[str, ...] = ("user", "nice", "system", "idle", "iowait", "irq", "softirq")
CPU_FIELDS += ("steal", "guest", "guest_nice")
# not busy time: idle, iowait, and guest time (already counted in user and nice)
_NOT_BUSY = frozenset({"idle", "iowait", "guest", "guest_nice"})
LOG_EVERY_SECONDS = 300.0
STAT_HEAD_BYTES = 1024  # the cpu line: ten counters of at most 20 digits
MEMINFO_HEAD_BYTES = 4096  # MemTotal and MemAvailable are its first and third lines


class KeptFile:
    """A file under /proc kept open and read from its start with one `pread`; opened
    again after an error (the error is raised: the caller leaves its series out)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def head(self, size: int) -> bytes:
        """At most `size` bytes from the file's start, read now."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(self._fd, size, 0)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class HostReader:
    """Reads one `HostSample` per call; None (series left out) when a file cannot be read.

    `proc_root`, `cpu_count`, `loadavg` and `clock_ticks` are seams for tests."""

    def __init__(
        self,
        proc_root: str = "/proc",
        *,
        cpu_count: Callable[[], int | None] = os.cpu_count,
        loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg,
        clock_ticks: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stat = KeptFile(f"{proc_root}/stat")
        self._meminfo = KeptFile(f"{proc_root}/meminfo")
        self._cpu_count = cpu_count
        self._loadavg = loadavg
        self._ticks = clock_ticks if clock_ticks is not None else os.sysconf("SC_CLK_TCK")
        self._monotonic = monotonic
        self._logged_at: float | None = None

    def __call__(self) -> HostSample | None:
        try:
            times = self._cpu_seconds()
            total, available = self._memory_bytes()
            load1 = float(self._loadavg()[0])
        except (OSError, ValueError) as error:
            self._log_failure(error)
            return None
        cpus = self._cpu_count()
        if cpus is None:  # the count is unknown: no count is better than a made-up one
            self._log_failure(RuntimeError("CPU count unknown"))
            return None
        return HostSample(
            cpu_busy_seconds=sum(v for name, v in times.items() if name not in _NOT_BUSY),
            cpu_iowait_seconds=times.get("iowait"),
            cpus=int(cpus),
            memory_total_bytes=total,
            memory_available_bytes=available,
            load1=load1,
        )

    def _cpu_seconds(self) -> dict[str, float]:
        """The host's CPU seconds by mode, from the first (all CPUs) line of /proc/stat."""
        line, newline, _ = self._stat.head(STAT_HEAD_BYTES).partition(b"\n")
        first = line.split()
        if not newline or not first or first[0] != b"cpu" or len(first) < 5:
            raise ValueError("/proc/stat has no cpu line")
        return {name: int(v) / self._ticks for name, v in zip(CPU_FIELDS, first[1:], strict=False)}

    def _memory_bytes(self) -> tuple[int, int]:
        """(MemTotal, MemAvailable) in bytes; ValueError on a kernel without MemAvailable
        (before 3.14): an estimate would be a made-up value."""
        fields: dict[bytes, int] = {}
        for line in self._meminfo.head(MEMINFO_HEAD_BYTES).splitlines():
            key, _, rest = line.partition(b":")
            if key in (b"MemTotal", b"MemAvailable"):
                fields[key] = int(rest.split()[0]) * 1024  # the file counts kB
                if len(fields) == 2:
                    break
        if len(fields) < 2:
            raise ValueError("/proc/meminfo has no MemTotal or no MemAvailable")
        return fields[b"MemTotal"], fields[b"MemAvailable"]

    def _log_failure(self, error: Exception) -> None:
        now = self._monotonic()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY_SECONDS:
            self._logged_at = now
            log.warning("reading host CPU and memory failed", extra={"error": str(error)})
