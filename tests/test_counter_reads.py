"""The cumulative /proc counters are read only when someone will see them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.model import HostSample
from gpu_exporter.sampling.counter_reads import MAX_AGE_SECONDS, CounterReads
from gpu_exporter.sampling.history import HISTORY_CADENCES
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock
from tests.test_processes import TICKS, FakeHost, FakeProc, attributor, gpu, host, raw

__all__ = ["host"]  # the fake /proc fixture


def reads_over(reads: CounterReads, clock: FakeClock, collector: str, samples: int) -> list[int]:
    """The samples (1 s apart) in which `collector`'s counters are read."""
    out = []
    for i in range(samples):
        if reads.due(collector, 1.0):
            out.append(i)
        clock.now += 1.0
    return out


def test_unseen_samples_do_not_read_the_counters_but_a_minute_is_the_most_they_wait() -> None:
    clock = FakeClock()
    reads = CounterReads(lambda within: False, {}, monotonic=clock.monotonic)
    assert reads_over(reads, clock, "process", 130) == [0, 60, 120]
    assert MAX_AGE_SECONDS == 60.0


def test_a_sample_before_an_expected_scrape_reads_the_counters() -> None:
    clock = FakeClock()
    start = clock.now
    reads = CounterReads(  # a scraper every 15 s, next at 15 s
        lambda within: (clock.now - start) % 15 == 14, {}, monotonic=clock.monotonic
    )
    assert reads_over(reads, clock, "process", 46) == [0, 14, 29, 44]


def test_the_live_page_history_reads_host_cpu_every_sample_and_processes_every_10_s() -> None:
    clock = FakeClock()
    reads = CounterReads(lambda within: False, HISTORY_CADENCES, monotonic=clock.monotonic)
    assert reads_over(reads, clock, "host", 5) == [0, 1, 2, 3, 4]
    assert reads_over(reads, clock, "process", 25) == [0, 10, 20]


def test_process_cpu_between_reads_is_the_last_read_and_a_new_worker_counts_whole(
    host: FakeHost,
) -> None:
    host.add(FakeProc(10, 1, "python", (100, 0, 0, 0)))
    attribute = attributor(host)
    (p,) = attribute({0: raw([gpu(10)])})[0].processes
    assert p.cpu_seconds == pytest.approx(100 / TICKS)
    host.add(FakeProc(10, 1, "python", (150, 0, 0, 0)))
    host.add(FakeProc(11, 10, "pt_data_worker", (70, 0, 0, 0)))  # a worker starts
    (p,) = attribute({0: raw([gpu(10)])}, fresh=False)[0].processes
    assert (p.cpu_seconds, p.workers) == (pytest.approx(100 / TICKS), 0)  # not read
    (p,) = attribute({0: raw([gpu(10)])})[0].processes
    assert (p.cpu_seconds, p.workers) == (pytest.approx((150 + 70) / TICKS), 1)


def test_a_new_gpu_process_is_attributed_in_the_sample_that_first_lists_it(
    host: FakeHost,
) -> None:
    host.add(FakeProc(10, 1, "python", (100, 0, 0, 0)))
    attribute = attributor(host)
    attribute({0: raw([gpu(10)])})
    host.add(FakeProc(20, 1, "train", (40, 0, 0, 0), user="bob"))
    out = attribute({0: raw([gpu(10), gpu(20)])}, fresh=False)[0].processes
    new = next(p for p in out if p.pid == "20")
    assert (new.process, new.user, new.cpu_seconds) == ("train", "bob", pytest.approx(0.4))


def test_a_sample_not_due_carries_the_last_host_values_read(tmp_path: Path) -> None:
    clock = FakeClock()
    calls: list[float] = []

    def read_host() -> HostSample:
        calls.append(clock.now)
        return HostSample(float(len(calls)), 0.0, 2, 100, 50, 0.1)

    due = [False, True]  # the first sample always reads
    sampler = Sampler(
        SimulatedBackend(1, clock=clock.wall),
        interval_seconds=1.0,
        timeout_seconds=2.0,
        collectors=frozenset({"host"}),
        read_host=read_host,
        counters_due=lambda collector, interval: due.pop(0),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    hosts = []
    for _ in range(3):
        snapshot = sampler.sample_once()
        assert snapshot.host is not None and snapshot.stages["host"].success
        hosts.append(snapshot.host.cpu_busy_seconds)
        clock.now += 1.0
    sampler.stop(0)
    assert hosts == [1.0, 1.0, 2.0] and len(calls) == 2
