"""What the live page says about each GPU: verdicts with one line of plain advice.

Each verdict is the alert rule of the same idea, judged from the latest Snapshot and the
`History` of the last `VERDICT_WINDOW_SECONDS`, with the thresholds of
`sampling.thresholds` (the rules' own numbers). Nothing is judged without data: a
verdict whose inputs are missing (no busy counter, no process attribution, no GPM) is
not given, never assumed.

The busy-ratio verdicts (input-bound, idle-allocated, busy-but-sms-idle) follow the
rules in leaving MIG GPUs out: NVML reports no utilization there, and a process runs on
one instance, not on the whole GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpu_exporter.model import DeviceSample, ProcessSample
from gpu_exporter.sampling import thresholds
from gpu_exporter.sampling.history import History, gpu_key

VerdictName = Literal[
    "input-bound", "memory-leaked", "near-oom", "idle-allocated", "busy-but-sms-idle"
]
MIN_POINTS = 3
"""Busy and SM verdicts need at least this many points of history."""

ADVICE: dict[VerdictName, str] = {
    "input-bound": "The input pipeline cannot keep up: raise the DataLoader's num_workers, "
    "set pin_memory=True, and check the data loader (decoding, augmentation, storage).",
    "memory-leaked": "Find the holder with `fuser -v /dev/nvidia*` (a crashed job's "
    "leftover process, or a container still running) and end it.",
    "near-oom": "The next allocation may fail with CUDA out of memory: lower the batch "
    "size, or use mixed precision or gradient checkpointing.",
    "idle-allocated": "Release the GPU, or find out why the job does not use it.",
    "busy-but-sms-idle": "Kernels too small to fill the GPU: raise the batch size, or use "
    "CUDA graphs or torch.compile to cut launch overhead.",
}
"""One line of plain advice per verdict."""


@dataclass(frozen=True)
class GpuVerdict:
    """One verdict on one GPU: what is seen (with its numbers) and what to do."""

    name: VerdictName
    summary: str
    advice: str


def judge(device: DeviceSample, history: History) -> tuple[GpuVerdict, ...]:
    """The verdicts on one GPU, in a stable order (most urgent first)."""
    if not device.up or device.reading is None or device.static is None:
        return ()
    found = [
        _near_oom(device),
        _memory_leaked(device),
        *_busy_verdicts(device, history),
    ]
    return tuple(v for v in found if v is not None)


def gib(value: float) -> str:
    """Bytes as GiB, one decimal: "30.0 GiB"."""
    return f"{value / 1024**3:.1f} GiB"


def _verdict(name: VerdictName, summary: str) -> GpuVerdict:
    return GpuVerdict(name, summary, ADVICE[name])


def _near_oom(device: DeviceSample) -> GpuVerdict | None:
    limit = thresholds.NEAR_OOM_MEMORY_RATIO
    memory = device.reading.memory if device.reading else None
    if memory is not None and memory.used_bytes is not None and memory.total_bytes:
        ratio = memory.used_bytes / memory.total_bytes
        if ratio > limit:
            return _verdict(
                "near-oom",
                f"Memory {ratio:.0%} full ({gib(memory.used_bytes)} of "
                f"{gib(memory.total_bytes)}), above {limit:.0%}.",
            )
    mig = device.reading.mig if device.reading else None
    for gi, instance in sorted((mig.instances if mig else {}).items()):
        used, total = instance.memory_used_bytes, instance.memory_total_bytes
        if used is not None and total and used / total > limit:
            return _verdict(
                "near-oom",
                f"MIG instance {gi}: memory {used / total:.0%} full ({gib(used)} of "
                f"{gib(total)}), above {limit:.0%}.",
            )
    return None


def _memory_leaked(device: DeviceSample) -> GpuVerdict | None:
    attribution = device.attribution
    memory = device.reading.memory if device.reading else None
    if attribution is None or memory is None or memory.used_bytes is None:
        return None
    if attribution.process_count == 0 and memory.used_bytes > thresholds.LEAKED_MEMORY_BYTES:
        return _verdict(
            "memory-leaked",
            f"{gib(memory.used_bytes)} of memory is held by no live process on this GPU.",
        )
    return None


def _busy_verdicts(device: DeviceSample, history: History) -> list[GpuVerdict | None]:
    reading = device.reading
    if reading is None or reading.mig is not None or device.busy_seconds is None:
        return []
    window = thresholds.VERDICT_WINDOW_SECONDS
    busy, points = history.mean(gpu_key(device), "busy_ratio", window)
    if busy is None or points < MIN_POINTS:
        return []
    minutes = f"{window / 60:.0f} minutes"
    out: list[GpuVerdict | None] = [_input_bound(device, history, busy, minutes)]
    attribution = device.attribution
    if attribution is not None and attribution.process_count > 0:
        utilization, _ = history.mean(gpu_key(device), "utilization_ratio", window)
        idle = thresholds.IDLE_BUSY_RATIO
        if busy < idle and (utilization is None or utilization < idle):
            out.append(
                _verdict(
                    "idle-allocated",
                    f"{attribution.process_count} process(es) hold the GPU, but it was busy "
                    f"{busy:.0%} of the last {minutes}.",
                )
            )
    sm, sm_points = history.mean(gpu_key(device), "sm_ratio", window)
    if (
        sm is not None
        and sm_points >= MIN_POINTS
        and busy > thresholds.BUSY_BUT_SMS_IDLE_BUSY_RATIO
        and sm < thresholds.BUSY_BUT_SMS_IDLE_SM_RATIO
    ):
        out.append(
            _verdict(
                "busy-but-sms-idle",
                f"A kernel ran {busy:.0%} of the last {minutes}, but only {sm:.0%} of the SMs "
                "had work.",
            )
        )
    return out


def _input_bound(
    device: DeviceSample, history: History, busy: float, minutes: str
) -> GpuVerdict | None:
    if device.attribution is None or busy >= thresholds.INPUT_BOUND_BUSY_RATIO:
        return None
    for process in device.attribution.processes:
        cores = history.cpu_cores(gpu_key(device), process.pid)
        if cores is not None and cores >= _cores_needed(process):
            workers = process.workers or 0
            return _verdict(
                "input-bound",
                f"Busy {busy:.0%} of the last {minutes} while {process.process or 'pid'} "
                f"(pid {process.pid}) burns {cores:.1f} CPU cores with {workers} worker(s).",
            )
    return None


def _cores_needed(process: ProcessSample) -> float:
    """GPUInputBound: 0.9 of a core per worker, of one core without workers."""
    return thresholds.INPUT_BOUND_CORES_PER_WORKER * max(process.workers or 0, 1)
