"""Framework memory traces through the exporter's judgement and the shipped alert rules.

Each trace (`gpu_exporter.sources.simulated_memory`, the simulated host's own) is played
at the default 5 s interval through `MemoryPatterns` on a fast clock, rendered by the real
catalogue, scraped every 15 s and every 60 s, and handed to promtool with the shipped
rule files: a reservation held flat never pages, pressure and sharing do, a job that ends
while its GPU is full is named, a dead owner's memory stays GPUMemoryLeaked's.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.exporter import REPO
from tests.support.memory_traces import Traced, play, scraped

RULES = [
    REPO / "deploy" / "prometheus" / "rules" / f for f in ("gpu-recording.yml", "gpu-alerts.yml")
]
SERIES = (
    "gpu_up",
    "gpu_processes",
    "gpu_memory_used_bytes",
    "gpu_memory_total_bytes",
    "gpu_memory_pattern",
    "gpu_memory_flat_seconds",
    "gpu_memory_likely_oom_exit_info",
    "gpu_mig_memory_used_bytes",
    "gpu_mig_memory_total_bytes",
    "gpu_mig_memory_pattern",
    "gpu_mig_memory_flat_seconds",
    "gpu_process_memory_used_bytes",
)
HOUR = 3600.0
NEAR_FULL = "GPUMemoryNearFull"
ENDED = "GPUJobEndedWhileMemoryFull"

TRACES: dict[str, list[Traced]] = {
    # TensorFlow's default: 99% within 5 s of start, flat for an hour
    "tensorflow": [Traced(4242, "tensorflow", 0.99)],
    "vllm-0.95": [Traced(4242, "vllm", 0.95)],
    "jax-0.95": [Traced(4242, "jax", 0.95)],
    # JAX's default fraction: a step to 75% at start, then flat: no trend
    "jax-0.75": [Traced(4242, "jax", 0.75)],
    # 93-99% with drops of 5-10% and re-rises every 20-40 s
    "pytorch-pressure": [Traced(4242, "pytorch-pressure", 0.0)],
    "pytorch-growing": [Traced(4242, "pytorch-growing", 0.99)],
    "sharing-55-42": [Traced(4242, "flat", 0.55), Traced(4343, "flat", 0.42, user="bob")],
    "third-arrives-at-90": [
        Traced(4242, "flat", 0.50),
        Traced(4343, "flat", 0.40, user="bob"),
        Traced(4444, "flat", 0.08, start=600, user="carol"),
    ],
    # a process at 98% that ends abruptly at 30 minutes
    "ends-at-98": [Traced(4242, "tensorflow", 0.98, end=1800)],
    # the same process dies at 30 minutes but NVML keeps listing it: memory stays held
    "dead-owner": [Traced(4242, "tensorflow", 0.98, dies=1800)],
}


def never(alert: str) -> dict[str, Any]:
    """The alert never fired within the hour."""
    return {
        "expr": f'count_over_time(ALERTS{{alertname="{alert}",alertstate="firing"}}[61m])',
        "eval_time": "60m",
        "exp_samples": [],
    }


def firing(alert: str, at: str) -> dict[str, Any]:
    """The alert fires (once, for one GPU or instance) at `at`."""
    return {
        "expr": f'count(ALERTS{{alertname="{alert}",alertstate="firing"}})',
        "eval_time": at,
        "exp_samples": [{"labels": "{}", "value": 1}],
    }


def quiet(alert: str, at: str) -> dict[str, Any]:
    return {
        "expr": f'ALERTS{{alertname="{alert}",alertstate="firing"}}',
        "eval_time": at,
        "exp_samples": [],
    }


EXPECTED: dict[str, list[dict[str, Any]]] = {
    "tensorflow": [never(NEAR_FULL), never(ENDED), never("GPUMemoryFillingUp")],
    "vllm-0.95": [never(NEAR_FULL), never(ENDED), never("GPUMemoryFillingUp")],
    "jax-0.95": [never(NEAR_FULL), never(ENDED), never("GPUMemoryFillingUp")],
    "jax-0.75": [never(NEAR_FULL), never("GPUMemoryFillingUp")],
    "pytorch-pressure": [firing(NEAR_FULL, "10m"), firing(NEAR_FULL, "60m"), never(ENDED)],
    "pytorch-growing": [firing("GPUMemoryFillingUp", "15m"), firing(NEAR_FULL, "26m")],
    "sharing-55-42": [firing(NEAR_FULL, "7m"), firing(NEAR_FULL, "60m")],
    "third-arrives-at-90": [quiet(NEAR_FULL, "10m"), firing(NEAR_FULL, "18m")],
    "ends-at-98": [
        never(NEAR_FULL),
        quiet(ENDED, "29m"),
        firing(ENDED, "31m"),
        firing(ENDED, "39m"),
        quiet(ENDED, "42m"),
    ],
    "dead-owner": [never(NEAR_FULL), never(ENDED), firing("GPUMemoryLeaked", "45m")],
}
MIG_TRACES = ("tensorflow", "pytorch-pressure", "sharing-55-42", "ends-at-98")


def input_series(procs: list[Traced], scrape: float, *, mig: bool) -> list[dict[str, str]]:
    played = play(procs, HOUR, mig=mig)
    out = []
    for series, values in scraped(played, scrape, SERIES).items():
        # a series that goes is marked stale at the next scrape, as Prometheus does
        marked = [
            "stale" if v == "_" and n and values[n - 1] not in ("_", "stale") else v
            for n, v in enumerate(values)
        ]
        out.append({"series": series, "values": " ".join(marked)})
    return out


def promtool_test(tmp_path: Path, name: str, scrape: float, *, mig: bool) -> str:
    test: dict[str, Any] = {
        "interval": f"{scrape:g}s",
        "input_series": input_series(TRACES[name], scrape, mig=mig),
        "promql_expr_test": EXPECTED[name],
    }
    if mig:  # GPUMemoryLeaked is a whole GPU's
        test["promql_expr_test"] = [e for e in EXPECTED[name] if "GPUMemoryLeaked" not in e["expr"]]
    path = tmp_path / f"{name}.test.yml"
    path.write_text(
        yaml.safe_dump(
            {"rule_files": [str(r) for r in RULES], "evaluation_interval": "1m", "tests": [test]}
        )
    )
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed: run `make system-deps`"
    result = subprocess.run(
        [binary, "test", "rules", str(path)], capture_output=True, text=True, timeout=300
    )
    return result.stdout + result.stderr if result.returncode else ""


@pytest.mark.parametrize("scrape", [15.0, 60.0], ids=["15s", "60s"])
@pytest.mark.parametrize("name", list(TRACES))
def test_framework_traces_page_for_risk_not_for_reservation(
    tmp_path: Path, name: str, scrape: float
) -> None:
    assert promtool_test(tmp_path, name, scrape, mig=False) == ""


@pytest.mark.parametrize("scrape", [15.0, 60.0], ids=["15s", "60s"])
@pytest.mark.parametrize("name", MIG_TRACES)
def test_a_mig_instance_behaves_as_a_gpu(tmp_path: Path, name: str, scrape: float) -> None:
    assert promtool_test(tmp_path, name, scrape, mig=True) == ""
