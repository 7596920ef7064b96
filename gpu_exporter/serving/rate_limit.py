"""The web config's `rate_limit`: a token bucket, as exporter-toolkit's golang.org/x/time/rate.

`rate_limit: {interval: 1s, burst: 5}` lets 5 requests through at once and then one per
second on average; the rest get 429. The bucket starts full. As in exporter-toolkit a
burst of 0 lets nothing through, and an interval of 0 turns the limit off.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu_exporter.records import Record

_GO_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek small letter mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_GO_TERM = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
MAX_GO_DURATION_CHARS = 64  # "2h45m30.5s" needs 10; `sub` tries every start of longer text


@dataclass(frozen=True, repr=False)
class RateLimit(Record):
    """`interval_seconds`: one request per interval on average; `burst`: at once."""

    interval_seconds: float
    burst: int


class TokenBucket:
    """Holds up to `burst` tokens, gains one every `interval_seconds`; a request takes one."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._tokens = float(limit.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        """Take a token: True when there was one."""
        with self._lock:
            now = self._clock()
            gained = max(0.0, now - self._last) / self.limit.interval_seconds
            self._tokens = min(float(self.limit.burst), self._tokens + gained)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


def parse_go_duration(text: str) -> float | None:
    """Seconds in a Go duration string ("1s", "1m30s", "250ms", "0"), None if it is not one.

    Negative durations are not accepted.
    """
    text = text.strip()
    if len(text) > MAX_GO_DURATION_CHARS:
        return None
    if text == "0":
        return 0.0
    if not text or _GO_TERM.sub("", text) != "":
        return None
    return sum(float(number) * _GO_UNITS[unit] for number, unit in _GO_TERM.findall(text))
