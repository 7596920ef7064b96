"""The live page's verdicts, judged from synthetic samples and their history, at the
thresholds' edges (sampling/thresholds.py) and with missing data."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.history_memory import snapshot, static
from gpu_exporter.model import (
    ActivityTotals,
    Attribution,
    DeviceReading,
    MemoryReading,
    MigInstanceReading,
    MigReading,
    ProcessSample,
    Snapshot,
    UtilizationReading,
)
from gpu_exporter.sampling import thresholds
from gpu_exporter.sampling.history import History
from gpu_exporter.sampling.verdicts import judge

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


def test_near_oom_above_the_ratio_of_the_gpu_or_a_mig_instance() -> None:
    assert "near-oom" in run(3, busy=0.9, used=int(80 * GIB * 0.96))
    assert "near-oom" not in run(3, busy=0.9, used=int(80 * GIB * 0.94))
    full = MigReading(instances={2: MigInstanceReading(10 * GIB, 10 * GIB - 1)})
    assert "near-oom" in run(3, busy=0.9, mig=full)


def test_memory_leaked_only_when_attribution_says_no_process() -> None:
    assert "memory-leaked" in run(3, busy=0.0, used=2 * GIB, processes=())
    assert "memory-leaked" not in run(3, busy=0.0, used=GIB // 2, processes=())
    assert "memory-leaked" not in run(3, busy=0.0, used=2 * GIB, processes=None)  # unknown
    assert "memory-leaked" not in run(3, busy=0.0, used=2 * GIB, processes=(trainer(0, 0),))


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
