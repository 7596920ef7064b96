"""One recommended action per GPU (issue 36, item 6): every rule of the table, driven
one by one; the strongest action wins; no signal, no action; and end to end, the real
program on a simulated host with driver faults and a kernel log of Xids."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_exporter.model import (
    RECOVERY_ACTIONS,
    Attribution,
    DeadOwner,
    DeviceHolder,
    DeviceReading,
    DeviceSample,
    EccReading,
    FabricReading,
    HealthReading,
    MemoryReading,
    Snapshot,
    XidState,
)
from gpu_exporter.sampling import actions
from gpu_exporter.sampling.actions import RULES, XID_CATALOG, Recommendation, recommend
from gpu_exporter.sources.backend import LOST
from gpu_exporter.sources.nvml.calls import code_name
from tests.support.exporter import series, start_exporter, values
from tests.test_faults_e2e import FAST, write_scenario
from tests.test_processes import STATIC

NOW = 1_800_000_000.0
GIB = 2**30
CLEAN_ECC = EccReading(
    uncorrected_errors=0,
    retired_pages_pending=False,
    remapped_rows_pending=False,
    remapped_rows_failed=False,
)
HEALTHY_FABRIC = FabricReading(state="completed", status="success", summary="healthy")
HEALTHY = HealthReading(recovery_action=0, fabric=HEALTHY_FABRIC)


def device(
    ecc: EccReading | None = CLEAN_ECC,
    health: HealthReading | None = HEALTHY,
    *,
    up: bool = True,
    lost: bool = False,
) -> DeviceSample:
    reading = DeviceReading(ecc=ecc, health=health) if up else None
    return DeviceSample(0, STATIC, up=up, lost=lost, reading=reading)


def leaked(
    held: bool, *, complete: bool = True, scanned: bool = True, live: int = 0
) -> DeviceSample:
    """A healthy GPU holding 4.5 GiB whose listed owner (pid 1567) is dead; with `held`, its
    forked child (pid 1592) holds the device file."""
    holders = (DeviceHolder(1592, "python3", "alice"),) if held else ()
    attribution = Attribution(
        (),
        4 * GIB,
        live,
        dead_owners=(DeadOwner(1567, "gone", 4 * GIB),),
        holders=holders if scanned else None,
        holders_complete=complete,
    )
    memory = MemoryReading(total_bytes=141 * GIB, used_bytes=4 * GIB + GIB // 2)
    return replace(
        device(),
        reading=DeviceReading(ecc=CLEAN_ECC, health=HEALTHY, memory=memory),
        attribution=attribution,
    )


def test_a_leak_asks_to_end_the_holder_or_to_reset_only_when_the_scan_proves_none() -> None:
    assert judged(leaked(True)) == Recommendation("restart_workload", "memory_leaked_held")
    assert judged(leaked(False)) == Recommendation("reset_gpu", "memory_leaked")
    # a scan that could not read every process proves no absence; none yet decides nothing
    assert judged(leaked(False, complete=False)) == Recommendation("none", "none")
    assert judged(leaked(True, scanned=False)) == Recommendation("none", "none")
    assert judged(leaked(False, live=1)) == Recommendation("none", "none")  # a live owner


def judged(d: DeviceSample, xids: dict[int, float] | None = None) -> Recommendation | None:
    xid = {STATIC.uuid: XidState(last_timestamps=xids)} if xids is not None else {}
    snapshot = Snapshot(NOW, 0.1, 1, "nvml", True, devices=(d,), xid=xid)
    return recommend(snapshot, d)


def _case(signal: str) -> tuple[DeviceSample, dict[int, float] | None, str]:
    """A GPU on which only `signal` fires, its Xids, and the reason it must give."""
    if signal == "gpu_lost":
        return device(up=False, lost=True), None, signal
    if signal.startswith("recovery_action_"):
        name = signal.removeprefix("recovery_action_")
        code = next((c for c, n in RECOVERY_ACTIONS.items() if n == name), 99)
        return device(health=HealthReading(code, HEALTHY_FABRIC)), None, signal
    if signal.startswith("xid_"):
        bucket = signal.removeprefix("xid_").upper()
        code = min(x for x, b in XID_CATALOG.items() if b == bucket)
        return device(), {code: NOW - 60}, f"xid_{code}"
    fabric = {
        "fabric_unhealthy": replace(HEALTHY_FABRIC, summary="unhealthy"),
        "fabric_registration_failed": replace(HEALTHY_FABRIC, status="insufficient_resources"),
    }
    if signal in fabric:
        return device(health=HealthReading(0, fabric[signal])), None, signal
    if signal.startswith("memory_leaked"):
        return leaked(signal == "memory_leaked_held"), None, signal
    ecc = {
        "row_remap_failed": replace(CLEAN_ECC, remapped_rows_failed=True),
        "row_remap_pending": replace(CLEAN_ECC, remapped_rows_pending=True),
        "page_retirement_pending": replace(CLEAN_ECC, retired_pages_pending=True),
        "uncorrectable_ecc": replace(CLEAN_ECC, uncorrected_errors=2),
    }
    return device(ecc=ecc[signal]), None, signal


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.signal)
def test_each_rule_alone_gives_its_action_and_names_its_signal(rule: actions.Rule) -> None:
    d, xids, reason = _case(rule.signal)
    assert judged(d, xids) == Recommendation(rule.action, reason)
    assert rule.source and rule.condition


def test_a_healthy_gpu_needs_nothing_and_one_with_no_signal_gets_no_answer() -> None:
    assert judged(device(), {}) == Recommendation("none", "none")
    assert judged(device(ecc=None, health=None)) is None  # nothing read: never "none"
    assert judged(device(up=False)) is None  # down for a timeout: GPUDown says so
    # one signal read is enough to say "none"
    assert judged(device(ecc=None, health=HealthReading(0, None))) == Recommendation("none", "none")


def test_the_strongest_action_wins_and_the_first_row_names_an_equal_one() -> None:
    many = device(
        ecc=replace(CLEAN_ECC, remapped_rows_pending=True, uncorrected_errors=1),
        health=HealthReading(3, replace(HEALTHY_FABRIC, summary="unhealthy")),  # drain_p2p
    )
    assert judged(many, {13: NOW - 5}) == Recommendation("drain", "recovery_action_drain_p2p")
    assert judged(many, {79: NOW - 5}) == Recommendation("reboot_node", "xid_79")
    failed = replace(CLEAN_ECC, remapped_rows_failed=True)
    assert judged(device(ecc=failed), {79: NOW}) == Recommendation(
        "inspect_hardware", "row_remap_failed"
    )
    # of two Xids with the same action, the first row names it (RESET_GPU's before
    # WORKFLOW_XID_48's), and in one row the lower code
    assert judged(device(), {95: NOW, 48: NOW}) == Recommendation("reset_gpu", "xid_95")
    assert judged(device(), {119: NOW, 95: NOW}) == Recommendation("reset_gpu", "xid_95")


def test_xids_decide_for_an_hour_and_only_those_the_catalog_gives_an_action() -> None:
    hour = actions.RECENT_XID_SECONDS
    assert judged(device(), {79: NOW - hour + 1}) == Recommendation("reboot_node", "xid_79")
    assert judged(device(), {79: NOW - hour - 1}) == Recommendation("none", "none")
    for quiet in (43, 45, 63, 92, 154, 999):  # IGNORE, cleanup, "see the other Xid", unknown
        assert judged(device(), {quiet: NOW}) == Recommendation("none", "none")
    assert judged(device(), {31: NOW}) == Recommendation("restart_workload", "xid_31")
    assert judged(device(), {94: NOW}) == Recommendation("restart_workload", "xid_94")
    assert judged(device(), {95: NOW}) == Recommendation("reset_gpu", "xid_95")
    assert judged(device(), {74: NOW}) == Recommendation("reset_gpu", "xid_74")


def test_the_xid_catalog_names_each_code_once_and_the_lost_error_is_nvmls() -> None:
    listed = [x for xids in actions._BUCKETS.values() for x in xids]
    assert len(listed) == len(set(listed)) == len(XID_CATALOG)
    # the catalog's codes 1 to 162 that decide nothing: IGNORE, Xid 45's cleanup, 78's
    # software update, 154's "see the other Xid", 159's CHECK_UVM
    quiet = set(range(1, 163)) - set(XID_CATALOG)
    assert quiet == {
        *(14, 37, 38, 43, 44, 45, 63, 66, 67, 78, 92, 93, 106, 107, 121, 137, 141),
        *(152, 153, 154, 157, 159, 161),
    }
    import pynvml

    assert code_name(pynvml.NVML_ERROR_GPU_IS_LOST) == LOST


def test_the_real_program_recommends_from_driver_faults_and_kernel_log_xids(
    tmp_path: Path,
) -> None:
    """--simulate 4: GPU 0 has an Xid 79 in the kernel log (before start), GPU 1's driver
    asks for drain_p2p, GPU 2's fabric is unhealthy, GPU 3 is lost; the live page's JSON
    says the same as the metric."""
    now_usec = int(time.monotonic() * 1e6)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(
        f"4,1,{max(0, now_usec - 60_000_000)},-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, "
        "GPU has fallen off the bus.\n"
    )
    scenario = tmp_path / "scenario.json"
    write_scenario(
        scenario,
        {"faults": {"recovery_action": {1: "drain_p2p"}, "fabric": {2: "unhealthy"}, "lost": [3]}},
    )
    exporter = start_exporter(
        ["--simulate", "4", "--simulate.scenario", str(scenario), *FAST]
        + ["--collector.xid.kernel-log", str(kmsg)],
        tmp_path,
    )
    try:
        s = exporter.wait_for(
            lambda s: values(s, "gpu_recommended_action", action="reboot_node", gpu="0")
        )
        wanted = {
            "0": ("reboot_node", "xid_79"),
            "1": ("drain", "recovery_action_drain_p2p"),
            "2": ("drain", "fabric_unhealthy"),
            "3": ("reboot_node", "gpu_lost"),
        }
        found = {
            labels["gpu"]: (labels["action"], labels["reason"])
            for labels in series(s, "gpu_recommended_action")
        }
        assert found == wanted
        doc = json.loads(exporter.get("/api/overview").text)
        shown = {
            str(g["index"]): (g["recommended_action"]["action"], g["recommended_action"]["reason"])
            for g in doc["gpus"]
            if g.get("recommended_action")
        }
        assert shown == wanted
    finally:
        exporter.stop()
