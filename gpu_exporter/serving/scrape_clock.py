"""When /metrics will next be scraped, learnt from when it was.

The sampler takes a sample every interval (1 s at the finest), but Prometheus scrapes
every 15 to 60 s: rendering every sample's exposition would write text nobody reads.
An exposition is therefore rendered when it is first asked for, and ahead of time only
when a scraper is expected before the next sample, so that a scrape still finds its
bytes ready and costs a copy.

Prometheus scrapes each target at a fixed period and offset, so the gap between a
scraper's last two scrapes predicts its next one. Scrapers are told apart by address,
and each is expected to ask for what it asked for last (Prometheus: OpenMetrics, gzip),
which is what is rendered ahead for it.
A scraper seen once has no period yet: every exposition is rendered ahead for
FIRST_SCRAPE_WINDOW_SECONDS after it (a fast scraper's second scrape), then none until
it scrapes again: Prometheus's second scrape renders its own, once, and one stray
request (a person with curl, a readiness check on /metrics) costs a handful of renders.
(Renders just before each of Prometheus's usual intervals after it, 10 s to 2 min, cost
6 renders in 20 s on an idle host, 0.8 ms/s of CPU on 8 GPUs, to spare one scrape one
render: issue 52.) A scraper with a period that has missed
FORGET_AFTER_PERIODS scrapes in a row has stopped (a readiness check that polled
/metrics every 100 ms until the first sample, a `watch curl` ended): it is expected no
more until it scrapes again, which measures its period afresh. (It used to be
expected until forgotten, 2 minutes later: after a 100 ms readiness poll, every sample
rendered an exposition nobody asked for, 3 ms a sample on 8 GPUs.) A prediction that
misses costs that one scrape the render (a few milliseconds), nothing else.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu_exporter.metrics.exposition import TEXT, BodyFormat
from gpu_exporter.records import Record

FIRST_SCRAPE_WINDOW_SECONDS = 5.0  # render ahead this long after a new scraper's first scrape
SEEN_ONCE_FORGET_SECONDS = 120.0  # then a scraper seen once is forgotten (Prometheus's longest)
FORGET_GRACE_SECONDS = 120.0  # a scraper is forgotten this long after it is overdue
SLACK_SECONDS = 0.25  # a scrape this much early or late still finds its text rendered
FORGET_AFTER_PERIODS = 3  # silent this many periods: not expected; (+ the grace) dropped
MAX_SCRAPERS = 64  # addresses remembered; the stalest is dropped beyond


@dataclass(repr=False)
class _Scraper(Record):
    last: float  # monotonic seconds of its last scrape
    wants: BodyFormat  # what its last scrape asked for
    period: float | None = None  # seconds between its last two scrapes


class ScrapeClock:
    """Scrape times per client address; thread-safe (scrapes arrive on server threads)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._scrapers: dict[str, _Scraper] = {}

    def scraped(self, client: str, wants: BodyFormat = TEXT) -> None:
        """Note a scrape of /metrics by `client` (its address) now, asking for `wants`."""
        now = self._clock()
        with self._lock:
            scraper = self._scrapers.get(client)
            if scraper is None:
                if len(self._scrapers) >= MAX_SCRAPERS:
                    stalest = min(self._scrapers, key=lambda c: self._scrapers[c].last)
                    del self._scrapers[stalest]
                self._scrapers[client] = _Scraper(now, wants)
                return
            scraper.period = now - scraper.last
            scraper.last = now
            scraper.wants = wants

    def expected(self, within_seconds: float) -> set[BodyFormat]:
        """What the scrapers expected in the next `within_seconds` will ask for (empty:
        no scrape is expected)."""
        start = self._clock()
        end = start + within_seconds + SLACK_SECONDS
        out: set[BodyFormat] = set()
        with self._lock:
            for client, scraper in list(self._scrapers.items()):
                since = start - scraper.last
                if scraper.period is None:
                    if since > SEEN_ONCE_FORGET_SECONDS + SLACK_SECONDS:
                        del self._scrapers[client]
                    elif since - SLACK_SECONDS <= FIRST_SCRAPE_WINDOW_SECONDS:
                        out.add(scraper.wants)  # a fast scraper's second scrape
                    continue
                if since > FORGET_AFTER_PERIODS * scraper.period + FORGET_GRACE_SECONDS:
                    del self._scrapers[client]
                    continue
                if since > FORGET_AFTER_PERIODS * scraper.period + SLACK_SECONDS:
                    continue  # it stopped: expected again once it scrapes again
                if _next_scrape(scraper.last, scraper.period, start - SLACK_SECONDS) <= end:
                    out.add(scraper.wants)
        return out


def _next_scrape(last: float, period: float, after: float) -> float:
    """The first of `last + k * period` (k >= 1) at or after `after`."""
    if period <= 0:
        return after
    k = max(1, math.ceil((after - last) / period))
    return last + k * period
