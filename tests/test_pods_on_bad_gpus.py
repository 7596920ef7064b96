"""Every pod on a GPU that needs action (issue 51): the one documented query, and the Fleet
dashboard's panel that is that query, run by promtool's PromQL engine on a time-sliced GPU
held by three pods and a MIG GPU with two instances in use. The action is the physical
GPU's, so it reaches every replica holder and every instance, not one of them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.dashboards import PARSE_VALUES, REPO, queries, substitute

TITLE = "Pods on GPUs that need action"
DOCS = (REPO / "docs" / "kubernetes.md", REPO / "docs" / "alerts.md")
FILTER = re.compile(r"\{[^}]*\}")

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def documented_queries() -> list[str]:
    """The query of each page: the promql block that joins gpu_allocation_info with the action."""
    found = []
    for doc in DOCS:
        blocks = re.findall(r"```promql\n(.*?)```", doc.read_text(), flags=re.S)
        (block,) = [b for b in blocks if "gpu_allocation_info" in b and "recommended" in b]
        found.append(" ".join(block.split()))
    return found


def panel_query() -> str:
    (query,) = [q for q in queries("gpu-fleet.json") if q.panel_title == TITLE]
    assert query.instant
    return str(query.expr)


def test_the_docs_and_the_panel_give_one_query() -> None:
    kubernetes, alerts = documented_queries()
    assert kubernetes == alerts
    # the panel is the documented query with the dashboard's filters
    unfiltered = FILTER.sub("", panel_query()).replace(
        "gpu_recommended_action ==", 'gpu_recommended_action{action!="none"} =='
    )
    assert " ".join(unfiltered.split()) == kubernetes


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


NODE = {"instance": "node-1:9872", "job": "gpu-exporter"}
TIME_SLICED = {**NODE, "gpu": "0", "uuid": "GPU-ts0"}
MIG = {**NODE, "gpu": "1", "uuid": "GPU-mig1"}
HEALTHY = {**NODE, "gpu": "2", "uuid": "GPU-ok2"}
UNALLOCATED = {"instance": "node-2:9872", "job": "gpu-exporter", "gpu": "0", "uuid": "GPU-x0"}
HOLDERS = [  # (GPU, gpu_instance, namespace, pod, container, DRA claim, DRA device)
    (TIME_SLICED, "", "ml", "train-a", "trainer", "", ""),
    (TIME_SLICED, "", "ml", "train-b", "trainer", "", ""),
    (TIME_SLICED, "", "lab", "notebook", "jupyter", "", ""),
    (MIG, "1", "infer", "triton-a", "server", "", ""),
    (MIG, "2", "infer", "triton-b", "server", "mig-claim", "gpu-1-mig-2g-20gb-0-2"),
    (HEALTHY, "", "ml", "eval", "runner", "", ""),
]
ACTIONS = [  # (GPU, action, reason): the one series at 1 per GPU
    (TIME_SLICED, "reset_gpu", "xid_48"),
    (MIG, "drain", "fabric_unhealthy"),
    (HEALTHY, "none", ""),
    (UNALLOCATED, "reboot_node", "gpu_lost"),
]


def _allocation(gpu: dict[str, str], *rest: str) -> dict[str, str]:
    names = ("gpu_instance", "namespace", "pod", "container", "dra_claim", "dra_device")
    return {**gpu, **{k: v for k, v in zip(names, rest, strict=True) if v}}


def _input() -> list[dict[str, str]]:
    series = [_series("gpu_allocation_info", _allocation(g, *rest), "1x10") for g, *rest in HOLDERS]
    for gpu, action, reason in ACTIONS:
        labels = {**gpu, "action": action} | ({"reason": reason} if reason else {})
        series.append(_series("gpu_recommended_action", labels, "1x10"))
    return series


def _expected() -> list[dict[str, Any]]:
    action_of = {g["uuid"]: (a, r) for g, a, r in ACTIONS}
    samples = []
    for gpu, *rest in HOLDERS:
        action, reason = action_of[gpu["uuid"]]
        if action == "none":
            continue
        labels = _allocation(gpu, *rest) | {"action": action, "reason": reason}
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        samples.append({"labels": f"{{{text}}}", "value": 1})
    return samples


@needs_promtool
@pytest.mark.parametrize("source", ["docs", "panel"])
def test_every_replica_holder_and_mig_instance_of_a_gpu_needing_action_is_listed(
    tmp_path: Path, source: str
) -> None:
    """Three pods time-slice a GPU the driver wants reset: three rows. Two MIG instances
    of a GPU to drain, one given by a DRA claim: two rows, with the claim. The healthy
    GPU's pod and a GPU needing a reboot that no pod holds: none."""
    query = documented_queries()[0] if source == "docs" else substitute(panel_query(), PARSE_VALUES)
    expected = _expected()
    assert len(expected) == 5
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _input(),
                "promql_expr_test": [{"expr": query, "eval_time": "5m", "exp_samples": expected}],
            }
        ],
    }
    path = tmp_path / "pods.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
