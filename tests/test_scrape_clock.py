"""Rendering only for scrapes: when a scrape is expected (`serving.scrape_clock`), and the
daemon rendering a sample ahead only then (issue 14)."""

from __future__ import annotations

import gzip

import pytest

from gpu_exporter.config import load_settings
from gpu_exporter.daemon import Exporter
from gpu_exporter.metrics.exposition import TEXT, BodyFormat
from gpu_exporter.serving import scrape_clock
from gpu_exporter.serving.scrape_clock import ScrapeClock
from tests.support.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_nobody_has_scraped_so_nothing_is_expected(clock: FakeClock) -> None:
    assert not ScrapeClock(clock.monotonic).expected(within_seconds=1.0)


def test_after_a_first_scrape_only_the_samples_of_the_next_5_s_are_rendered(
    clock: FakeClock,
) -> None:
    scrapes = ScrapeClock(clock.monotonic)
    scrapes.scraped("10.0.0.1")
    seen = []
    for _ in range(130):  # a sample every second
        clock.now += 1.0
        seen.append(scrapes.expected(within_seconds=1.0))
    due = [i + 1 for i, expected in enumerate(seen) if expected]
    # a fast scraper's second scrape, nothing more: a one-off scrape (a person with curl, a
    # readiness check) costs 5 renders, not 17 (before Prometheus's usual intervals, 10 s
    # to 2 min, issue 52), nor one per sample for 2 min; Prometheus's second scrape renders
    assert due == [1, 2, 3, 4, 5]
    assert not scrapes.expected(within_seconds=1.0)  # and it is forgotten


def test_a_periodic_scraper_is_expected_only_just_before_its_next_scrape(
    clock: FakeClock,
) -> None:
    scrapes = ScrapeClock(clock.monotonic)
    scrapes.scraped("10.0.0.1")
    clock.now += 15.0
    scrapes.scraped("10.0.0.1")  # period 15 s: next at +15, +30, ...
    seen = []
    for second in range(1, 61):  # a sample every second for a minute
        clock.now += 1.0
        seen.append(scrapes.expected(within_seconds=1.0))
        if second % 15 == 0:
            scrapes.scraped("10.0.0.1")
    # the samples published 1 s before each scrape (and the one at it, within the slack)
    assert [i + 1 for i, due in enumerate(seen) if due] == [14, 15, 29, 30, 44, 45, 59, 60]


def test_a_scraper_that_stops_is_forgotten(clock: FakeClock) -> None:
    scrapes = ScrapeClock(clock.monotonic)
    scrapes.scraped("10.0.0.1")
    clock.now += 30.0
    scrapes.scraped("10.0.0.1")
    clock.now += 3 * 30.0 + scrape_clock.FORGET_GRACE_SECONDS + 1
    assert not scrapes.expected(within_seconds=60.0)  # would be due, but it is gone


def test_two_scrapers_at_different_offsets_are_both_expected(clock: FakeClock) -> None:
    scrapes = ScrapeClock(clock.monotonic)
    for t in (0.0, 10.0):  # A at 0, 10, 20, ...
        clock.now = 1000.0 + t
        scrapes.scraped("10.0.0.1")
    for t in (4.0, 14.0):  # B at 4, 14, 24, ...
        clock.now = 1000.0 + t
        scrapes.scraped("10.0.0.2")
    due = []
    for t in range(15, 35):
        clock.now = 1000.0 + t
        if scrapes.expected(within_seconds=0.5):
            due.append(t)
    assert due == [20, 24, 30, 34]


def test_a_continuous_scraper_makes_every_sample_rendered(clock: FakeClock) -> None:
    scrapes = ScrapeClock(clock.monotonic)
    for _ in range(10):
        for _ in range(100):  # a scrape every 10 ms, as long as it goes on
            scrapes.scraped("127.0.0.1")
            clock.now += 0.01
        assert scrapes.expected(within_seconds=1.0)


def test_a_readiness_poll_that_stopped_is_not_expected(clock: FakeClock) -> None:
    """A client that polled /metrics every 100 ms until the first sample answered, then
    went quiet: no sample renders an exposition for it (it was expected for two minutes,
    every sample rendered, 3 ms each on 8 GPUs)."""
    scrapes = ScrapeClock(clock.monotonic)
    for _ in range(20):
        scrapes.scraped("127.0.0.1")
        clock.now += 0.1
    assert scrapes.expected(within_seconds=0.1)  # as long as it polls, it is expected
    clock.now += 1.0
    seen = []
    for _ in range(130):  # a sample every second
        seen.append(bool(scrapes.expected(within_seconds=1.0)))
        clock.now += 1.0
    assert not any(seen)
    scrapes.scraped("127.0.0.1")  # it comes back: its period is measured afresh
    clock.now += 0.5
    scrapes.scraped("127.0.0.1")
    assert scrapes.expected(within_seconds=1.0)


def test_a_periodic_scraper_that_misses_one_scrape_is_still_expected(clock: FakeClock) -> None:
    scrapes = ScrapeClock(clock.monotonic)
    for _ in range(3):
        scrapes.scraped("10.0.0.1")
        clock.now += 15.0
    clock.now += 15.0 - 1.0  # its scrape at +15 failed: the sample before +30 still renders
    assert scrapes.expected(within_seconds=1.0)


def test_each_expected_scraper_is_expected_to_ask_for_what_it_asked_for_last(
    clock: FakeClock,
) -> None:
    prometheus, curl = BodyFormat(openmetrics=True, compressed=True), TEXT
    scrapes = ScrapeClock(clock.monotonic)
    for t in (0.0, 10.0):  # Prometheus at 0, 10, 20, ...
        clock.now = 1000.0 + t
        scrapes.scraped("10.0.0.1", prometheus)
    clock.now = 1015.0
    scrapes.scraped("10.0.0.2", curl)  # a first scrape: expected for a while
    clock.now = 1016.0
    assert scrapes.expected(within_seconds=1.0) == {curl}
    clock.now = 1019.5
    assert scrapes.expected(within_seconds=1.0) == {prometheus, curl}
    scrapes.scraped("10.0.0.2", BodyFormat(openmetrics=False, compressed=True))
    assert scrapes.expected(within_seconds=1.0) == {prometheus}  # its period is 4.5 s now


def test_the_scrapers_remembered_are_bounded(clock: FakeClock) -> None:
    scrapes = ScrapeClock(clock.monotonic)
    for i in range(10 * scrape_clock.MAX_SCRAPERS):
        clock.now += 0.01
        scrapes.scraped(f"10.0.{i // 256}.{i % 256}")
    assert len(scrapes._scrapers) == scrape_clock.MAX_SCRAPERS


# The daemon ---------------------------------------------------------------------------


def _exporter() -> Exporter:
    args = ["--simulate", "2", "--collect.interval", "15s"]
    return Exporter(load_settings(args), args)


def test_a_sample_nobody_will_scrape_is_not_rendered_and_the_first_scrape_renders_it() -> None:
    exporter = _exporter()
    exporter.sampler.sample_once()
    exposition = exporter.state.exposition
    assert exposition is not None and not exposition.rendered()
    response = exporter.routes.get("/metrics", {}, client="127.0.0.1")
    assert response.status == 200 and b"gpu_up{" in response.body
    assert b"process_resident_memory_bytes" in response.body  # read when written
    assert exposition.rendered()


def test_a_sample_with_a_scrape_due_is_rendered_before_it_is_asked_for() -> None:
    exporter = _exporter()
    exporter.sampler.sample_once()
    exporter.routes.get("/metrics", {}, client="127.0.0.1")  # a scraper appears
    exporter.sampler.sample_once()
    exposition = exporter.state.exposition
    assert exposition is not None and exposition.rendered()
    # and it is what a scrape gets, byte for byte
    body = exposition.body(openmetrics=False, compressed=False)
    assert exporter.routes.get("/metrics", {}, client="127.0.0.1").body == body


def test_a_sample_is_rendered_ahead_in_the_format_prometheus_asks_for() -> None:
    exporter = _exporter()
    exporter.sampler.sample_once()
    prometheus = {
        "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        "Accept-Encoding": "gzip",
    }
    exporter.routes.get("/metrics", prometheus, client="10.0.0.9")  # a scraper appears
    exporter.sampler.sample_once()
    exposition = exporter.state.exposition
    assert exposition is not None
    assert exposition.rendered(BodyFormat(openmetrics=True, compressed=True))
    assert not exposition.rendered(TEXT)  # nobody asked for it: not written
    body = exposition.body(openmetrics=True, compressed=True)
    response = exporter.routes.get("/metrics", prometheus, client="10.0.0.9")
    assert response.body is body  # the scrape copied what was ready
    assert response.headers["Content-Encoding"] == "gzip"
    # only the gzip body is kept; the plain one it came from is written again if asked for
    assert not exposition.rendered(BodyFormat(openmetrics=True))
    plain = exposition.body(openmetrics=True, compressed=False)
    assert plain == gzip.decompress(body) and plain.endswith(b"# EOF\n")


def test_other_paths_are_not_scrapes() -> None:
    exporter = _exporter()
    exporter.sampler.sample_once()
    for path in ("/healthz", "/livez", "/", "/api/overview"):
        exporter.routes.get(path, {}, client="127.0.0.1")
    exporter.sampler.sample_once()
    exposition = exporter.state.exposition
    assert exposition is not None and not exposition.rendered()
