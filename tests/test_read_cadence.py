"""Each value read as often as it is worth (issue 42): the counter fields on a cadence
their measured cost sets, at least every 30 s; the sample buffers before they wrap while
the GPU is in use, and not while it holds no process; nothing else later than before.

Driven through the real sampler, the real pynvml wrappers and the tests' fake library on
a fake clock (`tests/support/fake_sampling.py`), one-second intervals.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml as M  # noqa: N812 (nvml.h's names)
import pytest

from gpu_exporter.attribution.processes import ProcessAttributor
from gpu_exporter.metrics.catalogue import METRICS, READ
from gpu_exporter.model import HostProcess, Snapshot
from gpu_exporter.sampling.buffer_reads import BufferRead, buffer_read
from gpu_exporter.sampling.busy import BusyCounter
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.nvml import PynvmlBackend
from gpu_exporter.sources.nvml.counter_fields import (
    MAX_AGE_SECONDS,
    RETRY_MAX_SECONDS,
    CounterCadence,
)
from tests.support.clock import FakeClock
from tests.support.exporter import fake_library_env, start_exporter, values
from tests.support.fake_host import SAMPLE_PERIOD_US
from tests.support.fake_nvml import FakeGpu, FakeNvmlLib, Install, h100
from tests.support.fake_sampling import one_second_sampler, started

COLLECTORS = frozenset({"utilization", "memory", "power", "ecc", "pcie", "clocks", "process"})
H200_COUNTERS_SECONDS = 5.66e-3  # energy 3 ms, 10 PCIe errors 1.75, clock events 0.7, replay 0.2
ENERGY = M.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
BUFFER_ENTRIES = 100  # an H100's buffers: 100 entries of 1/6 s


# The counters' cadence ---------------------------------------------------------------


def test_counters_that_cost_milliseconds_are_read_every_30_seconds_not_every_interval() -> None:
    cadence = CounterCadence()
    assert cadence.due(0.0, 1.0)  # never read: now
    cadence.note(0.2e-3 + H200_COUNTERS_SECONDS, with_counters=True)
    cadence.read(0.0, {"energy": 1.0}, ["energy"], set())
    cadence.note(0.2e-3, with_counters=False)
    assert cadence.cost_seconds == pytest.approx(H200_COUNTERS_SECONDS)
    assert cadence.period_seconds == MAX_AGE_SECONDS  # 57 s by cost, capped at 30
    due = []
    for t in range(1, 61):
        if cadence.due(float(t), 1.0):
            due.append(t)
            cadence.read(float(t), {"e": 1.0}, ["e"], set())
    assert due == [30, 60]  # never older than 30 s: read when the next would be later


def test_cheap_counters_are_read_every_interval_and_a_preempted_call_does_not_slow_them() -> None:
    cadence = CounterCadence()
    cadence.note(0.25e-3, with_counters=True)
    cadence.read(0.0, {"e": 1.0}, ["e"], set())
    cadence.note(0.2e-3, with_counters=False)
    cadence.note(25e-3, with_counters=True)  # the thread was preempted inside the call
    assert cadence.cost_seconds == pytest.approx(0.05e-3)  # the least of each kind
    assert cadence.period_seconds == pytest.approx(0.5)
    assert cadence.due(1.0, 1.0)


def test_a_counter_that_failed_is_retried_alone_and_is_absent() -> None:
    cadence = CounterCadence()
    cadence.note(10e-3, with_counters=True)
    keys = ["energy", "ecc"]
    assert cadence.asked(0.0, 1.0, keys) == keys  # never read: all of them
    cadence.read(0.0, {"power": 1.0, "ecc": 2.0}, keys, set(), step_seconds=1.0)  # energy failed
    assert cadence.values == {"ecc": 2.0}  # absent, never a stale or made-up value
    assert not cadence.due(1.0, 1.0)  # the counter that answered keeps its cadence
    assert cadence.asked(1.0, 1.0, keys) == ["energy"]  # the failed one alone, at once
    tries = [0]
    ecc_reads = 0
    for t in range(1, 2000):  # as the backend asks, one-second intervals
        group = cadence.due(float(t), 1.0)
        asked = cadence.asked(float(t), 1.0, keys)
        tries += [t] if "energy" in asked else []
        ecc_reads += "ecc" in asked
        answers = {"power": 1.0, "ecc": 2.0} if "ecc" in asked else {"power": 1.0}
        if group or asked:
            cadence.read(float(t), answers, asked, set(), step_seconds=1.0, group=group)
    assert ecc_reads == 2000 // 30  # every 30 s, as its cost says
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps[:9] == [1, 2, 4, 8, 16, 32, 64, 128, 256]  # twice as long each time
    assert max(gaps) == RETRY_MAX_SECONDS  # and at least every ten minutes
    assert cadence.failing() == {"energy": len(tries)}
    cadence.read(2000.0, {"power": 1.0, "energy": 5.0}, ["energy"], set(), group=False)
    assert cadence.values == {"ecc": 2.0, "energy": 5.0} and cadence.failing() == {}


def test_a_counter_that_fails_after_good_intervals_is_absent_and_back_once_it_answers() -> None:
    """After the first interval, one where every counter answers as at the last is read
    in one pass (`CounterCadence.read`). A counter that fails after many of those is
    absent and retried alone; one unsupported is absent, and not failing; one no longer
    wanted is not served; each is back with its first answer."""
    cadence = CounterCadence()
    keys = ["energy", "ecc", "replay"]
    unsupported: set[str] = set()

    def interval(t: int, answered: list[str], wanted: list[str] = keys) -> list[str]:
        asked = cadence.asked(float(t), 1.0, wanted, group=True)  # cheap: due every interval
        answers = {"power": 1.0, **{k: t * (1.0 + keys.index(k)) for k in answered if k in asked}}
        cadence.read(float(t), answers, asked, unsupported, step_seconds=1.0)
        return asked

    for t in range(10):
        assert interval(t, keys) == keys
        assert cadence.values == {"energy": t, "ecc": 2 * t, "replay": 3 * t}
    interval(10, ["energy", "ecc"])  # replay fails
    assert cadence.values == {"energy": 10, "ecc": 20} and cadence.failing() == {"replay": 1}
    assert interval(11, ["energy", "ecc"]) == keys  # retried at the next interval
    assert cadence.failing() == {"replay": 2}
    assert interval(12, keys) == ["energy", "ecc"]  # then two intervals later
    assert cadence.values == {"energy": 12, "ecc": 24}
    assert interval(13, keys) == keys
    assert cadence.values == {"energy": 13, "ecc": 26, "replay": 39} and cadence.failing() == {}
    assert interval(14, keys) == keys
    assert cadence.values == {"energy": 14, "ecc": 28, "replay": 42}
    unsupported.add("ecc")  # answered NOT_SUPPORTED: the backend no longer asks the driver
    for t in (15, 16):
        assert interval(t, ["energy", "replay"]) == keys
        assert cadence.values == {"energy": t, "replay": 3 * t} and cadence.failing() == {}
    interval(17, keys)  # an answer is served, whatever the device said before
    assert cadence.values == {"energy": 17, "ecc": 34, "replay": 51}
    unsupported.clear()  # forgotten (`Device.forget`), and answered again
    interval(18, keys)
    assert cadence.values == {"energy": 18, "ecc": 36, "replay": 54}
    unsupported.clear()
    interval(19, ["energy", "replay"])  # neither answered nor unsupported: failed
    assert cadence.values == {"energy": 19, "replay": 57} and cadence.failing() == {"ecc": 1}
    interval(20, keys)
    assert cadence.values == {"energy": 20, "ecc": 40, "replay": 60} and cadence.failing() == {}
    assert interval(21, keys, ["energy", "replay"]) == ["energy", "replay"]  # ecc turned off
    assert cadence.values == {"energy": 21, "replay": 63}
    assert interval(22, keys) == keys
    assert cadence.values == {"energy": 22, "ecc": 44, "replay": 66}
    cadence.forget()  # the call failed as a whole
    assert cadence.values == {} and cadence.asked(23.0, 1.0, keys) == keys
    interval(23, ["ecc"])
    assert cadence.values == {"ecc": 46} and cadence.failing() == {"energy": 1, "replay": 1}


class PlainCadence(CounterCadence):
    """The cadence without its shortcuts: each counter looked at, one by one."""

    def asked(
        self, now: float, step_seconds: float, keys: Any, *, group: bool | None = None
    ) -> list[str]:
        group = self.due(now, step_seconds) if group is None else group
        self._keys = frozenset(keys)
        retry = self._retry_at
        return [
            k
            for k in keys
            if (k not in retry and group) or (k in retry and now >= retry[k] - step_seconds / 2)
        ]

    def _answered_as_before(self, *_: Any) -> None:
        return None


@pytest.mark.parametrize("seed", range(4))
def test_the_counters_shortcuts_read_what_looking_at_each_counter_reads(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Counters answering, failing, turning unsupported or no longer wanted, at random
    and for a while (as on a GPU), the cadence due or not, now and then a call failing as
    a whole: the same counters asked, served, failing and retried as one by one."""
    rng = random.Random(seed)
    universe = [f"counter{i}" for i in range(8)]
    fast, plain = CounterCadence(), PlainCadence()
    state = dict.fromkeys(universe, "answers")  # each counter's behaviour, for a while
    wanted = list(universe)
    elsewhere: list[str] = []
    unsupported: set[str] = set()
    shortcuts = failing = 0
    as_before = fast._answered_as_before

    def counted(*args: Any) -> dict[str, float] | None:
        nonlocal shortcuts
        out = as_before(*args)
        shortcuts += out is not None
        return out

    monkeypatch.setattr(fast, "_answered_as_before", counted)
    for t in range(3000):
        now = t * 1.0
        if rng.random() < 0.01:
            wanted = [k for k in universe if rng.random() < 0.8]  # collectors changed
            elsewhere = [k for k in universe if k not in wanted and rng.random() < 0.5]
        for key in universe:
            if rng.random() < 0.01:
                state[key] = rng.choice(["answers"] * 6 + ["fails", "unsupported"])
        if rng.random() < 0.005:
            unsupported.clear()  # the device forgot them: asked again
        group = rng.random() < 0.8
        asked = fast.asked(now, 1.0, wanted, group=group)
        assert asked == plain.asked(now, 1.0, wanted, group=group)
        if rng.random() < 0.005:  # the call failed as a whole
            fast.forget()
            plain.forget()
            continue
        answers = {"power": now}
        for key in elsewhere:  # a counter no longer wanted, its key read some other way
            answers[key] = -now
        for key in asked:
            if key in unsupported:
                continue  # not asked of the driver (`fields.read_fields`)
            if state[key] == "answers":
                answers[key] = now + universe.index(key)
            elif state[key] == "unsupported":
                unsupported.add(key)
        if group or asked:
            for cadence in (fast, plain):
                cadence.read(now, answers, asked, unsupported, step_seconds=1.0, group=group)
        assert list(fast.values.items()) == list(plain.values.items())  # in the same order
        assert fast.failing() == plain.failing() and fast.read_at == plain.read_at
        failing += bool(plain.failing())
    assert shortcuts > 300 and failing > 300  # each way taken, hundreds of times


class ChargingLib(FakeNvmlLib):
    """The fake library charging the H200's price of the counters: a field-values call
    that asks for the energy counter takes 5.7 ms longer."""

    def c_nvmlDeviceGetFieldValues(self, handle: Any, count: Any, ptr: Any) -> int:  # noqa: N802
        if any(int(v.fieldId) == ENERGY for v in ptr._obj[: count.value]):
            time.sleep(H200_COUNTERS_SECONDS)
        return super().c_nvmlDeviceGetFieldValues(handle, count, ptr)


def test_one_failing_counter_field_does_not_make_the_others_read_every_interval(
    install: Install,
) -> None:
    """Issue 48: a field answering NVML_ERROR_UNKNOWN in its entry on every call (some
    boards and hypervisors) once made energy, PCIe and clocks-event counters be read
    every interval."""
    gpu = h100()
    replay = M.NVML_FI_DEV_PCIE_REPLAY_COUNTER
    gpu.field_errors[replay] = M.NVML_ERROR_UNKNOWN
    lib = install(ChargingLib([gpu]))
    clock = FakeClock()
    backend = PynvmlBackend(monotonic=clock.monotonic)
    backend.init()
    sampler = one_second_sampler(backend, clock, COLLECTORS)
    energy_asked: list[int] = []
    replay_asked: list[int] = []
    served: list[float | None] = []
    for t in range(300):
        calls = len(lib.field_requests)
        snapshot = sampler.sample_once()
        asked = [f for r in lib.field_requests[calls:] for f in r]
        if ENERGY in asked:
            energy_asked.append(t)
        if replay in asked:
            replay_asked.append(t)
        served.append(energy_joules(snapshot))
        reading = snapshot.devices[0].reading
        assert reading is not None and reading.pcie is not None
        assert reading.pcie.replay_errors is None  # absent while it fails
        clock.now += 1
    sampler.stop(0)
    assert None not in served  # energy served every interval, from its last read
    assert len(energy_asked) <= 300 / MAX_AGE_SECONDS + 2  # every 30 s, not every interval
    assert all(b - a <= MAX_AGE_SECONDS for a, b in itertools.pairwise(energy_asked))
    # the failing field: asked alone, ever more rarely
    assert len(replay_asked) <= 10
    gaps = [b - a for a, b in itertools.pairwise(replay_asked)]
    assert gaps == sorted(gaps) and gaps[-1] >= 64


def test_the_exporter_serves_the_counter_it_read_until_the_next_read(install: Install) -> None:
    gpu = h100()
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, COLLECTORS)
    energy = M.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    served: list[float | None] = []
    asked: list[bool] = []
    for _ in range(62):
        gpu.fields[energy] += 1000  # one joule a second
        calls = len(lib.field_requests)
        snapshot = sampler.sample_once()
        asked.append(any(energy in r for r in lib.field_requests[calls:]))
        served.append(energy_joules(snapshot))
        clock.now += 1
    sampler.stop(0)
    reads = [t for t, a in enumerate(asked) if a]
    assert reads[0] == 0 and len(reads) >= 3  # at least every 30 s
    assert all(b - a <= MAX_AGE_SECONDS for a, b in itertools.pairwise(reads))
    assert served == sorted(served)  # a counter never runs backwards
    for t, value in enumerate(served):  # the driver's own value when it was last read
        last = max(r for r in reads if r <= t)
        assert value == pytest.approx(123_456.789 + last + 1)


def energy_joules(snapshot: Snapshot) -> float | None:
    reading = snapshot.devices[0].reading
    assert reading is not None and reading.power is not None
    return reading.power.energy_joules


# The sample buffers --------------------------------------------------------------------


def fill(gpu: FakeGpu, clock: FakeClock, percent: int | Callable[[int], int]) -> None:
    """The GPU's buffers up to the clock's now: the last 100 entries of 1/6 s, each the
    given percent from now on (older entries keep theirs); `percent` may be a function of
    the entry's timestamp (us), and the instantaneous reading is then 0."""
    now_us = int(clock.monotonic() * 1e6) + BUFFER_ENTRIES * SAMPLE_PERIOD_US
    newest = now_us - now_us % SAMPLE_PERIOD_US
    for kind in (M.NVML_GPU_UTILIZATION_SAMPLES, M.NVML_MEMORY_UTILIZATION_SAMPLES):
        ring = dict(gpu.samples.get(kind, []))
        start = max(ring, default=newest - BUFFER_ENTRIES * SAMPLE_PERIOD_US)
        for ts in range(start + SAMPLE_PERIOD_US, newest + 1, SAMPLE_PERIOD_US):
            ring[ts] = percent(ts) if callable(percent) else percent
        gpu.samples[kind] = sorted(ring.items())[-BUFFER_ENTRIES:]
    now = percent if isinstance(percent, int) else 0  # read in the pattern's idle part
    gpu.utilization_percent = (now, now // 2)


def busy_of(snapshot: Snapshot) -> tuple[float, float]:
    device = snapshot.devices[0]
    assert device.busy_seconds is not None and device.busy_uncovered_seconds is not None
    return device.busy_seconds, device.busy_uncovered_seconds


def test_a_busy_gpu_s_buffers_are_read_before_they_wrap_and_cover_every_second(
    install: Install,
) -> None:
    gpu = h100()
    gpu.compute_processes = [(4242, 1 << 30)]
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, COLLECTORS)
    for _ in range(2):  # the first read sets the cursor, the second measures the span
        fill(gpu, clock, 80)
        sampler.sample_once()
        clock.now += 1
    start_busy, _ = busy_of(sampler.sample_once())
    clock.now += 1
    before = lib.count("nvmlDeviceGetSamples", gpu=0)
    for _ in range(120):
        fill(gpu, clock, 80)
        snapshot = sampler.sample_once()
        clock.now += 1
    sampler.stop(0)
    reads = (lib.count("nvmlDeviceGetSamples", gpu=0) - before) // 2
    span = (BUFFER_ENTRIES - 1) * SAMPLE_PERIOD_US / 1e6  # 16.5 s
    assert 120 / span <= reads <= 120 / (0.75 * span - 1) + 1  # about every 12 s, not 120
    busy, uncovered = busy_of(snapshot)
    assert uncovered == 0.0  # not one entry lost between reads
    # every entry to the last read counted, at 80%: within one read's worth of 120 s
    assert 0.8 * (120 - 0.75 * span) <= busy - start_busy <= 0.8 * 121
    reading = snapshot.devices[0].reading
    assert reading is not None and reading.utilization is not None
    assert reading.utilization.gpu_ratio == 0.8  # the gauge, every interval


def test_an_idle_gpu_s_buffers_are_not_read_until_a_process_comes(install: Install) -> None:
    """Nor its per-process buffer: nvmlDeviceGetProcessUtilization cost a real H200 on
    R580 2.1 ms of CPU a call answering "no process" (benchmarks/README.md, 2026-11-30)."""
    gpu = h100()
    gpu.compute_processes = []
    with_memory_used(gpu, 0)  # no context: what an idle H100 reports (the captures' 0 MiB)
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, COLLECTORS)
    for _ in range(3):
        fill(gpu, clock, 0)
        sampler.sample_once()
        clock.now += 1
    before = lib.count("nvmlDeviceGetSamples", gpu=0)
    per_process = lib.count("nvmlDeviceGetProcessUtilization", gpu=0)
    assert per_process == 0  # no process listed: no entry would credit one
    for _ in range(300):  # five idle minutes
        fill(gpu, clock, 0)
        snapshot = sampler.sample_once()
        clock.now += 1
    assert lib.count("nvmlDeviceGetSamples", gpu=0) == before  # not one read
    assert lib.count("nvmlDeviceGetProcessUtilization", gpu=0) == per_process
    idle_busy, idle_uncovered = busy_of(snapshot)
    assert idle_uncovered == 0.0  # held no process: idle, not a gap
    gpu.compute_processes = [(4242, 1 << 30)]  # a job starts, busy at once
    with_memory_used(gpu, 1 << 30)
    fill(gpu, clock, 90)
    sampler.sample_once()  # lists it: the buffers are read at the next interval
    # its per-process entries in the interval it is listed
    assert lib.count("nvmlDeviceGetProcessUtilization", gpu=0) == per_process + 1
    clock.now += 1
    fill(gpu, clock, 90)
    snapshot = sampler.sample_once()
    sampler.stop(0)
    assert lib.count("nvmlDeviceGetSamples", gpu=0) == before + 2
    assert lib.count("nvmlDeviceGetProcessUtilization", gpu=0) == per_process + 2
    busy, uncovered = busy_of(snapshot)
    assert uncovered == 0.0
    assert busy - idle_busy == pytest.approx(0.9 * 2, abs=0.9 * 0.4)  # its first seconds


def test_a_job_s_last_seconds_are_counted_when_its_gpu_turns_idle(install: Install) -> None:
    """Between reads the entries wait in the driver's ring; when the job ends (its process
    gone, its memory freed, the GPU reading idle) the GPU is idle and its buffers are no
    longer read, so the entries its job wrote since the last read are read once more
    first: every busy entry is counted, as reading every interval would count it (this
    lost up to 12 s of each job before)."""
    gpu = h100()
    gpu.compute_processes = [(4242, 1 << 30)]
    with_memory_used(gpu, 1 << 30)
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, COLLECTORS)
    written: dict[int, int] = {}  # every entry the GPU ever wrote: timestamp -> percent

    def tick(percent: int) -> Snapshot:
        fill(gpu, clock, percent)
        written.update(gpu.samples[M.NVML_GPU_UTILIZATION_SAMPLES])
        snapshot = sampler.sample_once()
        clock.now += 1
        return snapshot

    tick(80)  # the first read sets the cursor: what the ring held before is not counted
    cursor = max(written)
    for _ in range(37):  # three reads and part of the way to a fourth
        tick(80)
    reads = lib.count("nvmlDeviceGetSamples", gpu=0)
    gpu.compute_processes = []  # the job ends
    with_memory_used(gpu, 0)
    for _ in range(60):
        snapshot = tick(0)
    sampler.stop(0)
    assert lib.count("nvmlDeviceGetSamples", gpu=0) == reads + 2  # once more, then rests
    busy, uncovered = busy_of(snapshot)
    expected = sum(p / 100 * SAMPLE_PERIOD_US / 1e6 for ts, p in written.items() if ts > cursor)
    assert expected > 0.8 * 36  # the job's 37 s, all of them
    assert busy == pytest.approx(expected, abs=1e-6)
    assert uncovered == 0.0


WITH_GPM = COLLECTORS | {"gpm"}


def with_gpm(gpu: FakeGpu, graphics: Callable[[int], float], dram: Callable[[int], float]) -> None:
    """GPM on, its graphics-engine and DRAM activity (percent) by GPM interval."""
    gpu.gpm_supported = True
    gpu.gpm = {M.NVML_GPM_METRIC_GRAPHICS_UTIL: graphics, M.NVML_GPM_METRIC_DRAM_BW_UTIL: dram}


def run(sampler: Sampler, gpu: FakeGpu, clock: FakeClock, percent: int, seconds: int) -> Snapshot:
    """`seconds` samples a second apart, the buffers written at `percent` up to each; the
    last one."""
    for _ in range(seconds):
        fill(gpu, clock, percent)
        snapshot = sampler.sample_once()
        clock.now += 1
    return snapshot


def reads_of(lib: FakeNvmlLib) -> tuple[int, int]:
    """The reads so far of GPU 0's GPU and memory-controller buffers."""
    return (
        lib.sample_reads[(0, M.NVML_GPU_UTILIZATION_SAMPLES)],
        lib.sample_reads[(0, M.NVML_MEMORY_UTILIZATION_SAMPLES)],
    )


def test_an_allocated_but_idle_gpu_s_buffers_rest_while_gpm_sees_nothing(
    install: Install,
) -> None:
    """A context holds memory (a notebook between cells): in use, so before GPM the
    buffers were read before they wrapped, zeros each time (2 x 1.8 ms of a real H200's
    CPU every ~10 s). GPM counts every cycle: while it sees the graphics engine and DRAM
    idle and the readings agree, neither buffer is read; the interval after GPM sees a
    kernel, both are read from their cursors, and the job counts from its first entry."""
    gpu = h100()
    gpu.compute_processes = [(4242, 2 << 30)]  # listed, holding memory, running nothing
    with_memory_used(gpu, 2 << 30)
    busy: list[int] = []  # the GPM intervals the job starts and ends in, once it does

    def active(interval: int) -> float:
        started = busy and interval >= busy[0]
        return 70.0 if started and (len(busy) == 1 or interval < busy[1]) else 0.0

    with_gpm(gpu, active, active)
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, WITH_GPM)
    run(sampler, gpu, clock, 0, 3)  # the first reads: the cursor, then the span
    before = reads_of(lib)
    snapshot = run(sampler, gpu, clock, 0, 120)
    assert reads_of(lib) == before  # two minutes, not one read (about 10 of each before)
    idle_busy, idle_uncovered = busy_of(snapshot)
    assert idle_uncovered == 0.0  # seen idle, not a gap
    busy.append(lib.gpm_interval(0))  # a kernel runs: 70% of the GPU for 4 s
    run(sampler, gpu, clock, 70, 4)
    busy.append(lib.gpm_interval(0))  # and ends: the context idle again
    snapshot = run(sampler, gpu, clock, 0, 5)
    sampler.stop(0)
    gpu_reads, mc_reads = reads_of(lib)
    assert 2 <= gpu_reads - before[0] <= 3 and 2 <= mc_reads - before[1] <= 3
    seconds, uncovered = busy_of(snapshot)
    assert uncovered == 0.0
    # every entry of the job counted, from its first (read from the ring after it began)
    # to its last (read once more as GPM saw the GPU go quiet)
    assert seconds - idle_busy == pytest.approx(0.7 * 4, abs=0.7 * 0.5)


def test_a_job_that_leaves_dram_alone_reads_only_the_gpu_s_buffer(install: Install) -> None:
    gpu = h100()
    gpu.compute_processes = [(4242, 2 << 30)]
    with_memory_used(gpu, 2 << 30)
    with_gpm(gpu, lambda interval: 90.0, lambda interval: 0.0)
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, WITH_GPM)

    def tick() -> Snapshot:
        fill(gpu, clock, 90)
        gpu.utilization_percent = (90, 0)  # the memory controller reads idle too
        snapshot = sampler.sample_once()
        clock.now += 1
        return snapshot

    for _ in range(3):
        tick()
    before = reads_of(lib)
    for _ in range(60):
        snapshot = tick()
    sampler.stop(0)
    gpu_reads, mc_reads = reads_of(lib)
    assert 4 <= gpu_reads - before[0] <= 6  # before it wraps: every ~12 s
    assert mc_reads == before[1]
    assert snapshot.devices[0].memory_controller_busy_uncovered_seconds == 0.0


def test_gpm_that_sees_nothing_of_a_busy_gpu_stops_no_read(install: Install) -> None:
    """GPM answering zeros while the GPU reads busy (GPM's counters held by another tool,
    or a stand-in that does not tie the two): the reading does not agree, so the buffers
    are read as before and the busy seconds are the buffer's."""
    gpu = h100()
    gpu.compute_processes = []  # work NVML does not list, and no memory: as the judge's host
    with_memory_used(gpu, 0)
    with_gpm(gpu, lambda interval: 0.0, lambda interval: 0.0)
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, WITH_GPM)
    start_busy, _ = busy_of(run(sampler, gpu, clock, 95, 4))
    before = reads_of(lib)
    snapshot = run(sampler, gpu, clock, 95, 60)
    sampler.stop(0)
    gpu_reads, mc_reads = reads_of(lib)
    assert gpu_reads - before[0] >= 4 and mc_reads - before[1] >= 4
    busy, uncovered = busy_of(snapshot)
    assert uncovered == 0.0
    assert busy - start_busy >= 0.95 * 50


def attributing_sampler(backend: PynvmlBackend, clock: FakeClock, process: str) -> Sampler:
    """A 1 s sampler on the fake clock whose processes are all named `process` on the host."""
    return Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=60.0,
        collectors=COLLECTORS,
        attribute_processes=ProcessAttributor(lookup=lambda pid: HostProcess(process=process)),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )


def test_a_job_that_starts_on_a_gpu_idle_since_the_exporter_started_counts_from_its_first_entry(
    install: Install,
) -> None:
    """The per-process entries are not asked while nothing is listed, yet the intervals
    with nothing listed are the counter's first reads: a job that starts later is not the
    buffer's history, and its SM seconds count from its first entry."""
    gpu = h100()
    gpu.compute_processes = []
    gpu.process_samples = []
    with_memory_used(gpu, 0)
    lib, backend, clock = started(install, gpu)
    sampler = attributing_sampler(backend, clock, "python")
    for _ in range(5):  # idle since the start
        fill(gpu, clock, 0)
        sampler.sample_once()
        clock.now += 1
    assert lib.count("nvmlDeviceGetProcessUtilization", gpu=0) == 0
    gpu.compute_processes = [(4242, 1 << 30)]  # a job starts: 60% of its SM time
    with_memory_used(gpu, 1 << 30)
    written_us = int(clock.wall() * 1e6)
    for _ in range(10):
        clock.now += 1
        now_us = int(clock.wall() * 1e6)
        while written_us + SAMPLE_PERIOD_US <= now_us:
            written_us += SAMPLE_PERIOD_US
            gpu.process_samples.append((4242, written_us, 60, 5))
        fill(gpu, clock, 60)
        snapshot = sampler.sample_once()
    sampler.stop(0)
    attribution = snapshot.devices[0].attribution
    assert attribution is not None
    (job,) = attribution.processes
    assert job.sm_seconds == pytest.approx(0.6 * 10, abs=0.15)  # from its first entry


def test_a_gpu_in_use_with_nothing_listed_asks_the_graphics_list_not_per_process_samples(
    install: Install,
) -> None:
    """A context NVML lists nowhere (another container's, a vGPU guest's) keeps the GPU in
    use: per-process entries would credit no listed process (2.1 ms of a real H200's CPU
    a call), so the graphics list (microseconds) is read each interval instead, and a
    renderer that starts is listed the interval it appears, its entries read from then."""
    gpu = h100()
    gpu.compute_processes = []
    gpu.graphics_processes = []
    with_memory_used(gpu, 2 << 30)  # the unlisted context's memory
    lib, backend, clock = started(install, gpu)
    sampler = attributing_sampler(backend, clock, "Xorg")
    graphics = "nvmlDeviceGetGraphicsRunningProcesses_v3"
    for _ in range(10):
        fill(gpu, clock, half_of_every_second)
        sampler.sample_once()
        clock.now += 1
    assert lib.count("nvmlDeviceGetProcessUtilization", gpu=0) == 0
    assert lib.count(graphics, gpu=0) == 10  # once a minute were it idle
    gpu.graphics_processes = [(200, 1 << 30)]  # a renderer starts
    gpu.process_samples = [(200, int(clock.monotonic() * 1e6), 30, 5)]
    fill(gpu, clock, half_of_every_second)
    snapshot = sampler.sample_once()
    sampler.stop(0)
    attribution = snapshot.devices[0].attribution
    assert attribution is not None
    assert [(p.pid, p.context) for p in attribution.processes] == [("200", "graphics")]
    assert attribution.processes[0].sm_ratio == pytest.approx(0.3)
    assert lib.count("nvmlDeviceGetProcessUtilization", gpu=0) == 1


def half_of_every_second(ts_us: int) -> int:
    """Busy the first half of every second, idle the second half."""
    return 100 if ts_us % 1_000_000 < 500_000 else 0


def with_memory_used(gpu: FakeGpu, used_bytes: int) -> None:
    """The GPU's used memory (v2: the driver's reservation left out); 0 without a
    context, as the captured H100 and L40S report idle; a context NVML does not list
    (another container's, a vGPU guest's) holds some."""
    assert gpu.memory_bytes is not None
    total, reserved, _used, _free = gpu.memory_bytes
    gpu.memory_bytes = (total, reserved, used_bytes, total - reserved - used_bytes)


def two_seconds_of_every_twenty(ts_us: int) -> int:
    """A bursty job: busy 2 s of every 20 s, idle at four 5 s readings in a row."""
    return 100 if 1_000_000 <= ts_us % 20_000_000 < 3_000_000 else 0


@pytest.mark.parametrize(
    ("interval", "pattern", "share", "from_start"),
    [
        (1.0, half_of_every_second, 0.5, False),
        (5.0, half_of_every_second, 0.5, False),
        (5.0, two_seconds_of_every_twenty, 0.1, False),
        (5.0, half_of_every_second, 0.5, True),  # the context there before the exporter
        (5.0, two_seconds_of_every_twenty, 0.1, True),
    ],
)
def test_busy_time_of_a_gpu_whose_processes_nvml_does_not_list_is_counted(
    install: Install,
    interval: float,
    pattern: Callable[[int], int],
    share: float,
    from_start: bool,
) -> None:
    """Issue 48: a GPU busy half of every second, NVML listing no process on it, whose
    instantaneous readings all land in the idle half, exported a busy rate of 0.000 and
    gpu_busy_uncovered_seconds_total grew by 0. Its context holds memory: its buffers are
    read (at the default 5 s interval too, idle at every reading in a row)."""
    gpu = h100()
    gpu.compute_processes = []
    with_memory_used(gpu, 2 << 30 if from_start else 0)
    _lib, backend, clock = started(install, gpu)
    sampler = Sampler(
        backend,
        interval_seconds=interval,
        # the read deadline is real time: 2 loaded cores once kept the fake driver's
        # reads past 5 s ("GPU down"), and this test is not about deadlines
        timeout_seconds=60.0,
        collectors=COLLECTORS,
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    for _ in range(3):  # truly idle (no context, no memory used), or the context idle
        fill(gpu, clock, 0)
        sampler.sample_once()
        clock.now += interval
    with_memory_used(gpu, 2 << 30)
    fill(gpu, clock, pattern)
    start_busy, start_uncovered = busy_of(sampler.sample_once())
    seconds = 0.0
    while seconds < 120:
        clock.now += interval
        seconds += interval
        fill(gpu, clock, pattern)
        snapshot = sampler.sample_once()
        reading = snapshot.devices[0].reading
        assert reading is not None and reading.utilization is not None
        assert reading.utilization.gpu_ratio == 0  # every instantaneous reading idle
    sampler.stop(0)
    busy, uncovered = busy_of(snapshot)
    span = (BUFFER_ENTRIES - 1) * SAMPLE_PERIOD_US / 1e6
    assert uncovered == start_uncovered  # read before the buffers wrapped: nothing lost
    low, high = share * (seconds - 0.75 * span - interval) - 2, share * seconds + 2
    assert low <= busy - start_busy <= high


def test_buffer_read_decisions() -> None:
    counter = BusyCounter()
    assert buffer_read(counter, idle=True, now_monotonic=0, interval_seconds=1) is BufferRead.READ
    counter.read_monotonic, counter.span_us = 0.0, 16_500_000
    assert buffer_read(counter, idle=True, now_monotonic=5, interval_seconds=1) is BufferRead.IDLE
    assert buffer_read(counter, idle=False, now_monotonic=5, interval_seconds=1) is BufferRead.WAIT
    for previous, decision in (
        (BufferRead.WAIT, BufferRead.READ),
        (BufferRead.READ, BufferRead.IDLE),
    ):
        # turned idle with entries left for later: read once more, then rest
        assert (
            buffer_read(counter, idle=True, now_monotonic=5, interval_seconds=1, previous=previous)
            is decision
        )
    decision = buffer_read(counter, idle=False, now_monotonic=11.4, interval_seconds=1)
    assert decision is BufferRead.READ
    # at the default 5 s interval: the next would be 12.4 s after the read, too late
    decision = buffer_read(counter, idle=False, now_monotonic=7.5, interval_seconds=5)
    assert decision is BufferRead.READ


# What the driver costs, as the exporter tells it -----------------------------------------


def test_every_metric_the_read_column_names_exists() -> None:
    assert set(READ) <= {m.name for m in METRICS}


@pytest.mark.e2e
def test_the_exporter_tells_what_each_nvml_function_costs_it(tmp_path: Path) -> None:
    """The real program on the fake driver library: every call counted and timed, by
    function, on /metrics, in /api/overview and on the live page."""
    exporter = start_exporter(["--collect.interval", "1s"], tmp_path, env=fake_library_env(1))
    try:
        samples = exporter.wait_for(lambda s: values(s, "gpu_exporter_samples_total") >= [3.0])
        fields = {"function": "nvmlDeviceGetFieldValues"}
        sampled = values(samples, "gpu_exporter_samples_total")[0]
        calls = values(samples, "gpu_exporter_nvml_calls_total", **fields)[0]
        seconds = values(samples, "gpu_exporter_nvml_call_seconds_total", **fields)[0]
        # one field call a sample (the counters ride in it when due), a few at start
        assert sampled <= calls <= sampled + 3
        assert 0 < seconds < calls * 0.5  # timed, each call well under a second here
        assert values(samples, "gpu_exporter_nvml_calls_total", function="nvmlInit") == [1.0]
        later = exporter.wait_for(
            lambda s: values(s, "gpu_exporter_samples_total")[0] >= sampled + 2
        )
        assert values(later, "gpu_exporter_nvml_calls_total", **fields)[0] >= calls + 2
        overview = json.loads(exporter.get("/api/overview").text)["nvml_calls"]
        functions = {f["function"]: f for f in overview["functions"]}
        assert functions["nvmlDeviceGetFieldValues"]["calls"] >= calls + 2
        assert functions["nvmlEventSetWait_v2"]["waits"] is True
        assert 0 < overview["seconds_per_second"] < 1
        page = exporter.get("/").text
        assert "Driver time" in page and 'data-function="nvmlDeviceGetFieldValues"' in page
    finally:
        exporter.stop()
