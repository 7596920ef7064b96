"""prometheus_client's metric families to and from the exporter's `Family`, for the
tests that hold our writers to prometheus_client's byte for byte."""

from __future__ import annotations

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)

from gpu_exporter.metrics.specs import MetricType
from gpu_exporter.metrics.text import Family


def to_client(family: Family) -> Metric:
    """prometheus_client's family of the same series (for the OpenMetrics format).

    A counter whose name does not end in `_total` (dcgm-exporter's names) is typed
    `unknown`: an OpenMetrics counter's samples must end in `_total`, and renaming them
    would break the queries the names are kept for.
    """
    out: GaugeMetricFamily | CounterMetricFamily | UnknownMetricFamily
    if family.type == "counter" and not family.name.endswith("_total"):
        out = UnknownMetricFamily(family.name, family.help, labels=list(family.label_names))
    elif family.type == "counter":
        out = CounterMetricFamily(family.family_name, family.help, labels=list(family.label_names))
    else:
        out = GaugeMetricFamily(family.family_name, family.help, labels=list(family.label_names))
    sample_name = family.name  # a counter's samples keep `_total`
    for values, value in family.rows:
        # a label with an empty value is no label (as Prometheus reads it): the series
        # is handed over without it, so the reference writes it as we mean it
        labels = {k: v for k, v in zip(family.label_names, values, strict=True) if v}
        out.add_sample(sample_name, labels, value)
    return out


def from_client(metric: Metric) -> Family:
    """A prometheus_client gauge or counter family as a `Family` (`_created` dropped)."""
    if metric.type not in ("gauge", "counter"):
        raise ValueError(f"{metric.name}: unsupported metric type {metric.type}")
    kind: MetricType = "counter" if metric.type == "counter" else "gauge"
    name = metric.name + "_total" if kind == "counter" else metric.name
    samples = [s for s in metric.samples if s.name == name]
    label_names = tuple(sorted({k for s in samples for k in s.labels}))
    rows = [(tuple(s.labels.get(k, "") for k in label_names), s.value) for s in samples]
    return Family(name, kind, metric.documentation, label_names, rows)
