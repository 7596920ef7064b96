"""The live page's verdicts, judged from synthetic samples and their history, at the
thresholds' edges (sampling/thresholds.py) and with missing data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from benchmarks.history_memory import snapshot, static
from gpu_exporter.model import (
    THROTTLE_REASONS,
    ActivityTotals,
    Attribution,
    ClocksReading,
    DeadOwner,
    DeviceHolder,
    DeviceReading,
    MemoryPattern,
    MemoryReading,
    MigReading,
    PowerReading,
    ProcessSample,
    Snapshot,
    TemperatureReading,
    UtilizationReading,
)
from gpu_exporter.sampling import thresholds
from gpu_exporter.sampling.history import History
from gpu_exporter.sampling.verdicts import judge, judge_instances
from tests.support.snapshots import mig_snapshot

GIB = 1024**3


def run(
    seconds: int,
    *,
    busy: float,
    sm: float | None = None,
    util: float = 0.5,
    used: int = 10 * GIB,
    total: int = 80 * GIB,
    processes: tuple[ProcessSample, ...] | None = None,
    mig: MigReading | None = None,
) -> list[str]:
    """Names of the verdicts on one GPU after `seconds` of samples a second apart."""
    history = History()
    last: Snapshot | None = None
    for t in range(seconds):
        base = snapshot(float(t), [static(0)])
        device = replace(
            base.devices[0],
            busy_seconds=None if mig else busy * t,
            activity=ActivityTotals(
                graphics_engine_seconds=busy * t, sm_seconds=None if sm is None else sm * t
            ),
            reading=DeviceReading(
                utilization=None if mig else UtilizationReading(gpu_ratio=util),
                memory=MemoryReading(total_bytes=total, used_bytes=used),
                mig=mig,
            ),
            attribution=None
            if processes is None
            else Attribution(
                processes=tuple(
                    replace(p, cpu_seconds=(p.cpu_seconds or 0) * t) for p in processes
                ),
                unattributed_memory_bytes=0,
                process_count=len(processes),
            ),
        )
        last = replace(base, devices=(device,))
        history.add(last)
    assert last is not None
    return [v.name for v in judge(last.devices[0], history)]


def trainer(cores: float, workers: int) -> ProcessSample:
    """A process whose tree burns `cores` CPU cores (CPU seconds per second)."""
    return ProcessSample(
        pid="42", process="python", user="a", context="compute", cpu_seconds=cores, workers=workers
    )


def test_input_bound_needs_low_busy_and_every_worker_busy() -> None:
    busy = thresholds.INPUT_BOUND_BUSY_RATIO - 0.1
    enough = thresholds.INPUT_BOUND_CORES_PER_WORKER * 4 + 0.05
    assert "input-bound" in run(20, busy=busy, processes=(trainer(enough, 4),))
    assert "input-bound" not in run(20, busy=busy, processes=(trainer(enough - 0.2, 4),))
    assert "input-bound" not in run(20, busy=0.6, processes=(trainer(enough, 4),))
    # without workers, one core is enough
    assert "input-bound" in run(20, busy=busy, processes=(trainer(0.95, 0),))


def at(pattern: str, ratio: float = 0.97) -> MemoryPattern:
    return MemoryPattern(pattern, 0, 0.0, 0, used_ratio=ratio, total_bytes=80 * GIB)


def test_near_oom_only_for_the_patterns_that_page_of_the_gpu_or_a_mig_instance() -> None:
    """GPUMemoryNearFull's patterns (pressure, sharing), not the ratio alone: a reservation
    held flat at 99% is shown (memory-reserved, info), not near-oom."""
    device = snapshot(0.0, [static(0)]).devices[0]

    def names(**patterns: object) -> list[str]:
        return [v.name for v in judge(replace(device, **patterns), History())]  # type: ignore[arg-type]

    assert names(memory_pattern=at("pressure")) == ["near-oom"]
    assert names(memory_pattern=at("sharing")) == ["near-oom"]
    for quiet in ("reserved", "not_full", "unowned"):
        assert "near-oom" not in names(memory_pattern=at(quiet, 0.99))
    assert names(memory_pattern=None) == []
    on_mig = names(mig_memory_patterns={2: at("pressure"), 3: at("reserved")})
    assert on_mig == ["near-oom"]


def test_memory_leaked_only_when_attribution_says_no_process() -> None:
    assert "memory-leaked" in run(3, busy=0.0, used=2 * GIB, processes=())
    assert "memory-leaked" not in run(3, busy=0.0, used=GIB // 2, processes=())
    assert "memory-leaked" not in run(3, busy=0.0, used=2 * GIB, processes=None)  # unknown
    assert "memory-leaked" not in run(3, busy=0.0, used=2 * GIB, processes=(trainer(0, 0),))


LEAK_USED = 4_831_838_208  # 4.5 GiB, as the H200 listed for the dead owner


def leak_verdicts(attribution: Attribution, busy: float = 0.0) -> dict[str, str]:
    """Verdicts (name: summary) on a GPU (minor 0) holding 4.5 GiB, with `attribution`."""
    history = History()
    last: Snapshot | None = None
    for t in range(10):
        base = snapshot(float(t), [replace(static(0), minor_number=0)])
        device = replace(
            base.devices[0],
            busy_seconds=busy * t,
            reading=DeviceReading(
                utilization=UtilizationReading(gpu_ratio=busy),
                memory=MemoryReading(total_bytes=141 * GIB, used_bytes=LEAK_USED),
            ),
            attribution=attribution,
        )
        last = replace(base, devices=(device,))
        history.add(last)
    assert last is not None
    return {v.name: v.summary for v in judge(last.devices[0], history)}


def test_memory_leaked_names_the_dead_owner_and_the_child_that_holds_the_device_file() -> None:
    dead = (DeadOwner(1567, "gone", LEAK_USED),)
    holders = (DeviceHolder(1592, "python3", "alice"),)
    found = leak_verdicts(Attribution((), LEAK_USED, 0, dead_owners=dead, holders=holders))
    assert (
        found["memory-leaked"]
        == "pid 1567 exited; pid 1592 (python3) still holds /dev/nvidia0: end it."
    )
    assert "idle-allocated" not in found  # a dead owner's GPU is not idle-allocated
    nobody = leak_verdicts(
        Attribution((), LEAK_USED, 0, dead_owners=dead, holders=(), holders_complete=True)
    )
    assert nobody["memory-leaked"] == (
        "pid 1567 exited; no process holds the device files: reset the GPU."
    )
    unread = leak_verdicts(Attribution((), LEAK_USED, 0, dead_owners=dead, holders=()))
    assert unread["memory-leaked"] == (
        "pid 1567 exited; no holder found, but the holder scan is incomplete: find the holder "
        "with sudo fuser -v /dev/nvidia*."
    )
    zombie = (DeadOwner(1567, "zombie", LEAK_USED), DeadOwner(1570, "gone", None))
    unscanned = leak_verdicts(Attribution((), LEAK_USED, 0, dead_owners=zombie))
    assert unscanned["memory-leaked"] == (
        "pids 1567, 1570 exited; 4.5 GiB stays taken until the process that holds its device "
        "file ends."
    )
    listed_none = leak_verdicts(Attribution((), LEAK_USED, 0, holders=holders))
    assert listed_none["memory-leaked"].startswith("4.5 GiB of memory is held by no live process")
    # a live owner beside the dead one: no leak, and an idle one keeps its idle-allocated
    live = ProcessSample(pid="1600", process="python", user="alice", context="compute")
    beside = leak_verdicts(Attribution((live,), 0, 1, dead_owners=dead, holders=holders))
    assert "memory-leaked" not in beside and "idle-allocated" in beside


def test_memory_leaked_says_reset_only_after_a_complete_scan_and_names_candidates() -> None:
    """As shipped (uid 0 without capabilities) the scan is denied the root processes: no
    reset, the candidates by process group or session, and the fuser command."""
    dead = (DeadOwner(1567, "gone", LEAK_USED),)
    denied = Attribution(
        (),
        LEAK_USED,
        0,
        dead_owners=dead,
        holders=(),
        holders_incomplete=("denied",),
        denied_processes=80,
        holder_candidates=(DeviceHolder(1592, "python3", "root"),),
        holder_candidate_count=1,
    )
    assert leak_verdicts(denied)["memory-leaked"] == (
        "pid 1567 exited; no holder found, but the exporter may not read every process's "
        "descriptors (80 denied); pid 1592 (python3), in a dead owner's process group or "
        "session, probably holds /dev/nvidia0: check with sudo fuser -v /dev/nvidia*."
    )
    budget = replace(
        denied, holders_incomplete=("budget",), holder_candidates=(), holder_candidate_count=0
    )
    assert leak_verdicts(budget)["memory-leaked"] == (
        "pid 1567 exited; no holder found, but the holder scan stopped at its time budget: "
        "find the holder with sudo fuser -v /dev/nvidia*."
    )
    for attribution in (denied, budget):
        assert "reset" not in leak_verdicts(attribution)["memory-leaked"]


def test_memory_leaked_names_a_few_holders_and_says_how_many_more() -> None:
    """One job forked 2,000 workers that hold the device file: five named, the rest counted."""
    dead = (DeadOwner(1567, "gone", LEAK_USED),)
    oldest = tuple(DeviceHolder(2000 + i, "python3", "alice") for i in range(5))
    many = Attribution((), LEAK_USED, 0, dead_owners=dead, holders=oldest, holder_count=2001)
    assert leak_verdicts(many)["memory-leaked"] == (
        "pid 1567 exited; pids 2000 (python3), 2001 (python3), 2002 (python3), 2003 (python3), "
        "2004 (python3) and 1,996 more still hold /dev/nvidia0: end them."
    )


def test_idle_allocated_when_a_process_holds_an_idle_gpu() -> None:
    held = (trainer(0.0, 0),)
    assert "idle-allocated" in run(10, busy=0.01, util=0.0, processes=held)
    assert "idle-allocated" not in run(10, busy=0.01, util=0.3, processes=held)
    assert "idle-allocated" not in run(10, busy=0.01, util=0.0, processes=())


def test_busy_but_sms_idle_needs_gpm() -> None:
    assert "busy-but-sms-idle" in run(10, busy=0.9, sm=0.1)
    assert "busy-but-sms-idle" not in run(10, busy=0.9, sm=0.3)
    assert "busy-but-sms-idle" not in run(10, busy=0.9, sm=None)


def test_busy_verdicts_wait_for_history_and_leave_mig_gpus_out() -> None:
    starved = (trainer(4.0, 0),)
    assert "input-bound" not in run(2, busy=0.1, processes=starved)  # one busy point only
    assert "input-bound" not in run(20, busy=0.1, processes=starved, mig=MigReading())


def throttled(
    seconds: int,
    active: Callable[[int], set[str]],
    *,
    celsius: float = 70.0,
    watts: float = 697.0,
    slowdown: float | None = 90.0,
) -> dict[str, str]:
    """Verdicts (name: summary and advice) on one GPU after `seconds` of samples a second
    apart, `active(t)` the clocks-event reasons active at second t."""
    history = History()
    last: Snapshot | None = None
    for t in range(seconds):
        base = snapshot(float(t), [replace(static(0), slowdown_temperature_celsius=slowdown)])
        reasons = {reason: reason in active(t) for reason in THROTTLE_REASONS}
        device = replace(
            base.devices[0],
            busy_seconds=float(t),
            reading=DeviceReading(
                utilization=UtilizationReading(gpu_ratio=1.0),
                memory=MemoryReading(total_bytes=80 * GIB, used_bytes=10 * GIB),
                temperature=TemperatureReading(gpu_celsius=celsius),
                power=PowerReading(watts=watts, limit_watts=700.0),
                clocks=ClocksReading(throttle_reasons=reasons),
            ),
        )
        last = replace(base, devices=(device,))
        history.add(last)
    assert last is not None
    return {v.name: f"{v.summary} {v.advice}" for v in judge(last.devices[0], history)}


def share(fraction: float, *reasons: str) -> Callable[[int], set[str]]:
    """`reasons` active in the first `fraction` of every 20 seconds."""
    return lambda t: set(reasons) if t % 20 < 20 * fraction else set()


def test_a_gpu_at_its_power_cap_says_so_with_the_watts_and_what_to_do() -> None:
    found = throttled(20, share(1.0, "sw_power_cap"))
    assert "sw_power_cap" in found["power-capped"]
    assert "697 of 700 W" in found["power-capped"] and "nvidia-smi -pl" in found["power-capped"]
    # the share of the window is the thermal rule's, for power too
    assert thresholds.POWER_CAPPED_RATIO == thresholds.THERMAL_THROTTLE_RATIO == 0.25
    assert "power-capped" in throttled(20, share(0.3, "sw_power_cap"))
    assert "power-capped" not in throttled(20, share(0.2, "sw_power_cap"))
    assert "power-capped" not in throttled(2, share(1.0, "sw_power_cap"))  # too little history


def test_a_bursty_job_at_its_power_cap_says_the_bursts_reach_the_limit() -> None:
    """Seen on an H200: a starved loop's 45 ms bursts held sw_power_cap 83% of the time at
    a mean of 305 of 700 W."""
    found = throttled(20, share(0.85, "sw_power_cap"), watts=305.0)["power-capped"]
    assert "in bursts: the draw averages 305 of 700 W" in found
    assert "peaks reach the limit" in found
    near = throttled(20, share(0.85, "sw_power_cap"), watts=0.8 * 700)["power-capped"]
    assert "560 of 700 W" in near and "bursts" not in near  # not far below: as it is


@pytest.mark.parametrize("reason", ["sw_thermal_slowdown", "hw_thermal_slowdown"])
def test_thermal_throttling_above_the_rules_share_names_its_reason(reason: str) -> None:
    found = throttled(20, share(0.3, reason), celsius=91.0)
    assert reason in found["thermal-throttled"]
    assert "30% of the last 5 minutes" in found["thermal-throttled"]
    assert "91 °C (slowdown at 90 °C)" in found["thermal-throttled"]
    assert "airflow" in found["thermal-throttled"]
    assert "thermal-throttled" not in throttled(20, share(0.2, reason))
    assert "hw-slowdown" not in throttled(20, share(1.0, reason, "hw_slowdown"))


def test_the_power_brake_shows_at_once_and_a_bare_hw_slowdown_on_its_own() -> None:
    brake = throttled(3, lambda t: {"hw_power_brake_slowdown", "hw_slowdown"} if t == 2 else set())
    assert "hw_power_brake_slowdown" in brake["power-brake"] and "ipmitool" in brake["power-brake"]
    assert "hw-slowdown" not in brake  # the brake explains it
    assert "power-brake" not in throttled(
        3, lambda t: set() if t == 2 else {"hw_power_brake_slowdown"}
    )
    assert "hw_slowdown" in throttled(3, lambda t: {"hw_slowdown"})["hw-slowdown"]
    quiet = throttled(20, lambda t: {"gpu_idle", "applications_clocks_setting", "sync_boost"})
    assert quiet == {}


def test_near_slowdown_within_the_margin_of_the_gpus_own_threshold() -> None:
    edge = 90.0 - thresholds.SLOWDOWN_MARGIN_CELSIUS
    near = throttled(3, lambda t: set(), celsius=edge)
    assert "85 °C, within 5 °C of the slowdown temperature (90 °C)" in near["near-slowdown"]
    assert "near-slowdown" not in throttled(3, lambda t: set(), celsius=edge - 1)
    assert "at or above" in throttled(3, lambda t: set(), celsius=92.0)["near-slowdown"]
    assert "near-slowdown" not in throttled(3, lambda t: set(), celsius=95.0, slowdown=None)


def test_each_mig_instance_has_its_own_verdicts() -> None:
    held = (
        replace(trainer(0.0, 0), gpu_instance="2"),
        replace(trainer(0.0, 0), pid="43", gpu_instance="1"),
    )
    snap = mig_snapshot(
        {
            1: ("1g.10gb", 10 * GIB - 1, 10 * GIB, 0.9),  # full
            2: ("1g.10gb", GIB, 10 * GIB, 0.01),  # held, idle
            3: ("1g.10gb", GIB, 10 * GIB, 0.01),  # idle, nobody on it
        },
        held,
    )
    history = History()
    history.add(snap)
    device = replace(snap.devices[0], mig_memory_patterns={1: at("pressure", 1.0)})
    verdicts = {
        gi: [v.name for v in found] for gi, found in judge_instances(device, history).items()
    }
    assert verdicts == {1: ["near-oom"], 2: ["idle-allocated"], 3: []}
    # without attribution, idleness is not judged; without MIG, there is nothing
    unknown = replace(device, attribution=None)
    assert [v.name for v in judge_instances(unknown, history)[2]] == []
    assert judge_instances(replace(device, reading=DeviceReading()), history) == {}
