"""Busy-time counters integrated from the driver's utilization sample buffer."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_exporter.model import UtilizationSample


class BusyCounter:
    """Seconds a GPU engine was busy, as a counter that never goes backwards.

    With the driver's buffer (`nvmlDeviceGetSamples`), each entry holds the busy share
    of the period since the previous entry, so summing `ratio * period` gives the exact
    busy time however fast utilization flickers. Where the buffer is not supported, the
    latest reading is held over the elapsed wall time instead.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._last_timestamp_us: int | None = None  # newest buffer entry integrated
        self._last_monotonic: float | None = None  # when the fallback last integrated

    @property
    def cursor_us(self) -> int:
        """Ask the driver for entries newer than this (0: give me the whole buffer)."""
        return self._last_timestamp_us or 0

    def add_samples(self, samples: Sequence[UtilizationSample], now_monotonic: float) -> None:
        """Integrate buffer entries newer than the cursor, oldest first.

        The first call only sets the cursor: the buffer's history predates the counter.
        """
        self._last_monotonic = now_monotonic
        if self._last_timestamp_us is None:
            if samples:
                self._last_timestamp_us = max(s.timestamp_us for s in samples)
            return
        previous = self._last_timestamp_us
        for sample in samples:
            if sample.timestamp_us <= previous:
                continue
            ratio = min(1.0, max(0.0, sample.ratio))
            self.seconds += ratio * (sample.timestamp_us - previous) / 1e6
            previous = sample.timestamp_us
        self._last_timestamp_us = previous

    def add_reading(self, ratio: float | None, now_monotonic: float) -> None:
        """Fallback: hold the latest reading over the time since the last call."""
        if ratio is not None and self._last_monotonic is not None:
            elapsed = max(0.0, now_monotonic - self._last_monotonic)
            self.seconds += min(1.0, max(0.0, ratio)) * elapsed
        self._last_monotonic = now_monotonic

    def rebase(self) -> None:
        """Forget the driver's timestamps (after a driver reload); keep the total."""
        self._last_timestamp_us = None
        self._last_monotonic = None
