"""The web config's rate limit: golang.org/x/time/rate's token bucket, and Go durations."""

from __future__ import annotations

import pytest

from gpu_exporter.serving.rate_limit import RateLimit, TokenBucket, parse_go_duration
from tests.support.clock import FakeClock


def test_the_bucket_starts_full_then_refills_one_token_per_interval() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RateLimit(interval_seconds=2.0, burst=3), clock=clock.monotonic)
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]
    clock.now += 1.0
    assert not bucket.allow()  # half a token
    clock.now += 1.0
    assert bucket.allow()
    assert not bucket.allow()
    clock.now += 100.0  # never more than the burst
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]


def test_a_burst_of_zero_lets_nothing_through() -> None:
    """As x/time/rate: the toolkit's `interval: 1s, burst: 0` answers 429 to everything."""
    clock = FakeClock()
    bucket = TokenBucket(RateLimit(interval_seconds=1.0, burst=0), clock=clock.monotonic)
    for _ in range(3):
        assert not bucket.allow()
        clock.now += 10.0


def test_a_clock_that_goes_back_takes_nothing_away() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RateLimit(interval_seconds=1.0, burst=1), clock=clock.monotonic)
    assert bucket.allow()
    clock.now -= 5.0
    assert not bucket.allow()
    clock.now += 1.0
    assert bucket.allow()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("1s", 1.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("10us", 1e-5),
        ("10\u00b5s", 1e-5),
        ("7ns", 7e-9),
        (" 1s ", 1.0),
        ("1", None),
        ("", None),
        ("s", None),
        ("1 s", None),
        ("1d", None),
        ("-1s", None),
        ("1s2", None),
        ("fast", None),
    ],
)
def test_go_durations(text: str, seconds: float | None) -> None:
    assert parse_go_duration(text) == (pytest.approx(seconds) if seconds is not None else None)
