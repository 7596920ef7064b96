"""The live page's history: rates from counter deltas, gaps, downsampling, the 12-hour
bound, and its memory as the benchmark measures it."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from dataclasses import replace

import pytest

from benchmarks.history_memory import START, snapshot, static
from gpu_exporter.model import (
    ActivityTotals,
    ClocksReading,
    DeviceReading,
    MemoryReading,
    MigReading,
    PowerReading,
    Snapshot,
    TemperatureReading,
    UtilizationReading,
)
from gpu_exporter.sampling import history as history_module
from gpu_exporter.sampling.history import (
    COARSE,
    FINE,
    FOLD_AT,
    GPU_SERIES,
    MEDIUM,
    TIERS,
    WINDOWS,
    History,
    Ring,
    SeriesHistory,
    TierSpec,
    Window,
)
from gpu_exporter.sampling.thresholds import VERDICT_WINDOW_SECONDS
from tests.support.clock import FakeClock
from tests.support.exporter import REPO

KEY = (0, static(0).uuid)


def one_gpu(t: float, **changes: object) -> Snapshot:
    """The benchmark's synthetic sample of one GPU at `t`, its device changed by `changes`."""
    base = snapshot(t, [static(0)])
    device = replace(base.devices[0], **changes)  # type: ignore[arg-type]
    return replace(base, devices=(device,))


def test_two_gpus_with_one_uuid_keep_their_own_history() -> None:
    """Boards that report the same UUID (a cloned VBIOS) are two GPUs, told apart by
    index: GPU 0 at 500 W and 90% busy, GPU 1 at 100 W and 10%, never both at the mean."""
    history = History()
    twins = [static(0), replace(static(1), uuid=static(0).uuid)]
    for t in range(4):
        base = snapshot(float(t), twins)
        devices = tuple(
            replace(
                device,
                busy_seconds=t * busy,
                reading=DeviceReading(power=PowerReading(watts=watts, limit_watts=700.0)),
            )
            for device, watts, busy in zip(base.devices, (500.0, 100.0), (0.9, 0.1), strict=True)
        )
        history.add(replace(base, devices=devices))
    first, second = (history.gpu((i, twins[0].uuid), WINDOWS["5m"]) for i in (0, 1))
    assert first is not None and second is not None
    assert first.series["power_watts"] == [500.0] * 4
    assert second.series["power_watts"] == [100.0] * 4
    assert first.series["busy_ratio"][1:] == pytest.approx([0.9] * 3)
    assert second.series["busy_ratio"][1:] == pytest.approx([0.1] * 3)
    # each GPU's processes keep their own CPU points (the benchmark's pids differ by index)
    assert history.cpu_cores((1, twins[0].uuid), "1010") == pytest.approx(1.5)
    assert history.cpu_cores((0, twins[0].uuid), "1010") is None
    assert history.gpus_kept() == 2


def test_busy_ratio_is_the_busy_counter_delta_not_the_flickering_gauge() -> None:
    history = History()
    flicker = [0.95, 0.0, 0.95, 0.0]
    for k, gauge in enumerate(flicker):
        reading = DeviceReading(utilization=UtilizationReading(gpu_ratio=gauge))
        history.add(one_gpu(k * 2.0, busy_seconds=k * 2.0 * 0.4, reading=reading))
    points = history.gpu(KEY, WINDOWS["5m"])
    assert points is not None
    assert points.series["busy_ratio"][0] is None  # no delta before the second sample
    assert points.series["busy_ratio"][1:] == pytest.approx([0.4, 0.4, 0.4])
    assert points.series["utilization_ratio"] == pytest.approx(flicker)


def test_a_wall_clock_step_changes_no_rate() -> None:
    """Issue 48: rates were the counter's delta over the wall time between samples; a
    step back of 4 s within a 5 s interval made 2.5 busy seconds a ratio over 1 s
    (1.0, clamped), a step forward of 5 minutes one over 305 s. They are taken over the
    sampler's monotonic clock now."""
    clock = FakeClock()
    history = History()
    busy = 0.0
    for step in (0.0, -4.0, 300.0, -600.0, 0.0):
        clock.step(step)
        sample = one_gpu(clock.wall(), busy_seconds=busy)
        history.add(replace(sample, monotonic_seconds=clock.monotonic()))
        clock.now += 5.0
        busy += 2.5  # busy half of every 5 s interval
    points = history.gpu(KEY, WINDOWS["5m"])
    assert points is not None
    ratios = [r for r in points.series["busy_ratio"] if r is not None]
    assert ratios == pytest.approx([0.5] * 4)


def test_a_mig_gpu_falls_back_to_graphics_engine_activity() -> None:
    history = History()
    for k in range(3):
        history.add(
            one_gpu(
                float(k),
                busy_seconds=None,
                reading=DeviceReading(mig=MigReading()),
                activity=ActivityTotals(graphics_engine_seconds=k * 0.42),
            )
        )
    points = history.gpu(KEY, WINDOWS["5m"])
    assert points is not None
    assert points.series["busy_ratio"][1:] == pytest.approx([0.42, 0.42])
    assert points.series["utilization_ratio"] == [None, None, None]


def test_missing_values_are_gaps_never_zero() -> None:
    history = History()
    history.add(one_gpu(0.0, reading=DeviceReading(memory=MemoryReading(total_bytes=10))))
    history.add(one_gpu(1.0, reading=None, up=False))  # down: every series has a gap
    points = history.gpu(KEY, WINDOWS["5m"])
    assert points is not None
    assert points.series["memory_total_bytes"] == [10.0, None]
    assert points.series["memory_used_bytes"] == [None, None]
    assert points.series["power_watts"] == [None, None]
    assert points.series["busy_ratio"] == [None, None]


def test_fast_samples_average_into_one_point_a_second() -> None:
    history = History()
    for k in range(10):  # 200 ms apart: two 1-second buckets
        mem = MemoryReading(total_bytes=100, used_bytes=k)
        history.add(one_gpu(k * 0.2, reading=DeviceReading(memory=mem)))
    points = history.gpu(KEY, WINDOWS["5m"])
    assert points is not None
    assert points.series["memory_used_bytes"] == pytest.approx([2.0, 7.0])  # 0..4, 5..9
    assert points.times == pytest.approx([START + 0.4, START + 1.4])


def test_one_hour_and_twelve_hours_are_ten_second_and_one_minute_means() -> None:
    history = History()
    for k in range(180):  # 3 minutes, one sample a second, used = seconds since start
        mem = MemoryReading(total_bytes=1000, used_bytes=k)
        history.add(one_gpu(float(k), reading=DeviceReading(memory=mem)))
    hour = history.gpu(KEY, WINDOWS["1h"])
    day = history.gpu(KEY, WINDOWS["12h"])
    assert hour is not None and day is not None
    assert hour.series["memory_used_bytes"][:2] == pytest.approx([4.5, 14.5])
    assert len(hour.times) == 18
    # START is 20 s into a minute: the first minute holds seconds 0..39
    assert day.series["memory_used_bytes"] == pytest.approx([19.5, 69.5, 129.5, 169.5])


def test_twelve_hours_are_kept_and_no_more() -> None:
    history = History()
    statics = [static(0)]
    for k in range(13 * 60 + 30):  # 13.5 hours, one sample a minute
        history.add(snapshot(60.0 * k, statics))
    now = START + 60.0 * (13 * 60 + 29)
    for window in WINDOWS.values():
        points = history.gpu(KEY, window)
        assert points is not None
        assert len(points.times) <= window.max_points
        assert min(points.times) >= now - window.seconds
    day = history.gpu(KEY, WINDOWS["12h"])
    assert day is not None and len(day.times) >= 12 * 60 - 1  # the whole 12 hours is there


def test_window_caps_follow_their_tiers() -> None:
    assert WINDOWS["5m"] == Window("5m", 300.0, FINE)
    assert WINDOWS["1h"].tier is MEDIUM and WINDOWS["12h"].tier is COARSE
    assert [w.max_points for w in WINDOWS.values()] == [301, 361, 721]
    # a point a second for what is read of them (the 5-minute chart, the verdicts' window)
    # with a minute to spare: an hour of them (3600) was kept and never read
    assert FINE.capacity == 360
    assert FINE.span_seconds >= max(WINDOWS["5m"].seconds, VERDICT_WINDOW_SECONDS) + 1


def test_a_ring_keeps_the_newest_points_in_order() -> None:
    ring = Ring(3, 1)
    for k in range(5):
        ring.append(float(k), [k * 10.0])
    assert len(ring) == 3
    assert ring.since(0.0) == ([2.0, 3.0, 4.0], [[20.0, 30.0, 40.0]])
    assert ring.since(3.0) == ([3.0, 4.0], [[30.0, 40.0]])


def test_process_cpu_cores_are_the_rate_of_cpu_seconds() -> None:
    history = History()
    statics = [static(0)]
    for k in range(30):  # the benchmark's processes burn 1.5 cores
        history.add(snapshot(float(k), statics))
    assert history.cpu_cores(KEY, "1000") == pytest.approx(1.5)
    assert history.cpu_cores(KEY, "999") is None


def test_gpus_beyond_the_cap_forget_the_one_seen_longest_ago() -> None:
    history = History(max_gpus=2)
    for index in range(3):
        history.add(snapshot(float(index), [static(index)]))
    assert history.gpus_kept() == 2
    assert history.gpu((0, static(0).uuid), WINDOWS["5m"]) is None
    assert history.gpu((2, static(2).uuid), WINDOWS["5m"]) is not None


def test_more_gpus_at_once_than_the_cap_keep_the_first_and_churn_nothing() -> None:
    history = History(max_gpus=2)
    statics = [static(index) for index in range(3)]
    for t in range(3):
        history.add(snapshot(float(t), statics))
    kept = [history.gpu((s.index, s.uuid), WINDOWS["5m"]) for s in statics]
    assert [len(p.times) if p else None for p in kept] == [3, 3, None]


def test_a_known_gpu_reuses_its_rings_instead_of_allocating_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each GPU's rings (about 200 KiB) are allocated once, not once per sample."""
    made: list[object] = []
    real = history_module.SeriesHistory

    def counting(names: tuple[str, ...]) -> object:
        made.append(names)
        return real(names)

    history = History()  # the host's series, made here
    monkeypatch.setattr(history_module, "SeriesHistory", counting)
    statics = [static(index) for index in range(2)]
    for t in range(5):
        history.add(snapshot(START + t, statics))
    assert len(made) == 2


def test_memory_for_eight_gpus_and_twelve_hours_stays_under_8_mib() -> None:
    """The benchmark's figure (tracemalloc after a full fill), not a timing."""
    result = subprocess.run(
        [sys.executable, "benchmarks/history_memory.py", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    figures = json.loads(result.stdout)
    assert figures["kept_gpus"] == 8
    assert 0 < figures["mib"] <= 8.0, figures
    assert result.returncode == 0


def test_each_gpu_series_is_kept_under_its_own_name() -> None:
    """The samples' values reach the tiers as one vector in GPU_SERIES order: each series
    holds its own value, none its neighbour's."""
    history = History()
    reasons = {"sw_power_cap": True, "sw_thermal_slowdown": False, "hw_thermal_slowdown": False}
    reading = DeviceReading(
        utilization=UtilizationReading(gpu_ratio=0.25),
        memory=MemoryReading(total_bytes=80, used_bytes=30),
        power=PowerReading(watts=300.0, limit_watts=700.0),
        temperature=TemperatureReading(gpu_celsius=61.0),
        clocks=ClocksReading(throttle_reasons=reasons),
    )
    for t in (0.0, 2.0):
        activity = ActivityTotals(graphics_engine_seconds=t * 0.9, sm_seconds=t * 0.375)
        history.add(one_gpu(t, busy_seconds=t * 0.5, reading=reading, activity=activity))
    points = history.gpu(KEY, WINDOWS["5m"])
    assert points is not None
    assert {name: column[-1] for name, column in points.series.items()} == {
        "busy_ratio": 0.5,
        "utilization_ratio": 0.25,
        "sm_ratio": 0.375,
        "memory_used_bytes": 30.0,
        "memory_total_bytes": 80.0,
        "power_watts": 300.0,
        "power_limit_watts": 700.0,
        "temperature_celsius": 61.0,
        "slowdown_celsius": 87.0,
        "power_capped_ratio": 1.0,
        "thermal_throttled_ratio": 0.0,
    }
    assert list(points.series) == list(GPU_SERIES)


Sample = tuple[float, dict[str, float | None]]


def _reference(samples: list[Sample], spec: TierSpec, names: tuple[str, ...]) -> list[tuple]:
    """What a tier answers, computed the plain way: per bucket of spec.step_seconds (the
    last `capacity` closed ones and the open one), the mean time and each name's mean over
    the samples that have a value (NaN where none has)."""
    buckets: dict[float, list[Sample]] = {}
    for t, values in samples:
        buckets.setdefault(math.floor(t / spec.step_seconds) * spec.step_seconds, []).append(
            (t, values)
        )
    points = []
    for members in buckets.values():
        means = []
        for name in names:
            present = [
                float(v) for _, values in members if (v := values.get(name)) is not None and v == v
            ]
            means.append(sum(present) / len(present) if present else math.nan)
        points.append((sum(t for t, _ in members) / len(members), means))
    return points[-(spec.capacity + 1) :]


def _assert_same(answer: tuple[list[float], list[list[float]]], expected: list[tuple]) -> None:
    times, columns = answer
    assert len(times) == len(expected)
    for i, (t, means) in enumerate(expected):
        assert math.isclose(times[i], t, rel_tol=0.0, abs_tol=1e-6), (i, times[i], t)
        for k, mean in enumerate(means):
            got = columns[k][i]
            if math.isnan(mean):
                assert math.isnan(got), (i, k, got)
            else:  # float32 in the rings
                assert math.isclose(got, mean, rel_tol=1e-6, abs_tol=1e-9), (i, k, got, mean)


def test_tiers_answer_the_plain_means_of_irregular_samples_with_gaps() -> None:
    """The tiers hold an open bucket's samples unfolded, then fold them in batches of
    FOLD_AT: whatever the batching, every tier answers what the plain per-bucket means of
    the raw samples are, the open bucket included, read at any moment (a read folds too).
    Samples come 0.01..0.4 s apart (up to ~100 in a 1-second bucket, hundreds in a minute:
    more than FOLD_AT), with pauses that leave buckets empty and overflow the 1-second
    ring; values go missing (absent, None, NaN) at random and whole series for a while."""
    rng = random.Random(20261128)
    names = ("a", "b", "c", "d")
    series = SeriesHistory(names)
    samples: list[Sample] = []
    t = START
    reads = 0
    for k in range(6000):
        fast = (k // 500) % 3 == 1  # spells of 0.01..0.05 s steps
        t += rng.uniform(0.01, 0.05) if fast else rng.uniform(0.1, 0.4)
        if rng.random() < 0.01:
            t += rng.uniform(1.0, 90.0)  # a pause: empty buckets in every tier
        values: dict[str, float | None] = {
            "a": rng.uniform(0.0, 1.0),
            "b": rng.uniform(0.0, 80e9),  # bytes: float32 keeps 7 digits of them
            "c": rng.choice([None, math.nan, rng.uniform(-50.0, 50.0)]),
        }
        if rng.random() < 0.3:
            del values["a"]
        if (k // 700) % 2:  # "d" is there for 700 samples, then gone for 700
            values["d"] = rng.uniform(200.0, 700.0)
        series.add(t, values)
        samples.append((t, values))
        if rng.random() < 0.006:  # read mid-bucket, as the page does
            reads += 1
            for spec in TIERS:
                _assert_same(series.tiers[spec].since(-math.inf), _reference(samples, spec, names))
        assert all(len(tier._pending) < FOLD_AT for tier in series.tiers.values())
    assert reads > 20
    for spec in TIERS:
        expected = _reference(samples, spec, names)
        _assert_same(series.tiers[spec].since(-math.inf), expected)
        # from a point on: only the newest points, and the chosen columns, in their order
        t0 = expected[len(expected) // 2][0]
        times, (d, a) = series.tiers[spec].since(t0, [3, 0])
        newest = [(t, [means[3], means[0]]) for t, means in expected if t >= t0]
        _assert_same((times, [d, a]), newest)
