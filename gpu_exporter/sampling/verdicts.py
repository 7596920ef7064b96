"""What the live page says about each GPU: verdicts with one line of plain advice.

Each verdict is the alert rule of the same idea, judged from the latest Snapshot and the
`History` of the last `VERDICT_WINDOW_SECONDS`, with the thresholds of
`sampling.thresholds` (the rules' own numbers). Nothing is judged without data: a
verdict whose inputs are missing (no busy counter, no process attribution, no GPM) is
not given, never assumed.

The busy-ratio verdicts (input-bound, idle-allocated, busy-but-sms-idle) follow the
rules in leaving MIG GPUs out: NVML reports no utilization there, and a process runs on
one instance, not on the whole GPU. `judge_instances` gives each MIG instance its own.

Clocks held down (`gpu_throttle_active`): the power brake as soon as it is engaged
(GPUPowerBrake), heat and the power limit for more than a share of the window
(GPUThermalThrottling's share, kept by the history as `thermal_throttled_ratio` and
`power_capped_ratio`), a bare `hw_slowdown` at once; and a temperature near the GPU's
own slowdown threshold before it throttles. Each summary names the driver's reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from gpu_exporter.model import (
    Attribution,
    DeviceHolder,
    DeviceSample,
    MemoryHolder,
    MemoryPattern,
    ProcessSample,
)
from gpu_exporter.records import Record
from gpu_exporter.sampling import thresholds
from gpu_exporter.sampling.history import History, gpu_key

VerdictName = Literal[
    "power-brake",
    "thermal-throttled",
    "hw-slowdown",
    "near-slowdown",
    "power-capped",
    "input-bound",
    "memory-leaked",
    "near-oom",
    "ended-on-full-memory",
    "memory-reserved",
    "idle-allocated",
    "busy-but-sms-idle",
]
MIN_POINTS = 3
"""Busy and SM verdicts need at least this many points of history."""

ADVICE: dict[VerdictName, str] = {
    "power-brake": "The chassis or a power supply asserts the brake: check the power "
    "supplies and the BMC's event log (`ipmitool sel list`), then reseat or replace the "
    "failed unit; the GPU runs slowly until the signal clears.",
    "thermal-throttled": "Cool the GPU: check its fans and airflow, the inlet temperature "
    "and blocked filters or blanking panels, and compare with its neighbours "
    "(`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`).",
    "hw-slowdown": "The board slows itself (heat or an external power signal): run "
    "`nvidia-smi -q -d PERFORMANCE` for the detail, and check cooling and power cabling.",
    "near-slowdown": "Clocks drop at the slowdown temperature: improve the airflow or "
    "lower the inlet temperature now, or cap the power (`nvidia-smi -pl`) to run cooler.",
    "power-capped": "Expected under full load. If the limit is below the board's default "
    "(`nvidia-smi -q -d POWER`), raise it with `nvidia-smi -pl`; if the host's power "
    "budget set it, the job runs at its speed for that budget.",
    "input-bound": "The input pipeline cannot keep up: raise the DataLoader's `num_workers`, "
    "set `pin_memory=True`, and check the data loader (decoding, augmentation, storage).",
    "memory-leaked": "End the process that still holds the GPU's device file (a crashed "
    "job's forked child, a container still running); `sudo fuser -v /dev/nvidia*` lists "
    "them all. Only if neither the exporter's complete scan nor fuser finds a holder of its "
    "/dev/nvidiaN, reset it (`nvidia-smi -r -i <gpu>`).",
    "near-oom": "The next allocation may fail with CUDA out of memory: lower the batch "
    "size, or use mixed precision or gradient checkpointing; for fragmentation (much "
    "reserved, little allocated in `torch.cuda.memory_summary()`) set "
    "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`; when shared, give each job its own "
    "GPU or cap each one's memory.",
    "ended-on-full-memory": "Read the job's log (`kubectl logs --previous`, the Slurm "
    "output): `CUDA out of memory` confirms it; then a smaller batch, mixed precision or "
    "gradient checkpointing, or a larger GPU.",
    "memory-reserved": "Nothing to do: the framework manages the pool it reserved. Whether "
    "the job is short of memory inside it, only the framework's own statistics say "
    "(`torch.cuda.memory_stats()`, `tf.config.experimental.get_memory_info`, JAX "
    "`memory_stats()`, vLLM's KV-cache usage).",
    "idle-allocated": "Release the GPU, or find out why the job does not use it.",
    "busy-but-sms-idle": "Kernels too small to fill the GPU: raise the batch size, or use "
    "CUDA graphs or torch.compile to cut launch overhead.",
}
"""One line of plain advice per verdict."""

LEVEL: dict[VerdictName, str] = {"memory-reserved": "info"}
"""A verdict's level where it is not "warning": an info verdict is shown, not a problem."""


@dataclass(frozen=True, repr=False)
class GpuVerdict(Record):
    """One verdict on one GPU: what is seen (with its numbers) and what to do."""

    name: VerdictName
    summary: str
    advice: str

    @property
    def level(self) -> str:
        """ "info" (shown, nothing wrong) or "warning"."""
        return LEVEL.get(self.name, "warning")


def judge(device: DeviceSample, history: History) -> tuple[GpuVerdict, ...]:
    """The verdicts on one GPU, in a stable order (most urgent first)."""
    if not device.up or device.reading is None or device.static is None:
        return ()
    found = [
        *_throttled(device, history),
        _near_slowdown(device),
        *_memory(device.memory_pattern, ""),
        *_memory_instances(device),
        _memory_leaked(device),
        *_busy_verdicts(device, history),
    ]
    return tuple(v for v in found if v is not None)


def gib(value: float) -> str:
    """Bytes as GiB, one decimal: "30.0 GiB"."""
    return f"{value / 1024**3:.1f} GiB"


def _verdict(name: VerdictName, summary: str) -> GpuVerdict:
    return GpuVerdict(name, summary, ADVICE[name])


def _memory_instances(device: DeviceSample) -> list[GpuVerdict]:
    """A MIG GPU's near-oom: every instance at risk, in one verdict (each instance's own
    verdicts are `judge_instances`')."""
    risky = [
        f"{gi} ({p.used_ratio:.0%}, {p.pattern})"
        for gi, p in sorted(device.mig_memory_patterns.items())
        if p.pattern in AT_RISK and p.used_ratio is not None
    ]
    if not risky:
        return []
    instances = "MIG instance " if len(risky) == 1 else "MIG instances "
    return [_verdict("near-oom", f"{instances}{', '.join(risky)}: near full and at risk.")]


AT_RISK = ("pressure", "sharing")
"""The patterns GPUMemoryNearFull pages for."""


def _memory(pattern: MemoryPattern | None, where: str) -> list[GpuVerdict]:
    """GPUMemoryNearFull's patterns (near-oom), a likely OOM death (GPUJobEndedWhileMemoryFull)
    and a reservation held flat (memory-reserved, info): from the exporter's per-interval
    judgement (`memory_patterns`); `where` is "" for a GPU, "this instance" for one."""
    if pattern is None:
        return []
    out: list[GpuVerdict] = []
    ratio = f"{pattern.used_ratio:.0%}" if pattern.used_ratio is not None else "near full"
    if pattern.pattern == "pressure":
        how = (
            f"it dropped and climbed back near full {pattern.recent_drops} times in the last "
            f"{thresholds.MEMORY_PATTERN_WINDOW_SECONDS / 60:.0f} minutes (an allocator "
            "freeing its cache and retrying)"
            if pattern.recent_drops >= thresholds.MEMORY_PRESSURE_DROPS
            else "it grew into the ceiling"
        )
        out.append(_verdict("near-oom", f"Memory {ratio} full and under pressure: {how}."))
    elif pattern.pattern == "sharing":
        shared = [h for h in pattern.holders if h.memory_bytes and pattern.used_ratio is not None]
        named = " and ".join(_who(h) for h in shared[:3]) or "several processes"
        arrived = " (one arrived while it was near full)" if pattern.arrived else ""
        out.append(_verdict("near-oom", f"Memory {ratio} full, shared by {named}{arrived}."))
    elif pattern.pattern == "reserved" and pattern.holders:
        top = pattern.holders[0]
        total = pattern.total_bytes
        share = f" ({top.memory_bytes / total:.0%})" if total else ""
        name = f"pid {top.pid}" + (f" ({top.process})" if top.process else "")
        held = (
            "reserved {gib} at start and holds it flat"
            if top.at_start
            else "holds {gib} flat for " + _minutes(top.flat_seconds)
        ).format(gib=f"{top.memory_bytes / 1024**3:.0f} GiB{share}")
        out.append(
            _verdict(
                "memory-reserved",
                f"{name} {held}: the framework manages it; an out-of-memory inside its pool "
                "is invisible to the driver.",
            )
        )
    for ended in pattern.recent_exits:
        out.append(
            _verdict(
                "ended-on-full-memory",
                f"A job ended while {where or 'the GPU'} was {ended.used_ratio:.0%} full: "
                f"{_who(ended.holder, owner=True)}, holding {gib(ended.holder.memory_bytes)}: "
                "most likely CUDA out of memory; its log says which.",
            )
        )
    return out


def _who(h: MemoryHolder, *, owner: bool = False) -> str:
    """ "pid 4242 (python, 55 GiB)", or with its owner "pid 4242 (python), user alice,
    pod ml/train-0"."""
    name = f"pid {h.pid}"
    if not owner:
        return f"{name} ({h.process + ', ' if h.process else ''}{gib(h.memory_bytes)})"
    name += f" ({h.process})" if h.process else ""
    name += f", user {h.user}" if h.user else ""
    if h.pod:
        name += f", pod {h.namespace}/{h.pod}"
    elif h.container_id:
        name += f", container {h.container_id[:12]}"
    return name


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 90 else f"{seconds:.0f} s"


def _throttled(device: DeviceSample, history: History) -> list[GpuVerdict | None]:
    """The clocks held down: by the power brake now (GPUPowerBrake), by heat or the power
    limit for more than a share of the window (GPUThermalThrottling), by the board's own
    hardware slowdown now. Each names the reason as the driver reports it."""
    reading = device.reading
    reasons = reading.clocks.throttle_reasons if reading and reading.clocks else None
    if not reasons:
        return []
    active = sorted(name for name, on in reasons.items() if on)
    out: list[GpuVerdict | None] = []
    if reasons.get(thresholds.POWER_BRAKE_REASON):
        out.append(
            _verdict(
                "power-brake",
                f"Clocks held down by {thresholds.POWER_BRAKE_REASON}: the power brake is engaged.",
            )
        )
    window = thresholds.VERDICT_WINDOW_SECONDS
    minutes = f"{window / 60:.0f} minutes"
    heat, points = history.mean(gpu_key(device), "thermal_throttled_ratio", window)
    if heat is not None and points >= MIN_POINTS and heat > thresholds.THERMAL_THROTTLE_RATIO:
        now = [r for r in thresholds.THERMAL_THROTTLE_REASONS if reasons.get(r)]
        names = now or list(thresholds.THERMAL_THROTTLE_REASONS)
        out.append(
            _verdict(
                "thermal-throttled",
                f"Clocks held down by heat ({' or '.join(names)}) {heat:.0%} of the last "
                f"{minutes}{_temperature(device)}.",
            )
        )
    thermal_or_brake = {*thresholds.THERMAL_THROTTLE_REASONS, thresholds.POWER_BRAKE_REASON}
    if reasons.get("hw_slowdown") and not thermal_or_brake & set(active):
        out.append(_verdict("hw-slowdown", "Clocks held down by hw_slowdown."))
    capped, points = history.mean(gpu_key(device), "power_capped_ratio", window)
    if capped is not None and points >= MIN_POINTS and capped > thresholds.POWER_CAPPED_RATIO:
        out.append(
            _verdict(
                "power-capped",
                f"Clocks held down by sw_power_cap (the power limit) {capped:.0%} of the "
                f"last {minutes}{_watts(device, history)}.",
            )
        )
    return out


def _watts(device: DeviceSample, history: History) -> str:
    """ ": 690 of 700 W", or, when the mean draw of the window is far below the limit
    (POWER_BURSTS_RATIO), that bursts reach it; "" when the power is not known."""
    power = device.reading.power if device.reading else None
    if power is None or power.watts is None or not power.limit_watts:
        return ""
    limit = power.limit_watts
    mean, _ = history.mean(gpu_key(device), "power_watts", thresholds.VERDICT_WINDOW_SECONDS)
    if mean is not None and mean < thresholds.POWER_BURSTS_RATIO * limit:
        return (
            f", in bursts: the draw averages {mean:.0f} of {limit:.0f} W, and its peaks "
            "reach the limit (short kernels between waits for input)"
        )
    return f": {power.watts:.0f} of {limit:.0f} W"


def _temperature(device: DeviceSample) -> str:
    """ ", now 88 °C (slowdown at 90 °C)", or "" when the temperature is not known."""
    reading, static = device.reading, device.static
    celsius = reading.temperature.gpu_celsius if reading and reading.temperature else None
    if celsius is None:
        return ""
    slowdown = static.slowdown_temperature_celsius if static else None
    limit = f" (slowdown at {slowdown:.0f} °C)" if slowdown else ""
    return f", now {celsius:.0f} °C{limit}"


def _near_slowdown(device: DeviceSample) -> GpuVerdict | None:
    """The temperature within SLOWDOWN_MARGIN_CELSIUS of the slowdown threshold."""
    reading, static = device.reading, device.static
    celsius = reading.temperature.gpu_celsius if reading and reading.temperature else None
    slowdown = static.slowdown_temperature_celsius if static else None
    if celsius is None or not slowdown:
        return None
    if celsius < slowdown - thresholds.SLOWDOWN_MARGIN_CELSIUS:
        return None
    where = (
        "at or above"
        if celsius >= slowdown
        else f"within {thresholds.SLOWDOWN_MARGIN_CELSIUS:.0f} °C of"
    )
    return _verdict(
        "near-slowdown", f"{celsius:.0f} °C, {where} the slowdown temperature ({slowdown:.0f} °C)."
    )


@dataclass(frozen=True, repr=False)
class Leak(Record):
    """Memory held by no live process: GPUMemoryLeaked's condition on one GPU."""

    used_bytes: int
    attribution: Attribution
    holders: tuple[DeviceHolder, ...] | None  # of the device file, dead owners left out;
    # None: not scanned yet
    holder_count: int = 0  # every holder, dead owners left out (`holders` names a few)


def leak(device: DeviceSample) -> Leak | None:
    """More than the threshold used while no live process is listed: NVML lists none, or
    every owner it lists is dead (a forked child that holds the device files is no owner).
    The memory-leaked verdict and the recommended action both ask here."""
    attribution = device.attribution
    memory = device.reading.memory if device.reading and device.up else None
    if attribution is None or memory is None or memory.used_bytes is None:
        return None
    if attribution.process_count > 0 or memory.used_bytes <= thresholds.LEAKED_MEMORY_BYTES:
        return None
    owners = {o.pid for o in attribution.dead_owners}
    holders = attribution.holders
    count = attribution.holder_count
    if holders is not None:
        kept = tuple(h for h in holders if h.pid not in owners)
        count -= len(holders) - len(kept)
        holders = kept
    return Leak(memory.used_bytes, attribution, holders, max(count, len(holders or ())))


def _memory_leaked(device: DeviceSample) -> GpuVerdict | None:
    """Names the dead owners and, once scanned, the holders of the device file."""
    found = leak(device)
    if found is None:
        return None
    minor = device.static.minor_number if device.static else None
    return _verdict("memory-leaked", _leak_summary(found, minor))


FUSER = "sudo fuser -v /dev/nvidia*"


def _leak_summary(found: Leak, minor: int | None) -> str:
    """ "pid 1567 exited; pid 1592 (python3) still holds /dev/nvidia0: end it.", or "...: no
    process holds the device files: reset the GPU." only once a scan read every process and
    was denied none; otherwise what is known (candidates by process group or session) and
    the fuser command, never a reset."""
    a = found.attribution
    dead = a.dead_owners
    exited = (
        f"{_pids(str(o.pid) for o in dead)} exited; "
        if dead
        else f"{gib(found.used_bytes)} of memory is held by no live process; "
    )
    path = f"/dev/nvidia{minor}" if minor is not None else "the device file"
    holders = found.holders
    if holders is None:
        return (
            f"{exited}{gib(found.used_bytes)} stays taken until the process that holds its "
            "device file ends."
        )
    if holders:
        named = _some(holders, found.holder_count)
        verb, them = ("holds", "it") if found.holder_count == 1 else ("hold", "them")
        return f"{exited}{named} still {verb} {path}: end {them}."
    if a.holders_complete:
        return f"{exited}no process holds the device files: reset the GPU."
    why = []
    if "denied" in a.holders_incomplete:
        why.append(
            f"the exporter may not read every process's descriptors ({a.denied_processes} denied)"
        )
    if "budget" in a.holders_incomplete:
        why.append("the holder scan stopped at its time budget")
    unknown = f"no holder found, but {' and '.join(why) or 'the holder scan is incomplete'}"
    if a.holder_candidates:
        named = _some(a.holder_candidates, a.holder_candidate_count)
        verb = "probably holds" if a.holder_candidate_count == 1 else "probably hold"
        return (
            f"{exited}{unknown}; {named}, in a dead owner's process group or session, "
            f"{verb} {path}: check with {FUSER}."
        )
    return f"{exited}{unknown}: find the holder with {FUSER}."


def _some(holders: Iterable[DeviceHolder], count: int) -> str:
    """ "pid 1592 (python3)", or "pids 1592 (python3), 1600 (python3) and 1,998 more"."""
    listed = [f"{h.pid} ({h.process})" if h.process else str(h.pid) for h in holders]
    more = count - len(listed)
    if more <= 0:
        return _pids(listed)
    return f"pids {', '.join(listed)} and {more:,} more"


def _pids(names: Iterable[str]) -> str:
    """ "pid 1567" or "pids 1567, 1570"."""
    listed = list(names)
    return f"pid {listed[0]}" if len(listed) == 1 else f"pids {', '.join(listed)}"


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


def judge_instances(device: DeviceSample, history: History) -> dict[int, tuple[GpuVerdict, ...]]:
    """The verdicts on each MIG GPU instance of a GPU, by GPU-instance id: its own memory
    pattern's (near-oom, memory-reserved, ended-on-full-memory), and idle-allocated and
    input-bound on its graphics-engine activity over the latest GPM interval (the page
    keeps no history per instance) with the processes on it. Empty for a GPU without MIG."""
    reading = device.reading
    mig = reading.mig if reading and device.up else None
    if mig is None:
        return {}
    processes = device.attribution.processes if device.attribution else None
    out: dict[int, tuple[GpuVerdict, ...]] = {}
    for gi in sorted({d.gpu_instance for d in mig.devices} | set(mig.instances)):
        instance = mig.instances.get(gi)
        found: list[GpuVerdict | None] = []
        if instance is not None:
            found += _memory(device.mig_memory_patterns.get(gi), "this instance")
            gpm = instance.gpm
            active = gpm.graphics_engine_ratio if gpm else None
            mine = [p for p in processes or () if p.gpu_instance == str(gi)]
            if active is not None and processes is not None:
                found += _instance_activity(device, history, active, mine)
        out[gi] = tuple(v for v in found if v is not None)
    return out


def _instance_activity(
    device: DeviceSample, history: History, active: float, mine: list[ProcessSample]
) -> list[GpuVerdict | None]:
    if not mine:
        return []
    out: list[GpuVerdict | None] = []
    if active < thresholds.IDLE_BUSY_RATIO:
        out.append(
            _verdict(
                "idle-allocated",
                f"{len(mine)} process(es) hold this instance, but it is {active:.0%} active.",
            )
        )
    if active < thresholds.INPUT_BOUND_BUSY_RATIO:
        for process in mine:
            cores = history.cpu_cores(gpu_key(device), process.pid)
            if cores is not None and cores >= _cores_needed(process):
                out.append(
                    _verdict(
                        "input-bound",
                        f"{active:.0%} active while {process.process or 'pid'} (pid "
                        f"{process.pid}) burns {cores:.1f} CPU cores with "
                        f"{process.workers or 0} worker(s).",
                    )
                )
                break
    return out
