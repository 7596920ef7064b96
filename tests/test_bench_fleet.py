"""`make bench-fleet`'s day of history (benchmarks/fleet.py) backfills what the
Chargeback dashboard reads at its 24-hour range: a day of the chargeback's 5-minute
roll-ups, and a day of the 1-minute rows the bench times the dashboard on for
comparison. Its figures are measured, never asserted; this only holds that the history
behind them is the one the dashboard reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import fleet  # noqa: E402  (benchmarks/ is no package)

ROWS = (
    "allocated_seconds",
    "used_seconds",
    "wasted_seconds",
    "unmeasured_seconds",
    "energy_joules",
)


def test_every_chargeback_row_family_has_its_roll_up() -> None:
    per_owner = {
        f"instance_owner:gpu_{row}:sum5m": f"instance_gpu_owner:gpu_{row}:sum1m" for row in ROWS
    }
    per_node = {  # the dashboard's totals: no unmeasured total
        f"instance:gpu_{row}:sum5m": f"instance_gpu_owner:gpu_{row}:sum1m"
        for row in ROWS
        if row != "unmeasured_seconds"
    }
    assert {**per_owner, **per_node} == fleet.ROLLED_UP
    # per node: only the node's labels; the remainder's rows are
    # left out of the GPU-seconds, kept in the energy (the rows add up to the GPU's)
    used, energy = (fleet.ROLLUP_SHAPES[f"instance:gpu_{r}:sum5m"] for r in ROWS[1::3])
    assert used.labels == energy.labels == frozenset({"instance", "job"})
    assert not used.takes({"allocation": "none"}) and used.takes({"allocation": "kubernetes"})
    assert energy.takes({"allocation": "none", "method": "allocation"})
    assert not energy.takes({"allocation": "none", "method": "usage"})
    assert fleet.ROLLUP_SHAPES["instance_owner:gpu_used_seconds:sum5m"].labels is None
    assert fleet.ROLLUP_SHAPES["instance_owner:gpu_used_seconds:sum5m"].takes({})
    assert fleet.ROLLUP_SHAPES["instance:gpu_used_seconds:sum5m"].own_labels == {"gpu": "all"}
    dashboard = fleet.panels(fleet.CHARGEBACK_DASHBOARD, fleet.DAY_SECONDS)
    read, _ = fleet.dashboard_reads(dashboard)
    assert set(read) == set(fleet.ROLLED_UP)  # the dashboard reads only the roll-ups
    minute, _ = fleet.dashboard_reads(fleet.minute_rows(dashboard))
    assert set(minute) == set(fleet.ROLLED_UP.values())


def test_the_day_backfills_a_day_of_what_the_chargeback_dashboard_reads() -> None:
    samples = [("gpu_up", '{gpu="0",uuid="GPU-a"}', 1.0)]
    end = 1_000 * 3600
    labels = '{instance="node-0000:9872",job="gpu-exporter",gpu="0",uuid="GPU-a"}'
    charged = {
        name: [(name + labels, 60.0, 0.0)] for pair in fleet.ROLLED_UP.items() for name in pair
    }
    charged["instance_gpu:gpu_idle_power_watts:avg1m"] = [
        ("instance_gpu:gpu_idle_power_watts:avg1m" + labels, 70.0, 0.0)
    ]
    families, since, _first_of = fleet.what_is_read(1, set(), samples, end, 0.0, charged)
    day = end - 25 * 3600  # 24 hours, the lookback, rounded up to the hour
    for name in charged:
        assert name in families
        assert since[name] == day, name
    # the recorded families' resolution: the group's interval
    assert fleet.resolution("instance_owner:gpu_used_seconds:sum5m") == 300
    assert fleet.resolution("instance_gpu_owner:gpu_used_seconds:sum1m") == 60


def test_each_synthetic_gpus_memory_adds_up_as_a_drivers_does() -> None:
    """Per GPU of every synthetic node: total and reserved as the template's (a model's
    memory is fixed), used within total - reserved, free the rest (NVML's v2 memory
    info: total = used + free + reserved); what is derived from used (per process,
    unattributed, per MIG instance) within it; host memory available within its total."""
    samples = fleet.template()
    fixed = {
        (name, fleet._gpu(labels)): value
        for name, labels, value in samples
        if name in ("gpu_memory_total_bytes", "gpu_memory_reserved_bytes")
    }
    gpus = {gpu for _name, gpu in fixed}
    assert len(gpus) == fleet.GPUS_PER_NODE
    nodes = range(2 * fleet.FAULT_EVERY + 4)  # three faulty nodes: 3, 28 and 53
    for node in nodes:
        values: dict[tuple[str, int | None], float] = {}
        parts: dict[tuple[str, int | None], list[float]] = {}
        mig: dict[str, dict[str, float]] = {}  # MIG instance's labels -> used and total
        for s in fleet.node_series(node, samples):
            if s.name.startswith(("gpu_memory_", "gpu_host_memory_")):
                assert (s.name, fleet._gpu(s.labels)) not in values, (node, s.name, s.labels)
                values[(s.name, fleet._gpu(s.labels))] = s.base
            elif s.name in ("gpu_process_memory_used_bytes", "gpu_mig_memory_used_bytes"):
                parts.setdefault((s.name, fleet._gpu(s.labels)), []).append(s.base)
            if s.name.startswith("gpu_mig_memory_") and s.name.endswith("_bytes"):
                mig.setdefault(s.labels, {})[s.name] = s.base
        for gpu in gpus:
            where = f"node {node} GPU {gpu}"
            total = values[("gpu_memory_total_bytes", gpu)]
            reserved = values[("gpu_memory_reserved_bytes", gpu)]
            used = values[("gpu_memory_used_bytes", gpu)]
            free = values[("gpu_memory_free_bytes", gpu)]
            assert total == fixed[("gpu_memory_total_bytes", gpu)], where
            assert reserved == fixed[("gpu_memory_reserved_bytes", gpu)], where
            assert 0 <= used <= total - reserved, (where, used, total - reserved)
            assert free == pytest.approx(total - reserved - used, rel=1e-12, abs=1.0), (
                where,
                f"free {free} != total {total} - reserved {reserved} - used {used}",
            )
            assert free >= 0, where
            slack = used * 1e-12 + 1.0  # float rounding
            unattributed = values.get(("gpu_memory_unattributed_bytes", gpu), 0.0)
            assert unattributed <= used + slack, (where, unattributed, used)
            for family in ("gpu_process_memory_used_bytes", "gpu_mig_memory_used_bytes"):
                held = sum(parts.get((family, gpu), []))
                assert held <= used + slack, (where, family, held, used)
        for labels, held in mig.items():
            used, total = held["gpu_mig_memory_used_bytes"], held["gpu_mig_memory_total_bytes"]
            assert 0 <= used <= total, (node, labels, used, total)
        host = values[("gpu_host_memory_total_bytes", None)]
        assert 0 <= values[("gpu_host_memory_available_bytes", None)] <= host, node
