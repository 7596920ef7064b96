"""The cached exposition: our fast text renderer against prometheus_client's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpu_exporter.collector import SnapshotCollector
from gpu_exporter.exposition import render_text, wants_gzip, wants_openmetrics
from tests.test_golden import fixed_snapshot


class Awkward:
    """A collector with label values that need escaping."""

    def collect(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        gauge = GaugeMetricFamily("odd_gauge", 'help with \\ and\nnewline "quoted"', labels=["v"])
        for value in ['a"b', "back\\slash", "new\nline", "ünïcödé", ""]:
            gauge.add_metric([value], 1.5)
        counter = CounterMetricFamily("odd_events", "counts", labels=["k"])
        counter.add_metric(["x"], 12345678901234.0)
        counter.add_metric(["y"], 1e-7)
        return [gauge, counter]


def test_fast_renderer_is_byte_identical_to_prometheus_client() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(fixed_snapshot(4)))
    registry.register(Awkward())  # type: ignore[arg-type]
    assert render_text(registry) == generate_latest(registry)


def test_content_negotiation_helpers() -> None:
    assert wants_openmetrics("application/openmetrics-text; version=1.0.0")
    assert not wants_openmetrics("text/plain")
    assert not wants_openmetrics(None)
    assert wants_gzip("gzip, deflate")
    assert wants_gzip("deflate;q=1, gzip;q=0.5")
    assert not wants_gzip("gzip;q=0")
    assert not wants_gzip("identity")
