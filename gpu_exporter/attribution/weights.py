"""The share of a physical GPU each Kubernetes allocation holds: `gpu_allocation_weight`.

The chargeback rules (docs/chargeback.md) multiply a minute by this weight to give each
owner its allocated GPU-seconds, so the weights of one GPU must never add up to more
than 1:

- **A whole GPU**: 1. **Time-sliced (or MPS) replicas of one GPU**: the replicas a
  container holds over those the device plugin advertises for that GPU (the kubelet's
  GetAllocatableResources, allocated or not): a pod holding 1 of 4 replicas holds a
  quarter, whoever holds the other 3, and the replicas nobody holds are the remainder's
  (the chargeback rules give a GPU's remainder 1 minus its weights): the scheduler can
  give them to the next pod. Where the kubelet does not say what it advertises (an
  older kubelet, or its GetAllocatableResources failed: `allocatable` None), or for
  containers given one device that is no replica (a DRA claim shared by containers),
  each of the n containers the kubelet lists on the GPU holds 1/n of it.
- **A MIG GPU instance**: the larger of its compute share (the N of its profile's "Ng"
  over the 7 compute slices of A100, H100, H200 and B200) and its memory share (its
  memory over the GPU's). An instance makes unavailable whichever of the two it takes
  more of: a 3g.40gb on an 80 GB GPU takes 3/7 of the SMs but half the memory, and what
  remains cannot hold another 40 GB instance. The profiles of one GPU can take more
  than the whole by that measure (4g.40gb + 3g.40gb: 4/7 + 1/2), so where the shares of
  the GPU's instances add up to more than 1 each is divided by their sum. On an A30 (4
  compute slices) the memory share is always the larger, and exact. An instance whose
  profile and memory are both unknown has no weight (its series is left out).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gpu_exporter.model import DeviceSample, GpuAllocation, MigReading

COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU with 7 (A100, H100, H200, B200); an A30 has 4."""

_COMPUTE = re.compile(r"(?:^|\.)([0-9]{1,2})g\.")  # "3g.40gb", "1c.3g.40gb": 3; bounded
MAX_PROFILE = 64  # characters of a profile name looked at


def allocation_weights(
    allocations: Iterable[GpuAllocation],
    devices: Iterable[DeviceSample],
    replicas: Mapping[GpuAllocation, int] | None = None,
    advertised: Mapping[tuple[int, str, str], int] | None = None,
) -> dict[GpuAllocation, float]:
    """Each allocation's share of its physical GPU (0..1); an allocation whose share is
    unknown is left out. `replicas`: the replicas of its GPU (or MIG instance) each
    allocation holds, where it holds replicas; `advertised`: the replicas the device
    plugins advertise, by (index, uuid, gpu_instance), None where unknown."""
    by_target: dict[tuple[int, str, str], list[GpuAllocation]] = {}
    for a in allocations:
        by_target.setdefault((a.gpu, a.uuid, a.gpu_instance), []).append(a)
    shares = {(d.index, d.static.uuid): instance_shares(d) for d in devices if d.static is not None}
    held = replicas or {}
    out: dict[GpuAllocation, float] = {}
    for target, holders in by_target.items():
        index, uuid, gpu_instance = target
        share = 1.0 if gpu_instance == "" else shares.get((index, uuid), {}).get(gpu_instance)
        if share is None:
            continue
        if advertised is not None and all(held.get(a, 0) > 0 for a in holders):
            # at least the replicas held: one held but no longer advertised still counts
            total = max(advertised.get(target, 0), sum(held[a] for a in holders))
            for a in holders:
                out[a] = share * held[a] / total
            continue
        for a in holders:
            out[a] = share / len(holders)
    return out


def instance_shares(device: DeviceSample) -> dict[str, float]:
    """The share of the GPU each of its MIG GPU instances holds, by GPU instance id as
    `gpu_allocation_info` names it; empty while MIG is off."""
    reading = device.reading
    mig = reading.mig if reading is not None else None
    if mig is None:
        return {}
    total = reading.memory.total_bytes if reading is not None and reading.memory else None
    raw = {gi: s for gi, s in _raw_shares(mig, total).items() if s is not None}
    scale = max(1.0, sum(raw.values()))
    return {str(gi): s / scale for gi, s in raw.items()}


def _raw_shares(mig: MigReading, gpu_memory_bytes: int | None) -> Mapping[int, float | None]:
    profiles = {m.gpu_instance: m.profile for m in mig.devices}
    out: dict[int, float | None] = {}
    for gi in sorted({*profiles, *mig.instances}):
        candidates: list[float] = []
        match = _COMPUTE.search(profiles.get(gi, "")[:MAX_PROFILE])
        if match is not None:
            candidates.append(min(1.0, int(match.group(1)) / COMPUTE_SLICES))
        instance = mig.instances.get(gi)
        memory = instance.memory_total_bytes if instance is not None else None
        if memory is not None and gpu_memory_bytes:
            candidates.append(min(1.0, memory / gpu_memory_bytes))
        out[gi] = max(candidates) if candidates else None
    return out
