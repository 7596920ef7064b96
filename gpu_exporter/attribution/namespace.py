"""Does this /proc show the host's PID namespace, the one NVML's PIDs belong to?

NVML reports the PIDs of GPU processes as the host sees them. A container started
without the host's PID namespace (`docker run` without `--pid=host`, a pod without
`hostPID: true`) mounts its own /proc, where the same number can name an unrelated
process of the container: its name, user and CPU would be attached to the GPU process.

In the host's namespace the kernel's threads are visible: PID 2 is `kthreadd`, whose
parent is 0. In a container's own namespace PID 2 is one of its own processes (or
nothing). `NSpid` in /proc/self/status is no help: the container's own /proc shows one
entry. /proc mounted with `hidepid` hides kthreadd too; the host side of other users'
processes cannot be read there anyway.
"""

from __future__ import annotations

from gpu_exporter.attribution.proctree import parse_stat

KERNEL_THREADS_PID = 2


def sees_host_pid_namespace(proc_root: str = "/proc") -> bool:
    """True when `proc_root` shows the host's PID namespace (kthreadd is PID 2)."""
    try:
        with open(f"{proc_root}/{KERNEL_THREADS_PID}/stat", "rb") as handle:
            stat = parse_stat(handle.read(4096))
    except (OSError, ValueError, IndexError):
        return False
    return stat.comm == "kthreadd" and stat.ppid == 0
