"""The compute process list of each MIG device, read once an interval for two purposes.

Under MIG the processes are listed per MIG device (the parent's list has no memory). The
same list also tells, for free, that a MIG handle still names the instance it named at
enumeration, where `mig.handles_hold` would spend a UUID read: a MIG device whose list
names a PID its previous list named is the same compute instance. NVML refuses to
destroy a compute or GPU instance while a process is active on it (NVML_ERROR_IN_USE,
nvml.h on nvmlComputeInstanceDestroy and nvmlGpuInstanceDestroy), and a CUDA process
keeps the one MIG device it started on, so a process listed before and after through
one handle never left its instance. Only a PID that the kernel handed out again within
one interval could fool it, and Linux hands PIDs out in turn up to pid_max (32768 at
the least), so that takes tens of thousands of new processes in that interval.

An empty list proves nothing (an idle instance may have been swapped), nor does a first
list; those MIG devices are checked by UUID as before. On a GPU whose instances all run
work the check then costs no call of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpu_exporter.model import GpuProcess
from gpu_exporter.sources.nvml.buffers import ProcessEntry
from gpu_exporter.sources.nvml.mig import MigSlot

ReadList = Callable[[MigSlot], list[ProcessEntry] | None]


@dataclass
class MigProcessLists:
    """One GPU's MIG device process lists: those of the current interval (by MIG UUID),
    and the PIDs each MIG device listed last."""

    interval: int = -1  # the interval `lists` were read in
    lists: dict[str, list[ProcessEntry] | None] = field(default_factory=dict)
    pids: dict[str, frozenset[int]] = field(default_factory=dict)

    def take(self, interval: int, slots: Sequence[MigSlot], read: ReadList) -> frozenset[str]:
        """Read every MIG device's list for `interval` (`read` answers None for a handle
        that no longer answers); the UUIDs of those still running a process they ran the
        interval before."""
        self.interval = interval
        self.lists = {}
        continuing: set[str] = set()
        for slot in slots:
            uuid = slot.info.uuid
            procs = self.lists[uuid] = read(slot)
            if _pids(procs) & self.pids.get(uuid, frozenset()):
                continuing.add(uuid)
        self.pids = {uuid: _pids(procs) for uuid, procs in self.lists.items()}
        return frozenset(continuing)

    def processes(
        self, interval: int, slots: Sequence[MigSlot], read: ReadList
    ) -> list[GpuProcess] | None:
        """The processes of every MIG device, with their GPU and compute instance; None
        when no MIG device answered."""
        out: list[GpuProcess] = []
        answered = False
        for slot in slots:
            procs = self.of(interval, slot, read)
            answered = answered or procs is not None
            out += [
                GpuProcess(
                    pid=p.pid,
                    context="compute",
                    used_memory_bytes=p.used_memory_bytes,
                    gpu_instance=slot.info.gpu_instance,
                    compute_instance=slot.info.compute_instance,
                )
                for p in procs or ()
            ]
        return out if answered else None

    def of(self, interval: int, slot: MigSlot, read: ReadList) -> list[ProcessEntry] | None:
        """`slot`'s list for `interval`: the one `take` read, else read now."""
        uuid = slot.info.uuid
        if self.interval == interval and uuid in self.lists:
            return self.lists[uuid]
        procs = read(slot)
        self.pids[uuid] = _pids(procs)
        return procs


def _pids(procs: list[ProcessEntry] | None) -> frozenset[int]:
    return frozenset(p.pid for p in procs or ())
