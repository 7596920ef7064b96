"""The compute process list of each MIG device: read once an interval, and for two
purposes.

Under MIG the processes are listed per MIG device (the parent's list has no memory).

A list also tells, for free, that a MIG handle still names the instance it named at
enumeration, where `mig.handles_hold` would spend a UUID read: a MIG device whose list
names a PID its previous list named is the same compute instance. NVML refuses to
destroy a compute or GPU instance while a process is active on it (NVML_ERROR_IN_USE,
nvml.h on nvmlComputeInstanceDestroy and nvmlGpuInstanceDestroy), and a CUDA process
keeps the one MIG device it started on, so a process listed before and after through
one handle never left its instance. Only a PID that the kernel handed out again within
one interval could fool it, and Linux hands PIDs out in turn up to pid_max (32768 at
the least), so that takes tens of thousands of new processes in that interval. An empty
list proves nothing (an idle instance may have been swapped), nor does a first list:
those MIG devices are checked by UUID (`take` does not read them).

An empty list is not read again while its GPU instance's used memory, which the mig
collector reads every interval, stands still to the byte: a process on a MIG device
holds memory on its GPU instance (its CUDA context), so one that starts moves it. To
leave no room for a process whose memory was counted just before an empty list was
read and that was listed just after, the memory must stand still since the interval
before that read. Only where the GPU instance has this one MIG device: on a GPU instance
shared by compute instances, another's process could free what a new one takes. Read
again every SLOW_REFRESH_SECONDS whatever the memory does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpu_exporter.model import GpuProcess
from gpu_exporter.records import Record
from gpu_exporter.sources.backend import SLOW_REFRESH_SECONDS
from gpu_exporter.sources.nvml.buffers import ProcessEntry
from gpu_exporter.sources.nvml.mig import MigSlot

ReadList = Callable[[MigSlot], list[ProcessEntry] | None]


@dataclass(repr=False)
class MigProcessLists(Record):
    """One GPU's MIG device process lists: those of the current interval (by MIG UUID),
    the PIDs each MIG device listed last, and since when each GPU instance's used
    memory stands still."""

    interval: int = -1  # the interval `lists` were read in
    lists: dict[str, list[ProcessEntry] | None] = field(default_factory=dict)
    pids: dict[str, frozenset[int]] = field(default_factory=dict)
    empty: dict[str, tuple[int, float]] = field(default_factory=dict)  # (interval, time)
    memory: dict[int, tuple[int, int | None, int]] = field(default_factory=dict)
    """GPU instance id -> (interval last read, used bytes, first interval it stood at)."""

    def take(self, interval: int, slots: Sequence[MigSlot], read: ReadList) -> frozenset[str]:
        """Read for `interval` the list of each MIG device that listed a process last
        (`read` answers None for a handle that no longer answers); the UUIDs of those
        still running a process they ran then."""
        self.interval = interval
        self.lists = {}
        live = {slot.info.uuid for slot in slots}  # forget MIG devices gone
        self.pids = {uuid: pids for uuid, pids in self.pids.items() if uuid in live}
        self.empty = {uuid: at for uuid, at in self.empty.items() if uuid in live}
        continuing: set[str] = set()
        for slot in slots:
            uuid = slot.info.uuid
            if not self.pids.get(uuid):
                continue  # nothing to prove it by: its UUID is asked
            procs = self.lists[uuid] = read(slot)
            if _pids(procs) & self.pids[uuid]:
                continuing.add(uuid)
            self.pids[uuid] = _pids(procs)
        return frozenset(continuing)

    def used_memory(self, interval: int, gpu_instance: int, used_bytes: int | None) -> None:
        """What a GPU instance's used memory read in `interval` (None: not read)."""
        last = self.memory.get(gpu_instance)
        steady = last is not None and last[0] == interval - 1 and last[1] == used_bytes
        since = last[2] if last is not None and steady and used_bytes is not None else interval
        self.memory[gpu_instance] = (interval, used_bytes, since)

    def processes(
        self, interval: int, now: float, slots: Sequence[MigSlot], read: ReadList
    ) -> list[GpuProcess] | None:
        """The processes of every MIG device, with their GPU and compute instance; None
        when no MIG device answered. `now`: monotonic seconds."""
        shared = Counter(slot.info.gpu_instance for slot in slots)
        out: list[GpuProcess] = []
        answered = False
        for slot in slots:
            procs = self._of(interval, now, slot, read, alone=shared[slot.info.gpu_instance] == 1)
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

    def _of(
        self, interval: int, now: float, slot: MigSlot, read: ReadList, *, alone: bool
    ) -> list[ProcessEntry] | None:
        """`slot`'s list for `interval`: the one `take` read, the empty one while its GPU
        instance's memory stands still (see the module's docstring), else read now."""
        uuid = slot.info.uuid
        if self.interval == interval and uuid in self.lists:
            return self.lists[uuid]
        if alone and self._still_empty(interval, now, uuid, slot.info.gpu_instance):
            return []
        procs = read(slot)
        self.pids[uuid] = _pids(procs)
        if procs is not None and not procs:
            self.empty[uuid] = (interval, now)
        else:
            self.empty.pop(uuid, None)
        return procs

    def _still_empty(self, interval: int, now: float, uuid: str, gpu_instance: int) -> bool:
        empty, memory = self.empty.get(uuid), self.memory.get(gpu_instance)
        if empty is None or memory is None or now - empty[1] >= SLOW_REFRESH_SECONDS:
            return False
        read_in, used, steady_since = memory
        return read_in == interval and used is not None and steady_since <= empty[0] - 1


def _pids(procs: list[ProcessEntry] | None) -> frozenset[int]:
    return frozenset(p.pid for p in procs or ())
