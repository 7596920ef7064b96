"""Every dashboard query against a real Prometheus scraping three simulated exporters.

Exporters A and B serve 4 simulated GPUs each; C serves 4 with GPU 1 lost. Profiles by
index: 0 input-starved (busy ~47%), 1 idle but allocated, 2 near OOM and launch-bound
(busy ~87% on ~13% of its SMs), 3 busy, hot and MIG-partitioned (instance 2, a 3g.40gb,
serves inference; instances 3 and 9 are empty). Every GPU has GPM and 18 NVLink links.
A's GPUs 0 and 1 carry processes with real PIDs (a parent with two workers on GPU 0)
instead of the built-in ones, and A's driver asks for GPU 2 to be reset; B's and C's
built-in inference server sits on instance 2.
Grafana's variables are substituted as in `LIVE_VALUES`: the node dashboard is pointed at
A, the fleet dashboard at everything; `$__range` is 1h, longer than this Prometheus has
been alive, to show that range queries work on a young server too. The Prometheus loads
the shipped recording rules (evaluated every second), which the fleet dashboard's
long-range panels read.
A and B run on Kubernetes (a kubelet stand-in each): A's GPU 0 is allocated to ml/train,
its idle GPU 1 to lab/notebook, and its GPU 2 (the one the driver wants reset) is
time-sliced between ml/serve and ml/serve-canary; B's built-in training job runs in pod
ml/train-b, which was allocated no GPU (a stowaway), and B's GPU 1 is allocated to
lab/scratch by a DRA claim (its device named by the GPU's minor number, as NVIDIA's DRA
driver names it).

rate() over a window that starts before a series' first sample divides by the whole
window, so while a series is younger than `$__rate_interval` its rate reads low (a busy
GPU looks idle). That happens in production only when a GPU or node first appears; here
every series is young, so the tests that check which GPUs were idle over the range use a
range (`STEADY_RANGE`) that starts after the warm-up.

A busy GPU's busy counter steps at each read of its sample buffers, every ~12 s unwatched
(`sampling/buffer_reads.py`): against production's 1-minute rate windows that is five
steps a window, against this fleet's 10 s ones none or one, and a busy GPU read 0 in one
run of make test. So the fleet keeps the live page open (`LivePageViewer`): the buffers
are read every interval, a step a scrape, as many steps a window as production sees.
"""

from __future__ import annotations

import getpass
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.sources.simulated_tenants import PROFILE_PROCESSES, labels
from tests.support.dashboards import (
    ALL_VALUES,
    DASHBOARD_FILES,
    Query,
    all_queries,
    label_values_parts,
    queries,
    substitute,
    variable_queries,
)
from tests.support.exporter import Exporter, start_exporter
from tests.support.fleet import every_evaluation_rules
from tests.support.kubelet import Claim, ClaimDevice, Container, FakeKubelet, Pod, write_log_tree
from tests.support.prometheus import Prometheus, prometheus_binary, start_prometheus

pytestmark = pytest.mark.e2e

try:
    prometheus_binary()
    HAVE_PROMETHEUS = True
except RuntimeError:
    HAVE_PROMETHEUS = False

GIB = 1024**3
LIVE_VALUES = {
    "method": "usage",
    **ALL_VALUES,
    "__rate_interval": "10s",  # what Grafana derives from a 1s scrape interval, or near it
    "__interval": "1s",
    "__interval_ms": "1000",
    "__range": "1h",
    "__range_s": "3600",
}
STEADY_RANGE = {"__range": "4s"}
RECORDING_RULES = Path(__file__).resolve().parents[1] / "deploy/prometheus/rules/gpu-recording.yml"


def kubelets(tmp: Path) -> tuple[list[FakeKubelet], list[list[str]]]:
    """Kubelet stand-ins for exporters A and B, and the flags that point each at its own."""
    gpu = "nvidia.com/gpu"
    cgroup = labels(0, PROFILE_PROCESSES["input-starved"][0])  # B's built-in job
    train_b = Pod("ml", "train-b", [Container("trainer")], uid=cgroup.pod_uid)
    scratch = Claim("scratch-gpu", [ClaimDevice("gpu-2", pool="b")])
    nodes = {
        "a": (
            [
                Pod("ml", "train", [Container("trainer", {gpu: ["0"]})]),
                Pod("lab", "notebook", [Container("jupyter", {gpu: ["1"]})]),
                # two time-sliced replicas of GPU 2, as the device plugin names them
                Pod("ml", "serve", [Container("server", {gpu: ["2::0"]})]),
                Pod("ml", "serve-canary", [Container("server", {gpu: ["2::1"]})]),
            ],
            [],
        ),
        "b": (
            # B's GPU 1 of 4 is /dev/nvidia2, given by a DRA claim of NVIDIA's driver
            [train_b, Pod("lab", "scratch", [Container("shell", claims=[scratch])])],
            [(train_b, "trainer", cgroup.container_id)],
        ),
    }
    servers, flags = [], []
    for name, (pods, logged) in nodes.items():
        socket_path = Path(f"/tmp/dashboards-kubelet-{os.getpid()}-{name}.sock")
        servers.append(FakeKubelet(socket_path, pods).start())
        logs = write_log_tree(tmp / f"log-{name}", logged)
        flags.append(
            [
                "--collector.kubernetes",
                "--kubernetes.pod-resources-socket",
                str(socket_path),
                "--kubernetes.log-directory",
                str(logs),
            ]
        )
    return servers, flags


@dataclass
class Fleet:
    prometheus: Prometheus
    exporters: list[Exporter]
    job_pids: list[int]  # a parent with two workers on A's GPU 0, a lone process on GPU 1

    @property
    def instances(self) -> list[str]:
        return [f"127.0.0.1:{e.port}" for e in self.exporters]

    def values(self, dashboard: str) -> dict[str, str]:
        instance = self.instances[0] if dashboard == "gpu-node.json" else ALL_VALUES["instance"]
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


LIVE_PAGE_EVERY_S = 20.0  # under the 60 s for which one look keeps the buffers read


class LivePageViewer:
    """A browser with the live page open on every exporter: it asks each for the page's
    overview now and every LIVE_PAGE_EVERY_S seconds until stopped."""

    def __init__(self, exporters: list[Exporter]) -> None:
        self._exporters = exporters
        self._stop = threading.Event()
        self.answers: list[int] = []
        self._thread = threading.Thread(target=self._look, name="live-page", daemon=True)
        self._thread.start()

    def _look(self) -> None:
        while True:
            for exporter in self._exporters:
                try:
                    self.answers.append(exporter.get("/api/overview").status)
                except OSError:
                    self.answers.append(0)
            if self._stop.wait(LIVE_PAGE_EVERY_S):
                return

    def stop(self) -> None:
        """Stop looking; an AssertionError if any look went unanswered or was refused."""
        self._stop.set()
        self._thread.join()
        assert self.answers and set(self.answers) == {200}, self.answers


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if not HAVE_PROMETHEUS:
        pytest.skip("prometheus is not installed: run `make system-deps`")
    tmp = tmp_path_factory.mktemp("dashboards-live")
    trees = [_process_tree(2), _process_tree(0)]
    exporters: list[Exporter] = []
    prometheus: Prometheus | None = None
    viewer: LivePageViewer | None = None
    servers, kubernetes_flags = kubelets(tmp)
    kubernetes_flags.append([])  # C has no Kubernetes
    try:
        scenarios = [
            {
                "processes": [
                    {"gpu": 0, "pid": trees[0].pid, "memory_bytes": 40 * GIB, "sm_ratio": 0.45},
                    {"gpu": 1, "pid": trees[1].pid, "memory_bytes": 30 * GIB, "sm_ratio": 0.0},
                ],
                # the driver asks for a reset of GPU 2: the node's Needs action lists it
                "faults": {"recovery_action": {"2": "gpu_reset"}},
            },
            {},
            {"faults": {"lost": [1]}},
        ]
        for i, scenario in enumerate(scenarios):
            path = tmp / f"scenario-{i}.json"
            path.write_text(json.dumps(scenario))
            args = ["--simulate", "4", "--collect.interval", "1s", "--simulate.scenario", str(path)]
            exporters.append(start_exporter([*args, *kubernetes_flags[i]], tmp))
        config = tmp / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "evaluation_interval": "1s",
                    },
                    # the fleet dashboard's long-range panels read recording rules,
                    # evaluated here every second
                    "rule_files": [str(minute_rates_in_seconds(tmp / "r.yml"))],
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
        viewer = LivePageViewer(exporters)
        prometheus = start_prometheus(config, tmp)
        # warm-up: every GPU seen, and every busy counter older than the rate window
        # plus the steady range (12 GPUs: one lost, and each host's GPU 3 is MIG-partitioned,
        # which reports no utilization)
        prometheus.wait_for("count(gpu_up) == 12", timeout=30)
        prometheus.wait_for("count(count_over_time(gpu_busy_seconds_total[1m]) >= 15) == 8", 40)
        # and the GPM counters (every GPU that answers, and the 3 instances of each MIG GPU)
        gpm = "count(count_over_time({}[1m]) >= 15) == {}"
        prometheus.wait_for(gpm.format("gpu_sm_active_seconds_total", 11), 40)
        prometheus.wait_for(gpm.format("gpu_mig_sm_active_seconds_total", 9), 40)
        # and the recorded short rates, over the steady range (every GPU that answers),
        # once the GPM counters are older than their window: younger, a rate reads low
        window_old = (
            f"count(count_over_time(gpu_sm_active_seconds_total[1m]) >= {SHORT_RATE_S + 2}) == 11"
        )
        prometheus.wait_for(window_old, 60)
        prometheus.wait_for("count(count_over_time(instance_gpu:gpu_busy:ratio_rate1m[5s])) == 11")
        yield Fleet(prometheus, exporters, [t.pid for t in trees])
    finally:
        if viewer is not None:
            viewer.stop()
        if prometheus is not None:
            prometheus.stop()
        for exporter in exporters:
            exporter.stop()
        for tree in trees:
            os.killpg(tree.pid, signal.SIGKILL)
            tree.wait()
        for server in servers:
            server.stop()


SHORT_RATE_S = 20  # the recording rules' 1-minute rates, over this many seconds here
ROLLUP_S = 2  # the 5-minute roll-up's interval and window here


def minute_rates_in_seconds(dest: Path) -> Path:
    """The recording rules, every group at the test's 1 s evaluation but the 5-minute
    roll-up (every ROLLUP_S, over the ROLLUP_S that end 0.5 s before), with their 1-minute
    rates taken over SHORT_RATE_S seconds: a 1-minute rate of a counter younger than a
    minute reads low, and waiting a minute of warm-up for each of them cost 45 s of every
    test run. The expressions are otherwise the shipped ones."""
    every_evaluation_rules(RECORDING_RULES, dest, rollup_seconds=ROLLUP_S)
    text = dest.read_text()
    # the chargeback's rows: the increase since the evaluation SHORT_RATE_S before
    shorter = text.replace("[1m])", f"[{SHORT_RATE_S}s])").replace(
        " offset 1m", f" offset {SHORT_RATE_S}s"
    )
    assert shorter != text
    dest.write_text(shorter)
    return dest


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
        match = substitute(selector or "", ALL_VALUES)
        found[variable] = sorted(
            fleet.prometheus.api(f"label/{label}/values", **{"match[]": match})
        )
    assert found == {
        "job": ["gpu"],
        "instance": sorted(fleet.instances),
        "gpu": ["0", "1", "2", "3"],
        "namespace": ["lab", "ml"],
        # train-b was allocated nothing
        "pod": ["notebook", "scratch", "serve", "serve-canary", "train"],
    }


def test_kubernetes_panels_show_the_idle_pods_and_the_stowaway(fleet: Fleet) -> None:
    fleet.prometheus.wait_for("count(gpu_exporter_kubernetes_up == 1) == 2")
    idle = fleet.run(_panel("gpu-fleet.json", "Idle GPU-hours by namespace"), **STEADY_RANGE)
    assert {r["metric"]["namespace"] for r in idle if _value(r) > 0} == {"lab"}
    stowaways = fleet.run(_panel("gpu-fleet.json", "GPUs used without allocation"))
    assert [(r["metric"]["pod"], r["metric"]["gpu"], _value(r)) for r in stowaways] == [
        ("train-b", "0", 1.0)
    ]
    # on node A, the pods that were given GPUs 0 and 1, and the variables narrow them
    pods = fleet.run(_panel("gpu-node.json", "Pods allocated each GPU"))
    assert sorted((r["metric"]["gpu"], r["metric"]["pod"]) for r in pods) == [
        ("0", "train"),
        ("1", "notebook"),
        ("2", "serve"),
        ("2", "serve-canary"),
    ]
    only_lab = fleet.run(_panel("gpu-node.json", "Pods allocated each GPU"), namespace="lab")
    assert [r["metric"]["pod"] for r in only_lab] == ["notebook"]


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
    # busy: GPUs 0, 2, 3 of all three nodes (the MIG GPU 3s by their graphics-engine
    # activity); idle but allocated: GPU 1 of A and B; lost: C's 1
    assert counts == {"A": 9, "B": 2, "C": 0, "D": 1}


def test_memory_headroom_distribution(fleet: Fleet) -> None:
    panel = "Memory headroom distribution"
    counts = [_value(fleet.run(_panel("gpu-fleet.json", panel, ref))[0]) for ref in "ABCDE"]
    # < 5%: the near-OOM GPU 2s; 25-50%: input-starved 0s; >= 50%: idle 1s and the busy-hot
    # 3s. The busy-hot GPU is MIG-partitioned now: its instances hold 35 GiB of its 80,
    # where it held 85% before, so it moved from the 10-25% bucket to >= 50%.
    assert counts == [3, 0, 0, 3, 5]


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
    # no more than one GPU for as long as the range: the 2 s roll-ups whose evaluation
    # falls in the 4 s (2, at most 3), each of 2 one-second points
    assert hours[(a,)] <= 6 / 3600


def test_top_offender_gpus_are_the_idle_allocated_ones(fleet: Fleet) -> None:
    title = "Top offenders: GPUs idle while allocated"
    a, b, _c = fleet.instances
    for ref in "ABC":
        result = fleet.run(_panel("gpu-fleet.json", title, ref), **STEADY_RANGE)
        assert sorted(_by(result, "instance", "gpu")) == sorted([(a, "1"), (b, "1")]), ref
    busy = fleet.run(_panel("gpu-fleet.json", title, "C"), **STEADY_RANGE)
    assert all(_value(r) < 0.05 for r in busy)


def test_the_rollup_counts_every_point_once(fleet: Fleet) -> None:
    """The roll-up that the long-range panels add up (shipped: every 5 minutes, over the 5
    that end 30 s before; here every 2 s over the 2 s that end 0.5 s before, 1 s points):
    Prometheus runs it at exactly its interval, so consecutive evaluations tile the
    1-minute group's points, each counted once, as the seconds it stands for. Before
    Prometheus 3.0 a range also holds a sample exactly at its start: a point written
    exactly (to the millisecond) a window and the offset before an evaluation is then
    counted by two buckets (the two groups' phases, which Prometheus takes from their
    names and file, half a point apart here: about one fleet in 1,000; shipped, 30 s to
    the millisecond apart: one rule file in 60,000)."""
    a = fleet.instances[0]
    at = time.time()
    closed = fleet.prometheus.ranges_hold_their_start()

    def samples(expr: str) -> list[tuple[int, float]]:
        """(milliseconds, value): Prometheus's own timestamps, compared exactly."""
        (series,) = fleet.prometheus.query(expr, at)
        return [(round(float(t) * 1000), float(v)) for t, v in series["values"]]

    for gpu, rolled, point, total in (
        ("1", "gpu_idle_holding_memory_seconds:sum5m", "gpu_idle_holding_memory:bool_rate1m", 1),
        ("0", "gpu_busy:ratio_avg5m", "gpu_busy:ratio_rate1m", 0),
    ):
        selector = f'{{instance="{a}", gpu="{gpu}"}}'
        buckets = samples(f"instance_gpu:{rolled}{selector}[12s]")
        points = samples(f"instance_gpu:{point}{selector}[20s]")
        assert len(buckets) >= 5
        stamps = [t for t, _v in buckets]
        assert {b - a for a, b in itertools.pairwise(stamps)} == {ROLLUP_S * 1000}
        on_starts = 0.0  # points on a window's start: counted by a bucket more (2.x only)
        for stamp, value in buckets:
            start, end = stamp - (ROLLUP_S * 1000 + 500), stamp - 500
            on_start = [v for t, v in points if t == start] if closed else []
            inside = on_start + [v for t, v in points if start < t <= end]
            assert len(inside) == ROLLUP_S + len(on_start), (stamp, points)
            expected = sum(inside) if total else sum(inside) / len(inside)
            assert value == pytest.approx(expected), (stamp, inside)
            on_starts += sum(on_start)
        if total:  # the idle GPU: every one of its points in the buckets, once
            first, last = stamps[0] - (ROLLUP_S * 1000 + 500), stamps[-1] - 500
            once = sum(v for t, v in points if first < t <= last)
            assert sum(v for _t, v in buckets) == once + on_starts


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
    # busy-hot is MIG-partitioned now: no busy counter; its graphics-engine activity is
    # its busy 3g.40gb instance's 97% over 3 of the GPU's 7 slices
    assert 0.35 < busy[(a, "3")] < 0.5, busy
    instant = _by(fleet.run(_panel("gpu-node.json", title, "B")), "gpu")
    assert instant[("0",)] in (0.0, 0.95)  # the flicker
    assert ("3",) not in instant  # no utilization under MIG


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


def test_a_compute_and_graphics_process_is_one_row_and_its_memory_counts_once(
    fleet: Fleet,
) -> None:
    """B's near-OOM GPU 2 runs a ParaView server in both of NVML's lists (nvidia-smi's
    C+G) beside the fine-tuning job: one row in the process table, and the processes'
    memory sums to the GPU's used memory, not to more."""
    b = fleet.instances[1]
    rows = fleet.run(_panel("gpu-node.json", "Processes", "A"), instance=b)
    on_gpu_2 = sorted(
        (r["metric"]["process"], r["metric"]["context"]) for r in rows if r["metric"]["gpu"] == "2"
    )
    assert on_gpu_2 == [("pvserver", "compute+graphics"), ("python", "compute")]
    over = fleet.prometheus.query(
        f'sum by (gpu) (gpu_process_memory_used_bytes{{instance="{b}", gpu="2"}})'
        f' - on (gpu) gpu_memory_used_bytes{{instance="{b}", gpu="2"}}'
    )
    assert [_value(r) for r in over] == [0.0]


def test_idle_gpu_hours_are_charged_to_the_owner(fleet: Fleet) -> None:
    title = "Top offenders: idle-allocated GPU-hours per user and container"
    result = fleet.run(_panel("gpu-fleet.json", title), **STEADY_RANGE)
    # the lone process sits on A's idle-allocated GPU 1
    assert _by(result, "user")[(getpass.getuser(),)] > 0


def test_fleet_sm_activity_sits_below_the_busy_ratio(fleet: Fleet) -> None:
    title = "Fleet SM activity vs busy ratio"
    sm, busy, tensor = (_value(fleet.run(_panel("gpu-fleet.json", title, ref))[0]) for ref in "ABC")
    # 11 GPUs: busy ~48% (the launch-bound GPU 2s at ~87%), SMs ~24%
    assert 0.15 < sm < 0.35, sm
    assert 0.35 < busy < 0.6, busy
    assert busy - sm > 0.15  # the work GPU-Util hides
    assert 0 < tensor < sm


FLEET_TIME_SERIES = (
    "GPUs by state over time",
    "Fleet busy ratio",
    "Fleet memory used",
    "Fleet SM activity vs busy ratio",
)


def test_fleet_time_series_read_per_node_under_all_and_per_gpu_for_a_choice(
    fleet: Fleet,
) -> None:
    """Under All the fleet's time series read the per-node recorded series, for a choice
    of GPUs the per-GPU ones: every GPU chosen answers as All does, and GPU 1 alone is
    A's and B's idle-allocated GPU 1 and C's lost one."""
    per_gpu_under_all = substitute(
        'instance_gpu:gpu_busy:ratio_rate1m{gpu=~"$gpu", uuid!~"$gpu"}', LIVE_VALUES
    )
    assert fleet.prometheus.query(per_gpu_under_all) == []
    a, b, c = fleet.instances
    states = _by(fleet.prometheus.query("instance:gpu_by_state:count_rate1m"), "instance", "state")
    assert states == {
        (a, "busy"): 3,
        (a, "idle_allocated"): 1,
        (b, "busy"): 3,
        (b, "idle_allocated"): 1,
        (c, "busy"): 3,
    }
    assert _by(fleet.prometheus.query("instance:gpu_lost:count"), "instance") == {(c,): 1}
    checked = 0
    for query in queries("gpu-fleet.json"):
        if query.panel_title not in FLEET_TIME_SERIES:
            continue
        under_all = _by(fleet.run(query), "instance")
        every_gpu = _by(fleet.run(query, gpu="0|1|2|3"), "instance")
        assert under_all and under_all.keys() == every_gpu.keys(), query.name
        for key, value in under_all.items():
            assert value == pytest.approx(every_gpu[key], rel=0.05, abs=1e-3), (query.name, key)
        checked += 1
    assert checked == 10
    title = "GPUs by state over time"
    gpu_1 = {
        ref: _value(fleet.run(_panel("gpu-fleet.json", title, ref), gpu="1")[0]) for ref in "ABCD"
    }
    assert gpu_1 == {"A": 0, "B": 2, "C": 0, "D": 1}


def test_mig_instances_by_state(fleet: Fleet) -> None:
    counts = {
        ref: _value(fleet.run(_panel("gpu-fleet.json", "MIG instances by state", ref))[0])
        for ref in "ABC"
    }
    # three MIG GPUs (each node's GPU 3): the 3g.40gb serves, the 2g.20gb and 1g.10gb are
    # empty (their 13 MiB is the instance's own)
    assert counts == {"A": 3, "B": 0, "C": 6}


def test_gpm_activity_beside_the_busy_ratio(fleet: Fleet) -> None:
    a = fleet.instances[0]
    title = "SM activity vs busy ratio"
    sm = _by(fleet.run(_panel("gpu-node.json", title, "A")), "gpu")
    busy = _by(fleet.run(_panel("gpu-node.json", title, "B")), "gpu")
    occupancy = _by(fleet.run(_panel("gpu-node.json", title, "C")), "gpu")
    assert set(sm) == set(busy) == set(occupancy) == {(g,) for g in "0123"}
    assert busy[("2",)] > 0.8 and sm[("2",)] < 0.2  # launch-bound: GPUBusyButSMsIdle
    assert 0.3 < sm[("0",)] < 0.5  # the input-starved GPU's SMs follow its bursts
    assert sm[("1",)] == busy[("1",)] == 0
    assert 0.3 < sm[("3",)] < 0.45  # 85% of the busy instance's 3 of 7 slices
    assert all(occupancy[g] <= sm[g] for g in sm)
    tensor = _by(fleet.run(_panel("gpu-node.json", "Tensor core and math pipe activity")), "gpu")
    assert tensor[("1",)] == 0 and tensor[("3",)] > tensor[("2",)] > 0
    pipes = fleet.run(_panel("gpu-node.json", "Tensor core and math pipe activity", "B"))
    assert {r["metric"]["pipe"] for r in pipes} == {"fp64", "fp32", "fp16", "integer"}
    dram = _by(fleet.run(_panel("gpu-node.json", "DRAM bandwidth activity")), "instance", "gpu")
    assert dram[(a, "1")] == 0 and all(dram[(a, g)] > 0.1 for g in "023")


def test_mig_row_shows_the_three_instances_with_their_profiles(fleet: Fleet) -> None:
    title = "MIG instances"

    def column(ref: str, **overrides: str) -> dict[tuple[str, ...], float]:
        return _by(
            fleet.run(_panel("gpu-node.json", title, ref), **overrides), "gpu", "gpu_instance"
        )

    info = fleet.run(_panel("gpu-node.json", title, "A"))
    assert {
        (r["metric"]["gpu"], r["metric"]["gpu_instance"], r["metric"]["profile"]) for r in info
    } == {("3", "2", "3g.40gb"), ("3", "3", "2g.20gb"), ("3", "9", "1g.10gb")}
    assert all(r["metric"]["mig_uuid"].startswith("MIG-") for r in info)
    mib = 1024**2
    assert column("B") == {("3", "2"): 35 * GIB, ("3", "3"): 13 * mib, ("3", "9"): 13 * mib}
    assert column("C") == {("3", "2"): 40448 * mib, ("3", "3"): 20096 * mib, ("3", "9"): 9984 * mib}
    busy, sm = column("D"), column("E")
    assert busy[("3", "2")] > 0.9 and sm[("3", "2")] > 0.7
    assert busy[("3", "3")] == busy[("3", "9")] == sm[("3", "3")] == sm[("3", "9")] == 0
    # A's scenario replaces the built-in processes (none on an instance): every count is 0
    assert column("F") == {("3", "2"): 0, ("3", "3"): 0, ("3", "9"): 0}
    # on B, the built-in inference server holds instance 2, and the process table says so
    b = fleet.instances[1]
    assert column("F", instance=b) == {("3", "2"): 1, ("3", "3"): 0, ("3", "9"): 0}
    processes = fleet.run(_panel("gpu-node.json", "Processes", "A"), instance=b)
    on_mig = {
        (r["metric"]["process"], r["metric"]["gpu_instance"], r["metric"]["compute_instance"])
        for r in processes
        if r["metric"]["gpu"] == "3"
    }
    assert on_mig == {("tritonserver", "2", "0")}
    activity = "MIG instance activity: busy and SM active"
    assert len(fleet.run(_panel("gpu-node.json", activity, "A"))) == 3
    memory = "MIG instance memory used vs total"
    assert len(fleet.run(_panel("gpu-node.json", memory, "B"))) == 3


def test_nvlink_row_shows_18_links_up_per_gpu(fleet: Fleet) -> None:
    title = "NVLink links up"
    up, links, down = (_by(fleet.run(_panel("gpu-node.json", title, ref)), "gpu") for ref in "ABC")
    assert up == links == {(g,): 18 for g in "0123"}
    assert down == {(g,): 0 for g in "0123"}
    throughput = _by(fleet.run(_panel("gpu-node.json", "NVLink throughput")), "gpu", "direction")
    # the launch-bound GPU 2 all-reduces with its peers at ~45 GB/s each way, times its
    # 82-92% busy wave; the others use no NVLink
    for direction in ("tx", "rx"):
        assert 30e9 < throughput[("2", direction)] < 46e9, throughput
        assert all(throughput[(g, direction)] == 0 for g in "013")
    errors = fleet.run(_panel("gpu-node.json", "NVLink errors"))
    assert {r["metric"]["error_type"] for r in errors} == {
        "replay",
        "recovery",
        "crc_flit",
        "crc_data",
    }
    assert all(_value(r) == 0 for r in errors)


def test_every_pod_on_a_gpu_that_needs_action_is_listed(fleet: Fleet) -> None:
    """A's driver wants GPU 2 reset: both pods time-slicing it are listed with the action
    and its reason, and the pods of A's healthy GPUs are not; the namespace variable
    narrows the list."""
    fleet.prometheus.wait_for("count(gpu_allocation_info) == 5")
    title = "Pods on GPUs that need action"
    rows = fleet.run(_panel("gpu-fleet.json", title))
    a = fleet.instances[0]
    assert sorted(
        (r["metric"]["instance"], r["metric"]["gpu"], r["metric"]["pod"], r["metric"]["action"])
        for r in rows
    ) == [(a, "2", "serve", "reset_gpu"), (a, "2", "serve-canary", "reset_gpu")]
    assert {r["metric"]["reason"] for r in rows} == {"recovery_action_gpu_reset"}
    assert fleet.run(_panel("gpu-fleet.json", title), namespace="lab") == []


def test_rack_view_counts_gpus_faults_and_actions_per_tray(fleet: Fleet) -> None:
    """These simulated H100 boards have no platform info (Blackwell and later have): the
    rack view puts their 12 GPUs in the row without a rack, with C's lost GPU and the
    two GPUs that need action (A's reset, C's lost one's reboot), and lists those two
    with their reason."""
    title = "Racks and trays: GPUs, faults, NVLink errors and actions"
    counts = {
        ref: _by(fleet.run(_panel("gpu-fleet.json", title, ref)), "chassis_serial", "tray")
        for ref in "ABCD"
    }
    assert counts["A"] == {("", ""): 12}
    assert counts["B"] == {("", ""): 1}
    assert counts["C"] == {("", ""): 2}
    assert counts["D"] == {("", ""): 0}  # the simulated links count no faults
    a, _b, c = fleet.instances
    needing = fleet.run(_panel("gpu-fleet.json", "GPUs that need action, by rack and tray"))
    assert sorted(
        (r["metric"]["instance"], r["metric"]["gpu"], r["metric"]["action"]) for r in needing
    ) == sorted([(a, "2", "reset_gpu"), (c, "1", "reboot_node")])
