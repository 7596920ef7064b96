"""A clock for in-process tests: wall and monotonic time move only when told."""

from __future__ import annotations

T0 = 1_790_000_000.0  # a fixed Unix time, so golden files do not change


class FakeClock:
    """Wall and monotonic time that move only when `now` is changed."""

    def __init__(self) -> None:
        self.now = T0

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now - T0
