"""One answer per GPU: what to do now, and which signal decided it.

`gpu_recommended_action{action, reason}` is derived, never measured, so every way to it is
a row of `RULES` (signal, condition, action, source) and nothing else decides. The rows
read what the sample already holds: the driver's own recovery action, the Xids of the
last `RECENT_XID_SECONDS` with the immediate action NVIDIA's Xid catalog gives each code
(`XID_CATALOG`), the row remapper and page retirement, volatile uncorrectable ECC errors,
the NVLink fabric, a GPU that NVML says is lost, and memory that no live process holds
(`verdicts.leak`, GPUMemoryLeaked's condition) once the holders of its device file are
known. Where several fire, the strongest
action wins (`ACTIONS` is in order of strength), and the first row of that strength in
`RULES` names the reason. No signal, no action: a GPU none of whose signals could be read
gets no recommendation at all, never "none".

`make docs` renders the rows into docs/actions.md; tests/test_actions.py drives each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from gpu_exporter.model import RECOVERY_ACTIONS, DeviceReading, DeviceSample, Snapshot, XidState
from gpu_exporter.records import Record
from gpu_exporter.sampling import thresholds
from gpu_exporter.sampling.verdicts import leak

Action = Literal[
    "none", "restart_workload", "reset_gpu", "drain", "reboot_node", "inspect_hardware"
]
ACTIONS: tuple[Action, ...] = (
    "none",
    "restart_workload",
    "reset_gpu",
    "drain",
    "reboot_node",
    "inspect_hardware",
)
"""The actions, weakest first: a reboot resets every GPU, a drain precedes a reset, and a
GPU sent for inspection is out of service whatever else it needs."""

ADVICE: dict[Action, str] = {
    "none": "Nothing to do.",
    "restart_workload": "Restart the job that owned the GPU; the GPU itself is fine.",
    "reset_gpu": "Stop the GPU's processes, reset it (`nvidia-smi -r -i <gpu>`), then check "
    "`nvidia-smi -q -d ROW_REMAPPER,ECC`.",
    "drain": "Stop scheduling work here (`kubectl drain`, `scontrol update state=drain`) and "
    "move the jobs away, then act on the reason.",
    "reboot_node": "Drain the node, then reboot it.",
    "inspect_hardware": "Take the GPU out of service, collect `nvidia-bug-report.sh` and open "
    "a case with the vendor.",
}
"""What an operator runs for each action: the live page and docs/actions.md show it."""

RECENT_XID_SECONDS = 3600.0
"""An Xid decides an action for an hour after it was logged (the time the kernel log or
NVML's event gives it), then no more: a GPU reset or a reboot in between is not seen."""

XID_CATALOG_SOURCE = (
    "NVIDIA Xid catalog, Resolution Bucket (Immediate Action), as NVIDIA's NVSentinel "
    "ships it (xiderrorsmapping.csv)"
)

# Xid code -> the catalog's immediate-action bucket. Xids not listed (and IGNORE, the
# preemptive cleanup of Xid 45, 154 "follow the other Xid's guidance") decide nothing.
_BUCKETS: dict[str, tuple[int, ...]] = {
    "RESTART_APP": (
        *(8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80),
        *(82, 83, 84, 85, 86, 88, 89, 94, *range(96, 106), *range(126, 136), 139),
    ),
    "RESET_GPU": (46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 162),
    "WORKFLOW_XID_48": (48,),
    "WORKFLOW_NVLINK_ERR": (74,),
    "WORKFLOW_NVLINK5_ERR": tuple(range(144, 151)),
    "RESTART_BM": (79, 160),
    "RESTART_VM": (151,),
    "CHECK_MECHANICALS": (54,),
    "UNEXPECTED_ERR_REPORT_ISSUE": (
        *(1, 2, 3, 4, 5, 6, 7, 9, 10, 12, *range(15, 25), 26, 27, 28, 29, 30, 33, 34, 35),
        *(36, 42, 47, *range(49, 54), *range(55, 60), 61, 65, 73, 81, 87, 90, 91, 108),
        *(*range(111, 119), 122, 123, 124, 125, 138, 142),
    ),
}
XID_CATALOG: dict[int, str] = {xid: bucket for bucket, xids in _BUCKETS.items() for xid in xids}
"""Xid code -> its immediate-action bucket in NVIDIA's Xid catalog."""

BUCKET_ACTIONS: dict[str, Action] = {
    "RESTART_APP": "restart_workload",
    "RESET_GPU": "reset_gpu",
    "WORKFLOW_XID_48": "reset_gpu",  # a double-bit error: reset to remap or retire the row
    "WORKFLOW_NVLINK_ERR": "reset_gpu",  # reset; the workflow inspects the link if it repeats
    "WORKFLOW_NVLINK5_ERR": "reset_gpu",
    "RESTART_BM": "reboot_node",
    "RESTART_VM": "reboot_node",
    "CHECK_MECHANICALS": "inspect_hardware",
    "UNEXPECTED_ERR_REPORT_ISSUE": "inspect_hardware",  # "report the issue": not expected
}
"""The catalog's buckets in this module's actions."""

# nvmlDeviceGpuRecoveryAction_t -> action (0, "none", asks for nothing)
RECOVERY_ACTION_ACTIONS: dict[str, Action] = {
    "gpu_reset": "reset_gpu",
    "bus_reset": "reset_gpu",
    "node_reboot": "reboot_node",
    "system_reboot": "reboot_node",
    "drain_p2p": "drain",
    "drain_and_reset": "drain",  # drain first; the driver then asks for the reset
    "recover_imex_domain": "drain",  # the IMEX domain's jobs stop while it is recovered
}


@dataclass(frozen=True, repr=False)
class Recommendation(Record):
    """What to do with one GPU, and the signal that decided it."""

    action: Action
    reason: str  # a RULES signal, "xid_<code>", or "none" when nothing fired


@dataclass(frozen=True, repr=False)
class Rule(Record):
    """One way from a signal to an action."""

    signal: str  # the `reason` label it gives ("xid_<code>" for the Xid rows)
    condition: str  # what in the sample fires it
    action: Action
    source: str  # where the mapping comes from

    def __post_init__(self) -> None:
        assert self.action in ACTIONS


_NVML_H = "nvml.h, nvmlDeviceGpuRecoveryAction_t and NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
_MEMORY_ERRORS = "NVIDIA GPU Memory Error Management (A100/H100), Error Recovery and Response Flags"
_FABRIC = "NVIDIA Fabric Manager User Guide: a GPU not in the fabric has no NVLink peer-to-peer"
_LEAK = (
    f"more than {thresholds.LEAKED_MEMORY_BYTES / 2**30:.0f} GiB used while every owner NVML "
    "lists is dead (or it lists none)"
)
_LEAK_SOURCE = (
    "GPUMemoryLeaked runbook (docs/alerts.md); R580 on an H200: the driver keeps a dead "
    "owner's memory while a process it forked holds /dev/nvidiaN"
)

RULES: tuple[Rule, ...] = (
    Rule(
        "gpu_lost",
        "NVML answers GPU_IS_LOST: the GPU fell off the bus",
        "reboot_node",
        "nvml.h NVML_ERROR_GPU_IS_LOST; Xid catalog: Xid 79 RESTART_BM",
    ),
    *(
        Rule(
            f"recovery_action_{name}",
            f"the driver's recovery action is {name}",
            action,
            f"{_NVML_H}; {_MEMORY_ERRORS}",
        )
        for name, action in RECOVERY_ACTION_ACTIONS.items()
    ),
    Rule(
        "recovery_action_unknown",
        "the driver's recovery action is a code nvml.h does not name",
        "inspect_hardware",
        f"{_NVML_H}: read what `nvidia-smi -q` says of it",
    ),
    Rule(
        "row_remap_failed",
        "the row remapper could not remap a row (nvidia-smi: Remapping Failure Occurred)",
        "inspect_hardware",
        f"{_MEMORY_ERRORS}: a remapping failure meets the RMA policy",
    ),
    *(
        Rule(
            f"xid_{bucket.lower()}",
            f"an Xid of bucket {bucket} in the last {RECENT_XID_SECONDS / 60:.0f} minutes "
            f"(Xid {', '.join(map(str, _BUCKETS[bucket]))})",
            action,
            XID_CATALOG_SOURCE,
        )
        for bucket, action in BUCKET_ACTIONS.items()
    ),
    Rule(
        "fabric_unhealthy",
        "the fabric health summary is unhealthy or limited capacity",
        "drain",
        f"{_NVML_H.split(',')[0]}, nvmlGpuFabricInfo_v3 healthSummary; {_FABRIC}",
    ),
    Rule(
        "fabric_registration_failed",
        "the fabric probe completed with an error status",
        "drain",
        f"nvml.h, nvmlGpuFabricInfo status; {_FABRIC}",
    ),
    Rule(
        "row_remap_pending",
        "a remapped row waits for a GPU reset",
        "reset_gpu",
        f"{_MEMORY_ERRORS}: row remapping happens at the next GPU reset",
    ),
    Rule(
        "page_retirement_pending",
        "a retired page waits for a GPU reset (GPUs before Ampere)",
        "reset_gpu",
        "NVIDIA Dynamic Page Retirement: pending pages retire when the GPU is reset",
    ),
    Rule(
        "uncorrectable_ecc",
        "volatile uncorrectable ECC errors since the last reset",
        "reset_gpu",
        f"{_MEMORY_ERRORS}; Xid catalog: Xid 48 WORKFLOW_XID_48",
    ),
    Rule(
        "memory_leaked",
        f"{_LEAK}, and no process holds the GPU's device file (the holder scan read every process)",
        "reset_gpu",
        f"{_LEAK_SOURCE}; nothing but a reset frees memory no process holds",
    ),
    Rule(
        "memory_leaked_held",
        f"{_LEAK}, and a process (a crashed job's forked child) still holds the GPU's device "
        "file: end it (`gpu_memory_holder_info`), then restart the job",
        "restart_workload",
        f"{_LEAK_SOURCE}; the memory is freed when the last holder closes the files",
    ),
)
"""Every way to a recommendation, in the order that breaks a tie between equal actions."""

_BY_SIGNAL: dict[str, Rule] = {rule.signal: rule for rule in RULES}
_ROW: dict[str, int] = {rule.signal: i for i, rule in enumerate(RULES)}
_STRENGTH: dict[Action, int] = {action: i for i, action in enumerate(ACTIONS)}


def recommend(snapshot: Snapshot, device: DeviceSample) -> Recommendation | None:
    """The action for `device`, or None when none of its signals could be read."""
    xid = snapshot.xid.get(device.uuid) if device.static is not None else None
    fired, read = _fired(device, xid, snapshot.timestamp_seconds)
    if not read:
        return None
    best: tuple[int, int, str] | None = None  # (strength, -row, reason)
    for signal, reason in fired:
        rule = _BY_SIGNAL[signal]
        key = (_STRENGTH[rule.action], -_ROW[signal], reason)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        return Recommendation("none", "none")
    return Recommendation(ACTIONS[best[0]], best[2])


def _fired(device: DeviceSample, xid: XidState | None, now: float) -> tuple[list[Fired], bool]:
    """(signal, reason label) of every rule that fires, and whether any signal was read."""
    fired: list[Fired] = []
    read = False
    if device.lost:
        return [("gpu_lost", "gpu_lost")], True
    reading = device.reading if device.up else None
    for check in _CHECKS:
        answer = check(reading, xid, now)
        if answer is None:
            continue
        read = True
        fired.extend(answer)
    leaked = _leaked(device)
    if leaked is not None:
        read = True
        fired.extend(leaked)
    return fired, read


def _leaked(device: DeviceSample) -> list[Fired] | None:
    """Memory no live process holds, once the holders of the device file are known (a
    scan that could not read every process proves no absence: it decides nothing then);
    None when there is no leak: its absence alone reads no signal."""
    found = leak(device)
    if found is None or found.holders is None:
        return None
    if found.holders:
        return [("memory_leaked_held", "memory_leaked_held")]
    if found.attribution.holders_complete:
        return [("memory_leaked", "memory_leaked")]
    return None


Check = Callable[[DeviceReading | None, XidState | None, float], "list[Fired] | None"]
Fired = tuple[str, str]  # (RULES signal, reason label)


def _recovery_action(
    reading: DeviceReading | None, _xid: XidState | None, _now: float
) -> list[Fired] | None:
    code = reading.health.recovery_action if reading and reading.health else None
    if code is None:
        return None
    if code == 0:
        return []
    name = RECOVERY_ACTIONS.get(code)
    signal = (
        f"recovery_action_{name}" if name in RECOVERY_ACTION_ACTIONS else "recovery_action_unknown"
    )
    return [(signal, signal)]


def _memory(
    reading: DeviceReading | None, _xid: XidState | None, _now: float
) -> list[Fired] | None:
    ecc = reading.ecc if reading else None
    if ecc is None:
        return None
    uncorrected = ecc.uncorrected_errors
    flags = {
        "row_remap_failed": ecc.remapped_rows_failed,
        "row_remap_pending": ecc.remapped_rows_pending,
        "page_retirement_pending": ecc.retired_pages_pending,
        "uncorrectable_ecc": None if uncorrected is None else uncorrected > 0,
    }
    if all(value is None for value in flags.values()):
        return None
    return [(signal, signal) for signal, value in flags.items() if value]


def _fabric(
    reading: DeviceReading | None, _xid: XidState | None, _now: float
) -> list[Fired] | None:
    fabric = reading.health.fabric if reading and reading.health else None
    if fabric is None:
        return None
    out = []
    if fabric.healthy is False:
        out.append(("fabric_unhealthy", "fabric_unhealthy"))
    if fabric.status is not None and not fabric.registered:  # completed, with an error
        out.append(("fabric_registration_failed", "fabric_registration_failed"))
    return out


def _xids(_reading: DeviceReading | None, xid: XidState | None, now: float) -> list[Fired] | None:
    if xid is None:
        return None
    return [
        (f"xid_{XID_CATALOG[code].lower()}", f"xid_{code}")
        for code, when in sorted(xid.last_timestamps.items())
        if now - when <= RECENT_XID_SECONDS and XID_CATALOG.get(code) in BUCKET_ACTIONS
    ]


_CHECKS: tuple[Check, ...] = (_recovery_action, _memory, _fabric, _xids)


def action_rows() -> Iterator[tuple[str, str]]:
    """(action, what to run) of every action, weakest first, for docs/actions.md."""
    for action in ACTIONS:
        yield action, ADVICE[action]


def rule_rows() -> Iterator[tuple[str, str, str, str]]:
    """(reason, condition, action, source) of every rule, for docs/actions.md."""
    for rule in RULES:
        shown = "xid_<code>" if rule.signal.startswith("xid_") else rule.signal
        yield shown, rule.condition, rule.action, rule.source
