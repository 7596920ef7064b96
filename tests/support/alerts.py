"""What the shipped alert rules say about a scrape: promtool evaluates them on its series.

`firing(samples, ...)` turns one scrape of the real exporter into promtool input series
(each value held for 20 minutes, as a node whose state does not change), asks promtool
for the alerts of `alertname` at 11 minutes (past every `for:` of 10 minutes or less),
and returns what promtool says fired: labels and annotations, as Prometheus renders the
templates (their `query` calls run on the same series).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.exporter import Samples

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules"
INSTANCE, JOB = "node-1:9872", "gpu-exporter"
_BLOCK = re.compile(r"got:\s*\[(.*?)\n\s*\]", re.S)
_PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _series(samples: Samples, families: tuple[str, ...]) -> list[dict[str, str]]:
    out = []
    for (name, labels), value in sorted(samples.items()):
        if not name.startswith(families):
            continue
        pairs = dict(labels, instance=INSTANCE, job=JOB)
        text = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(pairs.items()))
        out.append({"series": f"{name}{{{text}}}", "values": f"{value!r}x20"})
    return out


def _parse(block: str) -> list[dict[str, dict[str, str]]]:
    alerts = []
    for line_labels, line_annotations in re.findall(
        r"Labels:(\{.*?\})\s*\n\s*Annotations:(\{.*?\}),?[ \t]*(?:\n|$)", block
    ):
        alerts.append(
            {
                "labels": {k: json.loads(f'"{v}"') for k, v in _PAIR.findall(line_labels)},
                "annotations": {
                    k: json.loads(f'"{v}"') for k, v in _PAIR.findall(line_annotations)
                },
            }
        )
    return alerts


def firing(
    samples: Samples, alertname: str, families: tuple[str, ...], tmp_path: Path
) -> list[dict[str, dict[str, str]]]:
    """The alerts `alertname` fires at 11m on the scraped `families` (name prefixes)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make system-deps`"
    spec = {
        "rule_files": [str(p) for p in sorted(RULES.glob("*.yml"))],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series(samples, families),
                # expecting none makes promtool print every alert that did fire
                "alert_rule_test": [{"eval_time": "11m", "alertname": alertname, "exp_alerts": []}],
            }
        ],
    }
    test_file = tmp_path / f"{alertname}.test.yml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    output = result.stdout + result.stderr
    if result.returncode == 0:
        return []
    match = _BLOCK.search(output)
    assert match, output
    alerts = _parse(match.group(1))
    assert alerts, output
    return alerts
