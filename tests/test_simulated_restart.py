"""A restarted simulated exporter continues the counters a real driver or host keeps.

The driver's counters (energy, error counts) run from the driver's load and the tenants'
CPU time from their start, not from the exporter's start: once they stepped back a little
at a restart, and Prometheus read that as a reset (43-500 CPU cores for 15 minutes, and
GPUInputBound went pending). The counters the exporter integrates itself start again from
0, which is a reset Prometheus handles.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.exporter import parse_samples, run_exporter, start_exporter

pytestmark = pytest.mark.e2e

KEPT_BY_THE_DRIVER_OR_HOST = (
    "gpu_energy_joules_total",
    "gpu_pcie_replay_errors_total",
    "gpu_nvlink_errors_total",
    "gpu_ecc_errors_total",
    "gpu_process_cpu_seconds_total",
    "gpu_host_cpu_busy_seconds_total",
)


def test_a_restarted_simulated_exporter_never_steps_a_continuing_counter_back(
    tmp_path: Path,
) -> None:
    exporter = start_exporter(["--simulate", "4", "--collect.interval", "0.2s"], tmp_path)
    try:
        time.sleep(3)  # the counters move on; the next exporter must go on from here
        before = exporter.scrape()
    finally:
        exporter.stop()
    # the same address: a simulated host's UUIDs are those of its host name and address
    once = run_exporter(["--simulate", "4", "--once", *exporter.args[-2:]])
    assert once.returncode == 0, once.stderr
    after = parse_samples(once.stdout)
    compared: set[str] = set()
    for (name, labels), value in before.items():
        if name in KEPT_BY_THE_DRIVER_OR_HOST and (name, labels) in after:
            assert after[(name, labels)] >= value, (name, dict(labels), value)
            compared.add(name)
    assert {"gpu_energy_joules_total", "gpu_process_cpu_seconds_total"} <= compared, compared
