"""What each GPU's (and MIG instance's) memory is doing, judged every interval.

Used memory near the total is the steady state of healthy jobs: TensorFlow maps nearly
all of a GPU at start, vLLM and JAX reserve a fraction (0.9, 0.95), PyTorch's caching
allocator keeps its peak. The driver cannot see inside such a pool, but each interval's
used memory per GPU, per MIG instance and per process, and when processes come and go,
tell the patterns apart (`model.MEMORY_PATTERNS`, thresholds in `sampling/thresholds.py`):

- `reserved`: near full and held flat, whatever reached it (a pool reserved up front);
- `pressure`: near the top and moving: at least MEMORY_PRESSURE_DROPS drops of
  MEMORY_DROP_RATIO of the total from near full that rose back near full with the same
  processes (a caching allocator that failed an allocation, freed its cache and retried),
  or growth into the ceiling (a rise of MEMORY_GROWTH_RATIO in small steps, no young
  process), within MEMORY_PATTERN_WINDOW_SECONDS;
- `sharing`: near full with two or more live processes holding at least
  MEMORY_SHARE_RATIO each, or a process that arrived while it was near full (within the
  window): the next allocation of one of them fails;
- `unowned`: near full with no live process (a dead owner's memory: GPUMemoryLeaked's);
- `not_full`: its peak over MEMORY_PEAK_WINDOW_SECONDS below the near-full line.

And after the fact: a process holding MEMORY_OOM_EXIT_RATIO of the total that ends while
its GPU was near full, its memory freed, is a likely out-of-memory death (`MemoryExit`).

Judged from each interval's readings, not from scrapes: a drop and re-rise between two
scrapes still counts. The state is bounded (a window of points, a few exits per GPU) and
dropped when its GPU, MIG instance or process goes. A MIG GPU is judged per instance only:
its instances do not share memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpu_exporter.model import (
    DeviceSample,
    MemoryExit,
    MemoryHolder,
    MemoryPattern,
    ProcessSample,
    device_with,
)
from gpu_exporter.records import Record
from gpu_exporter.sampling import thresholds as th

MAX_POINTS = 1024
"""Points kept per GPU or instance at most (the window at a 1 s interval is 600; only a
rise at every interval keeps them all, see `WindowLow`)."""

MAX_RECENT_EXITS = 4
"""Recent likely OOM exits named per GPU or instance."""

MAX_HOLDERS = 8
"""Live processes named per GPU or instance (the largest)."""

MAX_RECENT_DROPS = 64
"""Near-full drops remembered within the window (more than enough for `pressure`)."""

TrackKey = tuple[int, str, int, str]
"""(NVML index, GPU UUID, MIG GPU instance id or -1, UUID of its first MIG device or "")."""


@dataclass(repr=False)
class _Process(Record):
    first_seen: float  # monotonic
    memory: int
    anchor: int  # where its memory settled
    flat_since: float  # monotonic: when it last moved out of the flat band
    at_start_known: bool  # first seen after the GPU was (not in the first interval)
    sample: ProcessSample


class WindowLow:
    """The least of the values added within the last `window_seconds`.

    Kept are the (time, value) points that no later point is at or below, oldest first
    (so their values rise): the least within the window is the first of them still
    inside it. Memory that holds or wavers keeps a few points, not one an interval; only
    a rise at every interval keeps them all (at most MAX_POINTS, the oldest dropped)."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._points: deque[tuple[float, int]] = deque(maxlen=MAX_POINTS)

    def __len__(self) -> int:
        return len(self._points)

    def add(self, now: float, value: int) -> None:
        """A point at `now` (monotonic seconds, never earlier than the last)."""
        points = self._points
        while points and points[-1][1] >= value:  # never the least again while this is kept
            points.pop()
        points.append((now, value))
        while now - points[0][0] > self.window_seconds:
            points.popleft()

    def least(self, now: float, default: int) -> int:
        """The least value added at most `window_seconds` before `now`; `default` if none."""
        window = self.window_seconds
        return next((value for t, value in self._points if now - t <= window), default)


@dataclass(repr=False)
class _Track(Record):
    """One GPU's or MIG instance's state between intervals."""

    lows: WindowLow = field(default_factory=lambda: WindowLow(th.MEMORY_PATTERN_WINDOW_SECONDS))
    observations: int = 0
    prev_used: int = 0
    prev_near: bool = False
    peak: int | None = None  # the highest used memory since it came near full
    cycle_pids: frozenset[str] | None = None  # the processes of that peak
    dropped_at: float | None = None  # when it fell MEMORY_DROP_RATIO below the peak
    drops: int = 0
    recent_drops: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_RECENT_DROPS))
    grew_at: float | None = None
    near_at: float | None = None  # when it was last near full: the peak window's peak is
    arrived_at: float | None = None
    anchor: int = 0
    flat_since: float = 0.0
    exits: int = 0
    # (monotonic time, exit): held MEMORY_OOM_EXIT_HOLD_SECONDS whatever the wall clock does
    recent_exits: deque[tuple[float, MemoryExit]] = field(
        default_factory=lambda: deque(maxlen=MAX_RECENT_EXITS)
    )
    processes: dict[str, _Process] | None = None  # None: not known last interval


class MemoryPatterns:
    """Judges every GPU's and MIG instance's memory each interval (the sampler calls
    `observe`); keeps what the next interval needs and nothing of what went."""

    def __init__(self) -> None:
        self._tracks: dict[TrackKey, _Track] = {}

    def __len__(self) -> int:
        return len(self._tracks)

    def observe(
        self, devices: Sequence[DeviceSample], *, now: float, wall: float
    ) -> tuple[DeviceSample, ...]:
        """The devices with their memory patterns; `now` is monotonic seconds, `wall` the
        Unix time of the sample (for the exits' time)."""
        seen: set[TrackKey] = set()
        out: list[DeviceSample] = []
        for device in devices:
            reading = device.reading
            if not device.up or reading is None or device.static is None:
                # a GPU down for a while keeps its state: its counters go on where they were
                seen.update(k for k in self._tracks if k[:2] == (device.index, device.uuid))
                out.append(device)
                continue
            processes = device.attribution.processes if device.attribution else None
            mig = reading.mig
            if mig is None:
                memory = reading.memory
                pattern = None
                if memory is not None:
                    key = (device.index, device.uuid, -1, "")
                    pattern = self._step(
                        key, now, wall, memory.used_bytes, memory.total_bytes, processes
                    )
                    if pattern is not None:
                        seen.add(key)
                out.append(device_with(device, memory_pattern=pattern))
                continue
            first_uuid: dict[int, str] = {}
            for m in mig.devices:
                first_uuid.setdefault(m.gpu_instance, m.uuid)
            patterns: dict[int, MemoryPattern] = {}
            for gi, instance in sorted(mig.instances.items()):
                key = (device.index, device.uuid, gi, first_uuid.get(gi, ""))
                mine = (
                    None
                    if processes is None
                    else [p for p in processes if p.gpu_instance == str(gi)]
                )
                found = self._step(
                    key, now, wall, instance.memory_used_bytes, instance.memory_total_bytes, mine
                )
                if found is not None:
                    seen.add(key)
                    patterns[gi] = found
            out.append(device_with(device, mig_memory_patterns=patterns))
        if not devices:  # NVML down (or no GPU): nothing is known to have gone
            return ()
        for gone in set(self._tracks) - seen:
            del self._tracks[gone]
        return tuple(out)

    def _step(
        self,
        key: TrackKey,
        now: float,
        wall: float,
        used: int | None,
        total: int | None,
        processes: Sequence[ProcessSample] | None,
    ) -> MemoryPattern | None:
        if used is None or not total:
            return None
        track = self._tracks.get(key)
        if track is None:
            track = self._tracks[key] = _Track(anchor=used, flat_since=now)
        return _judge(track, now, wall, used, total, processes)


def _live(processes: Sequence[ProcessSample]) -> dict[str, tuple[int, ProcessSample]]:
    """Each live listed process's memory (its entries summed), by PID; the roll-up of
    processes beyond the cap (pid "") left out."""
    out: dict[str, tuple[int, ProcessSample]] = {}
    for p in processes:
        if not p.pid:
            continue
        before = out.get(p.pid)
        memory = (p.memory_used_bytes or 0) + (before[0] if before else 0)
        out[p.pid] = (memory, before[1] if before else p)
    return out


def _judge(
    track: _Track,
    now: float,
    wall: float,
    used: int,
    total: int,
    processes: Sequence[ProcessSample] | None,
) -> MemoryPattern:
    near = used > th.NEAR_OOM_MEMORY_RATIO * total
    first = track.observations == 0
    live = _live(processes) if processes is not None else None
    pids = frozenset(live) if live is not None else None
    before = track.processes

    # after the fact: a large holder gone while near full, its memory freed
    if live is not None and before is not None and track.prev_near:
        for pid, gone in before.items():
            if pid in live or gone.memory < th.MEMORY_OOM_EXIT_RATIO * total:
                continue
            if track.prev_used - used < gone.memory / 2:
                continue  # its memory stays held: a dead owner's, not a death by OOM
            track.exits += 1
            track.recent_exits.append(
                (now, MemoryExit(_holder(gone, now), wall, track.prev_used / total))
            )
    # a process arriving on a near-full GPU
    if live is not None and before is not None and track.prev_near and set(live) - set(before):
        track.arrived_at = now

    # drops from near full and re-rises, with the same processes
    rose_back = False
    if track.dropped_at is not None and now - track.dropped_at > th.MEMORY_PEAK_WINDOW_SECONDS:
        track.dropped_at = track.peak = None
    if near:
        if track.dropped_at is not None and pids == track.cycle_pids:
            track.drops += 1
            track.recent_drops.append(now)
            rose_back = True
        track.dropped_at = None
        if track.peak is None or not track.prev_near or pids != track.cycle_pids:
            track.peak, track.cycle_pids = used, pids
        else:
            track.peak = max(track.peak, used)
    elif track.peak is not None:
        if pids != track.cycle_pids:
            track.peak = track.dropped_at = None
        elif track.dropped_at is None and track.peak - used >= th.MEMORY_DROP_RATIO * total:
            track.dropped_at = now

    # growth into the ceiling: small steps, no young process, a real rise
    if near and not track.prev_near and not first and not rose_back:
        young = any(now - p.first_seen < th.MEMORY_STARTUP_SECONDS for p in (before or {}).values())
        young = young or (live is not None and before is not None and bool(set(live) - set(before)))
        lowest = track.lows.least(now, default=used)
        if (
            not young
            and used - lowest >= th.MEMORY_GROWTH_RATIO * total
            and used - track.prev_used < th.MEMORY_JUMP_RATIO * total
        ):
            track.grew_at = now

    # flat: within the band of where it settled
    if abs(used - track.anchor) > th.MEMORY_FLAT_RATIO * total:
        track.anchor, track.flat_since = used, now
    if live is None:
        track.processes = None
    else:
        track.processes = _processes(before, live, now, total, known=not first)

    track.lows.add(now, used)
    window = th.MEMORY_PATTERN_WINDOW_SECONDS
    while track.recent_drops and now - track.recent_drops[0] > window:
        track.recent_drops.popleft()
    while track.recent_exits and now - track.recent_exits[0][0] > th.MEMORY_OOM_EXIT_HOLD_SECONDS:
        track.recent_exits.popleft()
    track.observations += 1
    track.prev_used, track.prev_near = used, near

    grew = track.grew_at is not None and now - track.grew_at <= window
    arrived = track.arrived_at is not None and now - track.arrived_at <= window
    if near:
        track.near_at = now
    near_top = track.near_at is not None and now - track.near_at <= th.MEMORY_PEAK_WINDOW_SECONDS
    held = (track.processes or {}).values()
    sharers = sum(1 for p in held if p.memory >= th.MEMORY_SHARE_RATIO * total)
    holders: tuple[MemoryHolder, ...] = ()  # named only near the top, where verdicts read them
    if near_top:
        largest = sorted(held, key=lambda p: (-p.memory, p.sample.pid))[:MAX_HOLDERS]
        holders = tuple(_holder(p, now) for p in largest)
    if not near_top:
        pattern = "not_full"
    elif live is not None and not live:  # no live process: a dead owner's, or freed
        pattern = "unowned" if near else "not_full"
    elif len(track.recent_drops) >= th.MEMORY_PRESSURE_DROPS or grew:
        pattern = "pressure"
    elif sharers >= 2 or arrived:
        pattern = "sharing"
    else:
        pattern = "reserved"
    return MemoryPattern(
        pattern=pattern,
        near_full_drops=track.drops,
        flat_seconds=now - track.flat_since,
        likely_oom_exits=track.exits,
        recent_exits=tuple(e for _, e in track.recent_exits),
        recent_drops=len(track.recent_drops),
        grew=grew,
        arrived=arrived,
        used_ratio=used / total,
        total_bytes=total,
        holders=holders,
    )


def _processes(
    before: Mapping[str, _Process] | None,
    live: Mapping[str, tuple[int, ProcessSample]],
    now: float,
    total: int,
    *,
    known: bool,
) -> dict[str, _Process]:
    """This interval's processes, each carrying on from the last; the gone ones dropped."""
    out: dict[str, _Process] = {}
    for pid, (memory, sample) in live.items():
        old = (before or {}).get(pid)
        if old is None:
            out[pid] = _Process(now, memory, memory, now, known and before is not None, sample)
            continue
        old.memory, old.sample = memory, sample
        if abs(memory - old.anchor) > th.MEMORY_FLAT_RATIO * total:
            old.anchor, old.flat_since = memory, now
        out[pid] = old
    return out


def _holder(p: _Process, now: float) -> MemoryHolder:
    s = p.sample
    return MemoryHolder(
        pid=s.pid,
        process=s.process,
        user=s.user,
        container_id=s.container_id,
        pod_uid=s.pod_uid,
        namespace=s.namespace,
        pod=s.pod,
        container=s.container,
        memory_bytes=p.memory,
        flat_seconds=now - p.flat_since,
        at_start=p.at_start_known and p.flat_since - p.first_seen <= th.MEMORY_STARTUP_SECONDS,
    )


def patterns_of(devices: Iterable[DeviceSample]) -> dict[tuple[int, int], str]:
    """(GPU index, MIG GPU instance or -1) -> pattern: a compact view for tests and logs."""
    out: dict[tuple[int, int], str] = {}
    for d in devices:
        if d.memory_pattern is not None:
            out[(d.index, -1)] = d.memory_pattern.pattern
        for gi, p in d.mig_memory_patterns.items():
            out[(d.index, gi)] = p.pattern
    return out
