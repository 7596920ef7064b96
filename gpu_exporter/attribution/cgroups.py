"""Who a process belongs to, read from its `/proc/PID/cgroup`.

Container runtimes, the kubelet, systemd and Slurm all name the cgroup they put a
process in after the thing that owns it. `parse_cgroup` turns the file's text into
`CgroupLabels`; an empty string means "not found", never a guess. It understands
cgroup v1 (one line per hierarchy) and v2 (the single `0::` line), both cgroup drivers
(`cgroupfs` paths like `/docker/ID`, `systemd` paths like `/system.slice/docker-ID.scope`),
and paths seen from inside another cgroup namespace (`/../../kubepods.slice/...`):

| owner | example path |
|---|---|
| Docker | `/docker/ID`, `/system.slice/docker-ID.scope` |
| containerd | `/default/ID`, `/system.slice/nerdctl-ID.scope`, `.../cri-containerd-ID.scope` |
| CRI-O | `.../crio-ID.scope`, `.../crio-ID` |
| Podman | `/machine.slice/libpod-ID.scope/container`, `/libpod_parent/libpod-ID` |
| kubelet | `/kubepods/burstable/podUID/ID`, `.../kubepods-burstable-podUID.slice/...` |
| systemd | the innermost `*.service` or `*.scope` that is not a container's own scope |
| Slurm | `/slurm/uid_1000/job_42/step_0`, `/system.slice/slurmstepd.scope/job_42/step_0` |
"""

from __future__ import annotations

import re

from gpu_exporter.model import CgroupLabels

NAME_MAX = 255  # the kernel's limit on a cgroup's name: a longer component is no cgroup
_HEX64 = r"[0-9a-f]{64}"
# a container's own cgroup: "<runtime>-<id>[.scope]"; conmon (the runtime's monitor) is not
_RUNTIME_SCOPE = re.compile(
    rf"^(?:docker|cri-containerd|crio|libpod|nerdctl)-({_HEX64})(?:\.scope)?$"
)
_CONMON = re.compile(r"^(?:crio|libpod)-conmon-")
_BARE_ID = re.compile(rf"^({_HEX64})$")
_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# "pod<uid>" (cgroupfs) or "kubepods-<qos>-pod<uid>.slice" (systemd); static pods use 32 hex
_POD = re.compile(rf"(?:^|-)pod({_UUID}|[0-9a-f]{{32}})(?:\.slice)?$")
_SLURM_JOB = re.compile(r"^job_([0-9]+)$")
_UNIT = re.compile(r"^.+\.(?:service|scope)$")


def cgroup_paths(text: str) -> list[str]:
    """The cgroup paths of a `/proc/PID/cgroup` file, the v2 (`0::`) line first."""
    unified: list[str] = []
    legacy: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        (unified if hierarchy == "0" and controllers == "" else legacy).append(path.strip())
    return unified + legacy


def parse_path(path: str) -> CgroupLabels:
    """The labels one cgroup path carries."""
    container_id = pod_uid = unit = job = ""
    for component in path.split("/"):
        if not component or component == ".." or len(component) > NAME_MAX:
            continue
        if _CONMON.match(component):
            continue
        container = _RUNTIME_SCOPE.match(component) or _BARE_ID.match(component)
        if container:
            container_id = container.group(1)
            unit = ""  # a container's scope, and anything systemd put above it, is not its unit
            continue
        pod = _POD.search(component)
        if pod:
            pod_uid = pod.group(1).replace("_", "-")
            continue
        slurm = _SLURM_JOB.match(component)
        if slurm:
            job = slurm.group(1)
            continue
        if _UNIT.match(component) and not container_id:
            unit = component
    return CgroupLabels(
        container_id=container_id, pod_uid=pod_uid, systemd_unit=unit, slurm_job_id=job
    )


def parse_cgroup(text: str) -> CgroupLabels:
    """Labels from the text of `/proc/PID/cgroup`; each is the first one any line names."""
    found: dict[str, str] = {}
    for path in cgroup_paths(text):
        labels = parse_path(path)
        for name in ("container_id", "pod_uid", "systemd_unit", "slurm_job_id"):
            value = getattr(labels, name)
            if value and name not in found:
                found[name] = value
    if "container_id" in found:  # a hybrid host's other hierarchy may name the runtime's unit
        found.pop("systemd_unit", None)
    return CgroupLabels(**found)
