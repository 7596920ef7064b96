"""One Xid count per GPU from the two sources: the kernel log (by PCI bus id) and NVML's
events (by UUID).

They never count the same Xid (`sources/kernel_log.py`: while the kernel log is read,
events are not counted), so a GPU's counts are their sum, and its last Xid the later of
the two. A kernel-log bus id that no GPU of this sample has (a GPU lost before it was
enumerated, or NVML down) is kept apart, by bus id, rather than put on any GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpu_exporter.model import DeviceSample, KernelLogState, XidState
from gpu_exporter.sources.kernel_log_records import normalise_bus_id


def merge_xids(
    events: Mapping[str, XidState],
    kernel_log: KernelLogState | None,
    devices: Iterable[DeviceSample],
) -> tuple[dict[str, XidState], dict[str, XidState]]:
    """(Xids by UUID, kernel-log Xids of no GPU here by bus id)."""
    by_uuid = dict(events)
    unattributed = dict(kernel_log.xids) if kernel_log is not None else {}
    if not unattributed:
        return by_uuid, unattributed
    for device in devices:
        static = device.static
        bus_id = normalise_bus_id(static.pci_bus_id) if static and static.pci_bus_id else None
        found = unattributed.pop(bus_id, None) if bus_id is not None else None
        if found is not None:
            by_uuid[device.uuid] = combine(by_uuid.get(device.uuid), found)
    return by_uuid, unattributed


def combine(a: XidState | None, b: XidState) -> XidState:
    """The Xids of `a` and `b` together."""
    if a is None:
        return b
    counts = dict(a.counts)
    for code, count in b.counts.items():
        counts[code] = counts.get(code, 0) + count
    last = dict(a.last_timestamps)
    for code, when in b.last_timestamps.items():
        last[code] = max(when, last.get(code, when))
    newer = b if (b.last_timestamp_seconds or 0.0) >= (a.last_timestamp_seconds or 0.0) else a
    return XidState(
        counts=counts,
        last_timestamp_seconds=newer.last_timestamp_seconds,
        last_xid=newer.last_xid,
        last_timestamps=last,
    )
