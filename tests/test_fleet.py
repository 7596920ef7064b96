"""A fleet in a test: three simulated nodes, the example Prometheus, and a global one.

Three real exporters (`--simulate`, each with its own scenario) are found by the real
Prometheus from Debian's package through file-based discovery, with the example
configuration and the shipped rules; a second Prometheus federates the recording rules
from the first. The first sends its alerts (their `for:` at 0s) to Debian's real
Alertmanager with the example configuration, which posts them to a webhook in the test.
Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.sources.simulated_tenants import PROFILE_PROCESSES, labels
from tests.support.alertmanager import (
    Alertmanager,
    Webhook,
    loopback_config,
    start_alertmanager,
    start_webhook,
)
from tests.support.exporter import Exporter, http_get, start_exporter
from tests.support.fleet import (
    EXAMPLES,
    cluster_config,
    federation_config,
    immediate_alert_rules,
    write_yaml,
)
from tests.support.html_ids import parse
from tests.support.kubelet import Claim, ClaimDevice, Container, FakeKubelet, Pod, write_log_tree
from tests.support.prometheus import CHARGEBACK_FIRST_ROWS_SECONDS, Prometheus, start_prometheus

pytestmark = pytest.mark.e2e

IDLE_RULE = "instance_gpu:gpu_idle_while_allocated:ratio_rate30m"
MIG_IDLE_RULE = "instance_gpu_instance:gpu_mig_idle_while_allocated:ratio_rate30m"
GIB = 1024**3


def scenarios() -> dict[str, dict[str, Any]]:
    """node name -> (GPU count, scenario). GPU index modulo 4 picks the profile:
    0 input-starved, 1 idle (memory held, no kernels), 2 near-OOM and launch-bound,
    3 busy-hot and MIG-partitioned (instance 2 busy, 3 and 9 with no activity)."""
    me = os.getpid()  # a real process, so attribution has something to read
    return {
        # a process holds the idle GPU 1, and the idle MIG instance 3 of GPU 3: idle
        # while allocated
        "node-a": {
            "gpus": 4,
            "scenario": {
                "processes": [
                    {"gpu": 0, "pid": me, "memory_bytes": 40 * GIB, "sm_ratio": 0.45},
                    {"gpu": 1, "pid": me, "memory_bytes": 30 * GIB, "sm_ratio": 0.0},
                    {"gpu": 2, "pid": me, "memory_bytes": 78 * GIB, "sm_ratio": 0.7},
                    # a second live process on the near-full GPU 2: shared, at risk
                    # (GPUMemoryNearFull pages for sharing, not for one flat holder)
                    {"gpu": 2, "pid": os.getppid(), "memory_bytes": 2 * GIB, "sm_ratio": 0.0},
                    {"gpu": 3, "pid": me, "memory_bytes": 1 * GIB, "gpu_instance": 2},
                    {"gpu": 3, "pid": me, "memory_bytes": 4 * GIB, "gpu_instance": 3},
                ]
            },
        },
        # built-in tenants: GPU 1's memory is pinned by no process, GPU 3's inference
        # server holds its busy MIG instance; GPU 0 is lost
        "node-b": {"gpus": 4, "scenario": {"faults": {"lost": [0]}}},
        # a smaller node whose boards have no fan reading, on Kubernetes (kubelet()): its
        # GPU 0 tenant runs in pod ml/train-0, which asked for no GPU (a stowaway), while
        # a device plugin gave GPU 0 to ml/serve; GPU 1, idle with no process, is given to
        # a notebook by a DRA claim (allocated but idle)
        "node-c": {
            "gpus": 2,
            "scenario": {"faults": {"unsupported": ["temperature.fan_speed_ratio"]}},
        },
    }


def kubelet(workdir: Path) -> tuple[FakeKubelet, list[str]]:
    """node-c's kubelet stand-in and log tree, and the exporter flags that read them."""
    tenant = PROFILE_PROCESSES["input-starved"][0]
    cgroup = labels(0, tenant)  # the simulated tenant's container ID and pod UID
    train = Pod("ml", "train-0", [Container("trainer")], uid=cgroup.pod_uid)
    serve = Pod("ml", "serve", [Container("server", {"nvidia.com/gpu": ["0"]})])
    # NVIDIA's DRA driver names a GPU by its minor: the simulated GPU 1 of 2 is /dev/nvidia0
    claim = Claim("notebook-gpu", [ClaimDevice("gpu-0", pool="node-c")])
    notebook = Pod("lab", "notebook", [Container("jupyter", claims=[claim])])
    logs = write_log_tree(workdir / "node-c-log", [(train, "trainer", cgroup.container_id)])
    socket_path = Path(f"/tmp/fleet-kubelet-{os.getpid()}.sock")
    server = FakeKubelet(socket_path, [train, serve, notebook]).start()
    flags = [
        "--collector.kubernetes",
        "--kubernetes.pod-resources-socket",
        str(socket_path),
        "--kubernetes.log-directory",
        str(logs),
    ]
    return server, flags


@dataclass
class Fleet:
    exporters: dict[str, Exporter]
    prometheus: Prometheus
    workdir: Path
    alertmanager: Alertmanager
    webhook: Webhook
    scenario_files: dict[str, Path]

    def instance(self, node: str) -> str:
        return f"127.0.0.1:{self.exporters[node].port}"

    def node_of(self, instance: str) -> str:
        (node,) = [n for n in self.exporters if self.instance(n) == instance]
        return node


def recording_rules() -> dict[str, str]:
    rules = yaml.safe_load((EXAMPLES / "rules" / "gpu-recording.yml").read_text())
    return {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"]}


def alert_exprs() -> dict[str, str]:
    rules = yaml.safe_load((EXAMPLES / "rules" / "gpu-alerts.yml").read_text())
    return {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}


def picked(result: list[dict[str, Any]], fleet: Fleet) -> set[tuple[str, str]]:
    """{(node, gpu)} of a query result."""
    return {(fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu"]) for r in result}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("fleet")
    exporters: dict[str, Exporter] = {}
    scenario_files: dict[str, Path] = {}
    prometheus: Prometheus | None = None
    alertmanager: Alertmanager | None = None
    webhook = start_webhook()
    node_c_kubelet, kubernetes_flags = kubelet(workdir)
    try:
        for node, spec in scenarios().items():
            scenario = write_yaml(workdir / f"{node}-scenario.yml", spec["scenario"])
            scenario_files[node] = scenario
            args = ["--simulate", str(spec["gpus"]), "--simulate.scenario", str(scenario)]
            if node == "node-c":
                args += kubernetes_flags
            exporters[node] = start_exporter([*args, "--collect.interval", "1s"], workdir)
        targets = [
            {"targets": [f"127.0.0.1:{exporter.port}"], "labels": {"node": node}}
            for node, exporter in exporters.items()
        ]
        # the example discovers targets/gpu-exporter-*.yml
        write_yaml(workdir / "targets" / "gpu-exporter-fleet.yml", targets)
        alertmanager = start_alertmanager(loopback_config(webhook.url), workdir)
        rules = {"gpu-alerts.yml": immediate_alert_rules(workdir / "rules" / "gpu-alerts.yml")}
        settings = cluster_config(
            workdir / "targets", alertmanager.url.removeprefix("http://"), rules
        )
        config = write_yaml(workdir / "prometheus.yml", settings)
        prometheus = start_prometheus(config, workdir)
        yield Fleet(exporters, prometheus, workdir, alertmanager, webhook, scenario_files)
    finally:
        if prometheus is not None:
            prometheus.stop()
        if alertmanager is not None:
            alertmanager.stop()
        webhook.stop()
        for exporter in exporters.values():
            exporter.stop()
        node_c_kubelet.stop()


def test_all_targets_are_discovered_and_up(fleet: Fleet) -> None:
    fleet.prometheus.wait_for('up{job="gpu-exporter"} == 1', minimum=3)
    targets = fleet.prometheus.targets()
    assert len(targets) == 3
    assert {t["labels"]["node"] for t in targets} == set(fleet.exporters)
    assert all(t["health"] == "up" for t in targets), [t.get("lastError") for t in targets]
    assert all(t["scrapeUrl"].startswith("http://127.0.0.1:") for t in targets)
    assert {t["labels"]["job"] for t in targets} == {"gpu-exporter"}


def test_the_rules_load_and_evaluate_without_errors(fleet: Fleet) -> None:
    fleet.prometheus.wait_for("instance_gpu:gpu_busy:ratio_rate5m")
    groups = fleet.prometheus.api("rules")["groups"]
    files = {Path(g["file"]).name for g in groups}
    assert files == {"gpu-recording.yml", "gpu-alerts.yml"}
    for group in groups:
        for rule in group["rules"]:
            assert rule["health"] != "err", (rule["name"], rule.get("lastError"))


# Recorded only where this fleet's simulated H100 boards cannot show it: where the driver
# says where a GPU sits in its rack (GB200 and later), and for a link that retrained in
# an hour of the last (hours of trouble). tests/test_rack_e2e.py checks both against a
# simulated GB200 tray; the promtool cases (gpu-nvlink-trend.test.yml) the hours. And the
# GPU-seconds whose use nothing measures: a MIG instance of a GPU without GPM (A100, A30),
# where this fleet's H100s have GPM (gpu-chargeback.test.yml's GPU-a checks it).
NOT_IN_THIS_FLEET = {
    "instance_gpu_owner:gpu_unmeasured_seconds:sum1m",
    "instance_gpu:gpu_platform_info:last_seen_timestamp1d",
    "instance_gpu_link:gpu_nvlink_degrading:increase1h",
}


@pytest.mark.parametrize("record", sorted(set(recording_rules()) - NOT_IN_THIS_FLEET))
def test_every_recording_rule_returns_data(fleet: Fleet, record: str) -> None:
    # the first case in the order waits for the chargeback's first rows (58 s of the
    # default 60 s wait alone on a quiet machine)
    result = fleet.prometheus.wait_for(record, timeout=CHARGEBACK_FIRST_ROWS_SECONDS)
    for series in result:
        assert not math.isnan(float(series["value"][1])), f"{record}: NaN for {series['metric']}"


def test_fleet_totals_count_every_gpu_by_model(fleet: Fleet) -> None:
    fleet.prometheus.wait_for('up{job="gpu-exporter"} == 1', minimum=3)
    # node-b's GPU 0 was lost before the exporter could read its identity: it has no
    # gpu_info (nothing is made up), so it is counted by GPULost, not by model
    identified = sum(spec["gpus"] for spec in scenarios().values()) - 1
    result = fleet.prometheus.wait_for(f"name:gpu_count:sum == {identified}")
    assert [r["metric"]["name"] for r in result] == ["NVIDIA H100 80GB HBM3"]
    fleet.prometheus.wait_for(f"name:gpu_up:sum == {identified}")
    memory = fleet.prometheus.wait_for("name:gpu_memory_total_bytes:sum")
    per_gpu = fleet.prometheus.query("max(gpu_memory_total_bytes)")
    assert float(memory[0]["value"][1]) == identified * float(per_gpu[0]["value"][1])


STEADY_READINGS = 8  # scrapes of every GPU before a 30m rule is judged on a young fleet


def test_the_idle_rule_picks_out_the_idle_but_allocated_gpu(fleet: Fleet) -> None:
    fleet.prometheus.wait_for('gpu_processes{gpu="1"} > 0')
    # The rule guards a young series (whose rate() reads low) with the mean of the
    # utilization gauge. In its first seconds that mean is one or two readings, and an
    # input-starved GPU's bursts can read 0 in both (it once picked node-c's GPU 0):
    # judge the fleet once every GPU has a handful of readings, as the alert's `for:`
    # does in production.
    fleet.prometheus.wait_for(
        f"min(count_over_time(gpu_utilization_ratio[30m])) >= {STEADY_READINGS}"
    )
    expr = recording_rules()[IDLE_RULE]
    fleet.prometheus.wait_for(expr)
    # the rule's own expression, evaluated by Prometheus over the scraped data
    assert picked(fleet.prometheus.query(expr), fleet) == {("node-a", "1")}
    # and the recorded series that dashboards and GPUIdleWhileAllocated read
    fleet.prometheus.wait_for(IDLE_RULE)
    assert picked(fleet.prometheus.query(IDLE_RULE), fleet) == {("node-a", "1")}
    # GPUIdleWhileAllocated reads it, and the MIG instances' rule beside it
    idle_alert = alert_exprs()["GPUIdleWhileAllocated"]
    assert IDLE_RULE in idle_alert and MIG_IDLE_RULE in idle_alert
    # the count is recorded from the rule above, possibly one evaluation later
    fleet.prometheus.wait_for("name:gpu_idle_while_allocated:count == 1")
    counts = fleet.prometheus.query("name:gpu_idle_while_allocated:count")
    assert [float(r["value"][1]) for r in counts] == [1.0]


def test_alert_expressions_pick_out_the_injected_faults(fleet: Fleet) -> None:
    """The instant alert conditions (before their `for:`) see the simulated faults."""
    alerts = alert_exprs()
    fleet.prometheus.wait_for('gpu_up{gpu="0"} == 0')
    assert picked(fleet.prometheus.query(alerts["GPULost"]), fleet) == {("node-b", "0")}
    # GPU 2 of every node runs near OOM; node-c has GPUs 0 and 1 only
    near_full = picked(fleet.prometheus.query(alerts["GPUMemoryNearFull"]), fleet)
    assert near_full == {("node-a", "2"), ("node-b", "2")}
    # node-b's built-in tenants leave GPU 1's memory pinned by no process; node-a's
    # scenario puts a process there, so only node-b (and node-c, same built-ins) leak
    leaked = picked(fleet.prometheus.query(alerts["GPUMemoryLeaked"]), fleet)
    assert ("node-a", "1") not in leaked
    assert ("node-b", "1") in leaked
    assert all(gpu == "1" for _, gpu in leaked), leaked
    assert fleet.prometheus.query(alerts["GPUNVMLDown"]) == []
    assert fleet.prometheus.query(alerts["GPUExporterDown"]) == []
    # every simulated NVLink is up and error-free
    assert fleet.prometheus.query(alerts["GPUNVLinkDown"]) == []
    assert fleet.prometheus.query(alerts["GPUNVLinkErrors"]) == []
    links = fleet.prometheus.wait_for("count(gpu_nvlink_link_up == 1)")
    assert float(links[0]["value"][1]) == 18 * 9  # node-a's 4 GPUs, node-b's 3, node-c's 2


def test_a_stowaway_and_an_allocated_idle_pod_raise_their_alerts(fleet: Fleet) -> None:
    """Through Prometheus' own rule evaluation: the alerts are active (pending until
    their `for:`, which a test cannot wait) for exactly node-c's two pods. node-c has a
    device plugin and DRA: the notebook's GPU comes from a claim, named by its minor."""
    fleet.prometheus.wait_for("gpu_exporter_kubernetes_up == 1")
    allocations = fleet.prometheus.wait_for("gpu_allocation_info", minimum=2)
    assert {
        (
            fleet.node_of(r["metric"]["instance"]),
            r["metric"]["gpu"],
            r["metric"]["pod"],
            r["metric"].get("dra_claim", ""),
            r["metric"].get("dra_device", ""),
        )
        for r in allocations
    } == {("node-c", "0", "serve", "", ""), ("node-c", "1", "notebook", "notebook-gpu", "gpu-0")}
    stowaway = fleet.prometheus.wait_for('ALERTS{alertname="GPUUsedWithoutAllocation"}')
    assert [
        (fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu"], r["metric"]["pod"])
        for r in stowaway
    ] == [("node-c", "0", "train-0")]
    fleet.prometheus.wait_for(
        f"min(count_over_time(gpu_utilization_ratio[30m])) >= {STEADY_READINGS}"
    )
    idle = fleet.prometheus.wait_for('ALERTS{alertname="GPUAllocatedButIdle"}')
    assert [
        (fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu"], r["metric"]["pod"])
        for r in idle
    ] == [("node-c", "1", "notebook")]
    assert idle[0]["metric"]["dra_claim"] == "notebook-gpu"  # the alert names the claim
    by_namespace = fleet.prometheus.wait_for("namespace:gpu_allocated_idle:count")
    assert [(r["metric"]["namespace"], float(r["value"][1])) for r in by_namespace] == [
        ("lab", 1.0)
    ]
    # the pod is named on its processes too, from the kubelet's log layout
    processes = fleet.prometheus.query('gpu_process_memory_used_bytes{pod="train-0"}')
    assert {(r["metric"]["namespace"], r["metric"]["container"]) for r in processes} == {
        ("ml", "trainer")
    }


def test_busy_but_sms_idle_picks_out_the_launch_bound_gpus(fleet: Fleet) -> None:
    """GPU 2 of every node keeps a kernel running 82-92% of the time on ~13% of its SMs.

    The alert's 10-minute rates read low on series a minute old, so the same expression
    runs over 30 seconds (half the simulated busy wave's period: never below 80%).
    """
    expr = alert_exprs()["GPUBusyButSMsIdle"]
    assert expr.count("[10m]") == 2
    short = expr.replace("[10m]", "[30s]")
    # every GPU's counters older than the window (9 answer: node-b's GPU 0 is lost)
    fleet.prometheus.wait_for("count(gpu_sm_active_seconds_total offset 35s) == 9", timeout=90)
    result = fleet.prometheus.wait_for(short, minimum=2)
    # node-c has GPUs 0 and 1 only
    assert picked(result, fleet) == {("node-a", "2"), ("node-b", "2")}
    assert all(float(r["value"][1]) < 0.2 for r in result)  # the SM activity


def test_gpm_rules_show_sm_activity_below_the_busy_ratio(fleet: Fleet) -> None:
    busy = "instance_gpu:gpu_busy:ratio_rate5m"
    sm = "instance_gpu:gpu_sm_active:ratio_rate5m"
    fleet.prometheus.wait_for(sm, minimum=9)
    # young series read low in both; their quotient does not
    share = {
        (fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu"]): float(r["value"][1])
        for r in fleet.prometheus.query(f"{sm} / {busy}")
    }
    assert share[("node-a", "2")] < 0.3 and share[("node-b", "2")] < 0.3  # launch-bound
    assert share[("node-a", "0")] > 0.6  # input-starved: few but full bursts
    # the MIG GPU has no busy counter: its graphics-engine activity stands in
    mig = fleet.prometheus.query(f'{busy}{{gpu="3"}}')
    assert picked(mig, fleet) == {("node-a", "3"), ("node-b", "3")}
    assert fleet.prometheus.query('gpu_busy_seconds_total{gpu="3"}') == []
    for record in (
        "instance_gpu:gpu_tensor_active:ratio_rate5m",
        "instance_gpu:gpu_dram_active:ratio_rate5m",
    ):
        result = fleet.prometheus.wait_for(record, minimum=9)
        working = {
            (fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu"])
            for r in result
            if float(r["value"][1]) > 0
        }
        # all but the idle GPU 1s
        assert working == {
            ("node-a", "0"),
            ("node-a", "2"),
            ("node-a", "3"),
            ("node-b", "2"),
            ("node-b", "3"),
            ("node-c", "0"),
        }, record
    names = fleet.prometheus.wait_for("name:gpu_sm_active:avg_ratio_rate5m")
    fleet_busy = fleet.prometheus.query("name:gpu_busy:avg_ratio_rate5m")
    assert float(names[0]["value"][1]) < float(fleet_busy[0]["value"][1])


def test_mig_rules_see_each_instance_and_its_processes(fleet: Fleet) -> None:
    def by_instance(expr: str) -> dict[tuple[str, str], float]:
        result = fleet.prometheus.wait_for(expr, minimum=6)
        assert {r["metric"]["gpu"] for r in result} == {"3"}
        return {
            (fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu_instance"]): float(
                r["value"][1]
            )
            for r in result
        }

    keys = {(node, gi) for node in ("node-a", "node-b") for gi in ("2", "3", "9")}
    for record in (
        "instance_gpu_instance:gpu_mig_graphics_engine_active:ratio_rate5m",
        "instance_gpu_instance:gpu_mig_sm_active:ratio_rate5m",
        "instance_gpu_instance:gpu_mig_tensor_active:ratio_rate5m",
        "instance_gpu_instance:gpu_mig_dram_active:ratio_rate5m",
    ):
        activity = by_instance(record)
        assert set(activity) == keys, record
        assert all((v > 0) == (gi == "2") for (_node, gi), v in activity.items()), record
    # the built-in inference server holds node-b's instance 2; node-a's scenario puts a
    # process on its busy instance 2 and one on its idle instance 3
    processes = by_instance("instance_gpu_instance:gpu_mig_processes:count")
    held = {("node-b", "2"), ("node-a", "2"), ("node-a", "3")}
    assert processes == {key: float(key in held) for key in keys}
    # only the held instance without activity is idle while allocated: not the held
    # busy ones (even while a young series' 30-minute rate reads low), not the empty 9
    for expr in (recording_rules()[MIG_IDLE_RULE], MIG_IDLE_RULE):
        idle = fleet.prometheus.wait_for(expr)
        assert {
            (
                fleet.node_of(r["metric"]["instance"]),
                r["metric"]["gpu"],
                r["metric"]["gpu_instance"],
            )
            for r in idle
        } == {("node-a", "3", "3")}, expr
    fleet.prometheus.wait_for("name:gpu_mig_idle_while_allocated:count == 1")
    counts = fleet.prometheus.query("name:gpu_mig_idle_while_allocated:count")
    assert [float(r["value"][1]) for r in counts] == [1.0]


@pytest.fixture(scope="module")
def global_prometheus(fleet: Fleet) -> Iterator[Prometheus]:
    config = federation_config([fleet.prometheus.url.removeprefix("http://")])
    path = write_yaml(fleet.workdir / "global" / "prometheus.yml", config)
    server = start_prometheus(path, path.parent)
    try:
        yield server
    finally:
        server.stop()


def test_a_global_prometheus_federates_the_recording_rules(
    fleet: Fleet, global_prometheus: Prometheus
) -> None:
    # all but the NVLink last-up state, which only the cluster's own alert reads, and
    # what this fleet does not record (its GPUs have no rack)
    expected = {
        r
        for r in recording_rules()
        if not r.startswith("instance_gpu_link:") and r not in NOT_IN_THIS_FLEET
    }
    for record in expected:
        fleet.prometheus.wait_for(record)
    names: set[str] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = global_prometheus.query('count by (__name__) ({__name__=~".+:.+"})')
        names = {r["metric"]["__name__"] for r in result}
        if names == expected:
            break
        time.sleep(0.5)
    assert names == expected, f"federated {sorted(names)}"
    # honor_labels keeps the cluster's labels: its external label and the exporter's
    per_gpu = global_prometheus.query("instance_gpu:gpu_busy:ratio_rate5m")
    assert {r["metric"]["cluster"] for r in per_gpu} == {"gpu-cluster-1"}
    assert {r["metric"]["instance"] for r in per_gpu} == {
        fleet.instance(node) for node in fleet.exporters
    }
    # raw series stay in the cluster
    assert global_prometheus.query("gpu_up") == []
    assert global_prometheus.query("gpu_memory_used_bytes") == []


# Alerts that reach a person --------------------------------------------------------------

RECEIVER_OF_SEVERITY = {"critical": "/gpu-hardware", "warning": "/gpu-team", "info": "/gpu-waste"}
XID_NODE, XID_GPU, LOST_GPU = "node-c", "0", "1"  # raised and lost mid-run, below


def test_alerts_reach_the_webhook_through_a_real_alertmanager(fleet: Fleet) -> None:
    """Placed last: it raises an Xid on node-c's GPU 0 and loses its GPU 1 (lost after
    its UUID was read, as a GPU that falls off the bus does), then restores the scenario.

    GPUIdleWhileAllocated, GPUMemoryNearFull and GPUNeedsReboot (for the Xid 79 and for
    the lost GPU: GPUXidCritical steps aside while its GPU's action pages, GPULost is
    held back) arrive at the
    receiver of their severity with node, GPU, UUID, the user of the process that holds
    the memory (container and pod too where it has them), a summary naming them, and a
    runbook link that the exporter under test serves, at a section that exists.
    """
    original = scenarios()[XID_NODE]["scenario"]
    changed = dict(original, events=[{"gpu": int(XID_GPU), "xid": 79}])
    changed["faults"] = dict(original["faults"], lost=[int(LOST_GPU)])
    write_yaml(fleet.scenario_files[XID_NODE], changed)
    me = pwd.getpwuid(os.getuid()).pw_name
    expected = {
        ("GPUIdleWhileAllocated", "node-a", "1"),
        ("GPUMemoryNearFull", "node-a", "2"),
        ("GPUMemoryNearFull", "node-b", "2"),
        ("GPUNeedsReboot", XID_NODE, LOST_GPU),
        ("GPUNeedsReboot", XID_NODE, XID_GPU),
    }

    def arrived(alerts: list[tuple[str, dict[str, Any]]]) -> dict[tuple[str, str, str], Any]:
        out = {}
        for path, alert in alerts:
            labels = alert["labels"]
            key = (labels["alertname"], labels.get("node", ""), labels.get("gpu", ""))
            if key in expected and alert["status"] == "firing":
                out[key] = (path, alert)
        return out

    try:
        fleet.webhook.wait_for(lambda alerts: set(arrived(alerts)) == expected, timeout=120)
    finally:
        write_yaml(fleet.scenario_files[XID_NODE], original)
    got = arrived(fleet.webhook.alerts())
    uuids = {
        (fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu"]): r["metric"].get("uuid")
        for r in fleet.prometheus.query("last_over_time(gpu_up[10m])")
    }
    for (name, node, gpu), (path, alert) in sorted(got.items()):
        labels, annotations = alert["labels"], alert["annotations"]
        assert path == RECEIVER_OF_SEVERITY[labels["severity"]], (name, path)
        assert labels["uuid"] and labels["uuid"] == uuids[(node, gpu)], (name, labels)
        assert labels["instance"] == fleet.instance(node)
        # the summary names the GPU and the node's exporter
        assert f"GPU {gpu}" in annotations["summary"], annotations["summary"]
        assert fleet.instance(node) in annotations["summary"]
        # the runbook link opens the section of this alert on the exporter under test
        url = annotations["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == f"http://{fleet.instance(node)}/runbooks" and anchor == name.lower()
        result = http_get(page)
        assert result.status == 200 and anchor in parse(result.body.decode()).ids, url
    # a process is the cause: its user, and its container and pod where it has them
    idle = got[("GPUIdleWhileAllocated", "node-a", "1")][1]
    assert idle["labels"]["user"] == me and f"user {me}" in idle["annotations"]["summary"]
    near_full = got[("GPUMemoryNearFull", "node-a", "2")][1]
    assert near_full["labels"]["user"] == me
    # node-b's built-in near-OOM tenant: a Slurm job of carol's (no container or pod;
    # the promtool cases show those labels joined where a process has them)
    tenant = got[("GPUMemoryNearFull", "node-b", "2")][1]
    assert tenant["labels"]["user"] == "carol", json.dumps(tenant["labels"])
    assert "user carol" in tenant["annotations"]["summary"]
    assert "held by a process of user carol" in tenant["annotations"]["description"]
    xid = got[("GPUNeedsReboot", XID_NODE, XID_GPU)][1]
    assert xid["labels"]["reason"] == "xid_79" and "(xid_79)" in xid["annotations"]["summary"]
    lost = got[("GPUNeedsReboot", XID_NODE, LOST_GPU)][1]
    assert lost["labels"]["reason"] == "gpu_lost"
    # the faults behind the actions were held back: one page per GPU
    paged = {
        (a["labels"]["alertname"], a["labels"].get("gpu", ""))
        for _, a in fleet.webhook.alerts()
        if a["labels"].get("node") == XID_NODE
    }
    assert not paged & {("GPULost", LOST_GPU), ("GPUXidCritical", XID_GPU)}, paged


# Chargeback (docs/chargeback.md) ---------------------------------------------------------

GPU_LABELS = "instance, job, gpu, uuid"
# the chargeback group's rows (the dashboard group's idle-holding-memory ones are not,
# nor the 5-minute roll-ups, which hold the minutes before)
CHARGEBACK_ROWS = (
    "instance_gpu_owner:gpu_(allocation_weight|allocated_seconds|busy_seconds|used_seconds"
    "|wasted_seconds|unmeasured_seconds|energy_joules):(ratio|sum1m)"
)


def chargeback_evaluation(prometheus: Prometheus, after: float = 0.0) -> float:
    """The time of the chargeback group's latest evaluation after `after`: its last
    rule's samples are written, so every row of that evaluation can be read at it."""
    last = "max(timestamp(instance_gpu_owner:gpu_energy_joules:sum1m))"
    (result,) = prometheus.wait_for(f"{last} > {after}")
    return float(result["value"][1])


def by_gpu(result: list[dict[str, Any]], fleet: Fleet) -> dict[tuple[str, str], float]:
    return {
        (fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu"]): float(r["value"][1])
        for r in result
    }


def assert_chargeback_adds_up(fleet: Fleet, at: float) -> set[tuple[str, str]]:
    """The invariants of issue 45 at one evaluation; returns the GPUs charged."""
    query = fleet.prometheus.query
    up = set(by_gpu(query("gpu_up == 1", at), fleet))
    allocated = by_gpu(
        query(f"sum by ({GPU_LABELS}) (instance_gpu_owner:gpu_allocated_seconds:sum1m)", at),
        fleet,
    )
    # per GPU the allocated rows, the remainder's included, are the minute; GPUs up only
    assert allocated == {gpu: pytest.approx(60.0) for gpu in up}
    used, wasted, held = (
        f"instance_gpu_owner:gpu_{kind}_seconds:sum1m" for kind in ("used", "wasted", "allocated")
    )
    assert query(f"{used} > {held}", at) == []
    assert query(f"abs({used} + {wasted} - {held}) > 1e-9", at) == []
    assert len(query(f"{used} + {wasted}", at)) == len(query(held, at))
    # per GPU and method, every joule of the minute to someone, within 1%
    energy = "instance_gpu:gpu_energy_joules:sum1m"
    rows = f"sum by ({GPU_LABELS}, method) (instance_gpu_owner:gpu_energy_joules:sum1m)"
    off = f"abs({rows} - on ({GPU_LABELS}) group_left () {energy})"
    assert query(f"{off} > on ({GPU_LABELS}) group_left () 0.01 * {energy}", at) == []
    for method in ("allocation", "usage"):
        charged = query(f"{rows.replace('method)', 'method)')} and on () vector(1)", at)
        assert {
            (fleet.node_of(r["metric"]["instance"]), r["metric"]["gpu"])
            for r in charged
            if r["metric"]["method"] == method
        } == up
    return up


def owner_rows(fleet: Fleet, kind: str, at: float) -> dict[tuple[str, str, str], float]:
    """(node, gpu, owner) -> value of instance_gpu_owner:gpu_<kind>_seconds:sum1m; the
    owner is the pod, else the user, else "none" for the remainder row."""
    result = fleet.prometheus.query(f"instance_gpu_owner:gpu_{kind}_seconds:sum1m", at)
    return {
        (
            fleet.node_of(r["metric"]["instance"]),
            r["metric"]["gpu"],
            r["metric"].get("pod") or r["metric"].get("user") or r["metric"]["allocation"],
        ): float(r["value"][1])
        for r in result
    }


def test_chargeback_rows_add_up_and_a_lost_gpu_drops_out_whole(fleet: Fleet) -> None:
    """The chargeback rules over the simulated fleet in a real Prometheus: on every
    evaluation each GPU's allocated rows make the minute, used never exceeds allocated,
    used + wasted = allocated, and each method's energy rows make the GPU's energy; the
    owners are the kubelet's (node-c) or the processes' (node-a, node-b); a GPU lost
    mid-run leaves at the next evaluation with all its rows, the others' unharmed."""
    prometheus = fleet.prometheus
    me = pwd.getpwuid(os.getuid()).pw_name
    # node-b's GPU 2 holds carol's and dave's jobs: every kind of row has been written
    # (a row is the increase since the evaluation a minute before: the first rows come a
    # minute after the first samples)
    prometheus.wait_for(
        'instance_gpu_owner:gpu_used_seconds:sum1m{user="dave"}',
        timeout=CHARGEBACK_FIRST_ROWS_SECONDS,
    )
    # node-c's GPUs, both allocated (the alerts' test above may have just given back the
    # one it lost)
    prometheus.wait_for(
        'instance_gpu_owner:gpu_wasted_seconds:sum1m{pod=~"serve|notebook"}', minimum=2
    )
    # carol's job has kernels running: once her GPU's busy counter has stepped (every
    # ~12 s), her share of its busy time shows
    prometheus.wait_for('instance_gpu_owner:gpu_used_seconds:sum1m{user="carol"} > 0')
    # and every GPU's busy counter has two readings (it steps every ~12 s): used and
    # wasted are left out of a GPU whose busy time is not known yet
    prometheus.wait_for(
        "count(instance_gpu_owner:gpu_used_seconds:sum1m)"
        " == count(instance_gpu_owner:gpu_allocated_seconds:sum1m)"
    )
    # and every GPU up has its rows (a node's first come a minute after its first samples)
    prometheus.wait_for(
        "count(gpu_up == 1) == count(count by (instance, gpu) ("
        "instance_gpu_owner:gpu_allocated_seconds:sum1m))",
        timeout=CHARGEBACK_FIRST_ROWS_SECONDS,
    )
    at = chargeback_evaluation(prometheus)
    up = assert_chargeback_adds_up(fleet, at)
    assert ("node-b", "0") not in up  # lost from the start: no rows at all
    held, used = owner_rows(fleet, "allocated", at), owner_rows(fleet, "used", at)
    wasted = owner_rows(fleet, "wasted", at)
    # node-c, on Kubernetes: GPU 0 is ml/serve's by its device plugin, the whole GPU, so
    # all its busy time is serve's (the stowaway in ml/train-0 holds no allocation);
    # GPU 1 is the notebook's by its DRA claim, idle: all of it wasted
    busy = by_gpu(prometheus.query("instance_gpu:gpu_busy_seconds:sum1m", at), fleet)
    assert held[("node-c", "0", "serve")] == pytest.approx(60)
    assert used[("node-c", "0", "serve")] == pytest.approx(min(60, busy[("node-c", "0")]))
    assert (held[("node-c", "1", "notebook")], wasted[("node-c", "1", "notebook")]) == (60, 60)
    # node-b, bare metal: carol's and dave's jobs share GPU 2, half each; dave's ran no
    # kernel. GPU 1 is held by no process: all remainder, idle
    assert held[("node-b", "2", "carol")] == held[("node-b", "2", "dave")] == 30
    assert used[("node-b", "2", "dave")] == 0 and used[("node-b", "2", "carol")] > 0
    assert held[("node-b", "2", "none")] == 0
    assert [k for k in held if k[:2] == ("node-b", "1")] == [("node-b", "1", "none")]
    # node-a: the test's own process holds every GPU, idle on GPU 1
    assert held[("node-a", "1", me)] == 60 and used[("node-a", "1", me)] == 0
    # node-a's GPU 0 is lost mid-run: its rows leave together at the next evaluation
    scenario = scenarios()["node-a"]["scenario"]
    write_yaml(fleet.scenario_files["node-a"], dict(scenario, faults={"lost": [0]}))
    try:
        prometheus.wait_for(f'gpu_up{{instance="{fleet.instance("node-a")}",gpu="0"}} == 0')
        lost_at = chargeback_evaluation(prometheus, after=time.time())
        up = assert_chargeback_adds_up(fleet, lost_at)
        assert ("node-a", "0") not in up and ("node-a", "1") in up
        left = f'{{__name__=~"{CHARGEBACK_ROWS}",instance="{fleet.instance("node-a")}",gpu="0"}}'
        assert prometheus.query(left, lost_at) == []
    finally:
        write_yaml(fleet.scenario_files["node-a"], scenario)
    prometheus.wait_for(f'gpu_up{{instance="{fleet.instance("node-a")}",gpu="0"}} == 1')
