"""Metric families as plain values, and the one writer of the Prometheus text format.

`Family` is what the renderer produces from a Snapshot and what the exporter's own
process metrics (`self_process`) are, so every family is written by `write_text`, with
one float format and one escaping rule. `to_client` gives prometheus_client's families
for the OpenMetrics format (prometheus_client is imported only then).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpu_exporter.metrics.specs import LabelValues, MetricType

if TYPE_CHECKING:
    from prometheus_client.core import Metric

Row = tuple[LabelValues, float]


@dataclass(frozen=True)
class Family:
    """One metric family ready to write: name (counters end in `_total`), rows in order."""

    name: str
    type: MetricType
    help: str
    label_names: LabelValues
    rows: Sequence[Row]

    @property
    def family_name(self) -> str:
        """The name prometheus_client's families take (counters without `_total`)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        return self.name


def _go_float(value: float) -> str:
    """Go's float formatting where it differs from `repr`: infinities, NaN, and exponents
    from 1e7 on (as prometheus_client's `floatToGoString` writes them)."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def escape_label_value(value: str) -> str:
    """A label value as the text format writes it between double quotes."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def format_number(value: float) -> str:
    """Go's float formatting, as Prometheus writes it; `repr` is right for most values."""
    text = repr(value)
    if (value > 0 and text.find(".") > 6) or not math.isfinite(value):
        return _go_float(value)
    return text


def write_text(families: Iterable[Family]) -> str:
    """The Prometheus text format (0.0.4) of `families`, written directly.

    Byte-identical to `prometheus_client.generate_latest` over the same families (a test
    pins that) at a fraction of its cost. Two caches carry work over between samples:

    - a family whose rows equal those it had last time (link states, error counters,
      limits, identities: most of an exposition from one sample to the next) is not
      written again: its text is reused (`_FamilyTexts`);
    - most series share their label values (`gpu`, `uuid` on a hundred families; a
      process's dozen labels on each of its families), so the written `{...}` part is
      kept per label names and values (`_LabelCache`) and each row costs a dictionary
      lookup and one concatenation.
    """
    parts: list[str] = []
    append = parts.append
    texts = _TEXTS
    for family in families:
        rows = family.rows
        if not rows:
            continue
        text = texts.unchanged(family)
        if text is None:
            text = _write_family(family)
            texts.remember(family, text)
        append(text)
    return "".join(parts)


def _write_family(family: Family) -> str:
    lines: list[str] = []
    append = lines.append
    name = family.name
    help_text = family.help.replace("\\", "\\\\").replace("\n", "\\n")
    append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
    names = family.label_names
    rows = family.rows
    if not names:
        for _values, value in rows:
            append(f"{name} {format_number(value)}\n")
        return "".join(lines)
    written = _LABELS.for_names(names, len(rows))
    for values, value in rows:
        labels = written.get(values)
        if labels is None:
            labels = written[values] = _write_labels(names, values)
        append(name + labels + format_number(value) + "\n")
    return "".join(lines)


class _FamilyTexts:
    """The text last written for each family, with the rows it was written from.

    Rows compare equal only when every label value and every value is the same (NaN
    never equals itself, so a family holding one is always written afresh; 0.0 and -0.0
    compare equal, and Prometheus reads them alike)."""

    MAX_FAMILIES = 4096  # far above any exposition's; cleared beyond, never grown forever

    def __init__(self) -> None:
        self._texts: dict[tuple[str, str, str, LabelValues], tuple[Sequence[Row], str]] = {}

    @staticmethod
    def _key(family: Family) -> tuple[str, str, str, LabelValues]:
        return (family.name, family.type, family.help, family.label_names)

    def unchanged(self, family: Family) -> str | None:
        kept = self._texts.get(self._key(family))
        if kept is not None and kept[0] == family.rows:
            return kept[1]
        return None

    def remember(self, family: Family, text: str) -> None:
        if len(self._texts) >= self.MAX_FAMILIES:
            self._texts.clear()
        self._texts[self._key(family)] = (family.rows, text)


def _write_labels(names: LabelValues, values: LabelValues) -> str:
    """`{a="x",b="y"} `: labels sorted by name, values escaped where they need it."""
    pairs = sorted(zip(names, values, strict=True))
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs) + "} "


class _LabelCache:
    """Written label sets per label names, kept between samples: the values of one sample
    are mostly those of the last. Each table is cleared when it outgrows what the
    families using it need, so exited processes do not accumulate."""

    def __init__(self) -> None:
        self._tables: dict[LabelValues, dict[LabelValues, str]] = {}

    def for_names(self, names: LabelValues, rows: int) -> dict[LabelValues, str]:
        table = self._tables.get(names)
        if table is None:
            table = self._tables[names] = {}
        elif len(table) > 4 * rows + 1024:
            table.clear()
        return table


_LABELS = _LabelCache()
_TEXTS = _FamilyTexts()


def to_client(family: Family) -> Metric:
    """prometheus_client's family of the same series (for the OpenMetrics format).

    A counter whose name does not end in `_total` (dcgm-exporter's names) is typed
    `unknown`: an OpenMetrics counter's samples must end in `_total`, and renaming them
    would break the queries the names are kept for.
    """
    from prometheus_client.core import (  # only for an OpenMetrics scrape
        CounterMetricFamily,
        GaugeMetricFamily,
        UnknownMetricFamily,
    )

    labels = list(family.label_names)
    out: GaugeMetricFamily | CounterMetricFamily | UnknownMetricFamily
    if family.type == "counter" and not family.name.endswith("_total"):
        out = UnknownMetricFamily(family.name, family.help, labels=labels)
    elif family.type == "counter":
        out = CounterMetricFamily(family.family_name, family.help, labels=labels)
    else:
        out = GaugeMetricFamily(family.family_name, family.help, labels=labels)
    for values, value in family.rows:
        out.add_metric(list(values), value)
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
