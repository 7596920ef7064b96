"""The recent past of what the live page charts: bounded, in memory, never on disk.

`History.add(snapshot)` is called with every published Snapshot. From consecutive
snapshots it derives the rates a chart needs (the true busy ratio from the busy-counter
deltas, SM activity from GPM's totals, host CPU from its busy seconds) and keeps, per GPU
and for the host, three tiers of fixed size:

- `fine`: 1-second points for the last 6 minutes, what is read of them (the 5-minute
  chart and the verdicts' VERDICT_WINDOW_SECONDS) with a minute to spare: every sample
  at intervals of a second or more (full resolution); faster samples are averaged into
  one point a second;
- `medium`: 10-second means for the last hour (what the 1-hour chart draws);
- `coarse`: 1-minute means for the last 12 hours.

Values are float32 in `array('f')` rings, timestamps float64; a missing value is NaN
inside and `None` outside (a gap in a chart, never 0). The rings are allocated at their
full size when a GPU is first seen, and a tier's open bucket keeps fewer than FOLD_AT
samples unsummed, at any sampling rate, so the memory is fixed:
`benchmarks/history_memory.py` measures it (about 0.8 MiB for 8 GPUs, see
benchmarks/README.md). `benchmarks/history_add.py` times `History.add`.

A GPU is kept by its `GpuKey`, (NVML index, UUID), never by UUID alone: boards with the
same UUID (a cloned VBIOS, some virtual GPUs) are still two GPUs, as in the exposition,
where every series carries both labels. A GPU that comes back under another index after
NVML re-initialises starts a new history.

Process CPU is kept apart and briefly: for each GPU process, a few (time, CPU seconds)
points over `VERDICT_WINDOW_SECONDS`, enough for its CPU cores and the input-bound verdict.
"""

from __future__ import annotations

import math
import struct
import threading
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gpu_exporter.model import DeviceSample, HostSample, Snapshot
from gpu_exporter.records import Record
from gpu_exporter.sampling.thresholds import (
    THERMAL_THROTTLE_REASONS,
    VERDICT_WINDOW_SECONDS,
)

GPU_SERIES: tuple[str, ...] = (
    "busy_ratio",  # share of time a kernel ran (busy-counter deltas; MIG: graphics engine)
    "utilization_ratio",  # the driver's instantaneous utilization at each sample
    "sm_ratio",  # GPM SM activity (Hopper and newer)
    "memory_used_bytes",
    "memory_total_bytes",
    "power_watts",
    "power_limit_watts",
    "temperature_celsius",
    "slowdown_celsius",  # the slowdown temperature threshold
    "power_capped_ratio",  # 1 while the clocks are held at the power limit (sw_power_cap)
    "thermal_throttled_ratio",  # 1 while held down by heat (sw/hw_thermal_slowdown)
)
"""The series kept per GPU, in units their names say (ratios 0..1)."""

HOST_SERIES: tuple[str, ...] = (
    "cpu_ratio",  # share of all CPUs busy (non-idle), 0..1
    "memory_used_bytes",  # total minus available
    "memory_total_bytes",
)
"""The series kept for the host."""


@dataclass(frozen=True, repr=False)
class TierSpec(Record):
    """Points of `step_seconds` (means of the samples within) for `span_seconds`."""

    step_seconds: float
    span_seconds: float

    @property
    def capacity(self) -> int:
        return int(self.span_seconds / self.step_seconds)


FINE = TierSpec(1.0, VERDICT_WINDOW_SECONDS + 60.0)  # read: 5 minutes; kept: 6
MEDIUM = TierSpec(10.0, 3600.0)
COARSE = TierSpec(60.0, 12 * 3600.0)
TIERS: tuple[TierSpec, ...] = (FINE, MEDIUM, COARSE)


@dataclass(frozen=True, repr=False)
class Window(Record):
    """A span of the past the page and the API offer, and the tier it is read from."""

    name: str  # "5m", "1h", "12h"
    seconds: float
    tier: TierSpec

    @property
    def max_points(self) -> int:
        """The most points one series of this window holds (its last one still open)."""
        return math.ceil(self.seconds / self.tier.step_seconds) + 1


WINDOWS: Mapping[str, Window] = {
    w.name: w
    for w in (
        Window("5m", 300.0, FINE),
        Window("1h", 3600.0, MEDIUM),
        Window("12h", 12 * 3600.0, COARSE),
    )
}
DEFAULT_WINDOW = "5m"
GpuKey = tuple[int, str]
"""How the history names a GPU: (NVML index, UUID)."""
MAX_GPUS = 64  # GPUs kept; a new one replaces the one seen longest ago, if not still seen
PROCESS_POINT_SECONDS = 10.0  # process CPU points are kept at most this often
HISTORY_CADENCES: Mapping[str, float] = {
    "host": FINE.step_seconds,
    "process": PROCESS_POINT_SECONDS,
}
"""Seconds between the reads of each collector's /proc counters the history needs
(`counter_reads.CounterReads`): host CPU for every fine point, process CPU for each
process point."""


class Ring:
    """The last `capacity` points of `columns` float32 series at float64 timestamps.

    The values are one float32 array of `capacity` rows of `columns`: a point is a row,
    written in one call, and a column is read as a strided slice."""

    def __init__(self, capacity: int, columns: int) -> None:
        self.capacity = capacity
        self.columns = columns
        self._t = array("d", bytes(8 * capacity))
        self._values = array("f", [math.nan]) * (capacity * columns)
        self._row = struct.Struct(f"{columns}f")  # native float32s, as array("f")
        self._next = 0  # the row the next point goes to
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, t: float, values: Sequence[float]) -> None:
        """One point: `values`, one a column (else struct.error), rounded to float32."""
        i = self._next
        width = self.columns
        try:  # struct packs as array("f") stores, without building one: a third faster
            self._row.pack_into(self._values, 4 * width * i, *values)
        except OverflowError:  # beyond float32 (a Python that refuses it): inf, as array
            self._values[i * width : (i + 1) * width] = array("f", values)
        self._t[i] = t
        self._next = (i + 1) % self.capacity
        if self._size < self.capacity:
            self._size += 1

    def since(
        self, t0: float, columns: Sequence[int] | None = None
    ) -> tuple[list[float], list[list[float]]]:
        """Timestamps and columns (all, or those numbered in `columns`) of the newest
        points at or after `t0`, oldest first. Only those points are visited."""
        kept = 0
        i = self._next
        for _ in range(self._size):
            i = (i - 1) % self.capacity
            if self._t[i] < t0:
                break
            kept += 1
        first = (self._next - kept) % self.capacity
        rows = (  # the kept rows, [start, stop): one span, or two where the ring wraps
            [(first, first + kept)]
            if first + kept <= self.capacity
            else [(first, self.capacity), (0, self._next)]
        )
        width = self.columns
        chosen = range(width) if columns is None else columns
        times = [t for start, stop in rows for t in self._t[start:stop]]
        values = [
            [
                v
                for start, stop in rows
                for v in self._values[start * width + k : stop * width : width]
            ]
            for k in chosen
        ]
        return times, values


FOLD_AT = 16
"""A tier's open bucket sums its samples' values once this many have gathered (and when it
is closed or read): it never holds more of them unsummed."""


class Tier:
    """A ring of means over buckets of `spec.step_seconds`; the open bucket is readable.

    The open bucket is held as the sum of its samples' times (seconds) and their count,
    the samples not yet folded (`_pending`: at most FOLD_AT value vectors, shared with the
    other tiers, never copied), and per column the sum and count of the values present in
    those already folded. Adding a sample is O(1) (one append); the pending vectors are
    folded into the sums in one pass per column when FOLD_AT have gathered and when the
    bucket is closed or read, so a 1-minute bucket of samples every 0.1 s holds a fixed
    amount, never its 600 samples. A read folds: it needs the writer's lock (History's).
    """

    def __init__(self, spec: TierSpec, columns: int) -> None:
        self.spec = spec
        self.ring = Ring(spec.capacity, columns)
        self._step = spec.step_seconds
        self._columns = columns
        self._bucket: float | None = None  # start of the open bucket
        self._t_sum = 0.0
        self._n = 0  # samples in the open bucket, folded or pending
        self._pending: list[Sequence[float]] = []
        self._sums = [0.0] * columns  # of the folded samples' values present, per column
        self._counts = [0] * columns

    def add(self, t: float, values: Sequence[float]) -> None:
        """One sample at `t`: a value per column, NaN where missing. `values` is kept as
        it is until folded (the three tiers share one vector): it must not change."""
        step = self._step
        bucket = math.floor(t / step) * step
        if bucket != self._bucket:  # close the open bucket: its mean to the ring
            if self._n == 1 and self._pending:  # its one sample is its mean: no folding
                self.ring.append(self._t_sum, self._pending[0])
                self._pending.clear()
            elif self._n:
                self.ring.append(*self._open())
                self._sums = [0.0] * self._columns
                self._counts = [0] * self._columns
            self._bucket, self._t_sum, self._n = bucket, 0.0, 0
        self._t_sum += t
        self._n += 1
        pending = self._pending
        pending.append(values)
        if len(pending) >= FOLD_AT:
            self._fold()

    def _fold(self) -> None:
        """Add the pending vectors' values present (v == v: not NaN) to the sums, in the
        order they came, and forget the vectors."""
        sums, counts = self._sums, self._counts
        for k, column in enumerate(zip(*self._pending, strict=True)):
            total = sum(column, sums[k])
            if total == total:  # no gap among them (the common case, all in C)
                sums[k] = total
                counts[k] += len(column)
                continue
            present = [v for v in column if v == v]
            if present:
                sums[k] = sum(present, sums[k])
                counts[k] += len(present)
        self._pending.clear()

    def _open(self) -> tuple[float, list[float]]:
        """The open bucket's mean time and per-column means so far (NaN: no value)."""
        if self._pending:
            self._fold()
        means = [s / c if c else math.nan for s, c in zip(self._sums, self._counts, strict=True)]
        return self._t_sum / self._n, means

    def since(
        self, t0: float, columns: Sequence[int] | None = None
    ) -> tuple[list[float], list[list[float]]]:
        """As `Ring.since`, with the open bucket's mean so far as the newest point."""
        times, values = self.ring.since(t0, columns)
        if self._n:
            t, means = self._open()
            if t >= t0:
                times.append(t)
                chosen = means if columns is None else [means[k] for k in columns]
                for column, value in zip(values, chosen, strict=True):
                    column.append(value)
        return times, values


class SeriesHistory:
    """One GPU's or the host's series in every tier."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.tiers = {spec: Tier(spec, len(names)) for spec in TIERS}
        self._tiers = tuple(self.tiers.values())
        self.last_seen = 0.0

    def add(self, t: float, values: Mapping[str, float | None]) -> None:
        """One sample at `t`, by name; a name absent or None is a gap."""
        self.add_vector(t, [_value(values.get(name)) for name in self.names])

    def add_vector(self, t: float, vector: Sequence[float]) -> None:
        """One sample at `t`: a value per name in `names` order, NaN for a gap. The tiers
        keep `vector` as it is for a while: it must not change afterwards."""
        for tier in self._tiers:
            tier.add(t, vector)
        self.last_seen = t

    def points(self, window: Window, now: float) -> Points:
        times, columns = self.tiers[window.tier].since(now - window.seconds)
        return Points(
            times=times,
            series={
                name: [None if math.isnan(v) else v for v in column]
                for name, column in zip(self.names, columns, strict=True)
            },
        )

    def mean(self, name: str, seconds: float, now: float) -> tuple[float | None, int]:
        """The mean of `name` over the fine points of the last `seconds`, and their count;
        None when none has a value."""
        _, (column,) = self.tiers[FINE].since(now - seconds, [self.names.index(name)])
        values = [v for v in column if not math.isnan(v)]
        return (sum(values) / len(values) if values else None), len(values)


@dataclass(frozen=True, repr=False)
class Points(Record):
    """One window of a GPU's or the host's series: `times` (Unix seconds) and, per series,
    a value or None at each time."""

    times: list[float]
    series: dict[str, list[float | None]]


@dataclass(slots=True, repr=False)
class _Previous(Record):
    """What a rate needs of the sample before: its time and the counters' totals."""

    t: float
    busy_seconds: float | None
    graphics_engine_seconds: float | None
    sm_seconds: float | None


BusySource = Literal["busy_time", "graphics_engine"]
BUSY_COUNTERS: Mapping[BusySource, str] = {
    "busy_time": "busy_seconds",
    "graphics_engine": "graphics_engine_seconds",
}
"""The counter (`_Previous`'s field) the busy ratio is the rate of, by its source."""


def busy_source(device: DeviceSample) -> BusySource:
    """What a GPU's `busy_ratio` measures: the share of time a kernel ran (its busy
    counter), or, where the driver reports no utilization (a MIG-enabled GPU), GPM's
    graphics-engine activity."""
    return "busy_time" if device.busy_seconds is not None else "graphics_engine"


def gpu_key(device: DeviceSample) -> GpuKey:
    """The history's name of a GPU: its index with its UUID ("" before it is identified)."""
    return (device.index, device.uuid)


class History:
    """Every GPU's and the host's recent series; thread-safe (one writer, many readers)."""

    def __init__(self, max_gpus: int = MAX_GPUS) -> None:
        self._lock = threading.Lock()
        self._max_gpus = max_gpus
        self._gpus: dict[GpuKey, SeriesHistory] = {}
        self._host = SeriesHistory(HOST_SERIES)
        self._previous: dict[GpuKey, _Previous] = {}
        # the busy counters advance only when the buffers are read (`buffer_reads.py`):
        # the sample of the last read, and the busy share it gave, held until the next
        self._busy_read: dict[GpuKey, tuple[_Previous, float | None]] = {}
        self._previous_host: tuple[float, float] | None = None  # (t, cpu busy seconds)
        # GPU -> pid -> (t, CPU seconds) points, of the processes in the latest sample
        self._cpu: dict[GpuKey, dict[str, list[tuple[float, float]]]] = {}
        self.latest_time: float | None = None

    def add(self, snapshot: Snapshot) -> None:
        """Record one sample: its points at its wall time (the charts' axis), its rates
        over the sampler's monotonic clock, which a step of the wall clock does not move
        (a step back once made one interval's rate of several seconds' busy time a ratio
        over a fraction of a second)."""
        t = snapshot.timestamp_seconds
        tm = snapshot.monotonic_seconds if snapshot.monotonic_seconds is not None else t
        with self._lock:
            cpu: dict[GpuKey, dict[str, list[tuple[float, float]]]] = {}
            for device in snapshot.devices:
                if device.static is None:
                    continue
                key = gpu_key(device)
                series = self._gpus.get(key)
                if series is None:  # not setdefault: that would allocate the rings every sample
                    if not self._make_room(t):
                        continue  # more GPUs than MAX_GPUS at once: the rest are not kept
                    series = self._gpus[key] = SeriesHistory(GPU_SERIES)
                series.add_vector(t, self._device_values(key, device, tm))
                self._add_process_cpu(key, device, tm, cpu)
            self._cpu = cpu  # a process not in this sample is forgotten
            if snapshot.host is not None:
                self._host.add_vector(t, self._host_values(snapshot.host, tm))
            self.latest_time = t

    def _make_room(self, t: float) -> bool:
        """Room for one more GPU: forget the one seen longest ago when the cap is reached,
        unless it is in this sample too (then there is no room: nothing is churned)."""
        if len(self._gpus) < self._max_gpus:
            return True
        oldest = min(self._gpus, key=lambda k: self._gpus[k].last_seen)
        if self._gpus[oldest].last_seen >= t:
            return False
        del self._gpus[oldest]
        self._previous.pop(oldest, None)
        self._busy_read.pop(oldest, None)
        return True

    def _device_values(self, key: GpuKey, device: DeviceSample, t: float) -> list[float]:
        """The sample's value of each of GPU_SERIES, in its order, NaN for a gap."""
        reading = device.reading
        activity = device.activity
        now = _Previous(
            t,
            device.busy_seconds,
            activity.graphics_engine_seconds if activity else None,
            activity.sm_seconds if activity else None,
        )
        if reading is None:  # down: every series has a gap, and rates start again
            self._previous.pop(key, None)
            self._busy_read.pop(key, None)
            return [math.nan] * len(GPU_SERIES)
        before = self._previous.get(key)
        self._previous[key] = now
        source = busy_source(device)
        busy = (
            self._busy(key, now, device.busy_read)
            if source == "busy_time"
            else _rate(before, now, BUSY_COUNTERS[source])
        )
        static = device.static
        utilization, memory = reading.utilization, reading.memory
        power, temperature = reading.power, reading.temperature
        reasons = reading.clocks.throttle_reasons if reading.clocks else None
        values = (  # GPU_SERIES, in order; None where missing
            busy,  # busy_ratio
            utilization.gpu_ratio if utilization else None,  # utilization_ratio
            _rate(before, now, "sm_seconds"),  # sm_ratio
            memory.used_bytes if memory else None,  # memory_used_bytes
            memory.total_bytes if memory else None,  # memory_total_bytes
            power.watts if power else None,  # power_watts
            power.limit_watts if power else None,  # power_limit_watts
            temperature.gpu_celsius if temperature else None,  # temperature_celsius
            static.slowdown_temperature_celsius if static else None,  # slowdown_celsius
            _active(reasons, ("sw_power_cap",)),  # power_capped_ratio
            _active(reasons, THERMAL_THROTTLE_REASONS),  # thermal_throttled_ratio
        )
        return list(map(_value, values))

    def _busy(self, key: GpuKey, now: _Previous, read: bool) -> float | None:
        """The busy share since the sample that last read the buffers, when this one read
        them too; else that share, held (the buffers are read every interval while the page
        is watched, else as their coverage needs: every ~12 s while in use)."""
        last = self._busy_read.get(key)
        if not read:
            return last[1] if last is not None else None
        busy = _rate(last[0] if last is not None else None, now, "busy_seconds")
        self._busy_read[key] = (now, busy)
        return busy

    def _host_values(self, host: HostSample, t: float) -> list[float]:
        """The sample's value of each of HOST_SERIES, in its order, NaN for a gap."""
        before = self._previous_host
        self._previous_host = (t, host.cpu_busy_seconds)
        cpu = None
        if before is not None and t > before[0] and host.cpus > 0:
            cpu = _clamp((host.cpu_busy_seconds - before[1]) / (t - before[0]) / host.cpus)
        return [  # HOST_SERIES, in order
            _value(cpu),  # cpu_ratio
            float(host.memory_total_bytes - host.memory_available_bytes),  # memory_used_bytes
            float(host.memory_total_bytes),  # memory_total_bytes
        ]

    def _add_process_cpu(
        self,
        gpu: GpuKey,
        device: DeviceSample,
        t: float,
        into: dict[GpuKey, dict[str, list[tuple[float, float]]]],
    ) -> None:
        """The CPU points of the GPU's processes, this sample's added, into `into[gpu]`."""
        if device.attribution is None:
            return
        before = self._cpu.get(gpu, {})
        kept = into.setdefault(gpu, {})
        horizon = t - VERDICT_WINDOW_SECONDS
        for process in device.attribution.processes:
            pid = process.pid
            if not pid or process.cpu_seconds is None:
                continue
            points = kept.get(pid)
            if points is None:
                points = before.get(pid)
                if points is None:
                    points = []
                kept[pid] = points
            point = (t, process.cpu_seconds)
            if len(points) >= 2 and t - points[-2][0] < PROCESS_POINT_SECONDS:
                points[-1] = point
            else:
                points.append(point)
            while len(points) > 2 and points[1][0] <= horizon:
                del points[0]

    # Reading -----------------------------------------------------------------------

    def gpu(self, key: GpuKey, window: Window) -> Points | None:
        """One GPU's points over `window`; None for a GPU never seen."""
        with self._lock:
            series = self._gpus.get(key)
            if series is None or self.latest_time is None:
                return None
            return series.points(window, self.latest_time)

    def host(self, window: Window) -> Points:
        with self._lock:
            return self._host.points(window, self.latest_time or 0.0)

    def mean(self, key: GpuKey, name: str, seconds: float) -> tuple[float | None, int]:
        """The mean of one GPU series over the last `seconds` and how many points it has."""
        with self._lock:
            series = self._gpus.get(key)
            if series is None or self.latest_time is None:
                return None, 0
            return series.mean(name, seconds, self.latest_time)

    def cpu_cores(self, key: GpuKey, pid: str) -> float | None:
        """CPU cores a GPU process and its descendants used over the last
        VERDICT_WINDOW_SECONDS (CPU seconds per second); None until seen twice."""
        with self._lock:
            points = self._cpu.get(key, {}).get(pid)
            if not points or len(points) < 2:
                return None
            (t0, c0), (t1, c1) = points[0], points[-1]
        if t1 <= t0:
            return None
        return max(0.0, (c1 - c0) / (t1 - t0))

    def gpus_kept(self) -> int:
        with self._lock:
            return len(self._gpus)


def _active(reasons: Mapping[str, bool] | None, names: Sequence[str]) -> float | None:
    """1.0 while any of the clocks-event reasons `names` is active, 0.0 while none is;
    None when the driver reports none of them (their means are the share of time)."""
    if not reasons:
        return None
    known = [reasons[name] for name in names if name in reasons]
    return float(any(known)) if known else None


def _rate(before: _Previous | None, now: _Previous, counter: str) -> float | None:
    """The counter's increase per second between two samples, as a ratio 0..1."""
    if before is None or now.t <= before.t:
        return None
    a, b = getattr(before, counter), getattr(now, counter)
    if a is None or b is None:
        return None
    return _clamp((b - a) / (now.t - before.t))


def _clamp(ratio: float) -> float:
    return min(1.0, max(0.0, ratio))


def _value(value: float | None) -> float:
    """A series' value as the tiers keep it: a float, NaN for a gap."""
    return math.nan if value is None else float(value)
