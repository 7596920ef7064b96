"""deploy/alertmanager/alertmanager.yml: checked by amtool, and run by a real Alertmanager
that posts to a webhook here: grouped per node, hardware to the pager, waste to tickets,
symptoms of a down exporter or a lost GPU held back."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.alertmanager import (
    EXAMPLE,
    Alertmanager,
    Webhook,
    loopback_config,
    start_alertmanager,
    start_webhook,
)
from tests.support.exporter import REPO
from tests.support.web import eventually

RULES = REPO / "deploy" / "prometheus" / "rules" / "gpu-alerts.yml"
RECEIVER_OF_SEVERITY = {"critical": "gpu-hardware", "warning": "gpu-team", "info": "gpu-waste"}


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def alert_severities() -> dict[str, str]:
    return {name: rule["labels"]["severity"] for name, rule in _rules().items()}


def _seconds(duration: str) -> int:
    """A rule's `for:` (`30s`, `5m`, `1h`) in seconds; none is 0."""
    unit = {"s": 1, "m": 60, "h": 3600}[duration[-1]]
    return int(duration[:-1]) * unit


# The action alert that a held-back fault with a `for:` of its own leads to
# (docs/actions.md): the fault must wait longer than that action.
ACTION_OF_FAULT = {
    "GPULost": "GPUNeedsReboot",  # gpu_lost -> reboot_node
    "GPURowRemapPending": "GPUNeedsReset",  # row_remap_pending -> reset_gpu
    "GPUFabricNotRegistered": "GPUNeedsDrain",  # fabric_registration_failed -> drain
    "GPUMemoryLeaked": "GPUNeedsReset",  # memory_leaked -> reset_gpu
}


def test_no_fault_an_action_holds_back_fires_before_the_action() -> None:
    """An inhibition holds an alert back only while its source fires, and the action
    alerts wait their `for:`: a held-back fault that fired first paged on its own (an
    Xid 79 paged GPUXidCritical 30 s after it was logged, then GPUNeedsReboot). Each
    target of the actions' inhibit rule either steps aside in its expression while its
    GPU has an action that pages, or waits at least a minute longer than its action."""
    config = yaml.safe_load(EXAMPLE.read_text())
    (rule,) = [
        r
        for r in config["inhibit_rules"]
        if any("GPUNeedsReboot" in m for m in r["source_matchers"])
    ]
    assert "gpu" in rule["equal"]
    pattern = rule["source_matchers"][0].split("=~", 1)[1].strip('"')
    rules = _rules()
    sources = [name for name in rules if re.fullmatch(pattern, name)]
    # each reads one action (twice: with the GPU's rack labels, and without where it has none)
    paging = sorted(
        set(re.findall(r'gpu_recommended_action\{action="(\w+)"\} == 1', rules[s]["expr"])).pop()
        for s in sources
    )
    assert paging == ["drain", "inspect_hardware", "reboot_node", "reset_gpu"]
    step_aside = (
        "unless on (job, instance, gpu)\n"
        '  gpu_recommended_action{action=~"reboot_node|inspect_hardware|drain|reset_gpu"} == 1'
    )
    targets = [
        name
        for name in rules
        if re.fullmatch(rule["target_matchers"][0].split("=~", 1)[1].strip('"'), name)
    ]
    assert len(targets) == 8, targets
    step_aside = " ".join(step_aside.split())
    for name in targets:
        expr = " ".join(rules[name]["expr"].split())
        waits = _seconds(rules[name].get("for", "0s"))
        if name in ACTION_OF_FAULT:
            action = rules[ACTION_OF_FAULT[name]]
            assert waits >= _seconds(action["for"]) + 60, (name, waits)
            assert "unless" not in expr, name
        else:
            assert step_aside in expr, f"{name} fires before its action: {expr}"


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["amtool", *args], capture_output=True, text=True, timeout=30, check=False
    )


def test_amtool_accepts_the_example() -> None:
    result = amtool("check-config", str(EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "3 inhibit rules" in result.stdout


@pytest.mark.parametrize(("alert", "severity"), sorted(alert_severities().items()))
def test_every_alert_routes_to_the_receiver_of_its_severity(alert: str, severity: str) -> None:
    expected = RECEIVER_OF_SEVERITY[severity]
    result = amtool(
        "config",
        "routes",
        "test",
        "--config.file",
        str(EXAMPLE),
        f"--verify.receivers={expected}",
        f"alertname={alert}",
        f"severity={severity}",
        "instance=gpu-node-001:9872",
        "gpu=0",
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Alertmanager, Webhook]]:
    workdir = tmp_path_factory.mktemp("alertmanager")
    webhook = start_webhook()
    manager = None
    try:
        manager = start_alertmanager(loopback_config(webhook.url), workdir)
        yield manager, webhook
    finally:
        if manager is not None:
            manager.stop()
        webhook.stop()


def _alert(name: str, instance: str, gpu: str | None = None) -> dict[str, Any]:
    labels = {
        "alertname": name,
        "severity": alert_severities()[name],
        "cluster": "gpu-cluster-1",
        "instance": instance,
        "job": "gpu-exporter",
    }
    if gpu is not None:
        labels["gpu"] = gpu
    now = datetime.now(timezone.utc).isoformat()
    return {"labels": labels, "annotations": {"summary": name}, "startsAt": now}


def _key(alert: dict[str, Any]) -> tuple[str, str, str]:
    labels = alert["labels"]
    return labels["alertname"], labels["instance"], labels.get("gpu", "")


def test_routes_groups_and_inhibitions_in_a_real_alertmanager(
    running: tuple[Alertmanager, Webhook],
) -> None:
    manager, webhook = running
    a, b = "gpu-node-001:9872", "gpu-node-002:9872"
    # the alerts that inhibit others first, as Prometheus has them firing by the time
    # their symptoms fire: Alertmanager's inhibitor takes a new alert in apart from the
    # routes, so a symptom posted with its cause in one request can reach a route with
    # a group_wait of 1 s before the inhibitor has its cause (seen under load)
    causes = [
        _alert("GPUExporterDown", a),
        _alert("GPULost", b, "1"),
        _alert("GPUNeedsReboot", b, "4"),
    ]
    manager.post(causes)
    webhook.wait_for(lambda alerts: len(alerts) == len(causes))
    # GPU 4 fell off the bus: three alerts, one page, the one that says what to do. Its
    # GPULost, held back by GPUNeedsReboot, is itself the cause that holds back the GPU's
    # symptoms: it goes first too (posted with its symptom, the symptom was sent once
    # under make test's load), and being held back it sends nothing to wait for, so the
    # wait is on Alertmanager's list, then a group_wait more for its inhibitor
    gpu_4 = [_alert("GPULost", b, "4"), _alert("GPUXidCritical", b, "4")]
    manager.post(gpu_4)
    eventually(
        lambda: (
            {_key(a) for a in manager.alerts() if a["status"]["inhibitedBy"]}
            == {_key(a) for a in gpu_4}
        ),
        timeout=30,
        what="GPU 4's GPULost and GPUXidCritical listed as held back",
    )
    time.sleep(1.0)
    manager.post(
        [
            _alert("GPUMemoryNearFull", a, "0"),  # a symptom of node a's exporter being down
            _alert("GPUThermalThrottling", b, "1"),  # a symptom of GPU 1 being lost
            _alert("GPUMemoryNearFull", b, "0"),
            _alert("GPUThermalThrottling", b, "2"),
            _alert("GPUIdleWhileAllocated", b, "3"),
            _alert("GPUThermalThrottling", b, "4"),
        ]
    )
    expected = {
        "/gpu-hardware": {
            ("GPUExporterDown", a, ""),
            ("GPULost", b, "1"),
            ("GPUNeedsReboot", b, "4"),
        },
        "/gpu-team": {("GPUMemoryNearFull", b, "0"), ("GPUThermalThrottling", b, "2")},
        "/gpu-waste": {("GPUIdleWhileAllocated", b, "3")},
    }

    def delivered(alerts: list[tuple[str, dict[str, Any]]]) -> dict[str, set[tuple[str, ...]]]:
        out: dict[str, set[tuple[str, ...]]] = {}
        for path, alert in alerts:
            out.setdefault(path, set()).add(_key(alert))
        return out

    webhook.wait_for(lambda alerts: delivered(alerts) == expected)
    time.sleep(2.5)  # two more group intervals: the held-back alerts must stay held back
    assert delivered(webhook.alerts()) == expected, manager.log()
    # one notification carries node b's two warnings: grouped per node
    team = [body for path, body in webhook.received if path == "/gpu-team"]
    assert any(len(body["alerts"]) == 2 for body in team), team
    # and Alertmanager itself says why the two others were not sent
    inhibited = {_key(alert) for alert in manager.alerts() if alert["status"]["inhibitedBy"]}
    assert inhibited == {
        ("GPUMemoryNearFull", a, "0"),
        ("GPUThermalThrottling", b, "1"),
        ("GPULost", b, "4"),
        ("GPUXidCritical", b, "4"),
        ("GPUThermalThrottling", b, "4"),
    }


def test_the_example_is_what_the_test_runs(tmp_path: Path) -> None:
    """The loopback copy changes only URLs and delays: routes and inhibitions are the file's."""
    example = yaml.safe_load(EXAMPLE.read_text())
    copy = loopback_config("http://127.0.0.1:1")
    assert copy["inhibit_rules"] == example["inhibit_rules"]
    assert [r["matchers"] for r in copy["route"]["routes"]] == [
        r["matchers"] for r in example["route"]["routes"]
    ]
    assert [r["name"] for r in copy["receivers"]] == [r["name"] for r in example["receivers"]]


def _rack_alert(name: str, instance: str, gpu: str, rack: str | None, tray: str) -> dict[str, Any]:
    """An alert of a GPU with the rack labels the rules give it (none: a GPU outside a rack)."""
    alert = _alert(name, instance, gpu)
    if rack is not None:
        alert["labels"] |= {"chassis_serial": rack, "slot": str(int(tray) + 4), "tray": tray}
    return alert


def test_a_lost_tray_pages_once_and_a_rack_s_nvlink_warnings_arrive_together(
    tmp_path: Path,
) -> None:
    """GB200 NVL72: the four GPUs of one compute tray fall off the bus (here four VMs of
    one GPU each, so grouping per node would page four times): one notification to the
    pager holding the four. A failed NVLink switch tray takes links of GPUs on other
    trays of the same rack: one notification to the team. GPUs outside any rack are
    grouped per node, as before, not lumped together by their missing rack label."""
    webhook = start_webhook()
    manager = None
    try:
        # the posted alerts reach the dispatcher one by one: under load (a full `make test`)
        # the tray's first GPU once waited out a 1 s group_wait alone and was sent apart;
        # production waits 30 s
        manager = start_alertmanager(loopback_config(webhook.url, group_wait="3s"), tmp_path)
        rack, other = "1821424007777", "1821424008888"
        tray = [_rack_alert("GPULost", f"gb200-r7-t5-vm{g}:9872", "0", rack, "5") for g in range(4)]
        links = [
            _rack_alert("GPUNVLinkDown", f"gb200-r7-t{t}:9872", "1", rack, t) for t in ("2", "9")
        ]
        elsewhere = [
            _rack_alert("GPULost", "gb200-r8-t1:9872", "2", other, "1"),
            _rack_alert("GPULost", "hgx-001:9872", "3", None, ""),
            _rack_alert("GPULost", "hgx-002:9872", "3", None, ""),
        ]
        manager.post(tray + links + elsewhere)

        def groups(path: str) -> list[set[str]]:
            return [
                {a["labels"]["instance"] for a in body["alerts"]}
                for p, body in webhook.received
                if p == path
            ]

        webhook.wait_for(lambda alerts: len(alerts) == 9)
        time.sleep(2.5)  # two more group intervals: nothing is split off or sent again apart
        pages = groups("/gpu-hardware")
        assert {f"gb200-r7-t5-vm{g}:9872" for g in range(4)} in pages, pages
        assert {"gb200-r8-t1:9872"} in pages and {"hgx-001:9872"} in pages, pages
        assert {"hgx-002:9872"} in pages, pages
        # the lost tray: one notification, never one per GPU
        assert not [g for g in pages if g < {f"gb200-r7-t5-vm{g}:9872" for g in range(4)}]
        assert groups("/gpu-team") == [{"gb200-r7-t2:9872", "gb200-r7-t9:9872"}]
        (page,) = [
            body
            for p, body in webhook.received
            if p == "/gpu-hardware" and body["groupLabels"].get("chassis_serial") == rack
        ]
        assert page["groupLabels"] == {"cluster": "gpu-cluster-1", "chassis_serial": rack}
        assert {a["labels"]["tray"] for a in page["alerts"]} == {"5"}
    finally:
        if manager is not None:
            manager.stop()
        webhook.stop()
