"""Contract tests for issue 36 items 1-4: the driver's recovery action, the clocks-event
counters, the PCIe error counters and the NVLink fabric, through the real `pynvml` and the
fake library (`tests/support/fake_nvml.py`), printed by the real program (`--once`).

What the fake was taught first, from nvml.h 13 (and the R575 branch's header):

- field 230 is an `nvmlDeviceGpuRecoveryAction_t`; fields 74, 76 and 269-271 count
  nanoseconds from R580, where R575 numbered the last three 251-253 and gave 269-271 to
  power-smoothing settings; fields 173-182 count PCIe errors;
- `nvmlDeviceGetGpuFabricInfoV` answers a v3 structure (health summary) on R580 and later,
  ARGUMENT_VERSION_MISMATCH for a version the driver does not know, NOT_SUPPORTED where the
  GPU has no fabric; the unversioned call has no health at all;
- the health mask holds a 2-bit value per condition (1 true, 2 false, 0 not supported) and
  a 4-bit incorrect-configuration enumeration at shift 8 (0 not supported, 1 none, 2-8 a
  fault).
"""

from __future__ import annotations

import dataclasses

import pynvml
import pytest

from gpu_exporter import cli
from gpu_exporter.sources.nvml import nvml_h
from gpu_exporter.sources.scenario import Faults, ScenarioError, parse_scenario
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.exporter import Samples, parse_samples
from tests.support.fake_host import busy_h100
from tests.support.fake_nvml import NOT_SUPPORTED, FakeFabric, FakeNvmlLib, Install, h100
from tests.support.fake_sampling import one_second_sampler, started

R580 = "590.48.01"
ONCE = ["--once", "--no-collector.host", "--no-collector.process"]
H = nvml_h
TRUE, FALSE = 1, 2  # a condition's 2-bit value in the health mask
SHIFTS = {
    "degraded_bandwidth": H.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW,
    "route_recovery": H.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY,
    "route_unhealthy": H.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY,
    "access_timeout_recovery": H.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
}
CONFIG_SHIFT = H.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION
UUID_BYTES = bytes(range(1, 17))
CLUSTER = "01020304-0506-0708-090a-0b0c0d0e0f10"


def mask(value: int, config: int) -> int:
    """Every 2-bit condition at `value`, incorrect configuration at `config`."""
    return sum(value << shift for shift in SHIFTS.values()) | config << CONFIG_SHIFT


def series(
    samples: Samples, metric: str, gpu_index: int
) -> dict[tuple[tuple[str, str], ...], float]:
    """The series of `metric` for one GPU: labels other than gpu and uuid -> value."""
    return {
        tuple((k, v) for k, v in labels if k not in ("gpu", "uuid")): value
        for (name, labels), value in samples.items()
        if name == metric and ("gpu", str(gpu_index)) in labels
    }


def once(install: Install, lib: FakeNvmlLib, capsysbinary: pytest.CaptureFixture[bytes]) -> Samples:
    install(lib)
    assert cli.main(ONCE) == 0
    return parse_samples(capsysbinary.readouterr().out.decode())


def test_each_answer_of_the_driver_becomes_the_series_nvml_h_says(
    install: Install, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """One host, one case per GPU: a healthy v3 fabric, every condition holding with a
    named misconfiguration and an unknown recovery action, a completed probe that failed,
    no fabric at all, a v2-only and a v1-only driver, a probe not yet started."""
    gpus = [h100(i) for i in range(7)]
    healthy, troubled, failed, none, v2, v1, waiting = gpus
    healthy.fabric = FakeFabric(
        clique_id=7, cluster_uuid=UUID_BYTES, health_mask=mask(FALSE, 1), health_summary=1
    )
    healthy.fields.update(
        {
            H.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0,
            H.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: 1_500_000_000,
            H.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: 0,
            H.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: 2_000_000_000,
            H.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: 250_000,
        }
    )
    healthy.field_errors[H.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN] = NOT_SUPPORTED
    troubled.fabric = FakeFabric(
        clique_id=7, cluster_uuid=UUID_BYTES, health_mask=mask(TRUE, 5), health_summary=3
    )
    troubled.fields[H.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION] = 42  # a code nvml.h does not name
    failed.fabric = FakeFabric(
        status=pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES,
        health_mask=mask(FALSE, 1),
        health_summary=2,
    )
    failed.fields[H.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION] = 3
    none.field_errors[H.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION] = NOT_SUPPORTED
    for field_id in range(173, 183):
        none.fields.pop(field_id)
    # route recovery in progress, the rest not reported; a fault nvml.h does not name (9)
    v2.fabric = FakeFabric(
        clique_id=3,
        health_mask=TRUE << SHIFTS["route_recovery"] | 9 << CONFIG_SHIFT,
        health_summary=1,
        max_version=2,
    )
    v1.fabric = FakeFabric(state=2, health_mask=mask(TRUE, 5), max_version=1)
    waiting.fabric = FakeFabric(state=1)
    lib = FakeNvmlLib(gpus, driver_version=R580)
    samples = once(install, lib, capsysbinary)

    def of(metric: str, index: int) -> dict[tuple[tuple[str, str], ...], float]:
        return series(samples, metric, index)

    # item 1: one series per GPU, the action by name, or its number
    assert of("gpu_recovery_action", 0) == {(("action", "none"),): 1.0}
    assert of("gpu_recovery_action", 1) == {(("action", "42"),): 1.0}
    assert of("gpu_recovery_action", 2) == {(("action", "drain_p2p"),): 1.0}
    assert of("gpu_recovery_action", 3) == {}  # NOT_SUPPORTED: absent
    # item 2: ns -> s, absent (never 0) per reason the driver does not count
    assert of("gpu_clock_event_seconds_total", 0) == {
        (("reason", "sw_power_cap"),): 1.5,
        (("reason", "sync_boost"),): 0.0,
        (("reason", "sw_thermal_slowdown"),): 2.0,
        (("reason", "hw_power_brake_slowdown"),): 0.00025,
    }
    assert of("gpu_clock_event_seconds_total", 3) == {}
    # item 4: every counter of the batch, by type
    assert of("gpu_pcie_errors_total", 0)[(("error_type", "correctable"),)] == 12.0
    assert len(of("gpu_pcie_errors_total", 0)) == 10
    assert of("gpu_pcie_errors_total", 3) == {}
    # item 3: a healthy fabric on the v3 structure
    assert of("gpu_fabric_state", 0) == {(("state", "completed"), ("status", "success")): 1.0}
    assert of("gpu_fabric_info", 0) == {(("clique_id", "7"), ("cluster_uuid", CLUSTER)): 1.0}
    assert of("gpu_fabric_healthy", 0) == {(("summary", "healthy"),): 1.0}
    conditions = {(("condition", c),): 0.0 for c in (*SHIFTS, "incorrect_configuration")}
    assert of("gpu_fabric_health_condition", 0) == conditions
    # every bit of the mask set, the misconfiguration named; limited capacity is not healthy
    assert of("gpu_fabric_health_condition", 1) == {
        **{(("condition", c),): 1.0 for c in SHIFTS},
        (("condition", "incorrect_configuration"), ("fault", "insufficient_nvlinks")): 1.0,
    }
    assert of("gpu_fabric_healthy", 1) == {(("summary", "limited_capacity"),): 0.0}
    # a completed probe that failed: the error named, no clique or cluster, no made-up health
    assert of("gpu_fabric_state", 2) == {
        (("state", "completed"), ("status", "insufficient_resources")): 1.0
    }
    assert of("gpu_fabric_info", 2) == {}
    assert of("gpu_fabric_healthy", 2) == {(("summary", "unhealthy"),): 0.0}
    # no fabric: nothing at all
    for metric in ("gpu_fabric_state", "gpu_fabric_info", "gpu_fabric_healthy"):
        assert of(metric, 3) == {}, metric
    assert of("gpu_fabric_health_condition", 3) == {}
    # v2: the mask but no summary; an unnamed fault by its number
    assert of("gpu_fabric_healthy", 4) == {}
    assert of("gpu_fabric_health_condition", 4) == {
        (("condition", "route_recovery"),): 1.0,
        (("condition", "incorrect_configuration"), ("fault", "9")): 1.0,
    }
    # v1: no health at all, whatever the (absent) mask would say; still in progress
    assert of("gpu_fabric_state", 5) == {(("state", "in_progress"),): 1.0}
    assert of("gpu_fabric_health_condition", 5) == {}
    assert of("gpu_fabric_info", 5) == {}
    assert of("gpu_fabric_state", 6) == {(("state", "not_started"),): 1.0}
    # the newest structure each driver knows, then no older one; no fabric: asked once
    assert lib.count("nvmlDeviceGetGpuFabricInfoV", 0) == 1
    assert lib.count("nvmlDeviceGetGpuFabricInfo", 0) == 0
    assert lib.count("nvmlDeviceGetGpuFabricInfoV", 3) == 1
    assert lib.count("nvmlDeviceGetGpuFabricInfo", 3) == 0
    assert lib.count("nvmlDeviceGetGpuFabricInfoV", 4) == 2
    assert (
        lib.count("nvmlDeviceGetGpuFabricInfoV", 5),
        lib.count("nvmlDeviceGetGpuFabricInfo", 5),
    ) == (2, 1)
    # nothing of it was an error
    assert not [k for k in samples if k[0] == "gpu_exporter_nvml_errors_total"]


R575_THERMAL = (251, 252, 253)
R580_THERMAL = (269, 270, 271)


@pytest.mark.parametrize(
    ("driver", "thermal"),
    [
        ("575.57.08", R575_THERMAL),
        ("580.65.06", R580_THERMAL),
        ("570.124.06", ()),
        ("565.57.01", ()),
        ("560.35.03", ()),
    ],
)
def test_each_driver_is_asked_the_ids_its_own_header_gives(
    driver: str,
    thermal: tuple[int, ...],
    install: Install,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    """R575 numbered the thermal and power-brake counters 251-253 and used 269-271 for
    power-smoothing settings; R580 swapped them. A driver answers both ranges here, the
    wrong one with a setting (3): only the durations may be printed, in seconds. The
    recovery action (230) never meant anything else: every branch is asked for it (a real
    R565 answers it), and NOT_SUPPORTED decides."""
    g = h100()
    g.fields.update({field_id: 3 for field_id in (*R575_THERMAL, *R580_THERMAL)})
    g.fields.update({74: 4_000_000_000, 76: 0, H.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 1})
    for field_id in thermal:
        g.fields[field_id] = 5_000_000_000
    lib = FakeNvmlLib([g], driver_version=driver, record=True)
    samples = once(install, lib, capsysbinary)
    events = series(samples, "gpu_clock_event_seconds_total", 0)
    if thermal:
        assert events == {
            (("reason", "sw_power_cap"),): 4.0,
            (("reason", "sync_boost"),): 0.0,
            **{
                (("reason", r),): 5.0
                for r in ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
            },
        }
    else:  # before R575 no header says these fields count nanoseconds
        assert events == {}
    asked = {field_id for request in lib.field_requests for field_id in request}
    assert asked & {*R575_THERMAL, *R580_THERMAL} == set(thermal)
    assert H.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION in asked
    actions = series(samples, "gpu_recovery_action", 0)
    assert actions == {(("action", "gpu_reset"),): 1.0}


def test_the_fabric_is_read_at_enumeration_and_every_minute_and_no_call_is_added_per_interval(
    install: Install,
) -> None:
    """The batch grows, the call count does not: the health collector costs one fabric
    call per GPU a minute, nothing per interval. A fabric that turns unhealthy shows within
    the minute."""
    gpus = [busy_h100(0), busy_h100(1)]
    gpus[0].fabric = FakeFabric(clique_id=1, health_mask=mask(FALSE, 1), health_summary=1)
    lib = install(FakeNvmlLib(gpus, driver_version=R580))

    def calls_per_interval(collectors: frozenset[str]) -> tuple[float, list[object]]:
        lib.calls.clear()
        _lib, backend, clock = started(install, *gpus)
        install(lib)
        sampler = one_second_sampler(backend, clock, collectors)
        snapshots: list[object] = []
        for second in range(125):
            if second == 5:
                before = sum(n for (_fn, i), n in lib.calls.items() if i is not None)
            if second == 55:
                after = sum(n for (_fn, i), n in lib.calls.items() if i is not None)
            if second == 70:
                gpus[0].fabric = dataclasses.replace(gpus[0].fabric, health_summary=2)
            snapshots.append(sampler.sample_once())
            clock.now += 1
        sampler.stop(0)
        return (after - before) / 50 / len(gpus), snapshots

    base = frozenset({"utilization", "memory", "temperature", "power", "clocks", "pcie", "ecc"})
    without, _ = calls_per_interval(base)
    assert lib.count("nvmlDeviceGetGpuFabricInfoV") == 0
    gpus[0].fabric = dataclasses.replace(gpus[0].fabric, health_summary=1)
    with_health, snapshots = calls_per_interval(base | {"health"})
    assert with_health == without
    # at 0, 60 and 120 s: once a minute per GPU, the one without a fabric too
    assert lib.count("nvmlDeviceGetGpuFabricInfoV", 0) == 3
    assert lib.count("nvmlDeviceGetGpuFabricInfoV", 1) == 3

    def healthy(snapshot: object) -> bool | None:
        fabric = snapshot.devices[0].reading.health.fabric  # type: ignore[attr-defined]
        return fabric.healthy

    assert healthy(snapshots[59]) is True and healthy(snapshots[70]) is True
    assert healthy(snapshots[121]) is False


def test_the_simulated_host_offers_the_driver_s_verdicts_as_faults() -> None:
    """An HGX-like simulated host: a healthy fabric everywhere, no action needed; the
    scenario makes a GPU need a reboot and fabrics unhealthy or unregistered."""
    scenario = parse_scenario(
        {
            "faults": {
                "recovery_action": {0: "node_reboot", 1: 9},
                "fabric": {1: "unhealthy", 2: "not_registered", 3: "probe_failed"},
            }
        }
    )
    now = [1_800_000_001.0]  # 1 s into a 10 s power wave: the busy-hot GPU is capped
    backend = SimulatedBackend(5, clock=lambda: now[0], faults=scenario.faults)
    backend.init()
    all_on = frozenset({"health", "clocks"})
    readings = [backend.device_reading(i, all_on).health for i in range(5)]
    assert [r.recovery_action for r in readings] == [2, 9, 0, 0, 0]
    fabrics = [r.fabric for r in readings]
    assert [f.registered for f in fabrics] == [True, True, False, False, True]
    assert [f.healthy for f in fabrics] == [True, False, None, None, True]
    assert fabrics[2].state == "not_started" and fabrics[3].status == "insufficient_resources"

    # the busy-hot GPU (3): its power-cap counter grows while it is capped, and only then
    def capped() -> tuple[bool, float]:
        clocks = backend.device_reading(3, all_on).clocks
        assert clocks.throttle_reasons is not None and clocks.event_seconds["sync_boost"] == 0
        return clocks.throttle_reasons["sw_power_cap"], clocks.event_seconds["sw_power_cap"]

    active, first = capped()
    now[0] += 3.0  # still in the capped half of the wave
    still, second = capped()
    now[0] += 3.0  # past it: 6 s into the wave, capped until 5 s
    released, third = capped()
    now[0] += 3.0  # 9 s in: not capped
    _, fourth = capped()
    assert (active, still, released) == (True, True, False)
    assert second - first == pytest.approx(3.0)
    assert third - second == pytest.approx(1.0)
    assert fourth == third
    with pytest.raises(ScenarioError, match="recovery_action"):
        parse_scenario({"faults": {"recovery_action": {0: "reboot_please"}}})
    with pytest.raises(ScenarioError, match="fabric"):
        parse_scenario({"faults": {"fabric": {0: "broken"}}})
    assert Faults().fabric == {}
