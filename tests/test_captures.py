"""Real GPUs replayed: the exporter prints what nvidia-smi printed for the same board.

Every capture in tests/fixtures/nvidia-smi (real `nvidia-smi` output of H100, H100 and H200
with MIG, L40S, RTX 4080 SUPER and RTX 2080 SUPER hosts; see NOTICE there) becomes a fake
libnvidia-ml (tests/support/capture_hosts.py), and the real program (`gpu-exporter --once`,
PynvmlBackend through the real pynvml) reads it. Each value is then compared with what
nvidia-smi reported, converted here to the exporter's units (MiB -> bytes, MHz -> Hz,
% -> ratio, Enabled -> 1); what nvidia-smi printed as N/A must be absent from the exposition,
never 0. The expectations come from `--query-gpu` CSV where it has the value (and from
`nvidia-smi -q` and `-L` where only they have it: video max clock, thresholds, PCIe replays
and throughput, MIG devices; the process table of plain `nvidia-smi`), parsed here, apart
from the conversion into NVML units that built the fake.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest

from gpu_exporter import cli
from gpu_exporter.attribution import processes
from gpu_exporter.sampling.thresholds import NEAR_OOM_MEMORY_RATIO
from gpu_exporter.sources.fabric_daemons import nvswitches_present
from tests.support.capture_hosts import (
    CLOCK_EVENT_COLUMNS,
    board_support,
    capture_host,
    conform,
)
from tests.support.exporter import Samples, parse_samples, start_exporter
from tests.support.fake_nvml import FakeGpu, FakeMigDevice, FakeNvmlLib, Install, h100
from tests.support.nvidia_smi_capture import (
    STATES,
    Capture,
    CaptureState,
    available,
    capture_files,
    number,
)

CAPTURES = [Capture(path) for path in capture_files()]
every_capture_state = pytest.mark.parametrize(
    ("capture", "state"),
    [(capture, state) for capture in CAPTURES for state in STATES],
    ids=[f"{capture.name}-{state}" for capture in CAPTURES for state in STATES],
)
ONCE = ["--once", "--collector.pcie-throughput", "--no-collector.host", "--no-collector.process"]
MIB = 1024 * 1024

# Exporter series with no nvidia-smi counterpart in a capture (or the exporter's own).
UNCOMPARED = {"gpu_up"}
# Derived from several values a capture shows (docs/actions.md), not printed by nvidia-smi:
# the test checks it apart (every captured board is healthy: it needs nothing done).
RECOMMENDED = "gpu_recommended_action"
# Judged every interval from the memory a capture shows, checked apart.
MEMORY_PATTERN_SERIES = [
    f"gpu_{mig}memory_{name}"
    for mig in ("", "mig_")
    for name in ("pattern", "near_full_drops_total", "flat_seconds", "likely_oom_exits_total")
]
# A node's series judged from its boards (sources/fabric_daemons.py), checked apart.
FABRIC_REQUIRED = "gpu_fabric_daemon_required"
# Counters the exporter integrates from a value nvidia-smi shows: never printed without it.
DERIVED = {
    "gpu_busy_seconds_total": "gpu_utilization_ratio",
    "gpu_memory_controller_busy_seconds_total": "gpu_memory_controller_utilization_ratio",
}

# threshold label -> its line in nvidia-smi -q (Temperature)
TLIMIT_LINES = {
    "shutdown": "GPU Shutdown T.Limit Temp",
    "slowdown": "GPU Slowdown T.Limit Temp",
    "max_operating": "GPU Max Operating T.Limit Temp",
    "memory_max_operating": "Memory Max Operating T.Limit Temp",
}

# reason label -> --query-gpu column (Active / Not Active)
THROTTLE_COLUMNS = {
    "gpu_idle": "clocks_event_reasons.gpu_idle",
    "applications_clocks_setting": "clocks_event_reasons.applications_clocks_setting",
    "sw_power_cap": "clocks_event_reasons.sw_power_cap",
    "hw_slowdown": "clocks_event_reasons.hw_slowdown",
    "hw_thermal_slowdown": "clocks_event_reasons.hw_thermal_slowdown",
    "hw_power_brake_slowdown": "clocks_event_reasons.hw_power_brake_slowdown",
    "sw_thermal_slowdown": "clocks_event_reasons.sw_thermal_slowdown",
    "sync_boost": "clocks_event_reasons.sync_boost",
}


@dataclass(frozen=True)
class Expected:
    """One series the exporter should print with `value`, or leave out (`value` None)."""

    metric: str
    labels: dict[str, str]
    value: float | None
    source: str  # what nvidia-smi printed, for the failure message


def _scaled(text: str | None, factor: float) -> float | None:
    value = number(text)
    return value * factor if value is not None else None


def _mode(text: str | None) -> float | None:
    """Enabled/Yes/Active -> 1, Disabled/No/Not Active -> 0, N/A -> None."""
    value = available(text)
    if value is None:
        return None
    return {"Enabled": 1.0, "Yes": 1.0, "Active": 1.0}.get(value, 0.0)


def expectations(state: CaptureState, index: int) -> list[Expected]:
    """What the exporter must print for GPU `index`, from what nvidia-smi printed."""
    row, q = state.rows[index], state.gpu(index)
    gpu = str(index)

    def csv(metric: str, column: str, factor: float = 1.0, **labels: str) -> Expected:
        return Expected(metric, {"gpu": gpu, **labels}, _scaled(row[column], factor), column)

    def query(metric: str, path: tuple[str, ...], factor: float = 1.0, **labels: str) -> Expected:
        value = _scaled(q.get(*path), factor)
        return Expected(metric, {"gpu": gpu, **labels}, value, " / ".join(path))

    def flag(metric: str, column: str) -> Expected:
        return Expected(metric, {"gpu": gpu}, _mode(row[column]), column)

    pstate = available(row["pstate"])
    out = [
        csv("gpu_memory_total_bytes", "memory.total [MiB]", MIB),
        csv("gpu_memory_used_bytes", "memory.used [MiB]", MIB),
        csv("gpu_memory_free_bytes", "memory.free [MiB]", MIB),
        csv("gpu_memory_reserved_bytes", "memory.reserved [MiB]", MIB),
        csv("gpu_temperature_celsius", "temperature.gpu"),
        csv("gpu_memory_temperature_celsius", "temperature.memory"),
        # absolute thresholds only where nvidia-smi prints them (not the T.Limit margins)
        query(
            "gpu_temperature_threshold_celsius",
            ("Temperature", "GPU Slowdown Temp"),
            threshold="slowdown",
        ),
        query(
            "gpu_temperature_threshold_celsius",
            ("Temperature", "GPU Shutdown Temp"),
            threshold="shutdown",
        ),
        # relative to T.Limit where nvidia-smi prints that instead (Ada and later)
        csv("gpu_temperature_tlimit_margin_celsius", "temperature.gpu.tlimit"),
        *(
            query(
                "gpu_temperature_tlimit_threshold_celsius",
                ("Temperature", line),
                threshold=threshold,
            )
            for threshold, line in TLIMIT_LINES.items()
        ),
        csv("gpu_fan_speed_ratio", "fan.speed [%]", 0.01),
        csv("gpu_power_watts", "power.draw [W]"),
        csv("gpu_power_limit_watts", "enforced.power.limit [W]"),
        *(
            csv("gpu_clock_hertz", f"clocks.current.{clock} [MHz]", 1e6, clock=clock)
            for clock in ("graphics", "sm", "memory", "video")
        ),
        *(
            csv("gpu_clock_max_hertz", f"clocks.max.{clock} [MHz]", 1e6, clock=clock)
            for clock in ("graphics", "sm", "memory")
        ),
        query("gpu_clock_max_hertz", ("Max Clocks", "Video"), 1e6, clock="video"),
        Expected(
            "gpu_performance_state",
            {"gpu": gpu},
            float(pstate.removeprefix("P")) if pstate else None,
            "pstate",
        ),
        *(
            Expected(
                "gpu_throttle_active", {"gpu": gpu, "reason": reason}, _mode(row[column]), column
            )
            for reason, column in THROTTLE_COLUMNS.items()
        ),
        csv("gpu_pcie_link_generation", "pcie.link.gen.current"),
        csv("gpu_pcie_link_max_generation", "pcie.link.gen.max"),
        csv("gpu_pcie_link_width", "pcie.link.width.current"),
        csv("gpu_pcie_link_max_width", "pcie.link.width.max"),
        query("gpu_pcie_replay_errors_total", ("PCI", "Replays Since Reset")),
        query(
            "gpu_pcie_throughput_bytes_per_second", ("PCI", "Tx Throughput"), 1000, direction="tx"
        ),
        query(
            "gpu_pcie_throughput_bytes_per_second", ("PCI", "Rx Throughput"), 1000, direction="rx"
        ),
        csv("gpu_utilization_ratio", "utilization.gpu [%]", 0.01),
        csv("gpu_memory_controller_utilization_ratio", "utilization.memory [%]", 0.01),
        csv("gpu_encoder_utilization_ratio", "utilization.encoder [%]", 0.01),
        csv("gpu_decoder_utilization_ratio", "utilization.decoder [%]", 0.01),
        csv("gpu_ecc_errors_total", "ecc.errors.corrected.volatile.total", error_type="corrected"),
        csv(
            "gpu_ecc_errors_total",
            "ecc.errors.uncorrected.volatile.total",
            error_type="uncorrected",
        ),
        csv("gpu_retired_pages", "retired_pages.single_bit_ecc.count", cause="single_bit"),
        csv("gpu_retired_pages", "retired_pages.double_bit.count", cause="double_bit"),
        flag("gpu_retired_pages_pending", "retired_pages.pending"),
        csv("gpu_remapped_rows", "remapped_rows.correctable", error_type="correctable"),
        csv("gpu_remapped_rows", "remapped_rows.uncorrectable", error_type="uncorrectable"),
        flag("gpu_remapped_rows_pending", "remapped_rows.pending"),
        flag("gpu_remapped_rows_failed", "remapped_rows.failure"),
        flag("gpu_persistence_mode", "persistence_mode"),
        flag("gpu_mig_mode", "mig.mode.current"),
        flag("gpu_ecc_mode", "ecc.mode.current"),
    ]
    return out + _health_expectations(row, gpu) + _mig_expectations(state, index)


# nvidia-smi's words -> the exporter's label values
RECOVERY_ACTIONS = {"None": "none", "GPU Reset": "gpu_reset", "Node Reboot": "node_reboot"}
FABRIC_STATES = {
    "Not Started": "not_started",
    "In Progress": "in_progress",
    "Completed": "completed",
}
FABRIC_HEALTH_COLUMNS = {
    "degraded_bandwidth": "fabric.health.bandwidth",
    "route_recovery": "fabric.health.route_recovery_in_progress",
    "route_unhealthy": "fabric.health.route_unhealthy",
    "access_timeout_recovery": "fabric.health.access_timeout_recovery",
    "incorrect_configuration": "fabric.health.incorrect_configuration",
}


def _health_expectations(row: dict[str, str], gpu: str) -> list[Expected]:
    """The driver's recovery action, clocks-event counters (us -> s) and fabric."""
    labels = {"gpu": gpu}
    out = [
        Expected(
            "gpu_clock_event_seconds_total",
            {**labels, "reason": reason},
            _scaled(row[column], 1e-6),
            column,
        )
        for reason, (_field, column) in CLOCK_EVENT_COLUMNS.items()
    ]
    action = available(row["gpu_recovery_action"])
    if action is None:
        out.append(Expected("gpu_recovery_action", labels, None, "gpu_recovery_action"))
    else:
        action_labels = {**labels, "action": RECOVERY_ACTIONS[action]}
        out.append(Expected("gpu_recovery_action", action_labels, 1.0, "gpu_recovery_action"))
    state, status = available(row["fabric.state"]), available(row["fabric.status"])
    summary = available(row["fabric.health.summary"])
    assert summary is None, f"teach the expectations fabric.health.summary {summary!r}"
    out.append(Expected("gpu_fabric_healthy", labels, None, "fabric.health.summary"))
    for condition, column in FABRIC_HEALTH_COLUMNS.items():
        said = available(row[column])
        assert said is None, f"teach the expectations {column} {said!r}"
        out.append(
            Expected(
                "gpu_fabric_health_condition", {**labels, "condition": condition}, None, column
            )
        )
    if state is None:
        out += [
            Expected("gpu_fabric_state", labels, None, "fabric.state"),
            Expected("gpu_fabric_info", labels, None, "fabric.state"),
        ]
        return out
    fabric = {**labels, "state": FABRIC_STATES[state], "status": (status or "").lower()}
    out.append(Expected("gpu_fabric_state", fabric, 1.0, "fabric.state, fabric.status"))
    if state == "Completed" and status == "Success":
        info = {
            **labels,
            "clique_id": row["fabric.cliqueId"],
            "cluster_uuid": row["fabric.clusterUuid"].lower(),
        }
        out.append(Expected("gpu_fabric_info", info, 1.0, "fabric.cliqueId, fabric.clusterUuid"))
    return out


def _mig_expectations(state: CaptureState, index: int) -> list[Expected]:
    """gpu_mig_info per MIG device (`-q` ids, `-L` profile and UUID), memory per GPU instance."""
    out: list[Expected] = []
    listing = state.mig_listing(index)
    for device in state.gpu(index).all("MIG Device"):
        slot = int(device.get("Index") or -1)
        profile, mig_uuid = listing[slot]
        gpu_instance = device.get("GPU Instance ID") or ""
        labels = {
            "gpu": str(index),
            "gpu_instance": gpu_instance,
            "compute_instance": device.get("Compute Instance ID") or "",
            "profile": profile,
            "mig_uuid": mig_uuid,
        }
        out.append(Expected("gpu_mig_info", labels, 1.0, f"MIG Device {slot}"))
        memory = ("Shared FB Memory Usage",)
        for metric, key in (("total", "Total"), ("used", "Used")):
            value = _scaled(device.get(*memory, key), MIB)
            instance = {"gpu": str(index), "gpu_instance": gpu_instance}
            out.append(Expected(f"gpu_mig_memory_{metric}_bytes", instance, value, key))
    return out


def matching(samples: Samples, metric: str, labels: dict[str, str]) -> list[float]:
    want = set(labels.items())
    return [v for (name, ls), v in samples.items() if name == metric and want <= set(ls)]


def _mib(field: str) -> float:
    """nvidia-smi's "211 MiB" as 211.0."""
    return float(field.removesuffix(" MiB"))


def run_once(lib: FakeNvmlLib, install: Install, capsysbinary: pytest.CaptureFixture[bytes]) -> str:
    """`gpu-exporter --once` (the real program, in this process) against `lib`."""
    install(lib)
    assert cli.main(ONCE) == 0
    return capsysbinary.readouterr().out.decode()


def _device_series(samples: Samples) -> set[str]:
    return {n for (n, _) in samples if n.startswith("gpu_") and not n.startswith("gpu_exporter_")}


def disagreements(samples: Samples, state: CaptureState) -> tuple[list[str], set[str]]:
    """Where the exposition differs from nvidia-smi, and the metrics compared."""
    compared: set[str] = set(UNCOMPARED) | set(DERIVED)
    wrong: list[str] = []
    for index in range(len(state.rows)):
        for want in expectations(state, index):
            compared.add(want.metric)
            got = matching(samples, want.metric, want.labels)
            said = f"nvidia-smi {want.value if want.value is not None else 'N/A'} ({want.source})"
            if (want.value is None and got) or (
                want.value is not None and got != [pytest.approx(want.value, rel=1e-9)]
            ):
                wrong.append(f"{want.metric}{want.labels}: {said}, exporter {got}")
        gpu = {"gpu": str(index)}
        for counter, source in DERIVED.items():
            if matching(samples, counter, gpu) and not matching(samples, source, gpu):
                wrong.append(f"{counter}{gpu} printed, but {source} is N/A")
    return wrong, compared


@every_capture_state
def test_exporter_prints_what_nvidia_smi_printed_for_the_same_board(
    capture: Capture, state: str, install: Install, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    captured = capture.state(state)
    samples = parse_samples(run_once(capture_host(capture, state), install, capsysbinary))
    for index, row in enumerate(captured.rows):
        (labels,) = [
            dict(ls) for (n, ls) in samples if n == "gpu_info" and ("gpu", str(index)) in ls
        ]
        assert labels["name"] == row["name"]
        assert labels["uuid"] == row["uuid"]
        assert labels["pci_bus_id"] == row["pci.bus_id"]
        assert labels["vbios_version"] == row["vbios_version"]
        assert labels["compute_capability"] == row["compute_cap"]
        assert labels["driver_version"] == row["driver_version"].split()[0]
        assert labels["cuda_driver_version"] == (captured.cuda_version or "").split()[0]
    wrong, compared = disagreements(samples, captured)
    assert not wrong, "\n".join(wrong)
    recommended = {dict(ls)["gpu"]: dict(ls) for (n, ls) in samples if n == RECOMMENDED}
    assert {g: (r["action"], r["reason"]) for g, r in recommended.items()} == {
        str(i): ("none", "none") for i in range(len(captured.rows))
    }
    compared.add(RECOMMENDED)
    # the node's fabric daemons, judged from the boards: the H100 and H200 SXM captures are
    # one-GPU pass-through VMs whose fabric registration completed (nvidia-smi -q: Fabric
    # State Completed) with Fabric Manager in the hypervisor's service VM, as no NVSwitch is
    # on the guest's PCI bus: the node itself needs neither daemon (nor does this test's
    # host, unless its own bus holds an NVSwitch)
    required = {dict(ls)["daemon"]: v for (n, ls), v in samples.items() if n == FABRIC_REQUIRED}
    switches_here = nvswitches_present() is True
    has_fabric = any(row.get("fabric.state") == "Completed" for row in captured.rows)
    assert required == {"nv-fabricmanager": float(has_fabric and switches_here), "nvidia-imex": 0}
    compared.add(FABRIC_REQUIRED)
    # what the memory does, judged from the boards' used memory (sampling/memory_patterns):
    # after one sample no drop, no ended job and no flat time yet, and a board below the
    # near-full line (every capture: nvidia-smi's memory.used against memory.total) is
    # not_full; a MIG instance likewise
    for index, row in enumerate(captured.rows):
        gpu = {"gpu": str(index)}
        used = _mib(row["memory.used [MiB]"]) / _mib(row["memory.total [MiB]"])
        assert used < NEAR_OOM_MEMORY_RATIO
        patterns = [dict(ls)["pattern"] for (n, ls) in samples if n == "gpu_memory_pattern"]
        if patterns:  # none while MIG is on: the instances are judged
            assert patterns == ["not_full"]
        for counter in ("gpu_memory_near_full_drops_total", "gpu_memory_likely_oom_exits_total"):
            assert matching(samples, counter, gpu) in ([], [0])
    for name in MEMORY_PATTERN_SERIES:
        if name.endswith("_pattern"):
            assert {dict(ls)["pattern"] for (n, ls) in samples if n == name} <= {"not_full"}
        compared.add(name)
    # every device series the exporter printed is one nvidia-smi had a value for
    unexplained = _device_series(samples) - compared - {"gpu_info"}
    assert not unexplained, (
        f"values nvidia-smi did not show: {sorted(unexplained)}; compare a new metric in "
        "expectations(), or name it in DERIVED or UNCOMPARED"
    )


# What real boards leave out ----------------------------------------------------------


def capture_named(model: str) -> Capture:
    """The capture whose file name holds `model` ("nvidia-h100-80gb-hbm3")."""
    (capture,) = [c for c in CAPTURES if f"__{model}__" in c.path.name]
    return capture


HOPPER = {"retired_pages", "fan_speed"}  # remapped rows, average power, HBM temperature: there
UNDER_MIG = {"remapped_rows", "utilization", "encoder", "decoder"}
GEFORCE = {"retired_pages", "remapped_rows", "ecc_errors", "ecc_mode", "memory_temperature"}
NO_TLIMIT = {"tlimit_thresholds", "tlimit_margin"}  # absolute thresholds instead
BOARD_SUPPORT = {
    "nvidia-h100-80gb-hbm3": HOPPER,
    "nvidia-h100-mig": HOPPER | UNDER_MIG,  # the same board and driver, MIG on
    "nvidia-h200-mig": HOPPER | UNDER_MIG,
    "nvidia-l40s": {"retired_pages", "memory_temperature", "fan_speed", "mig_mode"},
    # Ada, yet on R595 without T.Limit: the absolute thresholds, as before Ada
    "nvidia-geforce-rtx-4080-super": GEFORCE | NO_TLIMIT | {"mig_mode"},
    "nvidia-geforce-rtx-2080-super": GEFORCE | NO_TLIMIT | {"mig_mode", "power_average"},  # Turing
}


@pytest.mark.parametrize("model", sorted(BOARD_SUPPORT))
def test_board_support_table_is_what_the_capture_leaves_n_a(model: str) -> None:
    capture = capture_named(model)
    assert board_support(capture, "idle").not_available == BOARD_SUPPORT[model]
    assert board_support(capture, "load").not_available == BOARD_SUPPORT[model]  # not by load


def test_mig_takes_remapped_rows_and_utilization_away_from_the_same_h100() -> None:
    plain = board_support(capture_named("nvidia-h100-80gb-hbm3")).not_available
    mig = board_support(capture_named("nvidia-h100-mig")).not_available
    assert mig - plain == UNDER_MIG
    assert plain - mig == set()


def _h100_with_mig() -> FakeGpu:
    gpu = h100()
    gpu.mig = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
    gpu.mig_devices = [
        FakeMigDevice(0, 2, 0, "MIG-h100-0", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", (42 << 30, 0))
    ]
    return gpu


def test_h100_fake_as_a_real_h100_prints_no_retired_pages_and_reads_average_power(
    install: Install, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    lib = FakeNvmlLib([conform(h100(), board_support(capture_named("nvidia-h100-80gb-hbm3")))])
    samples = parse_samples(run_once(lib, install, capsysbinary))
    # N/A on a real H100: absent, never 0
    assert matching(samples, "gpu_retired_pages", {}) == []
    assert matching(samples, "gpu_retired_pages_pending", {}) == []
    # what it does report
    assert matching(samples, "gpu_remapped_rows", {"error_type": "correctable"}) == [2.0]
    assert matching(samples, "gpu_power_watts", {}) == [pytest.approx(512.345)]
    assert lib.count("nvmlDeviceGetPowerUsage") == 0  # the average power field answered


def test_h100_fake_with_mig_as_a_real_one_prints_no_remapped_rows_nor_utilization(
    install: Install, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    support = board_support(capture_named("nvidia-h100-mig"))
    samples = parse_samples(
        run_once(FakeNvmlLib([conform(_h100_with_mig(), support)]), install, capsysbinary)
    )
    for metric in (
        "gpu_remapped_rows",
        "gpu_remapped_rows_pending",
        "gpu_remapped_rows_failed",
        "gpu_retired_pages",
        "gpu_utilization_ratio",
        "gpu_busy_seconds_total",
        "gpu_encoder_utilization_ratio",
    ):
        assert matching(samples, metric, {}) == [], metric
    assert matching(samples, "gpu_mig_mode", {}) == [1.0]
    assert matching(samples, "gpu_mig_info", {"profile": "3g.40gb"}) == [1.0]


# nvidia-smi's process table: "|    0   N/A  N/A    2165    C+G   /usr/bin/kwin_wayland    25MiB |"
PROCESS_ROW = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>\d+)\s+(?P<type>C\+G|C|G)\s"
    r".*\s(?P<mib>\d+)MiB\s*\|$"
)
CONTEXTS = {"C": "compute", "G": "graphics", "C+G": "compute+graphics"}


def process_table(capture: Capture, state: str) -> dict[tuple[str, str], tuple[str, float]]:
    """{(gpu, pid): (context, bytes)} of the table `nvidia-smi` printed, with its GI, CI
    as the exporter's gpu_instance, compute_instance ("" for N/A)."""
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for line in capture.sections[f"{state} :: nvidia-smi (default table)"].splitlines():
        row = PROCESS_ROW.match(line)
        if row:
            key = (row["gpu"], row["pid"])
            assert key not in out, f"nvidia-smi lists {key} twice"
            out[key] = (CONTEXTS[row["type"]], float(int(row["mib"]) * MIB))
    return out


@every_capture_state
def test_each_process_is_one_series_with_the_memory_and_type_nvidia_smi_lists(
    capture: Capture,
    state: str,
    install: Install,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(capture_host(capture, state))
    # the captured PIDs are another host's: this /proc cannot tell whether they live (in
    # the host's namespace a PID missing from /proc would be a dead owner)
    monkeypatch.setattr(processes, "sees_host_pid_namespace", lambda _root: False)
    assert cli.main(["--once", "--no-collector.host"]) == 0
    samples = parse_samples(capsysbinary.readouterr().out.decode())
    served: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for (name, labels), value in samples.items():
        if name == "gpu_process_memory_used_bytes":
            ls = dict(labels)
            served.setdefault((ls["gpu"], ls["pid"]), []).append((ls["context"], value))
    listed = process_table(capture, state)
    # one series per process, its memory once: a sum by pid, user or pod is nvidia-smi's
    assert served == {key: [want] for key, want in listed.items()}
    if "rtx-4080-super" in capture.name:  # kwin_wayland holds both kinds of context
        assert served[("0", "2165")] == [("compute+graphics", 25.0 * MIB)]


def test_daemon_serves_on_metrics_what_nvidia_smi_printed_for_an_h100_with_mig(
    tmp_path: Path,
) -> None:
    capture = capture_named("nvidia-h100-mig")
    site = Path(__file__).parent / "support" / "capture_site"
    env = {
        "FAKE_NVML_CAPTURE": str(capture.path),
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    exporter = start_exporter(ONCE[1:], tmp_path, env=env)
    try:
        samples = exporter.wait_for(lambda s: matching(s, "gpu_mig_info", {}))
    finally:
        exporter.stop()
    wrong, _ = disagreements(samples, capture.state("idle"))
    assert not wrong, "\n".join(wrong)
    assert matching(samples, "gpu_remapped_rows", {}) == []  # N/A under MIG: absent, not 0
    assert len(matching(samples, "gpu_mig_info", {})) == 4
