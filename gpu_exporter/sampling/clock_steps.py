"""Steps of the wall clock, as the sampler sees them.

NTP, chrony, PTP, a VM resume or an operator's `date` step the wall clock; CLOCK_MONOTONIC
does not move with it. The driver stamps its utilization samples (the GPU's buffers, each
process's entries) with the CPU's wall clock in microseconds, and the exporter asks for
the entries newer than the last it read: after a step back the driver's new entries are
older than that cursor, and asking from it would return none for the step's length (busy
time uncounted, every process idle). So the sampler measures the wall clock against the
monotonic one at every sample, and a change of their difference beyond STEP_SECONDS is a
step, handed to the counters that keep a driver timestamp (`BusyCounter.wall_stepped`,
`ProcessSeconds.wall_stepped`), which read the whole buffer once and take their cursor
from what it holds: the driver hands its entries out in the order it wrote them, so
after a step back the ones written since are those after the last timestamp that is
lower than the one before it (`written_since_step`), and they alone are new. Where the
driver's timestamps did not step (its newest entry is past the cursor, as it would be
without the step), nothing changes. NTP's slewing (at most 0.5 ms a second) is never
taken for a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

STEP_SECONDS = 1.0
"""A change of wall minus monotonic time this large between two samples is a step."""


class WallClockSteps:
    """The steps of the wall clock between calls, in seconds."""

    def __init__(self) -> None:
        self._offset: float | None = None  # wall minus monotonic time at the last call

    def step(self, wall: float, monotonic: float) -> float:
        """How far the wall clock stepped since the last call (negative: back); 0.0 when
        it did not (or at the first call)."""
        offset = wall - monotonic
        previous, self._offset = self._offset, offset
        if previous is None or abs(offset - previous) < STEP_SECONDS:
            return 0.0
        return offset - previous


def written_since_step(timestamps: Sequence[int]) -> int:
    """The index of the first entry written after the driver's clock stepped back, in
    entries handed out in the order written: after the last timestamp lower than the one
    before it; 0 when none is."""
    for i in range(len(timestamps) - 1, 0, -1):
        if timestamps[i] < timestamps[i - 1]:
            return i
    return 0


class Stamped(Protocol):
    """A driver entry: a utilization sample or a process's."""

    @property
    def timestamp_us(self) -> int: ...


T = TypeVar("T", bound=Stamped)


def not_after(entries: Sequence[T] | None, limit_us: int) -> Sequence[T] | None:
    """The entries stamped no later than `limit_us` (None stays None)."""
    if entries is None:
        return None
    return [e for e in entries if e.timestamp_us <= limit_us]
