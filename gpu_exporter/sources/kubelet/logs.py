"""Container and pod names from the kubelet's log layout: directory listings only.

The kubelet writes every container's log under `/var/log/pods/<namespace>_<pod>_<uid>/
<container>/` and links it as `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`.
Pod names, namespaces and container names are DNS names (no `_`), and a container ID is 64
hexadecimal digits, so both names split without ambiguity. Nothing is read but the two
directories' entries: no file, no link target, no API call.
"""

from __future__ import annotations

import os
import re

from gpu_exporter.model import ContainerName

DEFAULT_LOG_ROOT = "/var/log"
_CONTAINER_LOG = re.compile(r"^([^_]+)_([^_]+)_([^_]+)-([0-9a-f]{64})\.log$")
_POD_DIRECTORY = re.compile(r"^([^_]+)_([^_]+)_([0-9a-f-]{32,36})$")


def container_names(log_root: str = DEFAULT_LOG_ROOT) -> dict[str, ContainerName]:
    """Namespace, pod and container of every container ID with a log link; {} if none."""
    out: dict[str, ContainerName] = {}
    for entry in _listing(os.path.join(log_root, "containers")):
        match = _CONTAINER_LOG.match(entry)
        if match:
            pod, namespace, container, container_id = match.groups()
            out[container_id] = ContainerName(namespace, pod, container)
    return out


def pod_names(log_root: str = DEFAULT_LOG_ROOT) -> dict[str, ContainerName]:
    """Namespace and pod of every pod UID with a log directory (container left "")."""
    out: dict[str, ContainerName] = {}
    for entry in _listing(os.path.join(log_root, "pods")):
        match = _POD_DIRECTORY.match(entry)
        if match:
            namespace, pod, uid = match.groups()
            out[uid] = ContainerName(namespace, pod)
    return out


def _listing(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:  # not mounted, or not Kubernetes: nothing is named
        return []
