"""The exporter's own process metrics (`process_*`), read from /proc.

The same families, names, help and values as prometheus_client's `ProcessCollector`
(a test pins that), without importing prometheus_client on the hot path: its import
costs about 4 MiB of resident memory, which the exporter then carries on every node.
"""

from __future__ import annotations

import os
import resource

from gpu_exporter.metrics.text import Family


class ProcessMetrics:
    """CPU, memory, start time and file descriptors of one process (`self` by default)."""

    def __init__(self, proc: str = "/proc", pid: str = "self") -> None:
        self._dir = os.path.join(proc, pid)
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._pagesize = resource.getpagesize()
        self._btime = _boot_time(proc)

    def families(self) -> list[Family]:
        """The families, in ProcessCollector's order; none where /proc cannot be read."""
        if not self._btime:
            return []
        out: list[Family] = []
        try:
            with open(os.path.join(self._dir, "stat"), "rb") as stat:
                parts = stat.read().split(b")")[-1].split()
            out += [
                _gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", parts[20]),
                _gauge(
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    float(parts[21]) * self._pagesize,
                ),
                _gauge(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    float(parts[19]) / self._ticks + self._btime,
                ),
                Family(
                    "process_cpu_seconds_total",
                    "counter",
                    "Total user and system CPU time spent in seconds.",
                    (),
                    [((), float(parts[11]) / self._ticks + float(parts[12]) / self._ticks)],
                ),
            ]
        except OSError:
            pass
        try:
            max_fds = None
            with open(os.path.join(self._dir, "limits"), "rb") as limits:
                for line in limits:
                    if line.startswith(b"Max open file"):
                        max_fds = float(line.split()[3])
                        break
            open_fds = len(os.listdir(os.path.join(self._dir, "fd")))
            # an int, as ProcessCollector gives it: written "7", not "7.0"
            out.append(_gauge("process_open_fds", "Number of open file descriptors.", open_fds))
            if max_fds is not None:
                out.append(
                    _gauge("process_max_fds", "Maximum number of open file descriptors.", max_fds)
                )
        except OSError:
            pass
        return out


def _gauge(name: str, help_text: str, value: float | bytes) -> Family:
    number = float(value) if isinstance(value, bytes) else value
    return Family(name, "gauge", help_text, (), [((), number)])


def _boot_time(proc: str) -> float:
    """The kernel's boot time (Unix seconds), or 0 when /proc cannot tell."""
    try:
        with open(os.path.join(proc, "stat"), "rb") as stat:
            for line in stat:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0
