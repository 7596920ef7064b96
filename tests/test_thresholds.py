"""The live page's verdicts use the shipped alert rules' thresholds, from one module.

Each test reads a comparison out of a rule's PromQL in deploy/prometheus/rules/*.yml and
asserts that `sampling.thresholds` holds the same number: edit one, and this fails until
the other follows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpu_exporter.sampling import thresholds
from tests.support.exporter import REPO

RULES = REPO / "deploy" / "prometheus" / "rules"
NUMBER = r"(\d+(?:\.\d+)?(?:\s*\*\s*\d+(?:\.\d+)?)*)"


def rules() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(RULES).glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                out[rule.get("alert") or rule["record"]] = rule
    return out


def expr(name: str) -> str:
    return " ".join(str(rules()[name]["expr"]).split())


def numbers_after(text: str, operator: str) -> list[float]:
    """Every number (or product of numbers, `1024 * 1024`) compared with `operator`."""
    out = []
    for match in re.finditer(re.escape(operator) + r"\s*" + NUMBER + r"(?!\s*\*\s*[a-z])", text):
        value = 1.0
        for factor in match.group(1).split("*"):
            value *= float(factor)
        out.append(value)
    return out


def test_near_oom_is_the_memory_near_full_ratio() -> None:
    """GPUMemoryNearFull reads the exporter's patterns, judged at NEAR_OOM_MEMORY_RATIO; the
    rule that compares a ratio itself, GPUMemoryFillingUp's `unless`, uses the same line."""
    near_full = expr("GPUMemoryNearFull")
    assert 'pattern=~"pressure|sharing"' in near_full
    assert numbers_after(near_full, ") >") == []
    unless = expr("GPUMemoryFillingUp").split("unless", 2)[2]
    assert numbers_after(unless, ") >") == [thresholds.NEAR_OOM_MEMORY_RATIO]


def test_a_reservation_held_flat_is_the_flat_seconds_of_filling_up() -> None:
    """GPUMemoryFillingUp ignores a step held flat for 5 minutes: shorter than its `for:`."""
    flat = numbers_after(expr("GPUMemoryFillingUp"), "flat_seconds >")
    assert flat == [300.0, 300.0]
    assert flat[0] < 600.0  # for: 10m


def test_idle_allocated_is_the_idle_while_allocated_ratio() -> None:
    assert "instance_gpu:gpu_idle_while_allocated:ratio_rate30m" in expr("GPUIdleWhileAllocated")
    # the idle test itself is one recording rule, shared with the Kubernetes idle rule
    assert "instance_gpu:gpu_idle:ratio_rate30m" in expr(
        "instance_gpu:gpu_idle_while_allocated:ratio_rate30m"
    )
    assert "instance_gpu:gpu_idle:ratio_rate30m" in expr(
        "instance_gpu_pod:gpu_allocated_idle:ratio_rate30m"
    )
    found = numbers_after(expr("instance_gpu:gpu_idle:ratio_rate30m"), "<")
    assert found == [thresholds.IDLE_BUSY_RATIO, thresholds.IDLE_BUSY_RATIO]
    mig = numbers_after(
        expr("instance_gpu_instance:gpu_mig_idle_while_allocated:ratio_rate30m"), "<"
    )
    assert mig == [thresholds.IDLE_BUSY_RATIO, thresholds.IDLE_BUSY_RATIO]


def test_input_bound_is_busy_below_half_with_every_worker_busy() -> None:
    text = expr("GPUInputBound")
    cores = re.search(r">=\s*" + NUMBER + r"\s*\*\s*clamp_min\(gpu_process_workers, 1\)", text)
    assert cores is not None, text
    assert float(cores.group(1)) == thresholds.INPUT_BOUND_CORES_PER_WORKER
    # the GPU's busy ratio, and a MIG instance's graphics-engine activity
    assert numbers_after(text, "<") == [thresholds.INPUT_BOUND_BUSY_RATIO] * 2


def test_memory_leaked_is_the_leaked_amount() -> None:
    assert numbers_after(expr("GPUMemoryLeaked"), "gpu_memory_used_bytes >") == [
        thresholds.LEAKED_MEMORY_BYTES
    ]


def test_busy_but_sms_idle_is_busy_above_and_sm_activity_below() -> None:
    text = expr("GPUBusyButSMsIdle")
    assert numbers_after(text, "<") == [thresholds.BUSY_BUT_SMS_IDLE_SM_RATIO]
    assert numbers_after(text, ">") == [thresholds.BUSY_BUT_SMS_IDLE_BUSY_RATIO]


def test_the_parser_reads_what_it_is_given() -> None:
    # the helper must be able to fail: a changed number is read as the changed number
    assert numbers_after("x > 1024 * 1024 * 1024 and y < 0.3", ">") == [1024.0**3]
    assert numbers_after("x > 1024 * 1024 * 1024 and y < 0.3", "<") == [0.3]


def test_thermal_throttling_is_the_share_and_reasons_of_the_rule() -> None:
    text = expr("GPUThermalThrottling")
    assert numbers_after(text, ">") == [thresholds.THERMAL_THROTTLE_RATIO]
    reasons = re.search(r'reason=~"([^"]+)"', text)
    assert reasons is not None, text
    assert tuple(reasons.group(1).split("|")) == thresholds.THERMAL_THROTTLE_REASONS


def test_power_brake_is_the_reason_of_the_rule_being_active() -> None:
    text = expr("GPUPowerBrake")
    assert f'reason="{thresholds.POWER_BRAKE_REASON}"' in text
    assert numbers_after(text, "==") == [1.0]
