"""MIG: the MIG devices of a GPU with MIG enabled, enumerated through NVML.

Slots are sparse: `nvmlDeviceGetMigDeviceHandleByIndex` answers NOT_FOUND for an empty
one, which is normal. The enumeration changes only when an administrator repartitions
the GPU, so it is re-read every REFRESH_SECONDS (and after NVML re-initialises), and at
once when the check a GPU with MIG on makes every interval (`unchanged`) sees a change:

- the UUID through each handle the enumeration gave (`handles_hold`, one call per MIG
  device, but none for a MIG device whose process list, read anyway, shows it is the
  same instance: `mig_lists.py`). A MIG device destroyed leaves its handle invalid ("the
  MIG device handle would remain invalid", nvml.h on nvmlDeviceGetMigDeviceHandleByIndex),
  and so does a reset of the GPU, which a change of MIG mode needs; an instance destroyed
  and made again with the same profile either leaves the old handle invalid or reuses it
  for the new one ("Handles may be reused and their properties can change"), with a new
  UUID.
- how many one-slice GPU instances still fit (`nvmlDeviceGetGpuInstanceRemainingCapacity`,
  one call), which a GPU instance made in free space changes, and which answers
  NOT_SUPPORTED once MIG is off. Asked only while the last answer was above 0: on a full
  GPU no instance can be made before one is destroyed, which the UUIDs show. NVML asks
  for a privileged user here; as any other user it answers NO_PERMISSION, an expected
  answer and no error, and the check then rests on the UUIDs: an instance made in free
  space is seen at the next enumeration.

MIG mode itself is read at each enumeration (`layout`), not every interval.

Where the driver raises `nvmlEventMigConfigChange` (the event set of the Xid listener
registers it), the GPU is enumerated again at its next reading (`PynvmlBackend.
wait_event`): an addition only, since no MIG GPU has shown that the driver raises it for
every change, so the check above stays. The budget (issue 38): 16 calls per GPU per
interval plus at most 4 per MIG device.

GPU instance ids are reused after a repartition; a MIG device is known by its UUID.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pynvml

from gpu_exporter.model import MigDevice
from gpu_exporter.records import Record
from gpu_exporter.sources.backend import SLOW_REFRESH_SECONDS
from gpu_exporter.sources.nvml.calls import NOT_FOUND, Device, NvmlCalls, text
from gpu_exporter.sources.nvml.placement import GpuInstancePlacements

REFRESH_SECONDS = SLOW_REFRESH_SECONDS
GONE = frozenset({pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_FOUND})
_UNPRIVILEGED = frozenset({pynvml.NVML_ERROR_NO_PERMISSION})
_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")  # "NVIDIA H100 80GB HBM3 MIG 3g.40gb"


@dataclass(frozen=True, repr=False)
class MigSlot(Record):
    """One MIG device: its handle (with its own unsupported cache) and identity."""

    device: Device
    info: MigDevice


def profile_of(name: str | None) -> str:
    """The MIG profile in a MIG device's name ("3g.40gb"), or "" when it has none."""
    match = _PROFILE.search(name or "")
    return match.group(1) if match else ""


Layout = tuple[int, int | None]  # (current MIG mode, one-slice GPU instances that still fit)


def layout(calls: NvmlCalls, parent: Device) -> Layout | None:
    """MIG mode and the remaining capacity, read at each enumeration (two calls); None
    when MIG mode cannot be read. The capacity is None where the driver does not answer
    it (NOT_SUPPORTED, or NO_PERMISSION for an unprivileged user)."""
    mode = calls.query(parent, "mig", pynvml.nvmlDeviceGetMigMode)
    if mode is None:
        return None
    if mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
        return (int(mode[0]), None)
    return (int(mode[0]), remaining_capacity(calls, parent))


def remaining_capacity(calls: NvmlCalls, parent: Device) -> int | None:
    """How many one-slice GPU instances still fit; None where NVML does not say."""
    remaining = calls.call(
        "nvmlDeviceGetGpuInstanceRemainingCapacity",
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity,
        parent.handle,
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
        device=parent,
        key="mig_remaining_capacity",
        quiet=_UNPRIVILEGED,
    )
    return int(remaining) if remaining is not None else None


def unchanged(
    calls: NvmlCalls,
    parent: Device,
    known: Layout,
    slots: tuple[MigSlot, ...],
    continuing: frozenset[str] = frozenset(),
) -> bool:
    """The check every interval: are the MIG devices still those `slots` names, with
    `known` the layout at their enumeration? One call per MIG device but those whose
    process list proved them the same (`continuing`, by UUID: `mig_lists.py`), and one
    more while the GPU has room for another GPU instance (see the module's docstring)."""
    room = known[1]
    if room and remaining_capacity(calls, parent) != room:
        return False
    return handles_hold(calls, [s for s in slots if s.info.uuid not in continuing])


def handles_hold(calls: NvmlCalls, slots: Sequence[MigSlot]) -> bool:
    """Does each MIG handle still name the MIG device it named at enumeration (one
    `nvmlDeviceGetUUID` per MIG device)? False at the first that answers another UUID or
    no UUID: an invalid handle (INVALID_ARGUMENT, NOT_FOUND) is an answer here, not an
    error, since the instance was destroyed."""
    for slot in slots:
        uuid = calls.call(
            "nvmlDeviceGetUUID",
            pynvml.nvmlDeviceGetUUID,
            slot.device.handle,
            quiet=GONE,
        )
        if uuid is None or text(uuid) != slot.info.uuid:
            return False
    return True


def enumerate_mig(calls: NvmlCalls, parent: Device) -> tuple[MigSlot, ...]:
    """The MIG devices of `parent`, whose MIG mode is on (see `layout`)."""
    count = calls.query(parent, "mig_count", pynvml.nvmlDeviceGetMaxMigDeviceCount)
    placements = GpuInstancePlacements(calls, parent)
    slots: list[MigSlot] = []
    for index in range(int(count or 0)):
        handle = calls.call(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
            parent.handle,
            index,
            quiet=NOT_FOUND,
        )
        if handle is None:
            continue  # an empty slot
        d = Device(handle)
        gpu_instance = calls.query(d, "gpu_instance", pynvml.nvmlDeviceGetGpuInstanceId)
        compute_instance = calls.query(d, "compute_instance", pynvml.nvmlDeviceGetComputeInstanceId)
        uuid = calls.query(d, "uuid", pynvml.nvmlDeviceGetUUID)
        if gpu_instance is None or compute_instance is None or uuid is None:
            continue  # cannot be named: left out rather than guessed
        name = calls.query(d, "name", pynvml.nvmlDeviceGetName)
        info = MigDevice(
            uuid=text(uuid),
            gpu_instance=int(gpu_instance),
            compute_instance=int(compute_instance),
            profile=profile_of(text(name) if name is not None else None),
            placement=placements.of(int(gpu_instance)),
        )
        slots.append(MigSlot(d, info))
    return tuple(slots)
