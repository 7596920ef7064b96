"""What a scrape asks for: the format (`Accept`) and the encoding (`Accept-Encoding`).

RFC 9110 section 12: a header is a comma-separated list of elements, each with optional
`;name=value` parameters; `q` is the weight (section 12.4.2: `0` to `1` with at most
three decimals; `q=0` means "not acceptable"); types, subtypes, codings and parameter
names match case-insensitively. The choice follows Prometheus' own Go libraries:

- format (prometheus/common expfmt `NegotiateAccept`): the media ranges in order of
  weight, the more specific first where weights tie, and the first that names a format we
  write wins: `application/openmetrics-text` with no version, 0.0.1 or 1.0.0, or
  `text/plain` with no version or 0.0.4. Nothing named: the text format.
- encoding (client_golang promhttp, through `NegotiateContentEncoding`): gzip when its
  weight (its own element's, else that of `*`) is above 0 and not below that of
  `identity`; `x-gzip` is gzip (RFC 9110 section 8.4.1.3).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from gpu_exporter.serving.request_head import remembered

_QVALUE = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")
_OPENMETRICS_VERSIONS = ("", "0.0.1", "1.0.0")
_TEXT_VERSIONS = ("", "0.0.4")


class _Element(NamedTuple):
    value: str  # lower-cased: a media range or a coding
    params: dict[str, str]  # names lower-cased, values unquoted; `q` taken out
    q: float


def _elements(header: str | None) -> list[_Element]:
    """The header's elements, in order; one whose weight is not a qvalue is left out."""
    out = []
    for part in (header or "").split(","):
        value, *raw = part.split(";")
        value = value.strip().lower()
        if not value:
            continue
        params: dict[str, str] = {}
        q: float | None = 1.0
        for param in raw:
            name, _, text = param.partition("=")
            name, text = name.strip().lower(), text.strip().strip('"')
            if name == "q":
                q = float(text) if _QVALUE.fullmatch(text) else None
            else:
                params[name] = text
        if q is not None:
            out.append(_Element(value, params, q))
    return out


def _specificity(media_range: _Element) -> int:
    """3 for type/subtype with parameters, 2 without, 1 for type/*, 0 for */*."""
    kind, _, subtype = media_range.value.partition("/")
    if kind == "*":
        return 0
    if subtype == "*":
        return 1
    return 3 if media_range.params else 2


@remembered(longest=512, kept=32)  # a scraper sends the same Accept every time
def wants_openmetrics(accept: str | None) -> bool:
    """Whether the `Accept` header makes OpenMetrics the format to answer with."""
    ranges = sorted(
        enumerate(_elements(accept)), key=lambda ie: (-ie[1].q, -_specificity(ie[1]), ie[0])
    )
    for _, media_range in ranges:
        if media_range.q <= 0:
            break  # the rest are refused too
        version = media_range.params.get("version", "")
        if media_range.value == "application/openmetrics-text":
            if version in _OPENMETRICS_VERSIONS:
                return True
        elif media_range.value == "text/plain" and version in _TEXT_VERSIONS:
            return False
    return False


@remembered(longest=512, kept=32)
def wants_gzip(accept_encoding: str | None) -> bool:
    """Whether the `Accept-Encoding` header makes gzip the encoding to answer with."""
    weights: dict[str, float] = {}
    for coding in _elements(accept_encoding):
        name = "gzip" if coding.value == "x-gzip" else coding.value
        weights.setdefault(name, coding.q)  # a repeated coding: its first element counts
    anything = weights.get("*", 0.0)
    gzip = weights.get("gzip", anything)
    return gzip > 0 and gzip >= weights.get("identity", anything)
