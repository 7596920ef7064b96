"""Steps of the wall clock under the sampler (issue 48 item 4): the driver stamps its
utilization samples with the CPU's wall clock, the exporter asks for the entries newer
than the last it read. A step back once left every read empty for the step's length
(busy time counted uncovered, processes idle, their SM seconds lost); a step forward
counted the step as uncovered time. Driven through the real sampler and pynvml wrappers
on the tests' fake library and a fake clock whose wall time is stepped by minutes, at
the default 5 s interval.
"""

from __future__ import annotations

import pynvml as M  # noqa: N812 (nvml.h's names)
import pytest

from gpu_exporter.attribution.processes import ProcessAttributor
from gpu_exporter.model import HostProcess, Snapshot, UtilizationSample
from gpu_exporter.sampling.busy import BusyCounter
from gpu_exporter.sampling.clock_steps import WallClockSteps
from gpu_exporter.sampling.sampler import Sampler
from tests.support.clock import FakeClock
from tests.support.fake_host import SAMPLE_PERIOD_US
from tests.support.fake_nvml import FakeGpu, Install, h100
from tests.support.fake_sampling import started

INTERVAL = 5.0
ENTRIES = 100  # an H100's buffers: 100 entries of 1/6 s
PID = 4242
COLLECTORS = frozenset({"utilization", "memory", "process"})


class WallStampedDriver:
    """The driver's buffers as a real one fills them: an entry every 1/6 s, stamped with
    the wall clock (which steps), kept in the order written, the last 100."""

    def __init__(self, gpu: FakeGpu, clock: FakeClock) -> None:
        self.gpu, self.clock = gpu, clock
        self.written_to = clock.monotonic()  # monotonic time of the last entry written
        gpu.process_samples = []
        for kind in (M.NVML_GPU_UTILIZATION_SAMPLES, M.NVML_MEMORY_UTILIZATION_SAMPLES):
            gpu.samples[kind] = []

    def run_until_now(self) -> None:
        """Entries for the time since the last ones, at 50% busy, the process's too."""
        period = SAMPLE_PERIOD_US / 1e6
        offset = self.clock.wall() - self.clock.monotonic()  # the wall clock now
        while self.written_to + period <= self.clock.monotonic():
            self.written_to += period
            ts = round((self.written_to + offset) * 1e6)
            for ring in self.gpu.samples.values():
                ring.append((ts, 50))
                del ring[:-ENTRIES]
            assert self.gpu.process_samples is not None
            self.gpu.process_samples.append((PID, ts, 50, 10))
            del self.gpu.process_samples[:-ENTRIES]


def sm_seconds(snapshot: Snapshot) -> float:
    attribution = snapshot.devices[0].attribution
    assert attribution is not None
    (process,) = attribution.processes
    assert process.sm_seconds is not None
    return process.sm_seconds


def test_busy_and_process_seconds_follow_the_driver_across_steps_of_the_wall_clock(
    install: Install,
) -> None:
    gpu = h100()
    gpu.compute_processes = [(PID, 1 << 30)]
    _lib, backend, clock = started(install, gpu)
    sampler = Sampler(
        backend,
        interval_seconds=INTERVAL,
        # the read deadline is real time: 2 loaded cores once kept the fake driver's
        # reads past 5 s ("GPU down"), and this test is not about deadlines
        timeout_seconds=60.0,
        collectors=COLLECTORS,
        attribute_processes=ProcessAttributor(lookup=lambda pid: HostProcess(process="python")),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    driver = WallStampedDriver(gpu, clock)
    for _ in range(4):  # the first reads set the cursors and measure the span
        clock.now += INTERVAL
        driver.run_until_now()
        first = sampler.sample_once()
    busy0, uncovered0 = first.devices[0].busy_seconds, first.devices[0].busy_uncovered_seconds
    sm0 = sm_seconds(first)
    assert busy0 is not None and uncovered0 is not None
    elapsed = 0.0
    for step in (-300.0, 600.0, -3600.0, 120.0):  # back 5 min, on 10, back an hour, on 2
        clock.step(step)
        for _ in range(12):  # a minute at the default interval
            clock.now += INTERVAL
            elapsed += INTERVAL
            driver.run_until_now()
            snapshot = sampler.sample_once()
            device = snapshot.devices[0]
            attribution = device.attribution
            assert attribution is not None
            # the process's utilization gauge: its newest entry, never "idle" for the step
            assert attribution.processes[0].sm_ratio == pytest.approx(0.5), step
    sampler.stop(0)
    busy, uncovered = device.busy_seconds, device.busy_uncovered_seconds
    assert busy is not None and uncovered is not None
    assert uncovered == uncovered0  # a step is no gap in the driver's entries
    span = (ENTRIES - 1) * SAMPLE_PERIOD_US / 1e6
    # each entry counted once: within one read's worth (the buffers are read every ~10 s)
    assert 0.5 * (elapsed - 0.75 * span - INTERVAL) <= busy - busy0 <= 0.5 * (elapsed + 1)
    assert sm_seconds(snapshot) - sm0 == pytest.approx(0.5 * elapsed, abs=0.5 * INTERVAL)


def test_a_driver_whose_timestamps_do_not_step_counts_nothing_twice() -> None:
    """Where the driver's timestamps do not follow the wall clock, a step changes
    nothing: the whole buffer is read once, and what was counted is not counted again."""
    period = SAMPLE_PERIOD_US

    def entries(first: int, last: int) -> list[UtilizationSample]:
        return [UtilizationSample(n * period, 1.0) for n in range(first, last + 1)]

    for step in (-300.0, 300.0):
        counter = BusyCounter()
        counter.add_samples(entries(1, 30), 5.0)  # sets the cursor
        counter.add_samples(entries(31, 60), 10.0)  # 30 entries of 1/6 s, all busy
        assert counter.seconds == pytest.approx(5.0, abs=0.01)
        counter.wall_stepped(step)
        assert counter.cursor_us == 0  # the whole buffer, once
        counter.add_samples(entries(1, 90), 15.0)  # the last 100 entries (90 written)
        assert counter.seconds == pytest.approx(10.0, abs=0.01)  # 30 more, not 90
        assert counter.uncovered_seconds == 0.0
        assert counter.cursor_us == 90 * period


def test_slewing_is_no_step_and_a_step_is_measured_both_ways() -> None:
    steps = WallClockSteps()
    assert steps.step(1000.0, 10.0) == 0.0  # the first call
    assert steps.step(1005.0025, 15.0) == 0.0  # NTP slewing: 0.5 ms a second
    assert steps.step(710.0, 20.0) == pytest.approx(-300.0025)
    assert steps.step(1325.0, 25.0) == pytest.approx(610.0)
