"""The chargeback (docs/chargeback.md) from the real exporter to a real Prometheus, on
Kubernetes: a simulated 4-GPU host whose kubelet is the tests' stand-in, scraped by
Debian's Prometheus with the shipped recording rules. What promtool's cases hold with
series written by hand, here with the series the exporter writes (their labels, their
joins) on every kind of GPU at once:

- GPU 0, a whole GPU given to ml/train: all its busy time is train's;
- GPU 1, idle and given to nobody: all of it the remainder, none of it used;
- GPU 2, time-sliced in 4 replicas (the device plugin advertises them, the kubelet's
  GetAllocatableResources says so), one each to ml/a and ml/b, whose processes run 60%
  and 20% of its SMs: a quarter of it allocated to each, the 2 free replicas' half to
  the remainder, its busy time split 3 to 1;
- GPU 3, MIG: instance 2 given to infer/triton, instances 3 and 9 free: triton holds its
  instance's share, the remainder the rest.

Each test runs twice: scraped by deploy/prometheus/prometheus.yml's job, and as the
Prometheus Operator scrapes the DaemonSet through deploy/kubernetes's ServiceMonitor (the
relabelling the operator renders for it, tests/support/operator.py), with the exporter
run as shipped (uid 0 without capabilities): the owners keep their labels and are billed,
not the exporter's pod (issue 49).

Bare metal (two users' processes on one GPU) and a GPU lost mid-minute are in
test_fleet.py's chargeback test; the arithmetic of each case in promtool's
deploy/prometheus/tests/gpu-chargeback.test.yml.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.exporter import Exporter, http_get, parse_samples, start_exporter
from tests.support.fleet import TEST_INTERVAL, cluster_config, write_yaml
from tests.support.kubelet import Container, FakeKubelet, Pod, write_log_tree
from tests.support.operator import operator_scrape_config
from tests.support.prometheus import CHARGEBACK_FIRST_ROWS_SECONDS, Prometheus, start_prometheus

pytestmark = pytest.mark.e2e

GIB = 1024**3
GPU = "nvidia.com/gpu"
REPLICAS = 4  # GPU 2's, as the device plugin advertises them
GPU_LABELS = "instance, job, gpu, uuid"
SM = {"a": 0.6, "b": 0.2}  # the SM share of the time-sliced pods' processes
# the containers of the processes the scenario places (the kubelet's log tree maps
# their IDs to the pods below)
CONTAINERS = {pod: f"{n:x}" * 64 for n, pod in enumerate(("train", "a", "b", "triton"), 10)}
# the privileges the DaemonSet and the systemd unit give the exporter
SHIPPED_PRIVILEGES = ("setpriv", "--reuid=0", "--inh-caps=-all", "--bounding-set=-all")
# the DaemonSet's pod and its node, as the operator's target labels name them
EXPORTER_POD, NODE_NAME = "gpu-exporter-7x2kq", "gpu-node-1"


@dataclass
class Node:
    exporter: Exporter
    prometheus: Prometheus

    def query(self, expr: str, at: float | None = None) -> dict[tuple[str, str], float]:
        """(gpu, owner) -> value; the owner is the pod, or "none" for the remainder."""
        return {
            (
                r["metric"].get("gpu", ""),
                r["metric"].get("pod") or r["metric"].get("allocation", ""),
            ): (float(r["value"][1]))
            for r in self.prometheus.query(expr, at)
        }

    def per_gpu(self, expr: str, at: float) -> dict[str, float]:
        return {r["metric"]["gpu"]: float(r["value"][1]) for r in self.prometheus.query(expr, at)}


def pods(uuids: dict[str, str], mig_uuid: str) -> list[Pod]:
    """The stand-in kubelet's pods, given the GPUs' UUIDs by index and the MIG device's."""
    whole, shared = uuids.get("0", ""), uuids.get("2", "")
    return [
        Pod("ml", "train", [Container("main", {GPU: [whole]})]),
        Pod("ml", "a", [Container("main", {GPU: [f"{shared}::0"]})]),
        Pod("ml", "b", [Container("main", {GPU: [f"{shared}::1"]})]),
        Pod("infer", "triton", [Container("main", {"nvidia.com/mig-3g.40gb": [mig_uuid]})]),
    ]


def scenario(pod_uids: dict[str, str]) -> dict[str, object]:
    def process(pod: str, gpu: int, pid: int, **more: object) -> dict[str, object]:
        host = {"user": "alice", "container_id": CONTAINERS[pod], "pod_uid": pod_uids[pod]}
        return {"gpu": gpu, "pid": pid, "memory_bytes": 8 * GIB, **host, **more}

    return {
        "processes": [
            process("train", 0, 4_100_000, sm_ratio=0.5),
            process("a", 2, 4_100_001, sm_ratio=SM["a"]),
            process("b", 2, 4_100_002, sm_ratio=SM["b"]),
            process("triton", 3, 4_100_003, gpu_instance=2),
        ]
    }


SCRAPES = ("file_sd", "operator")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Node]]:
    """Both nodes, started together so that their first minutes of rows overlap."""
    with ExitStack() as stack:
        yield {
            scrape: stack.enter_context(started(scrape, tmp_path_factory.mktemp(scrape)))
            for scrape in SCRAPES
        }


@pytest.fixture(params=SCRAPES)
def node(request: pytest.FixtureRequest, nodes: dict[str, Node]) -> Node:
    return nodes[request.param]


@contextmanager
def started(scrape: str, workdir: Path) -> Iterator[Node]:
    """The node scraped by deploy/prometheus/prometheus.yml's job (file_sd), or by the
    scrape config the Prometheus Operator renders for deploy/kubernetes's ServiceMonitor
    (its relabelling and honor_labels; the target static, as the DaemonSet's pod
    EXPORTER_POD on NODE_NAME)."""
    socket_path = Path(f"/tmp/chargeback-kubelet-{scrape}-{os.getpid()}.sock")
    kubelet = FakeKubelet(socket_path, []).start()
    exporter: Exporter | None = None
    prometheus: Prometheus | None = None
    try:
        # the pods' UIDs and containers are known before the GPUs' UUIDs: the processes
        # and the log tree first, then the pods' devices once the exporter names them
        by_name = {p.name: p for p in pods({}, "")}
        logs = write_log_tree(
            workdir / "log", [(by_name[pod], "main", cid) for pod, cid in CONTAINERS.items()]
        )
        file = write_yaml(workdir / "scenario.yml", scenario({p: by_name[p].uid for p in by_name}))
        args = ["--simulate", "4", "--simulate.scenario", str(file), "--collect.interval", "1s"]
        args += ["--collector.kubernetes", "--kubernetes.pod-resources-socket", str(socket_path)]
        args += ["--kubernetes.log-directory", str(logs)]
        # scraped as the operator scrapes it, run as the DaemonSet runs it: uid 0 with no
        # capabilities
        shipped = SHIPPED_PRIVILEGES if scrape == "operator" else ()
        exporter = start_exporter(args, workdir, wrapper=shipped)
        samples = parse_samples(http_get(exporter.url + "/metrics").body.decode())
        uuids = {dict(ls)["gpu"]: dict(ls)["uuid"] for name, ls in samples if name == "gpu_info"}
        (mig_uuid,) = [
            dict(ls)["mig_uuid"]
            for name, ls in samples
            if name == "gpu_mig_info" and dict(ls)["gpu_instance"] == "2"
        ]
        kubelet.pods = pods(uuids, mig_uuid)
        kubelet.allocatable = {
            GPU: [uuids["0"], uuids["1"], *(f"{uuids['2']}::{n}" for n in range(REPLICAS))],
            "nvidia.com/mig-3g.40gb": [mig_uuid],
        }
        address = f"127.0.0.1:{exporter.port}"
        write_yaml(workdir / "targets" / "gpu-exporter-node.yml", [{"targets": [address]}])
        settings = cluster_config(workdir / "targets")
        if scrape == "operator":
            settings["scrape_configs"] = [
                operator_scrape_config(address, EXPORTER_POD, NODE_NAME, TEST_INTERVAL)
            ]
        config = write_yaml(workdir / "prometheus.yml", settings)
        prometheus = start_prometheus(config, workdir)
        yield Node(exporter, prometheus)
    finally:
        if prometheus is not None:
            prometheus.stop()
        if exporter is not None:
            exporter.stop()
        kubelet.stop()


def test_every_kind_of_gpu_is_charged_to_its_owners_and_the_sums_hold(node: Node) -> None:
    """Per GPU the allocated rows make the minute, used + wasted = allocated and used
    never exceeds it, each method's energy rows make the GPU's energy to 1%; and each
    GPU's rows are its owners' as the kubelet and the processes say."""
    prometheus = node.prometheus
    # the time-sliced pods' SM seconds have two readings each: their split is known
    prometheus.wait_for("count(rate(gpu_process_sm_seconds_total{pod=~'a|b'}[2m]) > 0) == 2")
    # a row is the increase since the evaluation a minute before: the first rows come a
    # minute after the first samples
    prometheus.wait_for(
        'instance_gpu_owner:gpu_used_seconds:sum1m{pod="b"} > 0',
        timeout=CHARGEBACK_FIRST_ROWS_SECONDS,
    )
    prometheus.wait_for(
        "count(instance_gpu_owner:gpu_used_seconds:sum1m)"
        " == count(instance_gpu_owner:gpu_allocated_seconds:sum1m)",
        timeout=120,
    )
    last = "max(timestamp(instance_gpu_owner:gpu_energy_joules:sum1m))"
    (result,) = prometheus.wait_for(f"{last} > 0")
    at = float(result["value"][1])

    held = node.query("instance_gpu_owner:gpu_allocated_seconds:sum1m", at)
    used = node.query("instance_gpu_owner:gpu_used_seconds:sum1m", at)
    wasted = node.query("instance_gpu_owner:gpu_wasted_seconds:sum1m", at)
    # the owners of each GPU, and per GPU the minute
    assert set(held) == {
        ("0", "train"), ("0", "none"),
        ("1", "none"),
        ("2", "a"), ("2", "b"), ("2", "none"),
        ("3", "triton"), ("3", "none"),
    }  # fmt: skip
    for gpu in "0123":
        assert sum(v for (g, _), v in held.items() if g == gpu) == pytest.approx(60), gpu
    assert set(used) == set(wasted) == set(held)
    for key, seconds in held.items():
        assert used[key] <= seconds + 1e-9, key
        assert used[key] + wasted[key] == pytest.approx(seconds, abs=1e-9), key
    busy = node.per_gpu("instance_gpu:gpu_busy_seconds:sum1m", at)
    # GPU 0: the whole GPU is train's, and all its busy time
    assert (held[("0", "train")], held[("0", "none")]) == (60, 0)
    assert used[("0", "train")] == pytest.approx(min(60, busy["0"]), rel=0.01)
    # GPU 1: nobody's, idle
    assert held[("1", "none")] == 60 and used[("1", "none")] == 0
    # GPU 2: a replica of 4 each, the 2 nobody holds the remainder's; the busy time
    # split by the SM seconds (3 to 1), each capped at its quarter
    quarter = 60 / REPLICAS
    assert held[("2", "a")] == held[("2", "b")] == quarter and held[("2", "none")] == 30
    sm = node.query("rate(gpu_process_sm_seconds_total{gpu='2'}[2m])", at)
    share = sm[("2", "a")] / (sm[("2", "a")] + sm[("2", "b")])
    assert share == pytest.approx(SM["a"] / (SM["a"] + SM["b"]), rel=0.1)
    assert busy["2"] > 0
    assert used[("2", "a")] == pytest.approx(min(quarter, busy["2"] * share), rel=0.01)
    assert used[("2", "b")] == pytest.approx(min(quarter, busy["2"] * (1 - share)), rel=0.01)
    # GPU 3: triton holds its 3g.40gb instance's share (its half of the memory, more than
    # 3/7 of the slices), used by the instance's graphics-engine activity
    weight = node.query('gpu_allocation_weight{gpu="3"}', at)[("3", "triton")]
    assert 3 / 7 < weight <= 0.5
    assert held[("3", "triton")] == pytest.approx(60 * weight)
    assert held[("3", "none")] == pytest.approx(60 * (1 - weight))
    activity = node.query(
        'instance_gpu_instance:gpu_mig_graphics_engine_active_seconds:increase1m{gpu_instance="2"}',
        at,
    )
    assert activity[("3", "")] > 0  # no pod label: the series is the instance's
    assert used[("3", "triton")] == pytest.approx(weight * activity[("3", "")], rel=0.01)
    # every joule of the minute to someone, by each method, to 1%
    energy = node.per_gpu("instance_gpu:gpu_energy_joules:sum1m", at)
    assert set(energy) == set("0123")
    for method in ("allocation", "usage"):
        charged = f'instance_gpu_owner:gpu_energy_joules:sum1m{{method="{method}"}}'
        rows = node.per_gpu(f"sum by ({GPU_LABELS}) ({charged})", at)
        assert rows == {g: pytest.approx(e, rel=0.01) for g, e in energy.items()}, method


def test_under_the_operator_the_owners_labels_are_the_exporter_s(node: Node) -> None:
    """Scraped through the operator's relabelling (issue 49): the owners keep their
    `namespace`, `pod` and `container` (honorLabels), no `exported_*` label appears, a
    series the exporter serves without them names the exporter's own pod, and `instance`
    is the node's name, so that the GPU's rows survive a rollout. The first test, run
    with this scrape config too, holds that the owners are billed and the exporter's pod
    is not."""
    prometheus = node.prometheus
    (up,) = prometheus.wait_for('gpu_up{gpu="0"}')
    weights = prometheus.wait_for("gpu_allocation_weight", minimum=4)
    assert prometheus.query('{__name__=~"gpu_.+", exported_pod!=""}') == []
    assert prometheus.query('{__name__=~"gpu_.+", exported_namespace!=""}') == []
    assert {w["metric"]["pod"] for w in weights} == {"train", "a", "b", "triton"}
    charged = prometheus.query(
        f'instance_gpu_owner:gpu_allocated_seconds:sum1m{{pod="{EXPORTER_POD}"}}'
    )
    assert charged == []
    if up["metric"].get("endpoint") is None:  # file_sd: the job's own labels
        return
    # and the exporter ran as shipped: uid 0 without capabilities
    status = Path(f"/proc/{node.exporter.process.pid}/status").read_text()
    assert re.search(r"^CapEff:\s+0+$", status, re.M), status
    assert re.search(r"^Uid:\s+0\s", status, re.M), status
    assert up["metric"]["pod"] == EXPORTER_POD
    assert up["metric"]["namespace"] == "monitoring"
    assert up["metric"]["instance"] == up["metric"]["node"] == NODE_NAME
    assert up["metric"]["job"] == "gpu-exporter"
