"""Host context: busy and iowait counters, CPU count, memory and load from (a fake) psutil."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import psutil
import pytest

from gpu_exporter.sources.host import HostReader

CpuTimes = namedtuple(
    "CpuTimes",
    "user nice system idle iowait irq softirq steal guest guest_nice",
)
Memory = namedtuple("Memory", "total available")


class FakePsutil:
    def __init__(self, **overrides: Any) -> None:
        self.times = CpuTimes(100.0, 5.0, 30.0, 900.0, 12.0, 1.0, 2.0, 0.5, 40.0, 3.0)
        self.cpus: int | None = 8
        self.fail: Exception | None = None
        self.__dict__.update(overrides)

    def cpu_times(self) -> Any:
        if self.fail is not None:
            raise self.fail
        return self.times

    def cpu_count(self, logical: bool = True) -> int | None:
        return self.cpus

    def virtual_memory(self) -> Any:
        return Memory(64 * 2**30, 40 * 2**30)

    def getloadavg(self) -> tuple[float, float, float]:
        return (3.5, 2.0, 1.0)


def test_host_sample_from_psutil() -> None:
    sample = HostReader(FakePsutil())()
    assert sample is not None
    # busy: user, nice, system, irq, softirq, steal; guest time is already inside user
    assert sample.cpu_busy_seconds == pytest.approx(100 + 5 + 30 + 1 + 2 + 0.5)
    assert sample.cpu_iowait_seconds == 12.0
    assert sample.cpus == 8
    assert (sample.memory_total_bytes, sample.memory_available_bytes) == (64 * 2**30, 40 * 2**30)
    assert sample.load1 == 3.5


def test_kernels_without_iowait_leave_that_counter_out() -> None:
    short = namedtuple("short", "user system idle")
    times = short(10.0, 5.0, 100.0)
    sample = HostReader(FakePsutil(times=times))()
    assert sample is not None
    assert sample.cpu_iowait_seconds is None and sample.cpu_busy_seconds == 15.0


def test_a_psutil_failure_leaves_the_host_series_out_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = HostReader(FakePsutil(fail=OSError("no /proc/stat")), monotonic=lambda: 0.0)
    assert reader() is None and reader() is None
    assert len([r for r in caplog.records if "host" in r.getMessage()]) == 1


def test_unknown_cpu_count_is_not_made_up() -> None:
    assert HostReader(FakePsutil(cpus=None))() is None


def test_real_host_reads_plausible_values() -> None:
    sample = HostReader()()
    assert sample is not None
    assert sample.cpus == psutil.cpu_count()
    assert 0 < sample.memory_available_bytes <= sample.memory_total_bytes
    assert sample.cpu_busy_seconds > 0 and sample.load1 >= 0
