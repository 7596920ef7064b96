"""A bound on how many lines one kind of event writes to the exporter's log.

A storm (50,000 Xids a second) must not write a line per event: the log would grow by
hundreds of MB a minute and the line would cost more than the event. `LogLimit` lets
the first `per_window` lines of each window through; the rest are counted, and one line
says how many once the window is over.
"""

from __future__ import annotations

import logging

PER_WINDOW = 10
WINDOW_SECONDS = 10.0


class LogLimit:
    """Lines of one kind: at most `per_window` each `window_seconds`, then a summary."""

    def __init__(
        self,
        logger: logging.Logger,
        summary: str,
        *,
        per_window: int = PER_WINDOW,
        window_seconds: float = WINDOW_SECONDS,
    ) -> None:
        self._log = logger
        self._summary = summary  # the summary line's message: "<N> of these were not logged"
        self._per_window = per_window
        self._window_seconds = window_seconds
        self._started: float | None = None  # monotonic seconds the window began
        self._used = 0
        self.withheld = 0  # lines not written in this window

    def allow(self, now: float) -> bool:
        """True when a line may be written now (`now`: monotonic seconds)."""
        self.flush(now)
        if self._started is None:
            self._started, self._used = now, 0
        if self._used < self._per_window:
            self._used += 1
            return True
        self.withheld += 1
        return False

    def flush(self, now: float) -> None:
        """Once the window is over: say how many lines it withheld, start a new one."""
        if self._started is None or now - self._started < self._window_seconds:
            return
        if self.withheld:
            self._log.warning(
                self._summary,
                extra={"not_logged": self.withheld, "window_seconds": self._window_seconds},
            )
        self._started, self._used, self.withheld = None, 0, 0
