"""The memory patterns, judged every interval from framework memory traces.

Each trace is the simulated host's own (`gpu_exporter.sources.simulated_memory`), played
at the default 5 s interval through `MemoryPatterns` on a fast clock (an hour in a
fraction of a second); the live page's verdicts read the result.
"""

from __future__ import annotations

import json
import random
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_exporter.attribution.processes import ProcessAttributor
from gpu_exporter.model import DeviceSample, MemoryPattern
from gpu_exporter.sampling import thresholds
from gpu_exporter.sampling.history import History
from gpu_exporter.sampling.memory_patterns import MAX_POINTS, MemoryPatterns, WindowLow
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sampling.verdicts import judge, judge_instances
from gpu_exporter.sources.nvml import PynvmlBackend
from gpu_exporter.sources.scenario import ScenarioError, parse_scenario
from gpu_exporter.sources.simulated import SimulatedBackend
from gpu_exporter.sources.simulated_memory import pressure_cycle, share
from tests.support.clock import FakeClock
from tests.support.fake_nvml import FakeNvmlLib, Install, h100
from tests.support.memory_traces import INSTANCE, Traced, device_at, pattern, play

HOUR = 3600.0
RESERVATIONS = {
    "tensorflow": [Traced(4242, "tensorflow", 0.99)],
    "vllm-0.95": [Traced(4242, "vllm", 0.95)],
    "jax-0.95": [Traced(4242, "jax", 0.95)],
}


def mine(device: DeviceSample) -> MemoryPattern:
    found = device.memory_pattern or device.mig_memory_patterns.get(INSTANCE)
    assert found is not None
    return found


def verdicts(device: DeviceSample) -> dict[str, str]:
    """The GPU's verdicts (name: summary), or its MIG instance's."""
    if device.mig_memory_patterns:
        found = judge_instances(device, History())[INSTANCE]
    else:
        found = judge(device, History())
    return {v.name: v.summary for v in found}


@pytest.mark.parametrize("mig", [False, True], ids=["gpu", "mig"])
@pytest.mark.parametrize("name", list(RESERVATIONS))
def test_a_reservation_held_flat_for_an_hour_is_reserved_never_at_risk(
    name: str, mig: bool
) -> None:
    played = play(RESERVATIONS[name], HOUR, mig=mig)
    patterns = Counter(pattern(d) for t, d in played if t >= 40)  # after vLLM's 25 s start
    assert patterns == {"reserved": len(played) - 8}
    last = mine(played[-1][1])
    assert last.near_full_drops == 0 and last.likely_oom_exits == 0
    assert last.flat_seconds >= HOUR - 40  # since it settled, 35 s in at the latest
    # shown, not paged: an info verdict naming the process and what it reserved
    shown = verdicts(played[-1][1])
    assert set(shown) == {"memory-reserved"}
    assert shown["memory-reserved"].startswith("pid 4242 (python) reserved ")
    assert (
        "at start and holds it flat: the framework manages it; an out-of-memory inside "
        in (shown["memory-reserved"])
    )


def test_the_reservation_verdict_reads_as_the_issue_asks() -> None:
    (_, device), *_ = reversed(play([Traced(4242, "tensorflow", 0.99)], 60))
    [verdict] = judge(device, History())
    assert verdict.level == "info"
    assert verdict.summary == (
        "pid 4242 (python) reserved 79 GiB (99%) at start and holds it flat: the framework "
        "manages it; an out-of-memory inside its pool is invisible to the driver."
    )


def test_the_pytorch_pressure_trace_is_what_the_issue_describes() -> None:
    """93-99% with drops of 5-10% and re-rises every 20-40 s."""
    lengths, tops, drops = zip(*(pressure_cycle(k) for k in range(200)), strict=True)
    assert min(lengths) >= 20 and max(lengths) <= 40
    assert min(tops) >= 0.96 and max(tops) <= 0.99
    assert min(drops) >= 0.05 and max(drops) <= 0.10
    assert share("tensorflow", 4.9, 0.99) == 0.99  # within 5 s of start


@pytest.mark.parametrize("mig", [False, True], ids=["gpu", "mig"])
def test_pytorch_under_pressure_is_pressure_within_two_minutes_and_stays(mig: bool) -> None:
    played = play([Traced(4242, "pytorch-pressure", 0.0)], HOUR, mig=mig)
    first = next(t for t, d in played if pattern(d) == "pressure")
    assert first <= 120
    assert {pattern(d) for t, d in played if t >= first} == {"pressure"}
    last = mine(played[-1][1])
    # every cycle's drop and re-rise counted, about one every 30 s
    assert 100 <= last.near_full_drops <= 130
    summary = verdicts(played[-1][1])["near-oom"]
    assert "under pressure: it dropped and climbed back near full" in summary


def test_a_drop_and_re_rise_between_two_scrapes_still_counts() -> None:
    """Judged from every 5 s reading: a minute's scrapes would see only the tops."""
    played = play([Traced(4242, "pytorch-pressure", 0.0)], 600)
    scraped = [d for t, d in played if t % 60 == 0]
    assert mine(scraped[-1]).near_full_drops >= 15


@pytest.mark.parametrize("mig", [False, True], ids=["gpu", "mig"])
def test_pytorch_growing_into_the_ceiling_is_pressure(mig: bool) -> None:
    played = play([Traced(4242, "pytorch-growing", 0.99)], HOUR, mig=mig)
    reached = next(t for t, d in played if (mine(d).used_ratio or 0) > 0.95)
    at_risk = [t for t, d in played if pattern(d) == "pressure"]
    assert at_risk[0] == reached
    assert at_risk[-1] - at_risk[0] == thresholds.MEMORY_PATTERN_WINDOW_SECONDS
    assert verdicts(played[len(at_risk) // 2 + int(reached / 5)][1])["near-oom"].endswith(
        "it grew into the ceiling."
    )


@pytest.mark.parametrize("mig", [False, True], ids=["gpu", "mig"])
def test_two_processes_at_55_and_42_percent_are_sharing(mig: bool) -> None:
    played = play([Traced(4242, "flat", 0.55), Traced(4343, "flat", 0.42)], 600, mig=mig)
    assert {pattern(d) for t, d in played if t >= 10} == {"sharing"}
    summary = verdicts(played[-1][1])["near-oom"]
    assert "shared by pid 4242 (python, " in summary and " and pid 4343 (python, " in summary


def test_a_third_process_arriving_on_a_gpu_at_90_percent_makes_it_sharing() -> None:
    procs = [
        Traced(4242, "flat", 0.50),
        Traced(4343, "flat", 0.40),
        Traced(4444, "flat", 0.08, start=600),
    ]
    played = play(procs, 1200)
    assert {pattern(d) for t, d in played if t < 600} == {"not_full"}
    assert {pattern(d) for t, d in played if t >= 600} == {"sharing"}


def test_a_small_process_arriving_on_a_near_full_gpu_is_sharing() -> None:
    """A new process on a GPU already near full: whatever it allocates, the other cannot."""
    procs = [Traced(4242, "tensorflow", 0.97), Traced(4343, "flat", 0.005, start=600)]
    played = play(procs, 1200)
    assert {pattern(d) for t, d in played if 15 <= t < 600} == {"reserved"}
    after = [d for t, d in played if t >= 600]
    assert {pattern(d) for d in after} == {"sharing"}
    assert all(mine(d).arrived for d in after)


@pytest.mark.parametrize("mig", [False, True], ids=["gpu", "mig"])
def test_a_process_at_98_percent_that_ends_is_a_likely_oom_death_named_for_ten_minutes(
    mig: bool,
) -> None:
    played = play([Traced(4242, "tensorflow", 0.98, end=1800)], HOUR, mig=mig)
    counts = {t: mine(d).likely_oom_exits for t, d in played}
    assert counts[1795] == 0 and counts[1800] == 1 and counts[HOUR] == 1
    named = [t for t, d in played if mine(d).recent_exits]
    assert named[0] == 1800 and named[-1] == 1800 + thresholds.MEMORY_OOM_EXIT_HOLD_SECONDS
    assert all(mine(d).pattern == "reserved" for t, d in played if 15 <= t < 1800)
    [ended] = mine(played[400][1]).recent_exits
    assert ended.holder.pid == "4242" and ended.holder.user == "alice"
    assert ended.holder.pod == "train-0" and ended.used_ratio == pytest.approx(0.98, abs=0.005)
    where = "this instance" if mig else "the GPU"
    assert verdicts(played[400][1])["ended-on-full-memory"] == (
        f"A job ended while {where} was 98% full: pid 4242 (python), user alice, pod "
        f"ml/train-0, holding {'39.2' if mig else '78.4'} GiB: most likely CUDA out of "
        "memory; its log says which."
    )
    assert pattern(played[400][1]) == "not_full"


def test_a_job_that_frees_its_memory_below_near_full_first_is_no_oom_death() -> None:
    procs = [Traced(4242, "tensorflow", 0.90, end=600)]
    played = play(procs, 1200)
    assert mine(played[-1][1]).likely_oom_exits == 0


@pytest.mark.parametrize("mig", [False, True], ids=["gpu", "mig"])
def test_a_dead_owner_s_memory_stays_leaked_not_an_oom_risk(mig: bool) -> None:
    """Memory held, owner gone: `unowned` (GPUMemoryLeaked's), no death counted."""
    played = play([Traced(4242, "tensorflow", 0.98, dies=1800)], HOUR, mig=mig)
    assert {pattern(d) for t, d in played if t >= 1800} == {"unowned"}
    assert mine(played[-1][1]).likely_oom_exits == 0
    found = verdicts(played[-1][1])
    assert "near-oom" not in found and "ended-on-full-memory" not in found
    if not mig:
        assert "memory-leaked" in found


def test_without_process_attribution_only_memory_is_judged() -> None:
    patterns = MemoryPatterns()
    device = replace(device_at(20, [Traced(1, "tensorflow", 0.99)]), attribution=None)
    for t in range(0, 600, 5):
        (judged,) = patterns.observe([device], now=float(t), wall=float(t))
    assert mine(judged).pattern == "reserved" and mine(judged).holders == ()


def test_state_is_bounded_and_dropped_when_the_gpu_or_instance_goes() -> None:
    patterns = MemoryPatterns()
    gpu = device_at(10, [Traced(1, "pytorch-pressure", 0.0)])
    instance = device_at(10, [Traced(1, "flat", 0.5)], mig=True)
    instance = replace(instance, index=1)
    for t in range(0, 2 * int(HOUR), 1):  # a 1 s interval: more points than the window
        patterns.observe([gpu, instance], now=float(t), wall=float(t))
    assert len(patterns) == 2
    track = next(iter(patterns._tracks.values()))
    assert len(track.lows) <= min(MAX_POINTS, thresholds.MEMORY_PATTERN_WINDOW_SECONDS + 1)
    patterns.observe([gpu], now=2 * HOUR, wall=2 * HOUR)
    assert len(patterns) == 1
    patterns.observe([], now=2 * HOUR + 1, wall=0.0)  # NVML down: nothing known gone
    assert len(patterns) == 1


@pytest.mark.parametrize("seed", range(4))
def test_the_window_s_least_memory_is_the_least_of_every_point_within_it(seed: int) -> None:
    """`WindowLow` against the plain minimum of every point kept (what the growth into
    the ceiling compares with): memory rising, falling, holding and wavering, at
    intervals from 0.5 s to a gap longer than the window."""
    rng = random.Random(seed)
    window = thresholds.MEMORY_PATTERN_WINDOW_SECONDS
    low, points, now, used = WindowLow(window), [], 0.0, 40 << 30
    for _ in range(3000):
        now += rng.choice((0.5, 1.0, 1.0, 5.0, 30.0)) if rng.random() > 0.001 else window + 1
        expected = min((u for t, u in points if now - t <= window), default=-1)
        assert low.least(now, default=-1) == expected
        step = rng.randrange(1 << 28)
        used = rng.choice((used, used, used + step, used - step))
        low.add(now, used)
        points.append((now, used))
    assert len(low) < len(points)


def test_memory_that_holds_or_wavers_keeps_a_few_points_not_one_an_interval() -> None:
    window = thresholds.MEMORY_PATTERN_WINDOW_SECONDS
    held, wavering, rising = WindowLow(window), WindowLow(window), WindowLow(window)
    rng = random.Random(1)
    for t in range(int(window) * 2):  # a 1 s interval, twice the window
        held.add(float(t), 70 << 30)
        wavering.add(float(t), (70 << 30) + rng.randrange(64 << 20))
        rising.add(float(t), (10 << 30) + t * (1 << 20))
    assert len(held) == 1
    assert len(wavering) < 30  # the window's running minima: a few, at random
    assert len(rising) == window + 1  # a rise at every interval: each could be the least


def test_a_gpu_down_for_a_while_keeps_its_counters_a_gpu_gone_drops_them() -> None:
    patterns = MemoryPatterns()
    torch = [Traced(1, "pytorch-pressure", 0.0)]
    for t in range(0, 300, 5):
        (judged,) = patterns.observe([device_at(t, torch)], now=float(t), wall=float(t))
    drops = mine(judged).near_full_drops
    assert drops > 0
    gpu = device_at(300, torch)
    patterns.observe([replace(gpu, up=False, reading=None)], now=300.0, wall=0.0)
    patterns.observe([], now=305.0, wall=0.0)
    (back,) = patterns.observe([gpu], now=310.0, wall=0.0)
    assert mine(back).near_full_drops == drops
    assert gpu.static is not None
    other = replace(gpu, static=replace(gpu.static, uuid="GPU-another-board"))
    (swapped,) = patterns.observe([other], now=315.0, wall=0.0)
    assert len(patterns) == 1 and mine(swapped).near_full_drops == 0


@pytest.mark.parametrize(
    ("process", "error"),
    [
        ({"memory_trace": "keras", "memory_ratio": 0.9}, "memory_trace must be one of"),
        ({"memory_trace": "jax"}, "a memory_trace needs its memory_ratio"),
        ({"memory_trace": "jax", "memory_ratio": 1.5}, "memory_ratio must be between 0 and 1"),
        ({"memory_trace": "jax", "memory_ratio": 0.9, "memory_bytes": 1}, "not both"),
        ({"start_seconds": 10**400}, "start_seconds must be between 0 and"),
        ({"start_seconds": float("nan")}, "start_seconds must be between 0 and"),
        ({"start_seconds": 20, "end_seconds": 10}, "end_seconds must be after start_seconds"),
    ],
)
def test_a_scenario_s_memory_trace_is_checked(process: dict[str, object], error: str) -> None:
    with pytest.raises(ScenarioError, match=error):
        parse_scenario({"processes": [{"gpu": 0, "pid": 1, **process}]})


def test_the_simulated_host_plays_a_trace_and_ends_the_process(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "scenario.json"
    process = {"gpu": 0, "pid": 7, "memory_trace": "tensorflow", "memory_ratio": 0.99}
    path.write_text(json.dumps({"processes": [process | {"start_seconds": 5, "end_seconds": 60}]}))
    backend = SimulatedBackend(1, clock=clock.wall, scenario_path=str(path))
    backend.init()
    ratio = []
    for _ in range(15):
        reading = backend.device_reading(0, frozenset({"memory"}))
        memory = reading.memory
        assert memory is not None and memory.used_bytes is not None and memory.total_bytes
        listed = [p.pid for p in backend.processes(0) or ()]
        ratio.append((round(memory.used_bytes / memory.total_bytes, 2), listed))
        clock.now += 5
    assert ratio[0] == (0.0, [])  # not started
    assert ratio[2] == (0.99, [7])  # 99% within 5 s of its start
    assert ratio[12] == (0.0, [])  # ended at 60 s: gone, its memory freed


def test_the_stand_in_driver_s_traces_through_the_real_sampler(install: Install) -> None:
    """The test stand-in (the real pynvml wrappers on a fake libnvidia-ml) plays the traces
    as the driver reports them (bytes used, the process lists), through the real sampler and
    process attribution at the 5 s interval on a fast clock: TensorFlow reserved, PyTorch
    under pressure, a job at 98% that ends a likely OOM death."""
    traces = {0: ("tensorflow", 0.99, None), 1: ("pytorch-pressure", 0.0, None)}
    traces[2] = ("flat", 0.98, 300.0)
    gpus = [h100(i) for i in range(3)]
    jobs = [subprocess.Popen(["sleep", "300"]) for _ in gpus]  # live PIDs for /proc
    try:
        install(FakeNvmlLib(gpus))
        clock = FakeClock()
        backend = PynvmlBackend(monotonic=clock.monotonic)
        sampler = Sampler(
            backend,
            interval_seconds=5.0,
            timeout_seconds=5.0,
            collectors=frozenset({"memory", "process"}),
            attribute_processes=ProcessAttributor(),
            clock=clock.wall,
            monotonic=clock.monotonic,
        )
        seen: dict[int, set[str]] = {i: set() for i in traces}
        for step in range(121):  # 10 minutes
            t = step * 5.0 - 10.0  # the jobs start 10 s after the exporter
            for index, (trace, level, end) in traces.items():
                gpu = gpus[index]
                total, reserved, _used, _free = gpu.memory_bytes or (0, 0, 0, 0)
                listed = t >= 0 and (end is None or t < end)
                used = int(share(trace, t, level) * total) if listed else 0
                gpu.memory_bytes = (total, reserved, used, total - reserved - used)
                gpu.compute_processes = [(jobs[index].pid, used)] if listed else []
            snapshot = sampler.sample_once()
            for index in traces:
                found = snapshot.devices[index].memory_pattern
                assert found is not None
                seen[index].add(found.pattern)
            clock.now += 5.0
        sampler.stop(0)
        last = {d.index: d.memory_pattern for d in snapshot.devices}
        assert seen[0] == {"not_full", "reserved"}
        assert seen[1] >= {"pressure"} and "sharing" not in seen[1]
        assert last[1] is not None and last[1].pattern == "pressure"
        assert last[1].near_full_drops >= 10
        assert seen[2] == {"not_full", "reserved"} and last[2] is not None
        assert last[2].likely_oom_exits == 1
        [ended] = last[2].recent_exits
        assert ended.holder.pid == str(jobs[2].pid) and ended.holder.process == "sleep"
    finally:
        for job in jobs:
            job.kill()
            job.wait()
