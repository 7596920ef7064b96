"""Every dashboard query against a real Prometheus scraping three simulated exporters.

Exporters A and B serve 4 simulated GPUs each; C serves 4 with GPU 1 lost. Profiles by
index: 0 input-starved (busy ~47%), 1 idle but allocated, 2 near OOM, 3 busy and hot.
A's GPUs 0 and 1 also carry processes with real PIDs (a parent with two workers on GPU 0).
Grafana's variables are substituted as in `LIVE_VALUES`: the node dashboard is pointed at
A, the fleet dashboard at everything; `$__range` is 1h, longer than this Prometheus has
been alive, to show that range queries work on a young server too.

rate() over a window that starts before a series' first sample divides by the whole
window, so while a series is younger than `$__rate_interval` its rate reads low (a busy
GPU looks idle). That happens in production only when a GPU or node first appears; here
every series is young, so the tests that check which GPUs were idle over the range use a
range (`STEADY_RANGE`) that starts after the warm-up.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.support.dashboards import (
    DASHBOARD_FILES,
    Query,
    all_queries,
    label_values_parts,
    queries,
    substitute,
    variable_queries,
)
from tests.support.exporter import Exporter, start_exporter
from tests.support.prometheus import Prometheus, prometheus_binary, start_prometheus

pytestmark = pytest.mark.e2e

try:
    prometheus_binary()
    HAVE_PROMETHEUS = True
except RuntimeError:
    HAVE_PROMETHEUS = False

GIB = 1024**3
LIVE_VALUES = {
    "__rate_interval": "10s",  # what Grafana derives from a 1s scrape interval, or near it
    "__interval": "1s",
    "__interval_ms": "1000",
    "__range": "1h",
    "__range_s": "3600",
    "job": ".+",
    "gpu": ".+",
}
STEADY_RANGE = {"__range": "4s"}


@dataclass
class Fleet:
    prometheus: Prometheus
    exporters: list[Exporter]
    job_pids: list[int]  # a parent with two workers on A's GPU 0, a lone process on GPU 1

    @property
    def instances(self) -> list[str]:
        return [f"127.0.0.1:{e.port}" for e in self.exporters]

    def values(self, dashboard: str) -> dict[str, str]:
        instance = self.instances[0] if dashboard == "gpu-node.json" else ".+"
        return {**LIVE_VALUES, "instance": instance}

    def run(self, query: Query, **overrides: str) -> list[dict[str, Any]]:
        values = {**self.values(query.dashboard), **overrides}
        return self.prometheus.query(substitute(query.expr, values))


def _process_tree(workers: int) -> subprocess.Popen[bytes]:
    """A parent process with `workers` child processes, all sleeping, in its own group."""
    code = (
        "import subprocess, sys, time\n"
        f"kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])"
        f" for _ in range({workers})]\n"
        "time.sleep(300)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if not HAVE_PROMETHEUS:
        pytest.skip("prometheus is not installed: run `make system-deps`")
    tmp = tmp_path_factory.mktemp("dashboards-live")
    trees = [_process_tree(2), _process_tree(0)]
    exporters: list[Exporter] = []
    prometheus: Prometheus | None = None
    try:
        scenarios = [
            {
                "processes": [
                    {"gpu": 0, "pid": trees[0].pid, "memory_bytes": 40 * GIB, "sm_ratio": 0.45},
                    {"gpu": 1, "pid": trees[1].pid, "memory_bytes": 30 * GIB, "sm_ratio": 0.0},
                ]
            },
            {},
            {"faults": {"lost": [1]}},
        ]
        for i, scenario in enumerate(scenarios):
            path = tmp / f"scenario-{i}.json"
            path.write_text(json.dumps(scenario))
            args = ["--simulate", "4", "--collect.interval", "1s", "--simulate.scenario", str(path)]
            exporters.append(start_exporter(args, tmp))
        config = tmp / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "gpu",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{e.port}" for e in exporters]}
                            ],
                        }
                    ],
                }
            )
        )
        prometheus = start_prometheus(config, tmp)
        # warm-up: every GPU seen, and every busy counter older than the rate window
        # plus the steady range (12 GPUs: one lost, and each host's GPU 3 is MIG-partitioned,
        # which reports no utilization)
        prometheus.wait_for("count(gpu_up) == 12", timeout=30)
        prometheus.wait_for("count(count_over_time(gpu_busy_seconds_total[1m]) >= 15) == 8", 40)
        yield Fleet(prometheus, exporters, [t.pid for t in trees])
    finally:
        if prometheus is not None:
            prometheus.stop()
        for exporter in exporters:
            exporter.stop()
        for tree in trees:
            os.killpg(tree.pid, signal.SIGKILL)
            tree.wait()


@pytest.mark.parametrize("query", all_queries(), ids=lambda q: q.name)
def test_panel_query_returns_data(fleet: Fleet, query: Query) -> None:
    result = fleet.run(query)
    if not result:
        deadline = time.monotonic() + 5  # a moment more of warm-up, once
        while not result and time.monotonic() < deadline:
            time.sleep(0.5)
            result = fleet.run(query)
    assert result, (
        f"{query.name}: no data for {substitute(query.expr, fleet.values(query.dashboard))}"
    )


@pytest.mark.parametrize("dashboard", DASHBOARD_FILES)
def test_template_variables_list_the_fleet(fleet: Fleet, dashboard: str) -> None:
    found: dict[str, list[str]] = {}
    for variable, query in variable_queries(dashboard).items():
        selector, label = label_values_parts(query)
        match = substitute(selector or "", {"job": ".+", "instance": ".+"})
        found[variable] = sorted(
            fleet.prometheus.api(f"label/{label}/values", **{"match[]": match})
        )
    assert found == {
        "job": ["gpu"],
        "instance": sorted(fleet.instances),
        "gpu": ["0", "1", "2", "3"],
    }


def _panel(dashboard: str, title: str, ref: str = "A") -> Query:
    matches = [q for q in queries(dashboard) if q.panel_title == title and q.ref_id == ref]
    assert len(matches) == 1, (dashboard, title, ref)
    return matches[0]


def _value(sample: dict[str, Any]) -> float:
    return float(sample["value"][1])


def _by(result: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"].get(label, "") for label in labels): _value(r) for r in result}


def test_gpus_by_state_counts_every_gpu_once(fleet: Fleet) -> None:
    counts = {
        ref: _value(fleet.run(_panel("gpu-fleet.json", "GPUs by state", ref))[0]) for ref in "ABCD"
    }
    # busy: GPUs 0, 2, 3 of all three nodes; idle but allocated: GPU 1 of A and B; lost: C's 1
    assert counts == {"A": 9, "B": 2, "C": 0, "D": 1}


def test_memory_headroom_distribution(fleet: Fleet) -> None:
    panel = "Memory headroom distribution"
    counts = [_value(fleet.run(_panel("gpu-fleet.json", panel, ref))[0]) for ref in "ABCDE"]
    # < 5%: the near-OOM GPU 2s; 10-25%: busy-hot 3s; 25-50%: input-starved 0s; >= 50%: idle 1s
    assert counts == [3, 0, 3, 3, 2]


def test_gpus_close_to_oom_are_the_near_oom_ones_with_their_model(fleet: Fleet) -> None:
    result = fleet.run(_panel("gpu-fleet.json", "GPUs close to OOM (> 90% memory used)"))
    assert sorted(_by(result, "instance", "gpu")) == sorted((i, "2") for i in fleet.instances)
    assert {r["metric"]["name"] for r in result} == {"NVIDIA H100 80GB HBM3"}
    assert all(0.95 < _value(r) < 0.99 for r in result)


def test_idle_allocated_gpu_hours_per_node(fleet: Fleet) -> None:
    result = fleet.run(
        _panel("gpu-fleet.json", "Idle-allocated GPU-hours per node"), **STEADY_RANGE
    )
    hours = _by(result, "instance")
    a, b, c = fleet.instances
    assert hours[(a,)] > 0 and hours[(b,)] > 0
    assert hours[(c,)] == 0  # C's idle GPU is lost, its others are busy
    # no more than one GPU for as long as Prometheus has been up
    assert hours[(a,)] <= 5 / 3600  # one GPU, 4 s of range (5 steps of 1 s)


def test_top_offender_gpus_are_the_idle_allocated_ones(fleet: Fleet) -> None:
    title = "Top offenders: GPUs idle while allocated"
    a, b, _c = fleet.instances
    for ref in "ABC":
        result = fleet.run(_panel("gpu-fleet.json", title, ref), **STEADY_RANGE)
        assert sorted(_by(result, "instance", "gpu")) == sorted([(a, "1"), (b, "1")]), ref
    busy = fleet.run(_panel("gpu-fleet.json", title, "C"), **STEADY_RANGE)
    assert all(_value(r) < 0.05 for r in busy)


def test_gpu_models_table(fleet: Fleet) -> None:
    result = fleet.run(_panel("gpu-fleet.json", "GPU models"))
    assert _by(result, "name") == {("NVIDIA H100 80GB HBM3",): 11}


def test_busy_ratio_shows_the_truth_behind_the_flicker(fleet: Fleet) -> None:
    title = "Busy ratio (rate) vs instantaneous utilization"
    busy = _by(fleet.run(_panel("gpu-node.json", title, "A")), "instance", "gpu")
    a = fleet.instances[0]
    assert set(busy) == {(a, g) for g in "0123"}  # the node dashboard shows one node
    assert 0.25 < busy[(a, "0")] < 0.70, busy  # input-starved: ~47%
    assert busy[(a, "1")] == 0
    assert busy[(a, "3")] > 0.9
    instant = _by(fleet.run(_panel("gpu-node.json", title, "B")), "gpu")
    assert instant[("0",)] in (0.0, 0.95)  # the flicker


def test_throttle_timeline_shows_only_reasons_seen_in_the_range(fleet: Fleet) -> None:
    result = fleet.run(_panel("gpu-node.json", "Throttle reasons"))
    reasons = {(r["metric"]["gpu"], r["metric"]["reason"]) for r in result}
    assert ("1", "gpu_idle") in reasons
    assert not {reason for _gpu, reason in reasons} & {"hw_slowdown", "display_clock_setting"}


def test_temperature_thresholds(fleet: Fleet) -> None:
    title = "Temperature with slowdown and shutdown thresholds"
    assert _value(fleet.run(_panel("gpu-node.json", title, "C"))[0]) == 90
    assert _value(fleet.run(_panel("gpu-node.json", title, "D"))[0]) == 92


def test_oom_line_is_total_minus_reserved(fleet: Fleet) -> None:
    result = fleet.run(_panel("gpu-node.json", "Memory used vs total (OOM line)", "B"))
    assert {_value(r) for r in result} == {(81559 - 529) * 1024**2}


def test_process_table_and_input_bound_panel_show_the_training_job(fleet: Fleet) -> None:
    parent, lone = (str(pid) for pid in fleet.job_pids)
    workers = fleet.run(_panel("gpu-node.json", "Processes", "D"))
    by_pid = {r["metric"]["pid"]: r for r in workers}
    assert _value(by_pid[parent]) == 2
    assert by_pid[parent]["metric"]["gpu"] == "0"
    assert by_pid[parent]["metric"]["user"] == getpass.getuser()
    assert _value(by_pid[lone]) == 0
    memory = _by(fleet.run(_panel("gpu-node.json", "Processes", "A")), "pid")
    assert memory[(parent,)] == 40 * GIB
    title = "Input-bound? Busy ratio vs process-tree CPU and workers"
    cpu = _by(fleet.run(_panel("gpu-node.json", title, "B")), "pid")
    assert 0 <= cpu[(parent,)] < 0.5  # sleeping workers
    assert _by(fleet.run(_panel("gpu-node.json", title, "C")), "pid")[(parent,)] == 2


def test_idle_gpu_hours_are_charged_to_the_owner(fleet: Fleet) -> None:
    title = "Top offenders: idle-allocated GPU-hours per user and container"
    result = fleet.run(_panel("gpu-fleet.json", title), **STEADY_RANGE)
    # the lone process sits on A's idle-allocated GPU 1
    assert _by(result, "user")[(getpass.getuser(),)] > 0
