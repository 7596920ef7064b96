"""Per-process attribution: who holds each GPU context, and what their tree costs the host.

`ProcessAttributor` is called by the sampler once per sample. It takes what NVML listed
on every GPU (`DeviceRaw.processes`, `.process_utilization`) and adds the host's side of
each PID:

- command name, user, optional command line, and the cgroup labels (`identity.py`,
  `cgroups.py`), cached per (pid, start time), so a reused PID is looked up afresh;
- CPU seconds of the process and all its descendants, the descendant count, resident
  memory and start time, read from one walk of /proc (`proctree.py`) in the samples the
  sampler says will be seen (`sampling/counter_reads.py`), and whenever NVML lists a
  PID not known yet; the other samples carry the values last read.

A PID is only a claim: the driver keeps listing the owner of a context that died while
a process it forked holds the device files (nvidia-smi prints it as `[No data]`). Where
/proc shows the host's PID namespace, a listed PID is a dead owner when it is gone from
/proc, when its stat state is Z (zombie) or X (dead), or when it was reused: its start
time is later than when this attributor first saw the PID listed. Both times are read on
the clock /proc's start times count on, seconds since boot with suspend included
(CLOCK_BOOTTIME), which never steps: an NTP, PTP or operator step of the wall clock, a
VM resume, changes neither (a cached boot time against `time.time()` once made every job
started after a step back a dead owner). A dead owner is no
process: it has no `gpu_process_*` series, is not counted in `gpu_processes`, and its
memory is unattributed (`Attribution.dead_owners` names it for the verdicts). Where /proc
is another namespace's, a PID cannot be judged and keeps its GPU series with empty
labels and no host values. A process that exits while it is read, or a file we may not
read, are expected: what could be read is kept, the rest is "" or left out. Nothing is
made up.

While a GPU has more than `scan_above_bytes` of memory that no live listed process
accounts for, the attributor asks `holders.HolderScanner` (its own thread, at most once
a minute) who holds that GPU's `/dev/nvidiaN`, and hands the last answer on
(`Attribution.holders`, at most `holders.MAX_HOLDERS` named, `holder_count` in all). It
remembers the process group and session of every listed process while it lives, so a
dead owner's workers whose descriptors the scan may not read are still named, as
candidates (`Attribution.holder_candidates`); an owner never seen alive stands for its
own group (a group's leader's PID is its id).

Each process is one series per GPU (and MIG instance), as nvidia-smi lists it: one that
NVML lists in both the compute and the graphics list (nvidia-smi's type C+G) has context
"compute+graphics" and its memory once (`_merge`).

Per GPU, the `limit` processes using the most GPU memory keep their own series; the
rest are summed into one series with `process="other"` and an empty `pid`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from gpu_exporter.attribution.holders import HolderScanner, Named
from gpu_exporter.attribution.identity import (
    FileReader,
    Identity,
    UserName,
    identify,
    read_file,
    user_name,
)
from gpu_exporter.attribution.namespace import sees_host_pid_namespace
from gpu_exporter.attribution.proctree import ProcTable, StatFiles, boot_time_seconds
from gpu_exporter.model import (
    PROCESS_CONTEXTS,
    Attribution,
    DeadOwner,
    DeviceRaw,
    GpuProcess,
    HolderScanState,
    HostProcess,
    ProcessSample,
    ProcessUtilization,
)

log = logging.getLogger(__name__)

OTHER = "other"
UNKNOWN = HostProcess()  # a PID /proc cannot judge: frozen, so one serves them all
GONE = HostProcess(dead="gone")
REUSE_SLACK_SECONDS = 1.0
"""A start time this much after the PID was first listed means the PID was reused. Both are
seconds since boot (start ticks are 1/100 s); the slack covers a clock read a little
before NVML's list (a listed process always started before it was listed)."""


def since_boot() -> float:
    """Seconds since boot, suspend included (CLOCK_BOOTTIME): the clock of the start times
    in /proc/PID/stat (Linux 3.17 and later); it never steps with the wall clock."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


HostProcessLookup = Callable[[int], HostProcess | None]
"""Answers for PIDs the backend itself knows (the simulated tenants); None: ask /proc."""


class ProcessAttributor:
    """Builds each GPU's process series once per sample. Used on the sampler thread only.

    `proc_root`, `read` and `name_of` (files and accounts), `since_boot` (seconds since
    boot, CLOCK_BOOTTIME: when a PID was first seen listed, compared with its start
    ticks), `clock` (Unix seconds: only to notice a step, which moves the boot time) and
    `lookup` are seams for tests; `lookup` answers for
    PIDs that have no /proc entry on this host (the simulated backend's), and a PID it
    answers for is alive. `holders` scans for the holders of the device files while a
    GPU has more than `scan_above_bytes` that no live listed process accounts for.
    """

    def __init__(
        self,
        *,
        limit: int = 32,
        cmdline: bool = False,
        proc_root: str = "/proc",
        read: FileReader = read_file,
        name_of: UserName = user_name,
        lookup: HostProcessLookup | None = None,
        clock_ticks: int | None = None,
        page_size: int | None = None,
        since_boot: Callable[[], float] = since_boot,
        clock: Callable[[], float] = time.time,
        holders: HolderScanner | None = None,
        scan_above_bytes: int = 2**30,
    ) -> None:
        self.limit = max(0, limit)
        self.cmdline = cmdline
        self._proc_root = proc_root
        self._read = read
        self._name_of = name_of
        self._lookup = lookup
        self._clock_ticks = clock_ticks
        self._page_size = page_size
        self._boot_time: float | None = None
        self._cache: dict[tuple[int, int], Identity] = {}
        self._stat_files = StatFiles()
        self._members: set[int] = set()  # last sample's GPU process trees
        self._hosts: dict[int, HostProcess] = {}  # the last host view read, by PID
        self._since_boot = since_boot
        self._clock = clock
        self._boot_offset: float | None = None  # wall minus boot time when btime was read
        # PID -> (seconds since boot it was first seen listed, its start ticks then or None)
        self._first_seen: dict[int, tuple[float, int | None]] = {}
        self._groups: dict[int, tuple[int, int]] = {}  # listed PID -> (pgrp, session)
        self.holders = holders
        self._scan_above = scan_above_bytes
        self.sees_host_pid_namespace = sees_host_pid_namespace(proc_root)
        if not self.sees_host_pid_namespace:
            log.warning(
                "not in the host's PID namespace (no kthreadd in %s): GPU processes are "
                "exported with their PID and GPU memory only; run the container with "
                "--pid=host (Kubernetes: hostPID: true) to attribute them",
                proc_root,
            )

    @property
    def holder_scan(self) -> HolderScanState | None:
        """The last scan for the holders of the device files; None before the first."""
        return self.holders.state if self.holders is not None else None

    # One sample --------------------------------------------------------------------

    def __call__(
        self, raws: Mapping[int, DeviceRaw], *, fresh: bool = True
    ) -> Mapping[int, Attribution]:
        """Each GPU's process series. With `fresh` False, /proc is read only if NVML
        lists a PID not known yet; else the host values are those last read."""
        pids = {p.pid for raw in raws.values() for p in raw.processes or ()}
        now = self._since_boot()  # never the wall clock: it steps (see the module)
        self._first_seen = {pid: self._first_seen.get(pid, (now, None)) for pid in pids}
        self._groups = {pid: g for pid, g in self._groups.items() if pid in pids}
        if fresh or not pids <= self._hosts.keys():
            self._hosts = self.host_processes(pids)
        hosts = self._hosts
        out = {
            index: self.attribute(raw, hosts)
            for index, raw in raws.items()
            if raw.processes is not None
        }
        if self.holders is not None:
            out = self._with_holders(raws, out, self.holders)
        return out

    def _with_holders(
        self,
        raws: Mapping[int, DeviceRaw],
        attribution: dict[int, Attribution],
        scanner: HolderScanner,
    ) -> dict[int, Attribution]:
        """Each GPU with more than `scan_above_bytes` no live process accounts for gets the
        holders of its device file from the last scan; a scan is asked for (it runs on its
        own thread, at most once a minute), never waited for."""
        suspects = {
            index: raws[index].static.minor_number
            for index, a in attribution.items()
            if a.unattributed_memory_bytes is not None
            and a.unattributed_memory_bytes > self._scan_above
            and raws[index].static.minor_number is not None
        }
        if not suspects:
            return attribution
        owners = {index: {o.pid for o in attribution[index].dead_owners} for index in suspects}
        groups = {
            index: {g for pid in pids for g in (pid, *self._groups.get(pid, ()))}
            for index, pids in owners.items()
        }
        scanner.request({g for gs in groups.values() for g in gs})
        scan = scanner.latest()
        if scan is None:
            return attribution
        out = dict(attribution)
        reasons = scan.state.incomplete_reasons
        for index, minor in suspects.items():
            if minor is None:
                continue
            held = scan.holders.get(minor, Named())
            candidates = Named()
            for group in sorted(groups[index]):
                candidates = candidates.merge(
                    scan.candidates.get(group, Named()), leave_out=held.pids | owners[index]
                )
            out[index] = replace(
                out[index],
                holders=held.named,
                holders_complete=not reasons,
                holders_incomplete=reasons,
                denied_processes=scan.state.denied_processes,
                holder_count=len(held.pids),
                holder_candidates=candidates.named,
                holder_candidate_count=len(candidates.pids),
            )
        return out

    # Host side ---------------------------------------------------------------------

    def host_processes(self, pids: set[int]) -> dict[int, HostProcess]:
        """The host view of every PID, with one /proc walk for all of them."""
        out: dict[int, HostProcess] = {}
        rest: list[int] = []
        for pid in pids:
            known = self._lookup(pid) if self._lookup is not None else None
            if known is not None:
                out[pid] = known if self.cmdline else replace(known, cmdline=None)
            else:
                rest.append(pid)
        if not rest or not self.sees_host_pid_namespace:
            # this /proc is another namespace's: the same numbers name other processes
            out.update((pid, UNKNOWN) for pid in rest)
            self._cache.clear()
            self._members = set()
            return out
        table = ProcTable.scan(self._proc_root, self._stat_files, keep=self._members)
        members: set[int] = set()
        used: set[tuple[int, int]] = set()
        for pid in rest:
            stat = table.get(pid)
            if stat is None:  # in the host's PID namespace: gone
                out[pid] = GONE
                continue
            if stat.session and not stat.dead:
                self._groups[pid] = (stat.pgrp, stat.session)
            if stat.dead:
                out[pid] = HostProcess(process=stat.comm, dead="zombie")
                continue
            if self._reused(pid, stat.start_ticks):
                out[pid] = GONE
                continue
            key = (pid, stat.start_ticks)
            identity = self._cache.get(key)
            if identity is None:
                identity, complete = identify(
                    self._proc_root,
                    pid,
                    stat.comm,
                    cmdline=self.cmdline,
                    read=self._read,
                    name_of=self._name_of,
                )
                if complete:
                    self._cache[key] = identity
            used.add(key)
            descendants = table.descendants(pid)
            members.add(pid)
            members.update(descendants)
            ticks = self._ticks()
            boot = self._boot()
            out[pid] = HostProcess(
                process=identity.process,
                user=identity.user,
                cmdline=identity.cmdline,
                labels=identity.labels,
                executable=identity.executable,
                cpu_seconds=table.tree_cpu_ticks(pid, descendants) / ticks,
                workers=len(descendants),
                resident_memory_bytes=stat.rss_pages * self._pages(),
                start_time_seconds=None if boot is None else boot + stat.start_ticks / ticks,
            )
        for key in set(self._cache) - used:  # exited processes leave the cache
            del self._cache[key]
        self._members = members  # their stat files stay open for the next walk
        return out

    def _reused(self, pid: int, start_ticks: int) -> bool:
        """True when `pid` names a later process than the one NVML first listed: its start
        ticks differ from those read then, or it started (seconds since boot) after it
        was first seen listed (seconds since boot)."""
        first = self._first_seen.get(pid)
        if first is None:
            return False  # not listed by NVML (a backend's own PID): nothing to compare
        seen, ticks_then = first
        if ticks_then is None:
            self._first_seen[pid] = (seen, start_ticks)
        elif ticks_then != start_ticks:
            return True
        return start_ticks / self._ticks() > seen + REUSE_SLACK_SECONDS

    def _ticks(self) -> int:
        if self._clock_ticks is None:
            self._clock_ticks = os.sysconf("SC_CLK_TCK")
        return self._clock_ticks

    def _pages(self) -> int:
        if self._page_size is None:
            self._page_size = os.sysconf("SC_PAGE_SIZE")
        return self._page_size

    def _boot(self) -> float | None:
        """The boot time in Unix seconds (`btime`), read again when the wall clock
        stepped (wall minus boot time moved by more than a second; reading /proc/stat
        costs 0.1 ms and more with the CPUs): the kernel moves it with the step, so a start
        time it gives is today's Unix time; None (start times left out) while unreadable.
        Used for the exported start times only, never to judge a PID (`_reused` compares
        seconds since boot)."""
        offset = self._clock() - self._since_boot()  # the boot time, as the clocks say now
        stepped = self._boot_offset is not None and abs(offset - self._boot_offset) > 1.0
        if self._boot_time is None or stepped:
            self._boot_time = boot_time_seconds(self._proc_root)
            self._boot_offset = offset
        return self._boot_time

    # One GPU -----------------------------------------------------------------------

    def attribute(self, raw: DeviceRaw, hosts: Mapping[int, HostProcess]) -> Attribution:
        """The process series of one GPU and the memory none of them accounts for; a dead
        owner's entries are left out of both (its memory is unattributed)."""
        merged = _merge(raw.processes or ())
        entries: dict[Placement, int | None] = {}
        dead: dict[int, DeadOwner] = {}
        for placement, memory in merged.items():
            pid = placement[0]
            state = hosts.get(pid, UNKNOWN).dead
            if not state:
                entries[placement] = memory
                continue
            known = dead.get(pid)
            total = memory if known is None else _sum_int([known.memory_used_bytes, memory])
            dead[pid] = DeadOwner(pid, state, total)
        utilization = _latest_utilization(raw.process_utilization)
        samples = [
            _sample(
                placement,
                memory,
                utilization,
                raw.process_utilization is not None,
                hosts.get(placement[0], UNKNOWN),
            )
            for placement, memory in entries.items()
        ]
        samples.sort(key=lambda s: (-(s.memory_used_bytes or 0), int(s.pid)))
        kept, rest = samples[: self.limit], samples[self.limit :]
        kept.sort(key=lambda s: (int(s.pid), s.context, s.gpu_instance, s.compute_instance))
        if rest:
            kept.append(_other(rest))
        pids = len({placement[0] for placement in entries})
        return Attribution(
            tuple(kept),
            _unattributed(raw, merged, entries),
            pids,
            _containers(samples),
            _host_processes(samples),
            tuple(dead[pid] for pid in sorted(dead)),
        )


Placement = tuple[int, str, int | None, int | None]
"""Where a process holds memory: (pid, context, MIG GPU instance, MIG compute instance);
the context is "compute", "graphics" or "compute+graphics" (nvidia-smi's C, G, C+G)."""


def _merge(processes: Sequence[GpuProcess]) -> dict[Placement, int | None]:
    """GPU memory per process and place, once, as nvidia-smi lists it.

    NVML lists a process that holds both kinds of context (nvidia-smi's type C+G) in the
    compute and in the graphics list, each time with all its memory: it becomes one
    entry, context "compute+graphics", with that memory once (the larger answer, should
    the two lists disagree). A PID listed twice in one list is summed."""
    lists: dict[tuple[int, int | None, int | None], dict[str, int | None]] = {}
    for p in processes:
        memory = lists.setdefault((p.pid, p.gpu_instance, p.compute_instance), {})
        if p.context in memory:
            previous = memory[p.context]
            memory[p.context] = (
                None
                if previous is None or p.used_memory_bytes is None
                else previous + p.used_memory_bytes
            )
        else:
            memory[p.context] = p.used_memory_bytes
    out: dict[Placement, int | None] = {}
    for (pid, gpu_instance, compute_instance), memory in lists.items():
        context = "+".join(c for c in PROCESS_CONTEXTS if c in memory)
        known = [m for m in memory.values() if m is not None]
        out[(pid, context, gpu_instance, compute_instance)] = max(known) if known else None
    return out


def _latest_utilization(
    samples: Sequence[ProcessUtilization] | None,
) -> dict[int, ProcessUtilization]:
    """The newest utilization sample of each PID."""
    latest: dict[int, ProcessUtilization] = {}
    for s in samples or ():
        seen = latest.get(s.pid)
        if seen is None or s.timestamp_us >= seen.timestamp_us:
            latest[s.pid] = s
    return latest


def _sample(
    placement: Placement,
    memory: int | None,
    utilization: Mapping[int, ProcessUtilization],
    utilization_supported: bool,
    host: HostProcess,
) -> ProcessSample:
    pid, context, gpu_instance, compute_instance = placement
    u = utilization.get(pid)
    # The driver lists only processes that ran kernels in the period: absent means idle.
    sm = u.sm_ratio if u is not None else (0.0 if utilization_supported else None)
    mc = u.memory_controller_ratio if u is not None else (0.0 if utilization_supported else None)
    return ProcessSample(
        pid=str(pid),
        process=host.process,
        user=host.user,
        context=context,
        gpu_instance=str(gpu_instance) if gpu_instance is not None else "",
        compute_instance=str(compute_instance) if compute_instance is not None else "",
        container_id=host.labels.container_id,
        pod_uid=host.labels.pod_uid,
        systemd_unit=host.labels.systemd_unit,
        slurm_job_id=host.labels.slurm_job_id,
        cmdline=host.cmdline,
        executable=host.executable,
        memory_used_bytes=memory,
        sm_ratio=sm,
        memory_controller_ratio=mc,
        cpu_seconds=host.cpu_seconds,
        workers=host.workers,
        resident_memory_bytes=host.resident_memory_bytes,
        start_time_seconds=host.start_time_seconds,
    )


def _containers(samples: Sequence[ProcessSample]) -> dict[tuple[str, str, str], int]:
    """Processes per (gpu_instance, container_id, pod_uid) of every container, the ones
    beyond the cap included (Kubernetes attribution finds GPUs used without allocation)."""
    return _distinct_pids(
        ((s.gpu_instance, s.container_id, s.pod_uid), s.pid)
        for s in samples
        if s.container_id or s.pod_uid
    )


def _host_processes(samples: Sequence[ProcessSample]) -> dict[tuple[str, str, str], int]:
    """Processes per (gpu_instance, process name, executable) of those in no container and no pod,
    the ones beyond the cap included; a process the host's /proc does not show (no name)
    is not known to be the host's, and is left out."""
    return _distinct_pids(
        ((s.gpu_instance, s.process, s.executable), s.pid)
        for s in samples
        if s.process and not (s.container_id or s.pod_uid)
    )


K = TypeVar("K")


def _distinct_pids(placed: Iterable[tuple[K, str]]) -> dict[K, int]:
    """How many distinct PIDs each key has (a process in several MIG or context entries
    counts once)."""
    pids: dict[K, set[str]] = {}
    for key, pid in placed:
        pids.setdefault(key, set()).add(pid)
    return {key: len(members) for key, members in pids.items()}


def _sum_int(values: Sequence[int | None]) -> int | None:
    """The sum, or None when any value is unknown (a partial sum would mislead)."""
    if any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _sum_ratio(values: Sequence[float | None]) -> float | None:
    if any(v is None for v in values):
        return None
    return min(1.0, sum(v for v in values if v is not None))


def _other(rest: Sequence[ProcessSample]) -> ProcessSample:
    """The roll-up of the processes beyond the cap.

    Gauges are summed. CPU seconds and start time are left out: a sum over a set of
    processes that changes between samples is not a counter, and has no start.
    """
    contexts = {s.context for s in rest}
    return ProcessSample(
        pid="",
        process=OTHER,
        user="",
        context=contexts.pop() if len(contexts) == 1 else "",
        memory_used_bytes=_sum_int([s.memory_used_bytes for s in rest]),
        sm_ratio=_sum_ratio([s.sm_ratio for s in rest]),
        memory_controller_ratio=_sum_ratio([s.memory_controller_ratio for s in rest]),
        workers=_sum_int([s.workers for s in rest]),
        resident_memory_bytes=_sum_int([s.resident_memory_bytes for s in rest]),
    )


def _unattributed(
    raw: DeviceRaw, listed: Mapping[Placement, int | None], live: Mapping[Placement, int | None]
) -> int | None:
    """Used GPU memory no live listed process accounts for, in bytes; never negative.

    The used memory comes from NVML's v2 memory info, whose `used` already leaves out
    the driver's reservation (`gpu_memory_reserved_bytes`); where only v1 exists the
    reservation is not reported and cannot be taken out. A dead owner's memory is in it.
    None when the used memory or any live process's memory is unknown (vGPU), and under
    MIG, where each GPU instance holds memory of its own that no process accounts for: a
    guess would hide or invent a leak.
    """
    reading = raw.reading.memory
    used = reading.used_bytes if reading is not None else None
    if used is None:
        return None
    if any(gpu_instance is not None for (_pid, _c, gpu_instance, _ci) in listed):
        return None
    accounted = 0
    for memory in live.values():
        if memory is None:
            return None
        accounted += memory  # one entry per process: a C+G one is counted once (`_merge`)
    return max(0, used - accounted)
