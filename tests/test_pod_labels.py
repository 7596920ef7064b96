"""Pod labels without API access: docs/kubernetes.md's join of the exporter's allocation
with kube-state-metrics' `kube_pod_labels`, run by promtool on the recording rules.

The query is taken from the page itself, so the page shows what is tested.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.test_rules import PROMETHEUS, promtool

DOC = Path(__file__).resolve().parents[1] / "docs" / "kubernetes.md"
NODE = 'instance="node-1:9872",job="gpu-exporter"'
KSM = 'instance="ksm:8080",job="kube-state-metrics"'
MINUTES = 180  # three hours of samples, one a minute
ALLOCATED_FROM = 60  # the pods get their GPUs after an hour, once the busy rates exist


def idle_gpu_hours_query() -> str:
    """The PromQL block of the page's "Pod labels" section."""
    section = DOC.read_text().split("## Pod labels", 1)[1]
    match = re.search(r"```promql\n(.*?)```", section, re.S)
    assert match, "docs/kubernetes.md: no ```promql block in the pod labels section"
    return match.group(1).strip()


def allocation(gpu: int, namespace: str, pod: str, busy: bool) -> list[dict[str, str]]:
    """An allocated GPU's series: allocation, busy counter, utilization."""
    where = f'{NODE},gpu="{gpu}",uuid="GPU-a{gpu}"'
    return [
        {
            "series": f'gpu_allocation_info{{{where},gpu_instance="",namespace="{namespace}",'
            f'pod="{pod}",container="main"}}',
            "values": f"_x{ALLOCATED_FROM} 1x{MINUTES - ALLOCATED_FROM}",
        },
        {
            "series": f"gpu_busy_seconds_total{{{where}}}",
            "values": f"0+60x{MINUTES}" if busy else f"0x{MINUTES}",
        },
        {
            "series": f"gpu_utilization_ratio{{{where}}}",
            "values": f"1x{MINUTES}" if busy else f"0x{MINUTES}",
        },
    ]


def pod_labels(
    namespace: str, pod: str, team: str | None, replicas: int = 1
) -> list[dict[str, str]]:
    team_label = f',label_team="{team}"' if team else ""
    return [
        {
            "series": f'kube_pod_labels{{instance="ksm-{r}:8080",job="kube-state-metrics",'
            f'namespace="{namespace}",pod="{pod}",uid="u-{pod}"{team_label}}}',
            "values": f"1x{MINUTES}",
        }
        for r in range(replicas)
    ]


def test_idle_while_allocated_gpu_hours_by_a_pod_label_join_kube_state_metrics(
    tmp_path: Path,
) -> None:
    query = idle_gpu_hours_query()
    assert "kube_pod_labels" in query and "label_team" in query
    series = [
        *allocation(0, "ml", "train", busy=True),  # team vision, busy: not idle
        *allocation(1, "lab", "notebook", busy=False),  # team research, idle
        *allocation(2, "lab", "sweep", busy=False),  # team research, idle
        *allocation(3, "ops", "debug", busy=False),  # no team label, idle
        *pod_labels("ml", "train", "vision"),
        *pod_labels("lab", "notebook", "research", replicas=2),  # two KSM replicas
        *pod_labels("lab", "sweep", "research"),
        *pod_labels("ops", "debug", None),
        *pod_labels("web", "nginx", "research"),  # no GPU: not in the join
    ]
    # an idle allocation counts every minute from 60m to 180m, both ends: 121 minutes
    idle_hours = (MINUTES - ALLOCATED_FROM + 1) / 60
    spec = {
        "rule_files": [str(PROMETHEUS / "rules" / "gpu-recording.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": query,
                        "eval_time": f"{MINUTES}m",
                        "exp_samples": [
                            {"labels": '{label_team="research"}', "value": 2 * idle_hours},
                            {"labels": "{}", "value": idle_hours},
                        ],
                    }
                ],
            }
        ],
    }
    test_file = tmp_path / "pod-labels.test.yml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
