"""When the cumulative /proc counters are read: only when someone will see them.

The process trees' CPU seconds (collector `process`: a walk of /proc and a stat line per
process in each GPU process tree) and the host's CPU seconds (collector `host`) are
counters. A counter read later loses nothing: its value at the scrape is what Prometheus
stores, and a rate over two reads is as true as over twenty. So they are read, at the
start of a sample, only when that sample will be seen:

- when a scrape is expected before the next sample (`serving/scrape_clock.py`);
- at the cadence of the live page's history, whose points and verdicts take rates of
  them (`sampling/history.py`: the host every second, process CPU every 10 s);
- at least every MAX_AGE_SECONDS, so a scrape nobody predicted (a new scraper, a person
  with curl) never sees a value older than that.

Between reads the sample carries the last values read. NVML's process list is still
read every interval: a new GPU process is attributed (name, user, tree) in the sample
that first lists it, which reads /proc afresh for it. A DataLoader worker started
between reads is counted at the next read, with its whole CPU time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

MAX_AGE_SECONDS = 60.0  # a counter is never older than this


class CounterReads:
    """Decides, per collector (`process`, `host`), whether a sample reads its counters.

    `scrape_expected(within_seconds)` says whether a scrape is expected within that many
    seconds; `cadences` maps a collector to the seconds between the reads the live page's
    history needs (absent: the page is off)."""

    def __init__(
        self,
        scrape_expected: Callable[[float], bool],
        cadences: Mapping[str, float],
        *,
        max_age_seconds: float = MAX_AGE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._scrape_expected = scrape_expected
        self._cadences = dict(cadences)
        self._max_age = max_age_seconds
        self._monotonic = monotonic
        self._last: dict[str, float] = {}  # collector -> monotonic time of its last read

    def due(self, collector: str, interval_seconds: float) -> bool:
        """True when this sample reads `collector`'s counters (then noted as read)."""
        now = self._monotonic()
        last = self._last.get(collector)
        # half an interval early still counts: a cadence equal to the interval reads each time
        every = min(self._cadences.get(collector, self._max_age), self._max_age)
        if (
            last is None
            or now - last >= every - interval_seconds / 2
            or self._scrape_expected(interval_seconds)
        ):
            self._last[collector] = now
            return True
        return False
