"""The chargeback rows over time (issue 49), through promtool on the shipped rules: an
hour's rows add up to the counters' increase whatever the phases of the exporter's
reads, the scrapes and the evaluations; a GPU handed from one pod to the next is billed
to each for the minutes it held it; a scrape gap's increase is billed when scraping
resumes; a new exporter pod on the node continues the GPU's rows. The worked example of
each kind of GPU is deploy/prometheus/tests/gpu-chargeback.test.yml.

Each case writes the counters as the exporter serves them: the value of its last read
before each scrape (energy read every 30 s, busy time every 12 s, at a phase of their
own), scraped every 15 s or 60 s, a series that ends as Prometheus ends it (a stale
marker), and promtool evaluates the rules every minute.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.test_rules import RULES, promtool

HOUR = 3600
NODE = 'instance="node-1",job="gpu-exporter"'
GPU = f'{NODE},gpu="0",uuid="GPU-0"'
EXPORTER = 'namespace="monitoring",pod="gpu-exporter-a1"'  # the operator's target labels
ROWS = "instance_gpu_owner:gpu_{}:sum1m"
STALE = "stale"

Value = float | str | None  # a sample, STALE, or None (not scraped)


def read_at(t: float, every: float, phase: float) -> float:
    """The time of the exporter's last read at or before `t` (reads at phase + k*every)."""
    return phase + every * math.floor((t - phase) / every)


STEP = 5  # promtool's input step: scrapes fall on a multiple of it


def values(scrape: float, offset: float, minutes: int, value: Callable[[float], Value]) -> str:
    """promtool's values for a series scraped every `scrape` s from `offset` s (after
    the evaluations' minute) for `minutes`."""
    out = []
    for i in range(int(minutes * 60 / STEP) + 1):
        t = i * STEP
        v = value(t) if t >= offset and (t - offset) % scrape == 0 else None
        out.append("_" if v is None else v if isinstance(v, str) else repr(round(v, 6)))
    return " ".join(out)


def run(
    tmp_path: Path,
    scrape: float,
    minutes: int,
    series: dict[str, Callable[[float], Value]],
    cases: list[tuple[str, int, list[tuple[str, float]]]],
    offset: float = 0,
) -> subprocess.CompletedProcess[str]:
    """promtool's run of `cases` (expr, eval minute, [(labels, value)]) on `series`."""
    test = {
        "rule_files": [str(RULES / "gpu-recording.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": f"{STEP}s",
                "input_series": [
                    {"series": name, "values": values(scrape, offset, minutes, fn)}
                    for name, fn in series.items()
                ],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": f"{at}m",
                        "exp_samples": [{"labels": labels, "value": v} for labels, v in exp],
                    }
                    for expr, at, exp in cases
                ],
            }
        ],
    }
    path = tmp_path / "chargeback.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return promtool("test", "rules", str(path))


def within(expr: str, at: int, expected: float, tolerance: float) -> list[tuple[str, int, list]]:
    """Cases: `expr` has exactly one series at minute `at`, within `tolerance` of
    `expected` (promtool compares exactly, so the bound is a filter that must be empty)."""
    return [
        (f"count({expr})", at, [("{}", 1)]),
        (f"abs({expr} - {expected}) > {tolerance}", at, []),
    ]


def owner(pod: str, ns: str = "ml") -> str:
    return f'namespace="{ns}",pod="{pod}",container="main"'


def weight(pod: str) -> str:
    return f'gpu_allocation_weight{{{GPU},gpu_instance="",{owner(pod)},dra_claim="",dra_device=""}}'


def hour_sum(row: str, match: str, minutes: int = 60) -> str:
    """The rows of the `minutes` evaluations up to the eval time (a range takes samples
    at both its ends in Prometheus 2, hence a second less)."""
    return f"sum(sum_over_time({ROWS.format(row)}{{{match}}}[{minutes * 60 - 1}s]))"


def assert_passes(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


# --- rows that telescope --------------------------------------------------------------


@pytest.mark.parametrize("scrape", [15, 60])
@pytest.mark.parametrize("phase", [3, 20])
@pytest.mark.parametrize("offset", [0, 10])
def test_an_hour_at_500_w_bills_1_8_mj_whatever_the_phases(
    tmp_path: Path, scrape: int, phase: int, offset: int
) -> None:
    """One hour of a GPU drawing 500 W (1,800,000 J) and kept busy all the time (3,600 s)
    by its one pod, and of a second one busy half the time: the pod's rows of the hour
    bill the counters' increase to 0.5%, under both energy methods, with the exporter
    reading energy at second 3 or 20 of each half minute (its busy time every 12 s from
    the same phase), scraped every 15 s or 60 s, on the evaluations' second or 10 s
    after. (5-minute rates times 60 were 5% off, one way or the other by the phases,
    for good.)"""
    half = GPU.replace('gpu="0",uuid="GPU-0"', 'gpu="1",uuid="GPU-1"')
    energy_at = 7.5e8  # the driver's counter runs since it loaded
    series: dict[str, Callable[[float], Value]] = {
        "gpu_exporter_kubernetes_up{" + NODE + "}": lambda t: 1,
        f"gpu_up{{{GPU},{EXPORTER}}}": lambda t: 1,
        f"gpu_up{{{half},{EXPORTER}}}": lambda t: 1,
        weight("train"): lambda t: 1,
        weight("half").replace(GPU, half): lambda t: 1,
        f"gpu_power_watts{{{GPU},{EXPORTER}}}": lambda t: 500,
        f"gpu_power_watts{{{half},{EXPORTER}}}": lambda t: 500,
        f"gpu_energy_joules_total{{{GPU},{EXPORTER}}}": (
            lambda t: energy_at + 500 * read_at(t, 30, phase)
        ),
        f"gpu_energy_joules_total{{{half},{EXPORTER}}}": (
            lambda t: energy_at + 500 * read_at(t, 30, phase)
        ),
        f"gpu_busy_seconds_total{{{GPU},{EXPORTER}}}": (
            lambda t: max(0.0, read_at(t, 12, phase % 12))
        ),
        f"gpu_busy_seconds_total{{{half},{EXPORTER}}}": (
            lambda t: max(0.0, read_at(t, 12, phase % 12)) / 2
        ),
    }
    cases = []
    for minute in (65, 80):  # two hours that start at different phases of the minute
        for method in ("allocation", "usage"):
            match = f'pod="train",method="{method}"'
            cases += within(hour_sum("energy_joules", match), minute, 1.8e6, 0.005 * 1.8e6)
        cases += within(hour_sum("used_seconds", 'pod="train"'), minute, 3600, 0.005 * 3600)
        cases += within(hour_sum("wasted_seconds", 'pod="train"'), minute, 0, 0.005 * 3600)
        cases += within(hour_sum("used_seconds", 'pod="half"'), minute, 1800, 0.005 * 3600)
        cases += within(hour_sum("allocated_seconds", 'pod="train"'), minute, 3600, 1e-6)
    assert_passes(run(tmp_path, scrape, 85, series, cases, offset))


# --- a hand-over ------------------------------------------------------------------------


def test_a_gpu_handed_over_is_billed_to_each_owner_for_the_minutes_it_held_it(
    tmp_path: Path,
) -> None:
    """A whole GPU held by ml/a for its first 600 s, all of them busy at 400 W, then by
    the idle notebook ml/b (100 W): a is billed 600 s used (to a minute), b next to
    none; each is billed its 10 minutes' energy to a minute's worth. (With the rows a
    5-minute rate times the weight now, a was billed 420 s and b 180 s.)"""
    handover = 600

    def held(pod: str) -> Callable[[float], Value]:
        def value(t: float) -> Value:
            mine = t < handover if pod == "a" else t >= handover
            if mine:
                return 1
            return STALE if pod == "a" and t == handover else None

        return value

    def energy(t: float) -> float:
        read = read_at(t, 30, 3)
        return 400 * min(read, handover) + 100 * max(0.0, read - handover)

    series: dict[str, Callable[[float], Value]] = {
        "gpu_exporter_kubernetes_up{" + NODE + "}": lambda t: 1,
        f"gpu_up{{{GPU},{EXPORTER}}}": lambda t: 1,
        weight("a"): held("a"),
        weight("b"): held("b"),
        f"gpu_power_watts{{{GPU},{EXPORTER}}}": lambda t: 400 if t < handover else 100,
        f"gpu_energy_joules_total{{{GPU},{EXPORTER}}}": energy,
        f"gpu_busy_seconds_total{{{GPU},{EXPORTER}}}": (
            lambda t: min(max(0.0, read_at(t, 12, 3)), handover)
        ),
    }
    cases = within(hour_sum("used_seconds", 'pod="a"', 21), 21, 600, 60)
    cases += within(hour_sum("allocated_seconds", 'pod="a"', 21), 21, 600, 60)
    cases += within(hour_sum("used_seconds", 'pod="b"', 21), 21, 0, 15)
    cases += within(hour_sum("allocated_seconds", 'pod="b"', 21), 21, 660, 60)
    alloc = 'method="allocation"'
    cases += within(hour_sum("energy_joules", f'pod="a",{alloc}', 21), 21, 240_000, 400 * 60)
    cases += within(hour_sum("energy_joules", f'pod="b",{alloc}', 21), 21, 66_000, 400 * 60)
    assert_passes(run(tmp_path, 15, 22, series, cases))


# --- gaps and rollouts --------------------------------------------------------------------


@pytest.mark.parametrize("gap_minutes", [3, 8])
def test_a_scrape_gap_s_increase_is_billed_when_scraping_resumes(
    tmp_path: Path, gap_minutes: int
) -> None:
    """A GPU at 500 W, busy all the time, whose scrapes fail for 3 or 8 minutes of the
    hour (Prometheus marks its series stale, `up` is 0): the hour's rows still bill
    1,800,000 J and 3,600 s used, to 0.5%. (Its rows used to stop with the samples, and
    the gap's energy went unbilled: 5-7% of the hour.)"""
    start, end = 30 * 60, (30 + gap_minutes) * 60

    def scraped(value: Callable[[float], float]) -> Callable[[float], Value]:
        def sample(t: float) -> Value:
            if start <= t < end:
                return STALE if t == start else None
            return value(t)

        return sample

    series: dict[str, Callable[[float], Value]] = {
        f"up{{{NODE},{EXPORTER}}}": lambda t: 0 if start <= t < end else 1,
        "gpu_exporter_kubernetes_up{" + NODE + "}": scraped(lambda t: 1),
        f"gpu_up{{{GPU},{EXPORTER}}}": scraped(lambda t: 1),
        weight("train"): scraped(lambda t: 1),
        f"gpu_power_watts{{{GPU},{EXPORTER}}}": scraped(lambda t: 500),
        f"gpu_energy_joules_total{{{GPU},{EXPORTER}}}": scraped(lambda t: 500 * read_at(t, 30, 20)),
        f"gpu_busy_seconds_total{{{GPU},{EXPORTER}}}": scraped(
            lambda t: max(0.0, read_at(t, 12, 8))
        ),
    }
    alloc = 'pod="train",method="allocation"'
    cases = within(hour_sum("energy_joules", alloc), 65, 1.8e6, 0.005 * 1.8e6)
    cases += within(hour_sum("used_seconds", 'pod="train"'), 65, 3600, 0.005 * 3600)
    cases += within(hour_sum("allocated_seconds", 'pod="train"'), 65, 3600, 1e-6)
    assert_passes(run(tmp_path, 15, 66, series, cases))


def test_a_new_exporter_pod_on_the_node_continues_the_gpu_s_rows(tmp_path: Path) -> None:
    """A rollout at minute 30: the exporter's pod is replaced, its series end (stale) and
    the new pod's begin with other target labels (its `pod`), the busy counter from 0
    again, the driver's energy counter where it was. The GPU's rows are keyed by the
    node and the GPU, not the pod: the hour bills 1,800,000 J and 3,600 s used, to 0.5%.
    (Keyed by the series, the old pod's rows stopped before their rate caught up.)"""
    switch = 30 * 60 + 20  # the new pod's first scrape, 20 s after the old pod's last
    new = EXPORTER.replace("gpu-exporter-a1", "gpu-exporter-b2")

    def pod(which: str, value: Callable[[float], float]) -> Callable[[float], Value]:
        def sample(t: float) -> Value:
            if which == "old":
                return value(t) if t < 30 * 60 else STALE if t == 30 * 60 else None
            return value(t) if t >= switch else None

        return sample

    def busy(started: float) -> Callable[[float], float]:
        return lambda t: max(0.0, read_at(t, 12, 5) - started)

    series: dict[str, Callable[[float], Value]] = {}
    for which, labels, started in (("old", EXPORTER, 0.0), ("new", new, switch - 10)):
        series |= {
            f"up{{{NODE},{labels}}}": pod(which, lambda t: 1),
            f"gpu_exporter_kubernetes_up{{{NODE},{labels}}}": pod(which, lambda t: 1),
            f"gpu_up{{{GPU},{labels}}}": pod(which, lambda t: 1),
            f"gpu_power_watts{{{GPU},{labels}}}": pod(which, lambda t: 500),
            f"gpu_energy_joules_total{{{GPU},{labels}}}": pod(
                which, lambda t: 9e8 + 500 * read_at(t, 30, 11)
            ),
            f"gpu_busy_seconds_total{{{GPU},{labels}}}": pod(which, busy(started)),
        }
    # the weight names its pod and namespace: the target's are not added (honorLabels),
    # so both pods serve the one series
    series[weight("train")] = lambda t: (
        1 if t < 30 * 60 or t >= switch else (STALE if t == 30 * 60 else None)
    )
    # the new pod's busy counter starts 10 s before its first scrape: those 10 s and the
    # 30 s between the old pod's last scrape and the new one's first read are not counted
    alloc = 'pod="train",method="allocation"'
    cases = within(hour_sum("energy_joules", alloc), 65, 1.8e6, 0.005 * 1.8e6)
    cases += within(hour_sum("used_seconds", 'pod="train"'), 65, 3600, 0.005 * 3600 + 30)
    cases += within(hour_sum("allocated_seconds", 'pod="train"'), 65, 3600, 1e-6)
    # one row per GPU and owner throughout: the two pods' series are one GPU's
    cases.append((f'count({ROWS.format("allocated_seconds")}{{pod="train"}})', 31, [("{}", 1)]))
    assert_passes(run(tmp_path, 15, 66, series, cases))
