"""GPM activity integrated into counters, so `rate()` is the true mean over any window.

Each GPM reading holds the mean of each metric over the `elapsed_seconds` since the
previous GPM sample; adding `value x elapsed` every interval covers every second with
no gap, whatever the scrape interval (the same idea as the busy counters).

NVLink bytes come from GPM where the device has it (the backend then leaves the driver's
data counters out), else from the driver's data counters, which count since driver load
and are taken as they are.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpu_exporter.model import ActivityTotals, GpmReading, NvLinkReading


class ActivityCounter:
    """The activity totals of one GPU, or of one MIG GPU instance, for its whole life."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}  # graphics_engine, sm, sm_occupancy, dram
        self._pipes: dict[str, float] = {}
        self._pcie: dict[str, float] = {}
        self._nvlink: dict[str, float] = {}

    def add(self, reading: GpmReading | None, nvlink: NvLinkReading | None = None) -> None:
        """Integrate one GPM reading; take the driver's NVLink data counters as they are."""
        if reading is not None:
            elapsed = reading.elapsed_seconds
            ratios = (
                ("graphics_engine", reading.graphics_engine_ratio),
                ("sm", reading.sm_ratio),
                ("sm_occupancy", reading.sm_occupancy_ratio),
                ("dram", reading.dram_ratio),
            )
            _accumulate(self._seconds, ratios, elapsed)
            _accumulate(self._pipes, reading.pipe_ratios.items(), elapsed)
            _accumulate(self._pcie, reading.pcie_bytes_per_second.items(), elapsed)
            _accumulate(self._nvlink, reading.nvlink_bytes_per_second.items(), elapsed)
        if nvlink is not None:
            self._nvlink.update(nvlink.data_bytes)

    def totals(self) -> ActivityTotals | None:
        """What has been counted; None before anything was."""
        if not (self._seconds or self._pipes or self._pcie or self._nvlink):
            return None
        return ActivityTotals(
            graphics_engine_seconds=self._seconds.get("graphics_engine"),
            sm_seconds=self._seconds.get("sm"),
            sm_occupancy_seconds=self._seconds.get("sm_occupancy"),
            dram_seconds=self._seconds.get("dram"),
            pipe_seconds=dict(self._pipes),
            pcie_bytes=dict(self._pcie),
            nvlink_bytes=dict(self._nvlink),
        )


def _accumulate(
    totals: dict[str, float], rates: Iterable[tuple[str, float | None]], elapsed: float
) -> None:
    """Add each known `rate x elapsed` to its total; a negative or NaN rate adds 0 (four
    calls a GPU every interval: no dict built for them, no `max` call per value)."""
    get = totals.get
    for name, rate in rates:
        if rate is not None:
            totals[name] = get(name, 0.0) + (rate if rate > 0.0 else 0.0) * elapsed
