"""A clock for in-process tests: wall, monotonic and boot time move only when told."""

from __future__ import annotations

T0 = 1_790_000_000.0  # a fixed Unix time, so golden files do not change
BOOTED_FOR = 86_400.0  # seconds since boot at T0: the host booted a day before


class FakeClock:
    """Wall, monotonic and boot time that move together when `now` is changed, and the
    wall clock alone when it is stepped (`step`), as NTP, PTP or `date` step it."""

    def __init__(self) -> None:
        self.now = T0
        self.stepped = 0.0  # seconds the wall clock was stepped by, in all

    def wall(self) -> float:
        return self.now + self.stepped

    def monotonic(self) -> float:
        return self.now - T0

    def since_boot(self) -> float:
        """CLOCK_BOOTTIME: seconds since boot, which no step of the wall clock moves."""
        return self.now - T0 + BOOTED_FOR

    def step(self, seconds: float) -> None:
        """Step the wall clock by `seconds` (negative: back); nothing else moves."""
        self.stepped += seconds
