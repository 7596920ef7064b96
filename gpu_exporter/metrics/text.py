"""Metric families as plain values, and the one writer of the Prometheus text and
OpenMetrics formats.

`Family` is what the renderer produces from a Snapshot and what the exporter's own
process metrics (`self_process`) are, so every family is written by `write_text` or
`write_openmetrics`, with one float format, one escaping rule and one bound on label
values (`capped_label_value`), byte-identical to prometheus_client's writers for values
within the bound (the tests compare the two; prometheus_client is a development
dependency only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpu_exporter.digest import sha256_hex
from gpu_exporter.metrics.specs import LabelValues, MetricType
from gpu_exporter.records import Record

Row = tuple[LabelValues, float]

LABEL_VALUE_MAX_BYTES = 128
"""The longest label value written, in UTF-8 bytes: Prometheus' `label_value_length_limit`
counts bytes, and one value over it fails the whole scrape (every GPU of the node gone).
Values taken from the host (a process name completed from argv[0], a user, a cgroup
path, a pod name of up to 253 characters) are chosen by whoever runs a GPU process or
creates a pod; ours are far shorter."""
LONG_LABEL_VALUE_MAX_BYTES = {"cmdline": 256}
"""Labels allowed more than LABEL_VALUE_MAX_BYTES."""
CUT_MARKER = "\u2026"
"""Follows the kept start of a value that was cut (…), before its digest."""
CUT_DIGEST_HEX_DIGITS = 32
"""The hex digits of the SHA-256 of the whole value (as UTF-8) that end a cut value: 128
bits, so that two values cut to the same start stay two series, even when whoever names
them looks for a pair that would collide (about 2**64 hashes)."""
_CUT_TAIL_BYTES = len(CUT_MARKER.encode()) + CUT_DIGEST_HEX_DIGITS
_DIGEST_START = CUT_DIGEST_HEX_DIGITS + 1  # characters from the end of a cut value
_HEX_DIGITS = frozenset("0123456789abcdef")


@dataclass(frozen=True, repr=False)
class Family(Record):
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


def capped_label_value(name: str, value: str) -> str:
    """`value` as the label `name` is written: at most its limit in UTF-8 bytes
    (LABEL_VALUE_MAX_BYTES, or LONG_LABEL_VALUE_MAX_BYTES). A longer value is cut at a
    character boundary and ends in CUT_MARKER and the first CUT_DIGEST_HEX_DIGITS hex
    digits of the SHA-256 of the whole value, so distinct values stay distinct. A value
    within the limit that already ends so (a marker and as many hex digits) is written
    the same way, so no value is written as another's cut form. The one place label
    values are bounded."""
    limit = LONG_LABEL_VALUE_MAX_BYTES.get(name, LABEL_VALUE_MAX_BYTES)
    if (
        len(value) > CUT_DIGEST_HEX_DIGITS
        and value[-_DIGEST_START] == CUT_MARKER
        and _HEX_DIGITS.issuperset(value[-CUT_DIGEST_HEX_DIGITS:])
    ):  # as a cut value ends: cut it, whatever its length
        return _cut(value.encode("utf-8", "replace"), limit)
    if len(value) * 4 <= limit:  # no character takes more than 4 bytes
        return value
    data = value.encode("utf-8", "replace")  # as the exposition encodes it
    if len(data) <= limit:
        return value
    return _cut(data, limit)


def _cut(data: bytes, limit: int) -> str:
    """The UTF-8 `data` cut to `limit` bytes: its start up to a character boundary,
    CUT_MARKER and the digest of all of it."""
    kept = data[: limit - _CUT_TAIL_BYTES].decode("utf-8", "ignore")  # a whole character
    return kept + CUT_MARKER + sha256_hex(data)[:CUT_DIGEST_HEX_DIGITS]


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
      written again: its sample lines are reused (`_FamilyTexts`);
    - most series share their label values (`gpu`, `uuid` on a hundred families; a
      process's dozen labels on each of its families), so the written `{...}` part is
      kept per label names and values (`_LabelCache`) and each row costs a dictionary
      lookup and one concatenation.
    """
    parts: list[str] = []
    append = parts.append
    for family in families:
        if not family.rows:
            continue
        name = family.name
        help_text = family.help.replace("\\", "\\\\").replace("\n", "\\n")
        append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        append(_samples(family))
    return "".join(parts)


def write_openmetrics(families: Iterable[Family]) -> str:
    """The OpenMetrics text format (1.0.0) of `families`: what Prometheus asks for first.

    Byte-identical to prometheus_client's OpenMetrics writer over the same families (a
    test pins that). It differs from `write_text` in the headers only: a
    counter's family is named without `_total` (its samples keep it), a counter whose
    name lacks `_total` (dcgm-exporter's names) is typed `unknown`, double quotes in the
    help text are escaped, and the exposition ends with `# EOF`.
    """
    parts: list[str] = []
    append = parts.append
    for family in families:
        if not family.rows:
            continue
        kind: str = family.type
        name = family.family_name
        if kind == "counter" and name == family.name:
            kind = "unknown"
        append(f"# HELP {name} {escape_label_value(family.help)}\n# TYPE {name} {kind}\n")
        append(_samples(family))
    append("# EOF\n")
    return "".join(parts)


def _samples(family: Family) -> str:
    """The sample lines of one family, reused while its rows do not change."""
    text = _TEXTS.unchanged(family)
    if text is None:
        text = _write_samples(family)
    # remembered with the newest rows even when unchanged: the older equal rows are freed,
    # so one generation of rows is held (by the cache and the latest exposition) not two
    _TEXTS.remember(family, text)
    return text


def _write_samples(family: Family) -> str:
    lines: list[str] = []
    append = lines.append
    name = family.name
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
    """The sample lines last written for each family, with the rows they came from.

    Rows compare equal only when every label value and every value is the same (NaN
    never equals itself, so a family holding one is always written afresh; 0.0 and -0.0
    compare equal, and Prometheus reads them alike)."""

    MAX_FAMILIES = 4096  # far above any exposition's; cleared beyond, never grown forever

    def __init__(self) -> None:
        self._texts: dict[tuple[str, LabelValues], tuple[Sequence[Row], str]] = {}

    def unchanged(self, family: Family) -> str | None:
        kept = self._texts.get((family.name, family.label_names))
        if kept is not None and kept[0] == family.rows:
            return kept[1]
        return None

    def remember(self, family: Family, text: str) -> None:
        if len(self._texts) >= self.MAX_FAMILIES:
            self._texts.clear()
        self._texts[(family.name, family.label_names)] = (family.rows, text)


def _write_labels(names: LabelValues, values: LabelValues) -> str:
    """`{a="x",b="y"} `: labels sorted by name, values capped and escaped where they need it.

    A label whose value is empty is left out: to Prometheus an empty value is no label at
    all, and a series should not claim a label (a lost GPU's `uuid`, a host process's
    `container_id`) that it does not have."""
    pairs = sorted((k, v) for k, v in zip(names, values, strict=True) if v)
    if not pairs:
        return " "
    return (
        "{"
        + ",".join(f'{k}="{escape_label_value(capped_label_value(k, v))}"' for k, v in pairs)
        + "} "
    )


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
