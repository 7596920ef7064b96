"""The Grafana dashboards: JSON invariants, promtool-valid queries, catalogue metric names."""

from __future__ import annotations

import re
import shutil
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.metrics.catalogue import METRICS_BY_NAME
from gpu_exporter.metrics.specs import DEFAULT_OPTIONS
from tests.support.dashboards import (
    ALL_VALUES,
    DASHBOARD_FILES,
    EXTRA_VARIABLES,
    PARSE_VALUES,
    REPO,
    TEMPLATE_VARIABLES,
    all_panels,
    all_queries,
    data_panels,
    label_values_parts,
    load,
    metric_names,
    promtool_check,
    queries,
    record_name,
    substitute,
    variable_queries,
    variables_used,
)

DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
RANGE_FUNCTIONS = re.compile(r"\b(rate|irate|increase)\s*\(")
GRAFANA_GLOBALS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s"}

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")

# The recording rules the fleet dashboard may read (deploy/prometheus/rules/gpu-recording.yml).
RECORDED = {
    rule["record"]
    for group in yaml.safe_load(
        (REPO / "deploy" / "prometheus" / "rules" / "gpu-recording.yml").read_text()
    )["groups"]
    for rule in group["rules"]
}
KUBERNETES_SERIES = {
    "gpu_allocation_info",
    "gpu_unallocated_processes",
    "instance_gpu_pod:gpu_allocated_idle:bool_rate1m",
    "instance_gpu_pod:gpu_allocated_idle_seconds:sum5m",
}


@pytest.fixture(params=DASHBOARD_FILES)
def dashboard(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(request.param)


def _overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def _call_argument(expr: str, open_paren: int) -> str:
    """The text between the parenthesis at `open_paren` and its match."""
    depth = 0
    for i in range(open_paren, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[i], 0)
        if depth == 0:
            return expr[open_paren + 1 : i]
    raise AssertionError(f"unbalanced parentheses in {expr!r}")


def rate_windows(expr: str) -> list[str]:
    """The range of the selector inside every rate/irate/increase call (its last [...])."""
    windows = []
    for match in RANGE_FUNCTIONS.finditer(expr):
        argument = _call_argument(expr, match.end() - 1)
        ranges = re.findall(r"\[([^\[\]]*)\]", argument)
        windows.append(ranges[-1] if ranges else "")
    return windows


def test_both_dashboards_exist_with_unique_uids() -> None:
    uids = [load(name)["uid"] for name in DASHBOARD_FILES]
    assert len(set(uids)) == len(DASHBOARD_FILES)
    assert all(uid and len(uid) <= 40 for uid in uids)


def test_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [panel["id"] for panel in all_panels(dashboard)]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids)), sorted(ids)


def test_panels_do_not_overlap_and_fit_the_grid(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard))
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["y"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
    for a, b in combinations(panels, 2):
        assert not _overlap(a["gridPos"], b["gridPos"]), (a["title"], b["title"])


def test_every_panel_has_a_unit_a_description_and_queries(dashboard: dict[str, Any]) -> None:
    for panel in data_panels(dashboard):
        title = panel.get("title")
        assert title, panel["id"]
        assert len(panel.get("description", "")) >= 40, title
        assert panel["fieldConfig"]["defaults"].get("unit"), title
        assert panel.get("targets"), title


def test_every_panel_and_target_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in data_panels(dashboard):
        assert panel["datasource"] == DATASOURCE_REF, panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource") == DATASOURCE_REF, (panel["title"], target["refId"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE_REF, variable["name"]


def test_target_ref_ids_are_unique_within_a_panel(dashboard: dict[str, Any]) -> None:
    for panel in data_panels(dashboard):
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_no_import_inputs_so_file_provisioning_works(dashboard: dict[str, Any]) -> None:
    assert "__inputs" not in dashboard
    assert "${DS_" not in str(dashboard)
    assert dashboard.get("id") is None


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_variables_are_datasource_job_instance_gpu_namespace_pod_in_that_order(name: str) -> None:
    """The same filters on every dashboard, in one order (the Chargeback dashboard's
    energy split after them)."""
    variables = load(name)["templating"]["list"]
    extra = EXTRA_VARIABLES.get(name, ())
    assert [v["name"] for v in variables] == [*TEMPLATE_VARIABLES, *extra]
    assert variables[0]["type"] == "datasource"
    assert variables[0]["query"] == "prometheus"
    for variable in variables[len(TEMPLATE_VARIABLES) :]:
        assert variable["type"] == "custom" and not variable.get("includeAll")
        assert variable["current"]["value"] == PARSE_VALUES[variable["name"]]
    for variable in variables[1 : len(TEMPLATE_VARIABLES)]:
        assert variable["type"] == "query"
        if variable.get("includeAll"):
            assert variable.get("allValue") == ALL_VALUES[variable["name"]], variable["name"]


def test_variables_are_used_only_as_regex_matchers() -> None:
    """`=~"$var"` is what makes All (.+) and multi-value selections work; `uuid!~"$gpu"`
    (no GPU under All: every UUID matches .+) is the per-GPU side of a fleet time series
    that reads per-node series under All."""
    filters = {"job", "instance", "gpu", "namespace", "pod", "method"}
    for query in all_queries():
        for variable in filters:
            uses = len(re.findall(rf"\${variable}\b", query.expr))
            matchers = len(re.findall(rf'\b{variable}=~"\${variable}"', query.expr))
            if variable == "gpu":
                matchers += len(re.findall(r'\buuid!~"\$gpu"', query.expr))
            assert uses == matchers, (query.name, variable)
        assert variables_used(query.expr) <= GRAFANA_GLOBALS | filters, query.name


def test_namespace_and_pod_filter_only_the_kubernetes_series() -> None:
    """A fleet without the Kubernetes collector has no namespace to choose: the other
    panels must not depend on it. Every Kubernetes series is filtered by both."""
    for query in all_queries():
        for selector in re.findall(r"([\w:]+)\{([^}]*)\}", query.expr):
            name, matchers = selector
            kubernetes = name in KUBERNETES_SERIES
            for variable in ("namespace", "pod"):
                assert (f'{variable}=~"${variable}"' in matchers) == kubernetes, (query.name, name)


def test_every_device_query_filters_by_job_instance_and_gpu() -> None:
    for query in all_queries():
        for name in metric_names(substitute(query.expr, PARSE_VALUES)):
            spec = METRICS_BY_NAME.get(name)
            per_gpu = name.startswith("instance_gpu") or bool(
                spec and "gpu" in spec.label_names(DEFAULT_OPTIONS)
            )
            wanted = ["job", "instance"] + (["gpu"] if per_gpu else [])
            for selector in re.findall(rf"\b{name}\{{([^}}]*)\}}", query.expr):
                for label in wanted:
                    assert f'{label}=~"${label}"' in selector, (query.name, name, label)
            assert re.search(rf"\b{name}\{{", query.expr), (query.name, f"{name} without filter")


PER_NODE_WHILE_ALL = re.compile(r'\binstance:[\w:]+\{[^}]*gpu=~"\$gpu"')
EVERY_GPU_BUT_ALL = 'uuid!~"$gpu"'


def test_fleet_time_series_read_one_series_per_node_while_every_gpu_is_selected() -> None:
    """A range query of the fleet dashboard reads every selected series at each of its
    steps: per GPU, 4,000 series at 4,000 GPUs and over a second per panel with 6 hours
    of history (benchmarks/README.md). While the GPU variable is All it reads the
    per-node recorded series (gpu="all", what .+ selects and a choice of GPUs does not);
    its per-GPU selectors, for a choice of GPUs, select nothing under All."""
    checked = 0
    for query in queries("gpu-fleet.json"):
        if query.instant:
            continue
        assert PER_NODE_WHILE_ALL.search(query.expr), query.name
        for name in metric_names(substitute(query.expr, PARSE_VALUES)):
            if name.startswith("instance:"):
                assert name in RECORDED, (query.name, name)
                continue
            for selector in re.findall(rf"\b{re.escape(name)}\{{([^}}]*)\}}", query.expr):
                assert EVERY_GPU_BUT_ALL in selector, (query.name, name)
        checked += 1
    assert checked >= 10


def test_per_node_series_carry_the_label_the_gpu_variable_selects_under_all() -> None:
    rules = [
        rule
        for group in yaml.safe_load(
            (REPO / "deploy" / "prometheus" / "rules" / "gpu-recording.yml").read_text()
        )["groups"]
        for rule in group["rules"]
        if rule.get("record", "").startswith("instance:")
    ]
    assert len(rules) >= 10
    for rule in rules:
        assert rule["labels"]["gpu"] == "all", rule["record"]
        assert re.search(r"\bby \(instance, job\)", rule["expr"]), rule["record"]


def test_every_rate_uses_the_rate_interval() -> None:
    checked = 0
    for query in all_queries():
        for window in rate_windows(query.expr):
            # or an instant query's increase over the whole range
            whole_range = window == "$__range" and query.instant
            assert window == "$__rate_interval" or whole_range, (query.name, window)
            checked += 1
    assert checked >= 10


def test_rate_window_check_sees_a_hard_coded_window() -> None:
    assert rate_windows("sum(rate(x[5m])) / increase(y[$__rate_interval])") == [
        "5m",
        "$__rate_interval",
    ]
    assert rate_windows("sum_over_time(rate(x[$__rate_interval])[$__range:$__interval])") == [
        "$__rate_interval"
    ]


def test_metric_name_extraction() -> None:
    expr = (
        'sum by (instance) (rate(gpu_busy_seconds_total{job=~".+", gpu="0"}[1m] @ end())) '
        "* on(job, uuid) group_left(name) gpu_info or vector(0) > bool 1e-3 "
        "and time() - gpu_process_start_time_seconds offset 1h"
    )
    assert metric_names(expr) == {
        "gpu_busy_seconds_total",
        "gpu_info",
        "gpu_process_start_time_seconds",
    }


def test_every_metric_name_a_query_references_is_in_the_catalogue() -> None:
    referenced: set[str] = set()
    for query in all_queries():
        names = metric_names(substitute(query.expr, PARSE_VALUES))
        assert names, query.name
        unknown = names - set(METRICS_BY_NAME) - RECORDED
        assert not unknown, (query.name, unknown)
        # the node dashboard works without the rules; the fleet dashboard needs them
        if query.dashboard == "gpu-node.json":
            assert not names & RECORDED, query.name
        referenced |= names
    for name in DASHBOARD_FILES:
        for variable, query in variable_queries(name).items():
            selector, _label = label_values_parts(query)
            assert selector is not None, (name, variable)
            assert metric_names(selector) <= set(METRICS_BY_NAME), (name, variable)
    # the questions the dashboards must answer need these
    assert {
        "gpu_busy_seconds_total",
        "gpu_utilization_ratio",
        "gpu_memory_used_bytes",
        "gpu_memory_total_bytes",
        "gpu_temperature_threshold_celsius",
        "gpu_throttle_active",
        "gpu_xid_errors_total",
        "gpu_ecc_errors_total",
        "gpu_remapped_rows",
        "gpu_pcie_link_width",
        "gpu_energy_joules_total",
        "gpu_process_cpu_seconds_total",
        "gpu_process_workers",
        "gpu_host_cpu_busy_seconds_total",
        "gpu_host_memory_available_bytes",
        "gpu_info",
        "gpu_graphics_engine_active_seconds_total",
        "gpu_sm_active_seconds_total",
        "gpu_pipe_active_seconds_total",
        "gpu_dram_active_seconds_total",
        "gpu_mig_info",
        "gpu_mig_memory_used_bytes",
        "gpu_mig_memory_total_bytes",
        "gpu_mig_graphics_engine_active_seconds_total",
        "gpu_mig_sm_active_seconds_total",
        "gpu_nvlink_link_up",
        "gpu_nvlink_bytes_total",
        "gpu_nvlink_errors_total",
    } <= referenced


def test_no_query_costs_the_square_of_the_range() -> None:
    """A query that looks back over the whole range ($__range) reads every sample in it;
    run as a range query, it does so at every step: samples read grow with the square of
    the range. Such queries, and every stat panel's on the fleet dashboard (a fleet's
    worth of series), run once, as instant queries. The long-range fleet panels integrate
    recorded per-GPU series, not rates of raw ones."""
    stats = {
        ("gpu-fleet.json", panel["id"])
        for panel in data_panels(load("gpu-fleet.json"))
        if panel["type"] == "stat"
    }
    checked = 0
    for query in all_queries():
        # `@ end()` pins a window to the range's end: Prometheus evaluates it once
        ranges = re.findall(r"\[\$__range(?::\$__interval)?\]( @ end\(\))?", query.expr)
        if not all(ranges) or (query.dashboard, query.panel_id) in stats:
            assert query.instant, query.name
            checked += 1
        for call in re.finditer(r"_over_time\(", query.expr):
            argument = _call_argument(query.expr, call.end() - 1)
            fleet = query.dashboard == "gpu-fleet.json"
            if fleet and argument.endswith("[$__range:$__interval]"):  # a subquery, range long
                assert not RANGE_FUNCTIONS.search(argument), (query.name, argument)
                assert metric_names(substitute(argument, PARSE_VALUES)) <= RECORDED, query.name
    assert checked >= 20


def test_the_catalogue_check_would_catch_a_misspelt_metric() -> None:
    names = metric_names('rate(gpu_busy_second_total{gpu=~".+"}[1m])')
    assert names - set(METRICS_BY_NAME) == {"gpu_busy_second_total"}


def test_substitution_replaces_every_variable_and_rejects_unknown_ones() -> None:
    for query in all_queries():
        assert "$" not in substitute(query.expr, PARSE_VALUES), query.name
    with pytest.raises(KeyError):
        substitute("rate(x[$__unknown])", PARSE_VALUES)


@needs_promtool
def test_every_query_passes_promtools_parser(tmp_path: Path) -> None:
    exprs = {record_name(q): substitute(q.expr, PARSE_VALUES) for q in all_queries()}
    assert len(exprs) == len(all_queries())  # record names are unique
    for name in DASHBOARD_FILES:
        for variable, query in variable_queries(name).items():
            selector, _label = label_values_parts(query)
            exprs[f"dashboard_variable_{variable}_{len(exprs)}"] = substitute(
                selector or "", PARSE_VALUES
            )
    result = promtool_check(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(exprs)} rules found" in result.stdout


@needs_promtool
def test_promtool_check_rejects_a_broken_query(tmp_path: Path) -> None:
    result = promtool_check({"broken": "sum(rate(gpu_up[1m])"}, tmp_path)
    assert result.returncode != 0


def test_panels_answer_the_operators_questions() -> None:
    titles = {name: {p["title"] for p in data_panels(load(name))} for name in DASHBOARD_FILES}
    fleet, node = titles["gpu-fleet.json"], titles["gpu-node.json"]
    assert {
        "GPUs by state",
        "Fleet busy ratio",
        "Idle-allocated GPU-hours per node",
        "Top offenders: idle-allocated GPU-hours per user and container",
        "Top offenders: GPUs idle while allocated",
        "Memory headroom distribution",
        "GPUs close to OOM (> 90% memory used)",
        "Xid errors since boot",
        "Uncorrected ECC errors in range",
        "Throttled GPU-hours by reason",
        "GPU models",
        "Fleet SM activity vs busy ratio",
        "MIG instances by state",
        "GPUs by action",
    } <= fleet
    assert {
        "Busy ratio (rate) vs instantaneous utilization",
        "Memory used vs total (OOM line)",
        "Power draw and limit",
        "Energy in range",
        "Temperature with slowdown and shutdown thresholds",
        "Clocks",
        "Throttle reasons",
        "PCIe link",
        "ECC errors",
        "Row remapping and page retirement",
        "Xid errors",
        "Processes",
        "Input-bound? Busy ratio vs process-tree CPU and workers",
        "Host CPU",
        "Host memory",
        "SM activity vs busy ratio",
        "Tensor core and math pipe activity",
        "DRAM bandwidth activity",
        "MIG instances",
        "MIG instance activity: busy and SM active",
        "MIG instance memory used vs total",
        "NVLink links up",
        "NVLink throughput",
        "NVLink errors",
        "Needs action",
    } <= node
    panels = {p["title"]: p for p in data_panels(load("gpu-node.json"))}
    assert panels["Throttle reasons"]["type"] == "state-timeline"
    busy = panels["Busy ratio (rate) vs instantaneous utilization"]["targets"]
    assert "rate(gpu_busy_seconds_total{" in busy[0]["expr"]
    assert busy[1]["expr"].startswith("gpu_utilization_ratio{")
    input_bound = [
        t["expr"] for t in panels[next(t for t in panels if "Input-bound" in t)]["targets"]
    ]
    assert any("rate(gpu_busy_seconds_total" in e for e in input_bound)
    assert any("rate(gpu_process_cpu_seconds_total" in e for e in input_bound)
    assert any("gpu_process_workers" in e for e in input_bound)
    process_columns = " ".join(t["expr"] for t in panels["Processes"]["targets"])
    for metric in (
        "gpu_process_memory_used_bytes",
        "gpu_process_utilization_ratio",
        "gpu_process_cpu_seconds_total",
        "gpu_process_workers",
    ):
        assert metric in process_columns


BUSY_WITH_MIG_FALLBACK = re.compile(
    r"\(rate\(gpu_busy_seconds_total\{(?P<a>[^}]*)\}\[\$__rate_interval\]\) or "
    r"rate\(gpu_graphics_engine_active_seconds_total\{(?P<b>[^}]*)\}\[\$__rate_interval\]\)\)"
)


def test_every_busy_ratio_counts_mig_gpus_by_their_graphics_engine() -> None:
    """A MIG GPU has no busy counter: wherever a panel reads one, the GPU's GPM
    graphics-engine activity stands in, with the same filters."""
    checked = 0
    for query in all_queries():
        uses = query.expr.count("rate(gpu_busy_seconds_total{")
        fallbacks = BUSY_WITH_MIG_FALLBACK.findall(query.expr)
        assert uses == len(fallbacks), query.name
        assert all(a == b for a, b in fallbacks), query.name
        checked += uses
    assert checked >= 8


def test_node_dashboard_selects_one_node() -> None:
    instance = load("gpu-node.json")["templating"]["list"][2]
    assert instance["name"] == "instance"
    assert not instance["multi"] and not instance["includeAll"]


def test_provisioning_files() -> None:
    provisioning = REPO / "grafana" / "provisioning"
    providers = yaml.safe_load((provisioning / "dashboards" / "gpu-exporter.yaml").read_text())
    assert providers["apiVersion"] == 1
    [provider] = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"]
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())
    assert sources["apiVersion"] == 1
    [source] = sources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"].startswith("http")
    # $__rate_interval is computed from the scrape interval Grafana is told about
    assert source["jsonData"]["timeInterval"]


def test_docs_describe_every_panel() -> None:
    docs = (REPO / "docs" / "dashboards.md").read_text()
    for name in DASHBOARD_FILES:
        for panel in data_panels(load(name)):
            assert panel["title"] in docs, (name, panel["title"])


def test_queries_helper_lists_every_target() -> None:
    for name in DASHBOARD_FILES:
        expected = sum(len(p["targets"]) for p in data_panels(load(name)))
        assert len(queries(name)) == expected >= 10


def test_the_chargeback_tables_say_not_measured_rather_than_0() -> None:
    """Where an owner's use is not measured (a MIG instance without GPM) the rules give
    no used or wasted rows but unmeasured seconds (docs/chargeback.md): the tables read
    wasted and not-measured from the rules, and show "not measured" where used or wasted
    has no value, never 0 (issue 49)."""
    tables = [p for p in load("gpu-chargeback.json")["panels"] if p["type"] == "table"]
    assert len(tables) == 2
    for table in tables:
        exprs = {t["refId"]: t["expr"] for t in table["targets"]}
        assert "gpu_allocated_seconds" in exprs["A"] and "gpu_used_seconds" in exprs["B"]
        for ref, family in (("B", "used"), ("C", "unmeasured"), ("W", "wasted")):
            assert exprs["A"].replace("allocated", family) == exprs[ref], (table["title"], ref)
        assert [t["id"] for t in table["transformations"]] == ["merge", "organize"]
        renamed = table["transformations"][1]["options"]["renameByName"]
        assert renamed["Value #C"] == "not measured GPU-h"
        assert renamed["Value #W"] == "wasted GPU-h"
        (mapping,) = [
            o
            for o in table["fieldConfig"]["overrides"]
            if o["matcher"] == {"id": "byRegexp", "options": "(used|wasted) GPU-h"}
        ]
        (value,) = [p["value"] for p in mapping["properties"] if p["id"] == "mappings"]
        assert value == [
            {"type": "special", "options": {"match": "null", "result": {"text": "not measured"}}}
        ]
