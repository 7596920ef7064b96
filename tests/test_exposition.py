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


def test_snapshot_text_is_byte_identical_to_prometheus_client_with_awkward_labels() -> None:
    import dataclasses

    from gpu_exporter.collector import families, text
    from gpu_exporter.snapshot import ProcessSample

    snapshot = fixed_snapshot(2)
    odd = ProcessSample(
        pid="4242",
        process='py"thon\\3',
        user="ünïcödé",
        context="compute",
        container_id="abc",
        cmdline="train.py --note 'a\nb'",
        memory_used_bytes=2**30,
        sm_ratio=0.25,
        cpu_seconds=12.5,
        workers=4,
    )
    device = dataclasses.replace(snapshot.devices[0], processes=(odd,), unattributed_memory_bytes=0)
    snapshot = dataclasses.replace(
        snapshot, devices=(device, *snapshot.devices[1:]), collectors=frozenset({"process"})
    )

    class Fixed:
        def collect(self) -> list[object]:
            return list(families(snapshot, cmdline=True))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    assert text(snapshot, cmdline=True).encode() == generate_latest(registry)
    assert 'process="py\\"thon\\\\3"' in text(snapshot, cmdline=True)
