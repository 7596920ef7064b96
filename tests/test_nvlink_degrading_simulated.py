"""The simulated GB200 tray's degrading link (a scenario's `nvlink_degrading`, which climbs
as marin-community/marin #9086's did) rendered by the real catalogue every 15 simulated
minutes for two days, fed to the shipped rules by promtool: GPUNVLinkDegrading fires for
that GPU (its link with --collector.nvlink.per-link, "a link" without) within the first
day, with the tray's rack labels, and never for the tray's healthy GPUs."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.metrics.render import families
from gpu_exporter.metrics.specs import DEFAULT_OPTIONS, RenderOptions
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.fabric_daemons import FabricDaemonWatch
from gpu_exporter.sources.scenario import Faults
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock
from tests.support.exporter import REPO

STEP = 900  # seconds between samples: the promtool series' interval
HOURS = 48
READ = {"gpu_nvlink_link_recovery_events_total", "gpu_nvlink_ber", "gpu_platform_info"}
TARGET = {"instance": "gb200-tray:9872", "job": "gpu-exporter"}

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def _series(options: RenderOptions) -> dict[str, list[float]]:
    """{series: a value per STEP}, as Prometheus would have scraped the simulated tray."""
    clock = FakeClock()
    backend = SimulatedBackend(
        4,
        clock=clock.wall,
        faults=Faults(nvlink_degrading={1: 7}),
        hardware="gb200-nvl72",
        host_id="rack-b/tray",
    )
    sampler = Sampler(
        backend,
        fabric_daemons=FabricDaemonWatch(backend.daemons_running, monotonic=clock.monotonic),
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=frozenset(c.name for c in COLLECTORS) - {"process", "host", "xid"},
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    out: dict[str, list[float]] = defaultdict(list)
    try:
        for _ in range(HOURS * 3600 // STEP + 1):
            snapshot = sampler.sample_once()
            for family in families(snapshot, options):
                if family.name not in READ:
                    continue
                for values, value in family.rows:
                    labels = {**TARGET, **dict(zip(family.label_names, values, strict=True))}
                    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                    out[f"{family.name}{{{text}}}"].append(value)
            clock.now += STEP
    finally:
        sampler.stop(0)
    return out


def _promtool(tmp_path: Path, series: dict[str, list[float]], tests: list[Any]) -> str:
    rules = REPO / "deploy" / "prometheus" / "rules"
    spec = {
        "rule_files": [str(rules / "gpu-recording.yml"), str(rules / "gpu-alerts.yml")],
        "evaluation_interval": "1h",
        # as in gpu-nvlink-trend.test.yml: the recording rules an alert reads first
        "group_eval_order": [
            "gpu-exporter.recording.nvlink-trend",
            "gpu-exporter.recording.rack",
            "gpu-exporter.alerts.nvlink",
        ],
        "tests": [
            {
                "interval": f"{STEP}s",
                "input_series": [
                    {"series": name, "values": " ".join(f"{v:g}" for v in values)}
                    for name, values in series.items()
                ],
                "promql_expr_test": tests,
            }
        ],
    }
    path = tmp_path / "simulated.test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, width=1_000_000))
    result = subprocess.run(
        ["promtool", "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.stdout + result.stderr if result.returncode else ""


FIRING = (
    'count by (gpu, link, signal, chassis_serial, tray) (ALERTS{alertname="GPUNVLinkDegrading"})'
)


@needs_promtool
@pytest.mark.parametrize("per_link", [False, True], ids=["per GPU", "per link"])
def test_the_simulated_degrading_link_fires_the_warning_within_a_day(
    tmp_path: Path, per_link: bool
) -> None:
    options = RenderOptions(nvlink_per_link=True) if per_link else DEFAULT_OPTIONS
    series = _series(options)
    (place,) = {
        (name.split('chassis_serial="')[1].split('"')[0], name.split('tray="')[1].split('"')[0])
        for name in series
        if name.startswith("gpu_platform_info{")
    }
    link = ',link="7"' if per_link else ""
    expected = [
        {
            "labels": f'{{gpu="1"{link},signal="{signal}",'
            f'chassis_serial="{place[0]}",tray="{place[1]}"}}',
            "value": 1,
        }
        for signal in ("effective_ber", "link_recovery")
    ]
    failed = _promtool(
        tmp_path,
        series,
        [
            # three hours in: three hours with events, not yet a trend
            {"expr": FIRING, "eval_time": "3h", "exp_samples": []},
            # by twelve hours: the recovery events in every hour, and the effective BER
            # above 1e-12 for every whole hour since its first step; GPUs 0, 2, 3: nothing
            {"expr": FIRING, "eval_time": "12h", "exp_samples": expected},
            {"expr": FIRING, "eval_time": "47h", "exp_samples": expected},
        ],
    )
    assert not failed, failed
