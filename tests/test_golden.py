"""Golden exposition of a fixed simulated snapshot, checked by promtool as well.

Regenerate after an intended change with `UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_golden.py`
and review the diff: it is the metric contract users' dashboards and alerts depend on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import KernelLogState, Snapshot, XidState
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.scenario import Faults
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock
from tests.support.snapshots import fixed_snapshot

GOLDEN = Path(__file__).parent / "golden"


def render(snapshot: Snapshot) -> str:
    return Exposition(snapshot).body(openmetrics=False, compressed=False).decode()


class _KernelLog:
    """A kernel log that has read an Xid 79 of GPU 0 and an Xid 48 of a bus id no GPU has,
    two SXids, a lost and a malformed record."""

    def state(self) -> KernelLogState:
        return KernelLogState(
            path="/dev/kmsg",
            up=True,
            xids={
                "00000000:18:00.0": XidState({79: 1}, 1700000000.5, 79, {79: 1700000000.5}),
                "00000000:99:00.0": XidState({48: 2}, 1700000100.0, 48, {48: 1700000100.0}),
            },
            sxids={0: {20034: 2}},
            lost_records=3,
            malformed_records=1,
        )


@pytest.mark.parametrize(
    ("name", "gpus", "faults", "hardware"),
    [
        ("simulated-4gpu", 4, None, "hgx-h100"),
        # a GB200 NVL72 compute tray: NVLink5 counters, platform info, the IMEX daemon
        ("simulated-gb200-nvl72", 4, Faults(), "gb200-nvl72"),
        (
            "simulated-lost-and-unsupported",
            2,
            Faults(
                lost=frozenset({1}),
                unsupported=frozenset(
                    {
                        "temperature.fan_speed_ratio",
                        "temperature.memory_celsius",
                        "utilization.samples",
                    }
                ),
            ),
            "hgx-h100",
        ),
    ],
)
def test_exposition_matches_golden_file(
    name: str, gpus: int, faults: Faults | None, hardware: str
) -> None:
    kernel_log = _KernelLog() if faults is None else None
    text = render(fixed_snapshot(gpus, faults, kernel_log, hardware))
    path = GOLDEN / f"{name}.prom"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"exposition changed: UPDATE_GOLDEN=1 to accept ({path})"


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.prom")), ids=lambda p: p.name)
def test_promtool_check_metrics_has_no_warnings(path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run `make system-deps`"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=path.read_bytes(), capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stderr.decode() + result.stdout.decode()
    assert result.stdout.decode() + result.stderr.decode() == ""


def test_unsupported_fields_are_left_out_not_zeroed() -> None:
    faults = Faults(
        unsupported=frozenset({"temperature.fan_speed_ratio", "temperature.memory_celsius"})
    )
    text = render(fixed_snapshot(1, faults))
    assert "gpu_fan_speed_ratio{" not in text
    assert "gpu_memory_temperature_celsius{" not in text
    assert "gpu_temperature_celsius{" in text
    assert "NaN" not in text


def test_gpu_lost_mid_run_keeps_only_identity_and_up() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(2, clock=clock.wall)
    sampler = Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=frozenset({"utilization", "memory", "power"}),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    sampler.sample_once()
    backend.faults = Faults(lost=frozenset({1}))
    clock.now += 1
    text = render(sampler.sample_once())
    lines = [line for line in text.splitlines() if 'gpu="1"' in line]
    assert sorted({line.split("{")[0] for line in lines}) == ["gpu_info", "gpu_up"]
    assert any(line.startswith("gpu_up{") and line.endswith(" 0.0") for line in lines)
    assert 'gpu_up{gpu="0",' in text and 'gpu_power_watts{gpu="0"' in text


def test_gpu_lost_before_identification_is_reported_down_without_uuid() -> None:
    """No UUID could be read: the series has no `uuid` label, never an empty one."""
    text = render(fixed_snapshot(2, Faults(lost=frozenset({1}))))
    assert 'gpu_up{gpu="1"} 0.0' in text
    assert 'uuid=""' not in text
