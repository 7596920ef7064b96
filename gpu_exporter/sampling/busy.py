"""Busy-time counters integrated from the driver's utilization sample buffer.

Each entry of the buffer (`nvmlDeviceGetSamples`) holds the busy share of one driver
sample period, which nvml.h puts "between 1 second and 1/6 second, depending on the
product" (`nvmlUtilization_t`). The buffer is not continuous: the driver stops adding
entries while a GPU idles (seen on GB10, where `nvmlDeviceGetSamples` answers NOT_FOUND
for minutes), and a buffer read less often than it wraps (about 100 entries, 12 to 17 s)
has lost its oldest entries. The entry after such a gap says nothing about the gap, so
an entry is credited for at most one sample period (with slack for timestamp jitter), and
the rest of the gap is counted as uncovered: neither busy nor idle, but visible.

Reading the buffer is dear (2.3 ms of the host's CPU a call on an H200), so it is read only
as often as its coverage needs (`buffer_reads.py`): before it wraps while the GPU is in
use, and not at all while NVML lists no process on it, it reads idle and its used memory
is at its idle baseline (no context), or while GPM sees the buffer's engine idle. The
counter measures the buffer's span from the entries' own timestamps (`span_us`), and a
stretch the exporter skipped because the GPU was idle (`hold_idle`) is idle time, not a
gap.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Iterable, Sequence

from gpu_exporter.model import UtilizationSample
from gpu_exporter.sampling.clock_steps import written_since_step

SPACINGS_KEPT = 64
"""The sample period is the median of this many recent spacings between entries."""

JITTER_SLACK = 1.5
"""An entry covers at most this many sample periods (its timestamp may come a little late)."""

UNKNOWN_PERIOD_US = 1_000_000
"""The period assumed before two entries were read together: nvml.h's longest, 1 s."""

_timestamp = operator.attrgetter("timestamp_us")


def median_period(spacings: Iterable[int]) -> float:
    """The median of entries' spacings in microseconds, `UNKNOWN_PERIOD_US` without any
    (by hand: `statistics` brings `decimal` and `fractions`, 0.5 MiB resident)."""
    ordered = sorted(spacings)
    if not ordered:
        return UNKNOWN_PERIOD_US
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2


class BusyCounter:
    """Seconds a GPU engine was busy, as a counter that never goes backwards.

    With the driver's buffer, each entry holds the busy share of the period before it, so
    summing `ratio * period` gives the exact busy time however fast utilization flickers;
    time no entry covers adds to `uncovered_seconds` instead. Where the buffer is not
    supported, the latest reading is held over the elapsed wall time.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.uncovered_seconds = 0.0  # buffer time no entry covered (see the module)
        self._last_timestamp_us: int | None = None  # newest buffer entry integrated
        self._last_monotonic: float | None = None  # when the fallback last integrated
        self._spacings: deque[int] = deque(maxlen=SPACINGS_KEPT)  # microseconds
        self._entries_monotonic: float | None = None  # when new entries were last read
        self._dry_credited = 0.0  # uncovered seconds already counted for the current gap
        self.span_us: int | None = None  # the widest the buffer was seen to reach back
        self.read_monotonic: float | None = None  # when the buffer was last read
        self._held_idle = False  # reads skipped since the last one: the GPU held no process
        self._step_us = 0  # the wall clock stepped since the last read (`wall_stepped`)

    @property
    def cursor_us(self) -> int:
        """Ask the driver for entries newer than this (0: give me the whole buffer, as
        after a step of the wall clock)."""
        return 0 if self._step_us else self._last_timestamp_us or 0

    def wall_stepped(self, seconds: float) -> None:
        """The wall clock stepped by `seconds` (`clock_steps.py`): the next read asks
        for the whole buffer, and where the driver's timestamps stepped with it (the last
        entry it wrote is nearer where it would be with the step than without), the
        cursor moves by as much, so entries are neither skipped nor counted twice."""
        if self._last_timestamp_us is not None:
            self._step_us += round(seconds * 1e6)

    def _follow_step(
        self, samples: Sequence[UtilizationSample], now_monotonic: float
    ) -> Sequence[UtilizationSample]:
        """The entries to integrate after a step of the wall clock: all of them where the
        driver's timestamps did not step (its last entry is nearer where it would be
        without the step), else those written since, with the cursor moved by the step."""
        step, self._step_us = self._step_us, 0
        previous = self._last_timestamp_us
        if not step or previous is None or not samples or self._entries_monotonic is None:
            return samples
        last = samples[-1].timestamp_us  # the driver's order: the last written
        expected = previous + round((now_monotonic - self._entries_monotonic) * 1e6)
        if abs(last - (expected + step)) >= abs(last - expected):
            return samples
        self._last_timestamp_us = max(0, previous + step)
        return samples[written_since_step([s.timestamp_us for s in samples]) :]

    @property
    def period_us(self) -> float:
        """The driver's sample period: the median spacing of entries read together."""
        return median_period(self._spacings)

    def add_samples(self, samples: Sequence[UtilizationSample], now_monotonic: float) -> None:
        """Integrate buffer entries newer than the cursor, oldest first.

        The first call only sets the cursor: the buffer's history predates the counter.
        A call with nothing new counts the time since entries were last read, beyond one
        period, as uncovered at once, so the counters explain a long dry spell as it
        happens; the entry that ends the gap then adds only what was not counted yet.
        """
        samples = self._follow_step(samples, now_monotonic)
        self._last_monotonic = self.read_monotonic = now_monotonic
        previous = self._last_timestamp_us
        held_idle, self._held_idle = self._held_idle, False
        self._measure_span(samples, previous)
        # a read of a busy GPU's buffer holds about 100 entries: the loops below run on
        # locals, not builtins and attributes per entry (issue 52)
        new: list[UtilizationSample] = []
        newest = previous
        for sample in sorted(samples, key=_timestamp):
            if newest is None or sample.timestamp_us > newest:
                new.append(sample)
                newest = sample.timestamp_us
        if not new:
            if not held_idle:
                self._count_dry_spell(now_monotonic)
            return
        stamps = [sample.timestamp_us for sample in new]
        self._spacings.extend(map(operator.sub, stamps[1:], stamps[:-1]))
        self._entries_monotonic = now_monotonic
        self._last_timestamp_us = stamps[-1]
        if previous is None:
            return
        longest_us = JITTER_SLACK * self.period_us
        seconds, uncovered, credited = self.seconds, self.uncovered_seconds, self._dry_credited
        for sample in new:
            stamp = sample.timestamp_us
            spacing_us = stamp - previous
            covered_us = spacing_us if spacing_us < longest_us else longest_us
            ratio = sample.ratio
            if not ratio >= 0.0:  # NaN too
                ratio = 0.0
            elif ratio > 1.0:
                ratio = 1.0
            seconds += ratio * covered_us / 1e6
            if not held_idle:  # the stretch before the first new entry held no process
                gap = (spacing_us - covered_us) / 1e6
                if gap > credited:
                    uncovered += gap - credited
            held_idle = False
            credited = 0.0
            previous = stamp
        self.seconds, self.uncovered_seconds, self._dry_credited = seconds, uncovered, 0.0

    def _measure_span(self, samples: Sequence[UtilizationSample], cursor_us: int | None) -> None:
        """Widen `span_us` to what a read that reached the buffer's oldest entry shows:
        the first read (which asks for everything) or one whose oldest entry is more than
        a period past the cursor (the buffer wrapped, or the driver paused)."""
        if len(samples) < 2:
            return
        stamps = [s.timestamp_us for s in samples]
        oldest, newest = min(stamps), max(stamps)
        if cursor_us is None or oldest - cursor_us > JITTER_SLACK * self.period_us:
            self.span_us = max(self.span_us or 0, newest - oldest)

    def hold_idle(self, now_monotonic: float) -> None:
        """This interval's read was skipped because the GPU was idle (`buffer_reads.py`:
        no process listed, read idle and no context held memory; or GPM saw the buffer's
        engine idle and the reading agreed): the time until the next read counts as idle
        where no entry covers it, never as uncovered."""
        self._held_idle = True
        self._dry_credited = 0.0
        self._entries_monotonic = now_monotonic

    def _count_dry_spell(self, now_monotonic: float) -> None:
        """Count as uncovered, now, the wall time beyond one period since entries came."""
        if self._last_timestamp_us is None or self._entries_monotonic is None:
            return
        longest = JITTER_SLACK * self.period_us / 1e6
        owed = max(0.0, now_monotonic - self._entries_monotonic - longest)
        if owed > self._dry_credited:
            self.uncovered_seconds += owed - self._dry_credited
            self._dry_credited = owed

    def add_reading(self, ratio: float | None, now_monotonic: float) -> None:
        """Fallback: hold the latest reading over the time since the last call."""
        if ratio is not None and self._last_monotonic is not None:
            elapsed = max(0.0, now_monotonic - self._last_monotonic)
            self.seconds += min(1.0, max(0.0, ratio)) * elapsed
        self._last_monotonic = now_monotonic

    def rebase(self) -> None:
        """Forget the driver's timestamps (after a driver reload); keep the totals."""
        self._last_timestamp_us = None
        self._last_monotonic = None
        self._entries_monotonic = None
        self._dry_credited = 0.0
        self.read_monotonic = None
        self._held_idle = False
        self._step_us = 0
