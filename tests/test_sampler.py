"""The sampler's own logic, with injected clocks: busy integration, backoff, reload."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from gpu_exporter.model import DeviceSample, UtilizationSample, device_with
from gpu_exporter.sampling.busy import BusyCounter
from gpu_exporter.sampling.sampler import BACKOFF_MAX_SECONDS, Sampler
from gpu_exporter.sources.scenario import Faults
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock


def samples(*pairs: tuple[int, float]) -> Sequence[UtilizationSample]:
    return [UtilizationSample(ts, ratio) for ts, ratio in pairs]


def test_first_buffer_read_only_sets_the_cursor() -> None:
    counter = BusyCounter()
    counter.add_samples(samples((1_000_000, 1.0), (2_000_000, 1.0)), 0.0)
    assert counter.seconds == 0.0
    assert counter.cursor_us == 2_000_000


def test_buffer_entries_are_integrated_exactly_however_they_flicker() -> None:
    counter = BusyCounter()
    counter.add_samples(samples((0, 0.0)), 0.0)
    flicker = [(i * 100_000, 0.95 if i % 2 else 0.0) for i in range(1, 21)]  # 2 s of 0/95%
    counter.add_samples(samples(*flicker), 2.0)
    assert abs(counter.seconds - 0.95) < 1e-9  # 10 busy periods of 0.1 s at 95%
    counter.add_samples(samples(*flicker), 3.0)  # the same entries again: nothing new
    assert abs(counter.seconds - 0.95) < 1e-9


def test_fallback_holds_the_latest_reading_over_elapsed_time() -> None:
    counter = BusyCounter()
    counter.add_reading(0.5, 10.0)
    assert counter.seconds == 0.0
    counter.add_reading(0.5, 12.0)
    assert counter.seconds == 1.0
    counter.add_reading(None, 13.0)  # unknown: nothing added, nothing invented
    assert counter.seconds == 1.0


def test_rebase_after_driver_reload_keeps_the_total() -> None:
    counter = BusyCounter()
    counter.add_samples(samples((5_000_000, 1.0)), 0.0)
    counter.add_samples(samples((6_000_000, 1.0)), 1.0)
    assert counter.seconds == 1.0
    counter.rebase()
    counter.add_samples(samples((100, 1.0)), 2.0)  # timestamps restarted: baseline only
    counter.add_samples(samples((1_000_100, 0.5)), 3.0)
    assert counter.seconds == 1.5


def make_sampler(backend: SimulatedBackend, clock: FakeClock) -> Sampler:
    return Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=2.0,
        collectors=frozenset({"utilization", "memory"}),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )


def test_nvml_init_retries_with_capped_exponential_backoff() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(1, clock=clock.wall, faults=Faults(init_error="driver_not_loaded"))
    sampler = make_sampler(backend, clock)
    for _ in range(400):  # 200 s of samples every half second
        sampler.sample_once()
        clock.now += 0.5
    snapshot = sampler.sample_once()
    assert not snapshot.nvml_up
    assert (
        snapshot.nvml_down_reason is not None and "driver_not_loaded" in snapshot.nvml_down_reason
    )
    count = snapshot.nvml_init_errors["driver_not_loaded"]
    # 1, 2, 4, 8, 16, 32, 60, 60, 60 ... seconds apart: about 9 tries in 200 s, not 400
    assert 7 <= count <= 11, count
    backend.faults = Faults()
    clock.now += BACKOFF_MAX_SECONDS
    assert sampler.sample_once().nvml_up


def test_sample_integrates_the_simulated_flicker_to_its_true_average() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(1, clock=clock.wall)
    sampler = make_sampler(backend, clock)
    sampler.sample_once()
    clock.now += 12.0  # fewer than the driver's 100 buffered entries
    snapshot = sampler.sample_once()
    busy = snapshot.devices[0].busy_seconds
    assert busy is not None
    assert abs(busy / 12.0 - 0.475) < 0.02


def test_without_the_sample_buffer_the_latest_reading_is_integrated() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(
        4, clock=clock.wall, faults=Faults(unsupported=frozenset({"utilization.samples"}))
    )
    sampler = make_sampler(backend, clock)
    sampler.sample_once()
    clock.now += 10.0
    snapshot = sampler.sample_once()
    near_oom = snapshot.devices[2]  # 82-92% busy
    assert near_oom.busy_seconds is not None and 8.2 <= near_oom.busy_seconds <= 9.2
    assert snapshot.devices[3].busy_seconds is None  # MIG: neither buffer nor reading
    assert snapshot.devices[1].busy_seconds == 0.0


SIXTH_US = 1_000_000 / 6  # the driver's sample period on recent GPUs


def ring(start_s: float, end_s: float, ratio: float) -> list[tuple[int, float]]:
    """Driver entries every 1/6 s in (start_s, end_s], as (timestamp us, ratio)."""
    first = int(start_s * 6) + 1
    return [(round(k * SIXTH_US), ratio) for k in range(first, int(end_s * 6) + 1)]


def test_a_dry_buffer_is_uncovered_time_not_busy_time() -> None:
    # The driver adds no entries while the GPU idles (GB10): idle 10 s with no entries,
    # then busy 10 s, twice over 40 s. Only the 20 busy seconds are busy.
    counter = BusyCounter()
    counter.add_samples(samples(*ring(-1.0, 0.0, 0.0)), 0.0)
    uncovered_mid_gap = 0.0
    for second in range(1, 41):
        busy = 10 <= second - 1 < 20 or 30 <= second - 1 < 40
        counter.add_samples(samples(*ring(second - 1, second, 1.0)) if busy else [], second)
        if second == 5:
            uncovered_mid_gap = counter.uncovered_seconds
    assert 17.0 <= counter.seconds <= 23.0  # not 40
    assert counter.seconds + counter.uncovered_seconds == pytest.approx(40.0)
    # A dry spell is counted while it lasts, not only when the next entry ends it.
    assert 4.0 <= uncovered_mid_gap <= 5.0


def test_entries_lost_to_a_wrapped_buffer_are_uncovered_time() -> None:
    counter = BusyCounter()
    counter.add_samples(samples(*ring(-1.0, 0.0, 1.0)), 0.0)
    # Not read for 30 s of full load: the driver kept only its newest 100 entries.
    counter.add_samples(samples(*ring(0.0, 30.0, 1.0)[-100:]), 30.0)
    assert counter.seconds == pytest.approx(100 / 6, abs=0.2)  # not 30
    assert counter.seconds + counter.uncovered_seconds == pytest.approx(30.0)


def test_jittered_timestamps_are_covered_in_full() -> None:
    counter = BusyCounter()
    counter.add_samples(samples((0, 0.0)), 0.0)
    jittered = [(k * 166_667 + (20_000 if k % 2 else 0), 1.0) for k in range(1, 61)]
    counter.add_samples(samples(*jittered), 10.0)
    assert counter.seconds == pytest.approx(60 * 166_667 / 1e6)
    assert counter.uncovered_seconds == 0.0


def test_device_with_copies_as_dataclasses_replace_does() -> None:
    """The sampler's and memory patterns' fast copy of a GPU's record is replace's copy:
    a field added with a __post_init__, slots or a derived default would break it here."""
    clock = FakeClock()
    device = make_sampler(SimulatedBackend(1, clock=clock.wall), clock).sample_once().devices[0]
    assert device.reading is not None
    changes = {"busy_seconds": 12.5, "attribution": None, "memory_pattern": None}
    copied = device_with(device, **changes)
    assert copied == dataclasses.replace(device, **changes)  # type: ignore[arg-type]
    assert copied is not device and copied.reading is device.reading
    assert device.busy_seconds != 12.5  # the original is left as it was
    assert not hasattr(DeviceSample, "__post_init__")
    # no slots of its own (its base Record's are none): its fields are its __dict__
    assert "__slots__" not in vars(DeviceSample) and vars(device).keys() == {
        f.name for f in dataclasses.fields(DeviceSample)
    }
