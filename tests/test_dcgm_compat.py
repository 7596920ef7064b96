"""`--compat.dcgm`: dcgm-exporter's names, units, types and labels, from the same Snapshot."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.metrics.dcgm import DCGM_LABELS, DCGM_METRICS, MIG_LABELS, DcgmMetric
from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.metrics.specs import RenderOptions
from gpu_exporter.model import DeviceEvent, Snapshot
from gpu_exporter.sources.nvml import PynvmlBackend
from gpu_exporter.sources.xid import XidListener
from tests.support.exporter import (
    Exporter,
    parse_samples,
    run_exporter,
    start_exporter,
    values,
)
from tests.support.fake_nvml import FakeMigDevice, FakeNvmlLib, Install, h100, old_fanless
from tests.support.fake_sampling import sample_fake
from tests.support.prometheus import Prometheus, start_prometheus

M = pynvml
MIB = 2**20
GIB = 2**30
COMPAT = RenderOptions(dcgm=True, hostname="node-7")

# dcgm-exporter's etc/default-counters.csv: name -> Prometheus type (read from its
# repository; FB_RESERVED and the profiling fields are in its newer default set)
CSV_TYPES = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_SM_ACTIVE": "gauge",
    "DCGM_FI_PROF_SM_OCCUPANCY": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
}


def known_h100() -> object:
    gpu = h100(0)
    gpu.power_milliwatts = 312_500
    gpu.encoder_percent = 7  # 7 / 100 * 100 is 7.000000000000001 in floating point
    gpu.decoder_percent = 29  # and 29 / 100 * 100 is 28.999999999999996
    gpu.gpm_supported = True
    gpu.gpm = {
        M.NVML_GPM_METRIC_GRAPHICS_UTIL: 75.0,
        M.NVML_GPM_METRIC_SM_UTIL: 40.0,
        M.NVML_GPM_METRIC_SM_OCCUPANCY: 20.0,
        M.NVML_GPM_METRIC_DRAM_BW_UTIL: 35.0,
        M.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 60.0,
        M.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 100.0,
        M.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 200.0,
        M.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 1000.0,
        M.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 3000.0,
    }
    return gpu


def snapshot_of(lib: FakeNvmlLib, xid: object = None, n: int = 3) -> Snapshot:
    collectors = {
        "utilization", "memory", "temperature", "power", "clocks", "pcie", "ecc",
        "modes", "gpm", "nvlink", "mig", "xid",
    }  # fmt: skip
    return sample_fake(collectors, n, xid)  # type: ignore[arg-type]


def dcgm(
    snapshot: Snapshot,
) -> tuple[dict[str, str], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    text = Exposition(snapshot, COMPAT).body(openmetrics=False, compressed=False).decode()
    types = {
        f.name: f.type for f in text_string_to_metric_families(text) if f.name.startswith("DCGM")
    }
    # DCGM's counters have no `_total` on the wire, and ours must not either
    assert not [line for line in text.splitlines() if line.startswith("DCGM") and "_total{" in line]
    # prometheus_client's parser appends `_total` to a counter's samples; take it off again
    samples = {
        (
            name.removesuffix("_total")
            if types.get(name.removesuffix("_total")) == "counter"
            else name,
            labels,
        ): v
        for (name, labels), v in parse_samples(text).items()
        if name.startswith("DCGM")
    }
    return types, samples


def one(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    (value,) = [
        v for (n, labels), v in samples.items() if n == name and not dict(labels).get("GPU_I_ID")
    ]
    return value


def test_every_dcgm_series_is_the_truth_in_dcgms_unit_and_type(install: Install) -> None:
    lib = install(FakeNvmlLib([known_h100()]))  # type: ignore[list-item]

    class Xids:
        listening = True

        def __init__(self) -> None:
            self.listener = XidListener(PynvmlBackend())

        def state(self) -> object:
            return self.listener.state()

    xids = Xids()
    xids.listener.record(DeviceEvent("GPU-h100-0", "xid", 79, M.nvmlEventTypeXidCriticalError))
    types, s = dcgm(snapshot_of(lib, xids))  # type: ignore[arg-type]
    assert types == {  # the parser names counters without their `_total`, as DCGM's are
        name: kind for name, kind in CSV_TYPES.items() if name in types
    }
    assert set(types) == set(CSV_TYPES)  # every one of the default set
    expected = {
        "DCGM_FI_DEV_SM_CLOCK": 1755.0,  # MHz
        "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
        "DCGM_FI_DEV_MEMORY_TEMP": 71.0,  # C
        "DCGM_FI_DEV_GPU_TEMP": 64.0,
        "DCGM_FI_DEV_POWER_USAGE": 312.5,  # 312500 mW in W
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123_456_789.0,  # mJ, as the driver counts
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 7.0,
        "DCGM_FI_DEV_GPU_UTIL": 87.0,  # percent
        "DCGM_FI_DEV_MEM_COPY_UTIL": 41.0,
        "DCGM_FI_DEV_ENC_UTIL": 7.0,
        "DCGM_FI_DEV_DEC_UTIL": 29.0,
        "DCGM_FI_DEV_XID_ERRORS": 79.0,  # the last Xid's code
        "DCGM_FI_DEV_FB_FREE": float(41_977_643_008 // MIB),  # MiB
        "DCGM_FI_DEV_FB_USED": float(42_949_672_960 // MIB),
        "DCGM_FI_DEV_FB_RESERVED": float(593_494_016 // MIB),
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 4194.0,  # (1000 + 3000) MiB/s in whole MB/s
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1.0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2.0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.75,  # ratios 0..1
        "DCGM_FI_PROF_SM_ACTIVE": 0.40,
        "DCGM_FI_PROF_SM_OCCUPANCY": 0.20,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.60,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.35,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 100.0 * MIB,  # bytes per second
        "DCGM_FI_PROF_PCIE_RX_BYTES": 200.0 * MIB,
    }
    missing = sorted(set(expected) - {name for name, _ in s})
    assert not missing
    for name, value in expected.items():
        if name.startswith("DCGM_FI_PROF_") or name == "DCGM_FI_DEV_POWER_USAGE":
            assert one(s, name) == pytest.approx(value), name  # DCGM's doubles
        else:  # DCGM's int64 fields: the driver's whole number, exactly
            assert one(s, name) == value, name
    labels = dict(next(labels for (n, labels) in s if n == "DCGM_FI_DEV_GPU_TEMP"))
    assert labels == {
        "gpu": "0",
        "UUID": "GPU-h100-0",
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-7",
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
    }


def test_what_the_device_cannot_answer_is_absent_not_zero(install: Install) -> None:
    lib = install(FakeNvmlLib([old_fanless(0)]))
    _types, s = dcgm(snapshot_of(lib))
    names = {name for name, _ in s}
    for absent in (
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",  # no Xid yet: no made-up 0
        "DCGM_FI_PROF_SM_ACTIVE",  # no GPM on this board
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    ):
        assert absent not in names, absent
    assert one(s, "DCGM_FI_DEV_GPU_TEMP") == 41.0
    assert one(s, "DCGM_FI_DEV_POWER_USAGE") == 58.0


def test_mig_instances_carry_gpu_i_id_and_gpu_i_profile(install: Install) -> None:
    gpu = known_h100()
    gpu.mig = (M.NVML_DEVICE_MIG_ENABLE, M.NVML_DEVICE_MIG_ENABLE)  # type: ignore[attr-defined]
    gpu.mig_devices = [  # type: ignore[attr-defined]
        FakeMigDevice(0, 2, 0, "MIG-a", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", (40 * GIB, 30 * GIB)),
        FakeMigDevice(4, 9, 0, "MIG-b", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", (10 * GIB, 0)),
    ]
    gpu.mig_devices[0].gpm = {M.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 90.0}  # type: ignore[attr-defined]
    gpu.mig_devices[1].gpm = {M.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 0.0}  # type: ignore[attr-defined]
    lib = install(FakeNvmlLib([gpu]))  # type: ignore[list-item]
    _types, s = dcgm(snapshot_of(lib))
    tensor = {
        dict(labels)["GPU_I_ID"]: (dict(labels)["GPU_I_PROFILE"], dict(labels)["gpu"], v)
        for (n, labels), v in s.items()
        if n == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" and dict(labels).get("GPU_I_ID")
    }
    assert tensor == {"2": ("3g.40gb", "0", pytest.approx(0.9)), "9": ("1g.10gb", "0", 0.0)}
    used = {
        dict(labels)["GPU_I_ID"]: v
        for (n, labels), v in s.items()
        if n == "DCGM_FI_DEV_FB_USED" and dict(labels).get("GPU_I_ID")
    }
    assert used == {"2": 30 * 1024.0, "9": 0.0}
    uuids = {dict(labels)["UUID"] for (n, labels) in s if n == "DCGM_FI_DEV_FB_USED"}
    assert uuids == {"GPU-h100-0"}  # the parent's, as in dcgm-exporter


def test_the_table_has_dcgm_labels_and_mig_labels_only_where_instances_exist() -> None:
    for spec in DCGM_METRICS:
        names = spec.label_names(COMPAT)
        assert names[: len(DCGM_LABELS)] == DCGM_LABELS
        assert names[len(DCGM_LABELS) :] in ((), MIG_LABELS)


# The real program ------------------------------------------------------------------------


def test_off_by_default_on_with_the_flag_or_the_config_file(tmp_path: Path) -> None:
    plain = run_exporter(["--simulate", "1", "--once"])
    assert "DCGM_FI_" not in plain.stdout
    flag = run_exporter(["--simulate", "1", "--once", "--compat.dcgm"])
    config = tmp_path / "config.yml"
    config.write_text("compat.dcgm: true\n")
    filed = run_exporter(["--simulate", "1", "--once", "--config.file", str(config)])
    for result in (flag, filed):
        s = parse_samples(result.stdout)
        assert values(s, "DCGM_FI_DEV_GPU_TEMP") and values(s, "gpu_temperature_celsius")
    config.write_text("compat.dcgm: maybe\n")
    bad = run_exporter(["--simulate", "1", "--once", "--config.file", str(config)])
    assert bad.returncode == 2 and "compat.dcgm: not a boolean: 'maybe'" in bad.stderr


def test_hostname_comes_from_node_name_when_set() -> None:
    env = dict(os.environ, NODE_NAME="gpu-node-42")
    result = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "--simulate", "1", "--once", "--compat.dcgm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    s = parse_samples(result.stdout)
    assert values(s, "DCGM_FI_DEV_GPU_TEMP", Hostname="gpu-node-42")


def test_openmetrics_keeps_dcgm_counter_names_by_typing_them_unknown(tmp_path: Path) -> None:
    exporter = start_exporter(["--simulate", "1", "--compat.dcgm"], tmp_path)
    try:
        text = exporter.get(
            "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
        ).text
    finally:
        exporter.stop()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown" in text
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text
    assert "# TYPE DCGM_FI_DEV_GPU_TEMP gauge" in text
    assert "# TYPE gpu_energy_joules counter" in text  # our own counters stay counters
    assert text.endswith("# EOF\n")


def test_promtool_finds_only_what_it_finds_in_dcgm_exporters_own_names() -> None:
    """dcgm-exporter's names break two of promtool's style rules: its counters have no
    `_total`, and `modelName` is camelCase. Nothing else may be found, and nothing at all
    in the gpu_ families of the same exposition."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run `make system-deps`"
    body = run_exporter(["--simulate", "4", "--once", "--compat.dcgm"]).stdout
    result = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=30
    )
    findings = sorted(set((result.stdout + result.stderr).strip().splitlines()))
    counters = {m.name for m in DCGM_METRICS if m.type == "counter"}
    inherent = {f'{name} counter metrics should have "_total" suffix' for name in counters}
    inherent |= {
        f"{m.name} label names should be written in 'snake_case' not 'camelCase'"
        for m in DCGM_METRICS
    }
    inherent |= {  # DCGM_FI_DEV_PCIE_REPLAY_COUNTER is a counter with "counter" in its name
        f"{m.name} metric name should not include type '{m.type}'"
        for m in DCGM_METRICS
        if m.type in m.name.lower()
    }
    assert findings and set(findings) <= inherent, set(findings) - inherent
    assert not [line for line in findings if line.startswith("gpu_")]


# Its dashboard against a real Prometheus -----------------------------------------------------

# The queries of dcgm-exporter's Grafana dashboard (grafana.com 12239, grafana/
# dcgm-exporter-dashboard.json), as published: the classic version filters on
# instance, the current one on Hostname.
CLASSIC = [
    'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}',
    'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})',
    'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}',
    'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})',
    'DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000',
    'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}',
    'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}',
    'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}',
]
CURRENT = [
    'max(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)',
    'avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"})',
    'max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)',
    'sum(max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) by (gpu))',
    'max(DCGM_FI_DEV_SM_CLOCK{Hostname=~"$Hostname", gpu=~"$gpu"} * 1000000) '
    "by (Hostname, UUID, gpu)",
    'max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    "by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    'max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    "by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    'max(DCGM_FI_DEV_FB_USED{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    "by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, list[Exporter]]]:
    tmp = tmp_path_factory.mktemp("dcgm-fleet")
    exporters = [
        start_exporter(["--simulate", "4", "--collect.interval", "1s", "--compat.dcgm"], tmp),
        start_exporter(["--simulate", "2", "--collect.interval", "1s", "--compat.dcgm"], tmp),
    ]
    config = tmp / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "dcgm",
                        "static_configs": [{"targets": [f"127.0.0.1:{e.port}" for e in exporters]}],
                    }
                ],
            }
        )
    )
    prometheus = start_prometheus(config, tmp)
    try:
        prometheus.wait_for("count(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", timeout=30)
        # rate() divides by its whole window: compare only once the series fill it
        prometheus.wait_for(
            f"count(count_over_time(DCGM_FI_DEV_GPU_TEMP[1m]) >= {WINDOW_SECONDS + 2}) == 6", 60
        )
        yield prometheus, exporters
    finally:
        prometheus.stop()
        for exporter in exporters:
            exporter.stop()


WINDOW_SECONDS = 10


def substitute(expr: str, **variables: str) -> str:
    for name, value in variables.items():
        expr = expr.replace(f"${name}", value)
    return expr


def test_dcgm_dashboard_variables_list_the_fleet(fleet: tuple[Prometheus, list[Exporter]]) -> None:
    prometheus, exporters = fleet
    instances = prometheus.api("label/instance/values", **{"match[]": "DCGM_FI_DEV_GPU_TEMP"})
    assert sorted(instances) == sorted(f"127.0.0.1:{e.port}" for e in exporters)
    gpus = prometheus.api("label/gpu/values", **{"match[]": "DCGM_FI_DEV_GPU_TEMP"})
    assert sorted(gpus) == ["0", "1", "2", "3"]
    hostnames = prometheus.api("label/Hostname/values", **{"match[]": "DCGM_FI_DEV_FB_FREE"})
    assert hostnames  # every exporter says which node it runs on


@pytest.mark.parametrize("expr", CLASSIC + CURRENT)
def test_dcgm_dashboard_queries_return_data(
    fleet: tuple[Prometheus, list[Exporter]], expr: str
) -> None:
    prometheus, _ = fleet
    query = substitute(expr, instance=".*", gpu=".*", Hostname=".*")
    result = prometheus.query(query)
    assert result, f"no data for {query}"
    if "SM_CLOCK" in expr:  # MHz * 1e6: hertz
        assert all(1e8 < float(r["value"][1]) < 3e9 for r in result)
    if "GPU_UTIL" in expr:  # percent, 0..100; the MIG GPU has none, as on real hardware
        assert all(0 <= float(r["value"][1]) <= 100 for r in result)
        assert "3" not in {r["metric"]["gpu"] for r in result}
    if "GR_ENGINE_ACTIVE" in expr:  # the MIG instances show up with their profiles
        profiles = {r["metric"].get("GPU_I_PROFILE") for r in result}
        assert {"3g.40gb", "2g.20gb", "1g.10gb"} <= profiles


def single_valued(spec: DcgmMetric) -> bool:
    """Whether `spec.equivalent` is one PromQL expression a query can compare."""
    return spec.difference is None


def test_only_the_last_xid_lacks_a_comparable_equivalent() -> None:
    assert [s.name for s in DCGM_METRICS if not single_valued(s)] == ["DCGM_FI_DEV_XID_ERRORS"]


@pytest.mark.parametrize(
    "spec", [s for s in DCGM_METRICS if single_valued(s)], ids=lambda spec: spec.name
)
def test_each_dcgm_series_agrees_with_its_gpu_equivalent(
    fleet: tuple[Prometheus, list[Exporter]], spec: DcgmMetric
) -> None:
    """The name map of the migration guide, checked against a real Prometheus."""
    prometheus, _ = fleet
    name, equivalent = spec.name, spec.equivalent
    assert prometheus.query(f'{name}{{GPU_I_ID=""}}'), f"the simulated fleet serves no {name}"
    # both at one evaluation time, a little in the past: a scrape ingested between the
    # two queries must not put one value from one sample and the other from the next
    at = time.time() - 2.0
    dcgm_values = {
        (r["metric"]["instance"], r["metric"]["gpu"]): float(r["value"][1])
        for r in prometheus.query(f'max by (instance, gpu) ({name}{{GPU_I_ID=""}})', at=at)
    }
    equivalent = equivalent.replace("[1m]", f"[{WINDOW_SECONDS}s]")  # as old as the data
    ours = {
        (r["metric"]["instance"], r["metric"]["gpu"]): float(r["value"][1])
        for r in prometheus.query(f"max by (instance, gpu) ({equivalent})", at=at)
    }
    assert dcgm_values.keys() == ours.keys()
    for key, value in dcgm_values.items():
        if spec.exact:
            assert ours[key] == pytest.approx(value), key
        else:  # a rate over a minute against the last interval's mean
            assert ours[key] == pytest.approx(value, rel=0.25, abs=0.05 * max(1.0, value)), key


# The migration guide's week side by side ----------------------------------------------------

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "migrating-from-dcgm-exporter.md"


def side_by_side_queries() -> dict[str, str]:
    """The guide's comparison queries, by the first DCGM field each one names."""
    blocks = re.findall(r"```promql\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    found: dict[str, str] = {}
    for block in blocks:
        if 'job="dcgm-exporter"' in block:
            names = re.findall(r"DCGM_FI_[A-Z_]*[A-Z]|DCGM_FI_\.\*", block)
            found[names[0]] = block
    return found


def test_the_guides_side_by_side_queries_find_what_differs(tmp_path: Path) -> None:
    """A node where "dcgm-exporter" (here: a second gpu-exporter) sees two GPUs and
    gpu-exporter one: every query of the guide must point at exactly that."""
    queries = side_by_side_queries()
    assert set(queries) == {
        "DCGM_FI_.*",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_GPU_TEMP",
    }
    node = {"NODE_NAME": "node-a"}
    args = ["--collect.interval", "1s", "--compat.dcgm"]
    theirs = start_exporter(["--simulate", "2", *args], tmp_path, env=node)
    ours = start_exporter(["--simulate", "1", *args], tmp_path, env=node)
    config = tmp_path / "prometheus.yml"
    jobs = [("dcgm-exporter", theirs), ("gpu-exporter", ours)]
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                "scrape_configs": [
                    {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{e.port}"]}]}
                    for job, e in jobs
                ],
            }
        )
    )
    prometheus = start_prometheus(config, tmp_path)
    try:
        prometheus.wait_for(
            "count(count_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m]) >= 3) == 3", 30
        )
        missing = prometheus.query(queries["DCGM_FI_.*"])
        assert missing and {(r["metric"]["Hostname"], r["metric"]["gpu"]) for r in missing} == {
            ("node-a", "1")
        }
        assert "DCGM_FI_DEV_GPU_TEMP" in {r["metric"]["__name__"] for r in missing}
        for field in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
            result = prometheus.query(queries[field])
            assert [r["metric"] for r in result] == [{"Hostname": "node-a", "gpu": "0"}], field
            assert math.isfinite(float(result[0]["value"][1])), field
        counts = prometheus.query(queries["DCGM_FI_DEV_GPU_TEMP"])
        assert [(r["metric"], r["value"][1]) for r in counts] == [({"Hostname": "node-a"}, "2")]
    finally:
        prometheus.stop()
        theirs.stop()
        ours.stop()
