"""Kubernetes attribution: who was given each GPU, who uses it, and who uses one unasked.

`KubernetesAttributor` runs on the sampler thread once per sample, on the last reading of
the kubelet (`sources.kubelet.watch`, refreshed on its own thread). It does three things:

- names each process series: the container ID and pod UID its cgroup gave
  (`cgroups.py`) looked up in the kubelet's log layout (`sources.kubelet.logs`);
- maps the kubelet's device IDs to this node's GPUs: `nvidia.com/gpu` gives GPU UUIDs,
  or indices under the device plugin's index strategy; `nvidia.com/mig-*` gives MIG
  device UUIDs; a time-sliced (or MPS) replica is `<ID>::<N>` (NVIDIA's device plugin,
  `NewAnnotatedID` in internal/rm/devices.go), one GPU however many replicas;
  GKE's device plugin names `nvidia<minor>` (the /dev/nvidiaN file it found, not the
  NVML index), `nvidia<minor>/gi<GPU instance>` and shared replicas `.../vgpu<N>`; the
  devices of DRA claims of NVIDIA's GPU driver are read by their names (`dra.py`);
- counts the replicas of each GPU the device plugins advertise (GetAllocatableResources),
  of which a container's replicas are its share (`weights.py`); a GPU that has none
  advertised now (unhealthy: the kubelet lists healthy devices only) keeps the count
  last seen;
- finds the stowaways: a container with processes on a GPU (or MIG GPU instance) that the
  kubelet did not allocate to it, and processes outside every pod (the host's own, or a
  container no pod holds), counted with empty pod labels, whatever the kubelet did with
  that GPU; host processes whose name is expected (`expected.EXPECTED_HOST_PROCESSES`, a display
  server) are not stowaways.

Its `KubernetesState.reason` names what keeps it from working, or what it found wrong
(a pod using a GPU without asking for one); each new reason is logged once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpu_exporter.attribution import dra
from gpu_exporter.attribution.weights import allocation_weights
from gpu_exporter.model import (
    ContainerDevices,
    ContainerName,
    DeviceHolder,
    DeviceSample,
    GpuAllocation,
    KubeletReading,
    KubernetesState,
    ProcessSample,
    UnallocatedUse,
)

log = logging.getLogger(__name__)

NVIDIA_RESOURCE_PREFIX = "nvidia.com/"
REPLICA_SEPARATORS = ("::", "/vgpu")  # time-slicing and MPS replicas: "GPU-<uuid>::<n>",
# and GKE's shared GPUs: "nvidia0/vgpu3"
SHOWN_IDS = 3  # device IDs quoted in a reason
MAX_DEVICE_ID = 255  # characters of a device ID looked at: a longer one names no device
MAX_MATCHED = 255  # characters of a name the expected-host-processes pattern is given

Devices = tuple[DeviceSample, ...]
Target = dra.Target  # (index, GPU UUID, MIG GPU instance or "")


class KubernetesAttributor:
    """One sample's Kubernetes view. Used on the sampler thread only."""

    def __init__(self, expected_host_processes: re.Pattern[str] | None = None) -> None:
        self._logged: str | None = None
        self._expected = expected_host_processes  # None: every host process is a stowaway
        self._advertised: dict[Target, int] = {}  # replicas last advertised, per GPU

    def __call__(
        self, devices: Devices, reading: KubeletReading | None
    ) -> tuple[Devices, KubernetesState]:
        if reading is None:
            return devices, KubernetesState(up=False, reason="the kubelet has not been read yet")
        devices = tuple(_named(d, reading) for d in devices)
        state = _state(devices, reading, self._expected, self._advertised)
        if state.reason != self._logged:
            if state.reason is not None and reading.error is None:
                log.warning("kubernetes attribution: %s", state.reason)
            self._logged = state.reason  # the kubelet's own failures are logged by its watcher
        return devices, state


# Names -------------------------------------------------------------------------------


def _named(device: DeviceSample, reading: KubeletReading) -> DeviceSample:
    attribution = device.attribution
    if attribution is None or not (reading.containers or reading.pod_names):
        return device
    processes = tuple(_name(p, reading) for p in attribution.processes)
    holders = attribution.holders
    if holders is not None:
        holders = tuple(_name_holder(h, reading) for h in holders)
    candidates = tuple(_name_holder(h, reading) for h in attribution.holder_candidates)
    return replace(
        device,
        attribution=replace(
            attribution, processes=processes, holders=holders, holder_candidates=candidates
        ),
    )


def _name(p: ProcessSample, reading: KubeletReading) -> ProcessSample:
    name = _lookup(reading, p.container_id, p.pod_uid)
    if name is None:
        return p
    return replace(p, namespace=name.namespace, pod=name.pod, container=name.container)


def _name_holder(h: DeviceHolder, reading: KubeletReading) -> DeviceHolder:
    name = _lookup(reading, h.labels.container_id, h.labels.pod_uid)
    if name is None:
        return h
    return replace(h, namespace=name.namespace, pod=name.pod, container=name.container)


def _lookup(reading: KubeletReading, container_id: str, pod_uid: str) -> ContainerName | None:
    """Who a container ID (or, failing it, a pod UID) is, from the log layout."""
    name = reading.containers.get(container_id) if container_id else None
    if name is None and pod_uid:
        name = reading.pod_names.get(pod_uid)
    return name


# Allocation --------------------------------------------------------------------------


def targets(devices: Devices) -> dict[str, Target]:
    """Every device ID a device plugin may name, to the GPU (and MIG instance) it names:
    GPU UUIDs, NVML indices, MIG device UUIDs (NVIDIA's), and `nvidia<minor>` (GKE's:
    its IDs are the names of the /dev/nvidiaN files, the minor number, which need not
    follow the NVML index; a GPU whose minor number is unknown gets none)."""
    out: dict[str, Target] = {}
    for d in devices:
        if d.static is None:
            continue
        whole = (d.index, d.static.uuid, "")
        out[d.static.uuid] = whole
        out[str(d.index)] = whole
        gke = f"nvidia{d.static.minor_number}" if d.static.minor_number is not None else None
        if gke is not None:
            out[gke] = whole
        mig = d.reading.mig if d.reading is not None else None
        for m in mig.devices if mig is not None else ():
            instance = (d.index, d.static.uuid, str(m.gpu_instance))
            out[m.uuid] = instance
            if gke is not None:
                out[f"{gke}/gi{m.gpu_instance}"] = instance
    return out


def split_replica(device_id: str) -> tuple[str, bool] | None:
    """The device an ID names, and whether the ID is one replica of it: "GPU-x::3" ->
    ("GPU-x", True), "nvidia0/vgpu3" -> ("nvidia0", True), "GPU-x" -> ("GPU-x", False);
    None for an ID over MAX_DEVICE_ID characters (no device plugin names one so)."""
    if len(device_id) > MAX_DEVICE_ID:
        return None
    base = device_id
    for separator in REPLICA_SEPARATORS:
        base = base.split(separator, 1)[0]
    return base, base != device_id


def _target(known: Mapping[str, Target], device_id: str) -> tuple[Target, bool] | None:
    """The GPU (or MIG instance) a device ID names, and whether it names a replica."""
    split = split_replica(device_id)
    target = known.get(split[0]) if split is not None else None
    return (target, split[1]) if target is not None and split is not None else None


def _state(
    devices: Devices,
    reading: KubeletReading,
    expected: re.Pattern[str] | None = None,
    advertised_before: dict[Target, int] | None = None,
) -> KubernetesState:
    if reading.error is not None and reading.held_seconds is None:
        return KubernetesState(up=False, reason=reading.error)
    known = targets(devices)
    allocations: dict[GpuAllocation, None] = {}
    replicas: dict[GpuAllocation, set[str]] = {}  # the replica IDs each allocation holds
    unmatched: dict[str, str] = {}  # device ID -> resource
    for entry in _nvidia(reading.allocations):
        for device_id in entry.device_ids:
            found = _target(known, device_id)
            if found is None:
                unmatched[device_id[:MAX_DEVICE_ID]] = entry.resource
                continue
            (index, uuid, gpu_instance), replica = found
            allocation = GpuAllocation(
                index, uuid, gpu_instance, entry.namespace, entry.pod, entry.container
            )
            allocations[allocation] = None
            if replica:
                replicas.setdefault(allocation, set()).add(device_id)
    dra_unmatched = _claimed(devices, reading.allocations, allocations)
    unallocated = _unallocated(devices, reading, allocations, expected)
    up = bool(allocations) or not (unmatched or dra_unmatched)
    advertised = _advertised(known, reading, advertised_before)
    reason = (
        _unmatched_reason(unmatched, devices)
        or dra.unmatched_reason(dra_unmatched, devices)
        or _unrequested_reason(unallocated, allocations)
        or _outside_pods_reason(unallocated)
    )
    if reading.error is not None:  # held through a failed read (sources/kubelet/watch.py)
        up = False
        reason = (
            f"{reading.error}; the allocation the kubelet gave {reading.held_seconds or 0:.0f} "
            "s ago is kept meanwhile (--kubernetes.allocation-hold)"
        )
    return KubernetesState(
        up=up,
        reason=reason,
        allocations=tuple(allocations),
        unallocated=unallocated,
        weights=allocation_weights(
            allocations, devices, {a: len(ids) for a, ids in replicas.items()}, advertised
        ),
        allocatable_known=reading.allocatable is not None,
    )


def _advertised(
    known: Mapping[str, Target], reading: KubeletReading, before: dict[Target, int] | None
) -> dict[Target, int] | None:
    """Replicas the device plugins advertise per GPU (or MIG instance), or None where the
    kubelet did not say. A GPU with none advertised now keeps the count last seen, in
    `before` (which this updates): the kubelet leaves out an unhealthy GPU's replicas
    while pods still hold them."""
    if reading.allocatable is None:
        return None
    ids: dict[Target, set[str]] = {}
    for entry in reading.allocatable:
        if not entry.resource.startswith(NVIDIA_RESOURCE_PREFIX):
            continue
        for device_id in entry.device_ids:
            found = _target(known, device_id)
            if found is not None and found[1]:
                ids.setdefault(found[0], set()).add(device_id)
    now = {target: len(replicas) for target, replicas in ids.items()}
    if before is None:
        return now
    before.update(now)
    return dict(before)


def _nvidia(entries: Iterable[ContainerDevices]) -> Iterable[ContainerDevices]:
    return (e for e in entries if e.dra is None and e.resource.startswith(NVIDIA_RESOURCE_PREFIX))


def _claimed(
    devices: Devices, entries: Iterable[ContainerDevices], allocations: dict[GpuAllocation, None]
) -> set[str]:
    """Add the GPUs (and MIG instances) of DRA claims to `allocations`, once per container
    however many claims or devices give it the same one; the names that match none."""
    gpus = dra.DraGpus(devices)
    given = {(a.gpu, a.gpu_instance, a.namespace, a.pod, a.container) for a in allocations}
    unmatched: set[str] = set()
    for entry in entries:
        if entry.dra is None or not dra.is_host_gpu(entry.dra):
            continue
        target = gpus.target(entry.dra.device)
        if target is None:
            unmatched.add(entry.dra.device)
            continue
        index, uuid, gpu_instance = target
        key = (index, gpu_instance, entry.namespace, entry.pod, entry.container)
        if key not in given:
            given.add(key)
            allocation = GpuAllocation(
                index, uuid, gpu_instance, entry.namespace, entry.pod, entry.container, entry.dra
            )
            allocations[allocation] = None
    return unmatched


def _unmatched_reason(unmatched: Mapping[str, str], devices: Devices) -> str | None:
    if not unmatched:
        return None
    ids = ", ".join(sorted(unmatched)[:SHOWN_IDS]) + (", ..." if len(unmatched) > SHOWN_IDS else "")
    resources = ", ".join(sorted(set(unmatched.values())))
    gpus = len([d for d in devices if d.static is not None])
    return (
        f"{len(unmatched)} device IDs of {resources} match no GPU of this node ({ids}); "
        f"expected GPU or MIG UUIDs, or indices 0 to {gpus - 1}: is the device plugin's "
        "DEVICE_ID_STRATEGY or the exporter's view of the GPUs different?"
    )


def _unrequested_reason(
    unallocated: tuple[UnallocatedUse, ...], allocations: Mapping[GpuAllocation, None]
) -> str | None:
    asked = {(a.namespace, a.pod) for a in allocations}
    for use in unallocated:
        if use.pod and (use.namespace, use.pod) not in asked:
            return (
                f"pod {use.namespace}/{use.pod} runs processes on GPU {use.gpu} but has no "
                "nvidia.com/gpu in its resource limits and no gpu.nvidia.com claim "
                "(NVIDIA_VISIBLE_DEVICES=all or a privileged container?): the scheduler "
                "counts that GPU as free"
            )
    return None


def _outside_pods_reason(unallocated: tuple[UnallocatedUse, ...]) -> str | None:
    for use in unallocated:
        if not use.pod:
            return (
                f"processes outside every pod run on GPU {use.gpu} (started on the node, not "
                "by Kubernetes): the scheduler does not see them; "
                "--kubernetes.expected-host-processes names those expected there"
            )
    return None


def is_expected(expected: re.Pattern[str] | None, process: str, executable: str) -> bool:
    """Whether a host process is one `expected` names: the whole of its name and, where
    the exporter may read /proc/PID/exe, the whole of its executable's file name. A
    process can take any name (`prctl`, `exec -a`, a write to /proc/PID/comm); taking an
    executable's name needs a file of that name. Both are cut to MAX_MATCHED characters
    (a name is at most 15, a file name 255) before the operator's pattern sees them."""
    if expected is None:
        return False
    names = (process, executable) if executable else (process,)
    return all(expected.fullmatch(name[:MAX_MATCHED]) is not None for name in names)


def _unallocated(
    devices: Devices,
    reading: KubeletReading,
    allocations: Mapping[GpuAllocation, None],
    expected: re.Pattern[str] | None = None,
) -> tuple[UnallocatedUse, ...]:
    """Processes of containers on GPUs not allocated to them, counted per container, and
    processes outside every pod (namespace, pod and container ""), counted per GPU (or MIG
    GPU instance) whatever the kubelet allocated: the host's own (not those whose whole
    name `expected` matches), and those of containers that no pod holds (no pod UID in
    their cgroup, no name in the kubelet's log layout: `docker run` by hand)."""
    given: set[tuple[int, str, str, str, str]] = set()  # (gpu, gi, namespace, pod, container)
    for a in allocations:
        given.add((a.gpu, a.gpu_instance, a.namespace, a.pod, a.container))
        given.add((a.gpu, a.gpu_instance, a.namespace, a.pod, ""))  # its pod, container unknown
    counts: dict[tuple[int, str, str, str, str, str], int] = {}
    for d in devices:
        if d.attribution is None:
            continue
        # every container's processes, those beyond the per-GPU process cap included
        for (gpu_instance, container_id, pod_uid), n in d.attribution.containers.items():
            name = _lookup(reading, container_id, pod_uid)
            if name is None:
                if not pod_uid:  # a container outside every pod
                    key = (d.index, d.uuid, gpu_instance, "", "", "")
                    counts[key] = counts.get(key, 0) + n
                continue
            if any(
                (d.index, gi, name.namespace, name.pod, name.container) in given
                for gi in ("", gpu_instance)
            ):
                continue
            key = (d.index, d.uuid, gpu_instance, name.namespace, name.pod, name.container)
            counts[key] = counts.get(key, 0) + n
        for (gpu_instance, process, executable), n in d.attribution.host_processes.items():
            if not is_expected(expected, process, executable):
                key = (d.index, d.uuid, gpu_instance, "", "", "")
                counts[key] = counts.get(key, 0) + n
    return tuple(UnallocatedUse(*key, processes=n) for key, n in sorted(counts.items()))
