"""SM seconds per process, integrated from NVML's per-process utilization samples.

`nvmlDeviceGetProcessUtilization` returns, per process that ran kernels since the
timestamp asked for, an entry: its SM share and when it was written
(`ProcessUtilization.timestamp_us`). A real H200 on R580 writes one entry per process and
read, its share averaged over the time since the timestamp asked for (at most one per
driver period, 200 ms there; docs/what-nvml-really-does.md, which says what that run could
not tell apart from a trailing second's average); a driver that keeps one
entry per period gives several. Either way, summing `share * spacing` per process gives
the SM time it used, however fast its utilization flickers, as `sampling/busy.py` does
for the GPU's own buffer; `gpu_process_sm_seconds_total` exports the sum, so its rate
over any window is the process's true average share.

- **No entry means idle**: the driver lists a process only for the periods in which it
  ran. An entry therefore covers the time since that process's previous entry only
  while the two are adjacent (at most `JITTER_SLACK` periods apart); after a longer gap,
  and for a process's first entry, it covers one period.
- **The period** is measured from the entries: the median spacing of adjacent entries of
  the same process (the driver's period, 1/6 s to 1 s by product); `UNKNOWN_PERIOD_US`
  (nvml.h's longest, 1 s) until two were seen.
- **The first read** only sets each process's cursor: the buffer's history (up to its
  span, ~16 s) predates the counter, as for `gpu_busy_seconds_total`. A process that
  appears later counts from its first entry.
- **A process is its PID and its start time**, so a PID the kernel reuses starts a new
  counter at 0; a process that leaves the GPU's list is forgotten.
- **A step back of the wall clock** (`clock_steps.py`; the driver's timestamps are the
  CPU's wall clock): the sampler asks for the whole buffer, and when its newest entry is
  not newer than the cursors, the driver's timestamps stepped too, and every cursor moves
  back by the step, so the entries after it are counted, once. (A step forward only
  leaves one longer spacing, which covers one period, as any gap does.)

No extra driver call: these are the entries the sampler reads each interval that lists a
process, for `gpu_process_utilization_ratio` (the newest entry's share).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence

from gpu_exporter.model import ProcessUtilization
from gpu_exporter.sampling.busy import JITTER_SLACK, SPACINGS_KEPT, median_period
from gpu_exporter.sampling.clock_steps import written_since_step

ProcessKey = tuple[int, float | None]
"""A process: (PID, start time in Unix seconds, None where /proc does not show it)."""


class _Process:
    __slots__ = ("last_us", "seconds")

    def __init__(self) -> None:
        self.seconds = 0.0
        self.last_us: int | None = None  # the newest entry integrated


class ProcessSeconds:
    """The SM seconds of every process on one GPU, as counters that never go backwards."""

    def __init__(self) -> None:
        self._processes: dict[ProcessKey, _Process] = {}
        self._read = False  # the first read only sets the processes' cursors
        self._spacings: deque[int] = deque(maxlen=SPACINGS_KEPT)  # microseconds
        self.step_us = 0  # a step back of the wall clock not followed yet (microseconds)

    def wall_stepped(self, seconds: float) -> None:
        """The wall clock stepped by `seconds`: a step back is followed at the next read
        that has entries (the sampler asks for the whole buffer until then)."""
        if seconds < 0 and self._read:
            self.step_us += round(seconds * 1e6)

    @property
    def period_us(self) -> float:
        """The driver's sample period: the median spacing of adjacent entries."""
        return median_period(self._spacings)

    def add(
        self,
        samples: Sequence[ProcessUtilization],
        processes: Mapping[int, float | None],
    ) -> dict[int, float]:
        """Integrate the new entries of the processes listed now (`processes`: PID to its
        start time) and return each one's SM seconds; the others are forgotten. Entries of
        a PID not listed are left out: its process is gone, or not yet listed."""
        samples = self._follow_step(samples)
        by_pid: dict[int, list[ProcessUtilization]] = {}
        for s in samples:
            if s.pid in processes:
                by_pid.setdefault(s.pid, []).append(s)
        for entries in by_pid.values():
            entries.sort(key=lambda s: s.timestamp_us)
            self._spacings.extend(
                b.timestamp_us - a.timestamp_us
                for a, b in itertools.pairwise(entries)
                if b.timestamp_us > a.timestamp_us
            )
        period = self.period_us
        live: dict[ProcessKey, _Process] = {}
        out: dict[int, float] = {}
        for pid, start in processes.items():
            key = (pid, start)
            process = live[key] = self._processes.get(key) or _Process()
            for s in by_pid.get(pid, ()):
                if process.last_us is not None and s.timestamp_us <= process.last_us:
                    continue  # already counted
                if not self._read:  # the buffer's history predates the counter
                    process.last_us = s.timestamp_us
                    continue
                spacing = None if process.last_us is None else s.timestamp_us - process.last_us
                covered = (
                    spacing if spacing is not None and spacing <= JITTER_SLACK * period else period
                )
                process.seconds += min(1.0, max(0.0, s.sm_ratio)) * covered / 1e6
                process.last_us = s.timestamp_us
            out[pid] = process.seconds
        self._processes = live
        self._read = True
        return out

    def stepped_back(self, samples: Sequence[ProcessUtilization]) -> bool:
        """Whether, with a step back pending, the driver's timestamps stepped too: the
        last entry it wrote is not newer than every cursor."""
        cursors = [p.last_us for p in self._processes.values() if p.last_us is not None]
        return bool(self.step_us and samples and cursors) and samples[-1].timestamp_us <= max(
            cursors
        )

    def _follow_step(self, samples: Sequence[ProcessUtilization]) -> Sequence[ProcessUtilization]:
        """After a step back (`wall_stepped`), once entries come: where the driver's
        timestamps stepped too, every cursor moves back by the step and only the entries
        written since count (`clock_steps.written_since_step`)."""
        if not self.step_us or not samples:
            return samples
        stepped = self.stepped_back(samples)
        if stepped:
            for p in self._processes.values():
                if p.last_us is not None:
                    p.last_us = max(0, p.last_us + self.step_us)
            samples = samples[written_since_step([s.timestamp_us for s in samples]) :]
        self.step_us = 0
        return samples

    def rebase(self) -> None:
        """Forget the driver's timestamps (after NVML re-initialised: they may restart),
        keep the totals; the next read only sets the cursors again."""
        for process in self._processes.values():
            process.last_us = None
        self._read = False
        self.step_us = 0
