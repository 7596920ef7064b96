"""Read the Grafana dashboards in grafana/dashboards and take their queries apart.

The tests use this to check the JSON's invariants, to feed every query (with Grafana's
variables substituted) to promtool's parser and to a real Prometheus, and to check that
every metric name a query references is in the exporter's catalogue.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = REPO / "grafana" / "dashboards"
DASHBOARD_FILES = ("gpu-fleet.json", "gpu-node.json", "gpu-chargeback.json")
TEMPLATE_VARIABLES = ("datasource", "job", "instance", "gpu", "namespace", "pod")
EXTRA_VARIABLES = {"gpu-chargeback.json": ("method",)}  # after the common ones

# What Grafana sends for each filter at All (the variables' allValue). Job and instance:
# `.*`, which Prometheus drops from the query (it matches every series, a series without
# the label too, and every series the dashboards read has both), where `.+` made each query
# merge the postings of every instance of the fleet in every block it read. GPU, namespace
# and pod: `.+`, which leaves out the series without the label (the per-node side of a
# fleet time series selects `uuid!~"$gpu"`; a bare-metal owner has no namespace).
ALL_VALUES: dict[str, str] = {
    "job": ".*",
    "instance": ".*",
    "gpu": ".+",
    "namespace": ".+",
    "pod": ".+",
}

# Grafana's built-in variables a query may use, with the values the tests substitute.
# $__interval_ms must agree with $__interval (both one minute here).
PARSE_VALUES: dict[str, str] = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "1h",
    "__range_s": "3600",
    **ALL_VALUES,
    "method": "usage",  # the Chargeback dashboard's energy split
}

PROMQL_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "inf",
        "nan",
    }
)


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((DASHBOARD_DIR / name).read_text()))


def all_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels inside collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def data_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Panels that show data (everything but rows)."""
    return (p for p in all_panels(dashboard) if p.get("type") != "row")


@dataclass(frozen=True)
class Query:
    dashboard: str  # file name
    panel_id: int
    panel_title: str
    ref_id: str
    expr: str
    instant: bool

    @property
    def name(self) -> str:
        board = self.dashboard.removesuffix(".json")
        return f"{board}:{self.panel_id}{self.ref_id} {self.panel_title}"


def queries(name: str) -> list[Query]:
    dashboard = load(name)
    return [
        Query(
            name,
            int(panel["id"]),
            str(panel.get("title", "")),
            str(target.get("refId", "")),
            str(target["expr"]),
            bool(target.get("instant", False)),
        )
        for panel in data_panels(dashboard)
        for target in panel.get("targets", [])
    ]


def all_queries() -> list[Query]:
    return [q for name in DASHBOARD_FILES for q in queries(name)]


def variable_queries(name: str) -> dict[str, str]:
    """{variable name: its label_values(...) query} for the query variables."""
    out: dict[str, str] = {}
    for variable in load(name)["templating"]["list"]:
        if variable.get("type") == "query":
            query = variable["query"]
            out[variable["name"]] = query["query"] if isinstance(query, dict) else str(query)
    return out


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Replace Grafana's $var / ${var} references; an unknown variable raises KeyError."""

    def replace(match: re.Match[str]) -> str:
        return values[match.group(1) or match.group(2)]

    return _VARIABLE.sub(replace, expr)


def variables_used(expr: str) -> set[str]:
    return {m.group(1) or m.group(2) for m in _VARIABLE.finditer(expr)}


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_TOKEN = re.compile(
    r"(?P<number>(?<![\w.])\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)"
    r"|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)(?P<call>\s*\()?"
)

_OFFSET = re.compile(r"\boffset\s+-?\w+")  # its duration (1h) is no metric


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords, labels left out)."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("{}", text)
    text = _BRACKETS.sub("[]", text)
    text = _GROUPING.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    names: set[str] = set()
    for match in _TOKEN.finditer(text):
        ident = match.group("ident")
        if ident is None or match.group("call") or ident.lower() in PROMQL_KEYWORDS:
            continue
        names.add(ident)
    return names


_LABEL_VALUES = re.compile(r"^\s*label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\s*\)\s*$")


def label_values_parts(query: str) -> tuple[str | None, str]:
    """(series selector or None, label) of a `label_values(selector, label)` query."""
    match = _LABEL_VALUES.match(query)
    if match is None:
        raise ValueError(f"not a label_values() query: {query!r}")
    return match.group("selector"), match.group("label")


def promtool_check(exprs: Mapping[str, str], workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run `promtool check rules` on a rule file with one recording rule per expression.

    Keys become the record names, so promtool's error names the failing query.
    """
    rules = [{"record": record, "expr": expr} for record, expr in exprs.items()]
    path = workdir / "dashboard-queries.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    return subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )


def record_name(query: Query) -> str:
    """A valid metric name that identifies the query in promtool's output."""
    slug = re.sub(r"\W", "_", query.dashboard.removesuffix(".json"))
    return f"dashboard_{slug}_panel_{query.panel_id}_{query.ref_id}"
