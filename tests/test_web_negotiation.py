"""Content negotiation of /metrics (issue 21): weights and case, as RFC 9110 section 12
and Prometheus' own libraries have them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpu_exporter.serving.negotiation import wants_gzip, wants_openmetrics
from tests.support.exporter import Exporter
from tests.support.web import call, wait_serving

PROMETHEUS_3 = (  # what Prometheus sends by default (scrape_protocols)
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("text/plain", False),
        (PROMETHEUS_3, True),
        ("application/openmetrics-text; version=1.0.0", True),
        ("application/openmetrics-text;version=0.0.1", True),
        ("application/openmetrics-text", True),
        ("APPLICATION/OPENMETRICS-TEXT; version=1.0.0", True),  # issue 21: was text
        ("Application/OpenMetrics-Text;Version=1.0.0;Q=0.9", True),
        ("application/openmetrics-text;q=0, text/plain", False),  # issue 21: was OpenMetrics
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text; q=0.000", False),
        ("text/plain;q=0.5, application/openmetrics-text;q=0.6", True),
        ("text/plain;q=0.6, application/openmetrics-text;q=0.5", False),
        ("text/plain, application/openmetrics-text", False),  # equal: the first
        ("*/*, application/openmetrics-text", True),  # equal: the more specific
        ("application/openmetrics-text;version=2.0.0, text/plain;q=0.1", False),
        ("application/openmetrics-text;q=2", False),  # not a qvalue: left out
        ("application/openmetrics-text;q=0.5000", False),
        ('application/openmetrics-text;version="1.0.0"', True),
        (",,;,application/openmetrics-text", True),
    ],
)
def test_the_format_follows_weights_and_ignores_case(accept: str | None, openmetrics: bool) -> None:
    assert wants_openmetrics(accept) is openmetrics


@pytest.mark.parametrize(
    ("accept_encoding", "gzip"),
    [
        (None, False),
        ("", False),
        ("identity", False),
        ("gzip", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("gzip, deflate", True),
        ("deflate;q=1, gzip;q=0.5", True),
        ("*", True),
        ("gzip;q=0", False),  # issue 21: was gzip
        ("gzip; q=0.000", False),  # issue 21: was gzip
        ("gzip;Q=0", False),
        ("gzip;q=0, *", False),  # named: its own weight counts
        ("*;q=0", False),
        ("gzip;q=0.5, identity", False),
        ("gzip, identity;q=0.5", True),
        ("gzip;q=0.5, identity;q=0.5", True),
        ("deflate, br", False),
    ],
)
def test_the_encoding_follows_weights_and_ignores_case(
    accept_encoding: str | None, gzip: bool
) -> None:
    assert wants_gzip(accept_encoding) is gzip


@pytest.mark.e2e
def test_metrics_answers_with_the_negotiated_format_and_encoding(
    started: Callable[..., Exporter],
) -> None:
    exporter = started()
    wait_serving(exporter, lambda: call(exporter.port))
    for headers, content_type, encoding in (
        (
            {"Accept": PROMETHEUS_3, "Accept-Encoding": "gzip"},
            "application/openmetrics-text",
            "gzip",
        ),
        (
            {"Accept": "APPLICATION/OPENMETRICS-TEXT; version=1.0.0"},
            "application/openmetrics-text",
            None,
        ),
        ({"Accept": "application/openmetrics-text;q=0, text/plain"}, "text/plain", None),
        ({"Accept-Encoding": "gzip;q=0"}, "text/plain", None),
        ({"Accept-Encoding": "gzip; q=0.000"}, "text/plain", None),
    ):
        result = call(exporter.port, headers=headers)
        assert result.status == 200
        assert result.headers["Content-Type"].startswith(content_type), headers
        assert result.headers.get("Content-Encoding") == encoding, headers
        assert result.headers["Vary"] == "Accept, Accept-Encoding"
