"""A GB200 NVL72 compute tray end to end: the simulated tray (4 GPUs with platform info and
NVLink5 counters, one link degrading) and an H100 board, scraped by the example
Prometheus with the shipped rules (recording groups every second, alerts without their
`for:`) and alerting the example Alertmanager. The rack rule remembers where each GPU
sits, the NVLink trend rules find the exporter's series, the Fleet dashboard's rack view
counts per rack and tray, and when the tray's four GPUs fall off the bus the pager gets
one notification for the rack, not four. Both exporters run as root and, in a second round,
as shipped (uid 0 without capabilities)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.alertmanager import (
    Alertmanager,
    Webhook,
    loopback_config,
    start_alertmanager,
    start_webhook,
)
from tests.support.dashboards import PARSE_VALUES, queries, substitute
from tests.support.exporter import Exporter
from tests.support.fleet import EXAMPLES, cluster_config, immediate_alert_rules, write_yaml
from tests.support.privileges import PROFILES, start_as
from tests.support.prometheus import Prometheus, start_prometheus

pytestmark = pytest.mark.e2e

RACK_RULE = "instance_gpu:gpu_platform_info:last_seen_timestamp1d"
TREND_RULE = "instance_gpu_link:gpu_nvlink_degrading:increase1h"


@dataclass
class Rack:
    tray: Exporter
    board: Exporter
    tray_scenario: Path
    prometheus: Prometheus
    alertmanager: Alertmanager
    webhook: Webhook

    def instance(self, exporter: Exporter) -> str:
        return f"127.0.0.1:{exporter.port}"


def _started(profile: str, args: list[str], workdir: Path) -> Exporter:
    exporter = start_as(profile, args, workdir)
    exporter.wait_for(lambda samples: bool(samples), timeout=30)
    return exporter


@pytest.fixture(scope="module", params=PROFILES)
def rack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Rack]:
    profile: str = request.param
    workdir = tmp_path_factory.mktemp("rack")
    webhook = start_webhook()
    started: list[Any] = []
    try:
        # GPU 0's link 7 degrades from the start (the simulated tray's own fault)
        scenario = write_yaml(workdir / "tray.yml", {"faults": {"nvlink_degrading": {0: 7}}})
        tray = _started(
            profile,
            [
                "--simulate",
                "4",
                "--simulate.hardware",
                "gb200-nvl72",
                "--simulate.scenario",
                str(scenario),
                "--collect.interval",
                "1s",
            ],
            workdir,
        )
        started.append(tray)
        board = _started(profile, ["--simulate", "2", "--collect.interval", "1s"], workdir)
        started.append(board)
        write_yaml(
            workdir / "targets" / "gpu-exporter-rack.yml",
            [{"targets": [f"127.0.0.1:{e.port}" for e in (tray, board)]}],
        )
        alertmanager = start_alertmanager(loopback_config(webhook.url), workdir)
        started.append(alertmanager)
        rules = {"gpu-alerts.yml": immediate_alert_rules(workdir / "rules" / "gpu-alerts.yml")}
        settings = cluster_config(
            workdir / "targets", alertmanager.url.removeprefix("http://"), rules
        )
        prometheus = start_prometheus(write_yaml(workdir / "prometheus.yml", settings), workdir)
        started.append(prometheus)
        yield Rack(tray, board, scenario, prometheus, alertmanager, webhook)
    finally:
        for service in reversed(started):
            service.stop()
        webhook.stop()


def _by(result: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"].get(k, "") for k in labels): float(r["value"][1]) for r in result}


def test_the_rack_rule_remembers_where_each_gpu_of_the_tray_sits(rack: Rack) -> None:
    info = rack.prometheus.wait_for("gpu_platform_info", minimum=4)
    recorded = rack.prometheus.wait_for(RACK_RULE, minimum=4)
    where = {
        (
            r["metric"]["gpu"],
            r["metric"]["uuid"],
            r["metric"]["chassis_serial"],
            r["metric"]["slot"],
            r["metric"]["tray"],
        )
        for r in info
    }
    assert {
        (
            r["metric"]["gpu"],
            r["metric"]["uuid"],
            r["metric"]["chassis_serial"],
            r["metric"]["slot"],
            r["metric"]["tray"],
        )
        for r in recorded
    } == where
    assert len({w[2:] for w in where}) == 1  # one rack, one slot and tray: the tray's
    assert {r["metric"]["instance"] for r in recorded} == {rack.instance(rack.tray)}


def test_the_trend_rules_read_the_exporter_s_series(rack: Rack) -> None:
    """Each rule of the trend family, without its final comparison (an hour of trouble the
    minutes of a test cannot show; gpu-nvlink-trend.test.yml has the hours), finds the
    series the exporters serve: NVLink5's recovery events and effective BER on the tray,
    the legacy recovery counter on the H100 board, per GPU."""
    groups = yaml.safe_load((EXAMPLES / "rules" / "gpu-recording.yml").read_text())["groups"]
    rules = [r for g in groups for r in g["rules"] if r.get("record") == TREND_RULE]
    assert [r["labels"]["signal"] for r in rules] == ["link_recovery", "recovery", "effective_ber"]
    expected = {
        "link_recovery": rack.instance(rack.tray),
        "recovery": rack.instance(rack.board),
        "effective_ber": rack.instance(rack.tray),
    }
    for rule in rules:
        without_comparison = rule["expr"].rsplit(">", 1)[0]
        result = rack.prometheus.wait_for(without_comparison, minimum=2)
        assert {r["metric"]["instance"] for r in result} == {expected[rule["labels"]["signal"]]}
        assert all(set(r["metric"]) == {"instance", "job", "gpu", "uuid"} for r in result), result


def _panel(title: str, ref: str) -> str:
    (query,) = [q for q in queries("gpu-fleet.json") if q.panel_title == title and q.ref_id == ref]
    return str(substitute(query.expr, PARSE_VALUES))


RACK_VIEW = "Racks and trays: GPUs, faults, NVLink errors and actions"


def test_a_lost_tray_shows_in_the_rack_view_and_pages_once(rack: Rack) -> None:
    """Placed last: the tray's four GPUs fall off the bus. The rack view still counts them
    in their rack and tray, now lost, and the pager gets one notification for the rack
    naming the four (GPUNeedsReboot: the lost GPUs' action, which holds GPULost back)."""
    chassis = rack.prometheus.wait_for(RACK_RULE, minimum=4)[0]["metric"]["chassis_serial"]
    gpus = _by(rack.prometheus.wait_for(_panel(RACK_VIEW, "A"), minimum=2), "chassis_serial")
    assert gpus == {(chassis,): 4, ("",): 2}
    write_yaml(rack.tray_scenario, {"faults": {"lost": [0, 1, 2, 3]}})
    lost = f"{_panel(RACK_VIEW, 'B')} > 0"
    assert _by(rack.prometheus.wait_for(lost), "chassis_serial") == {(chassis,): 4}
    assert _by(rack.prometheus.query(_panel(RACK_VIEW, "A")), "chassis_serial") == gpus

    def pages() -> list[dict[str, Any]]:
        return [
            body
            for path, body in rack.webhook.received
            if path == "/gpu-hardware" and body["groupLabels"].get("chassis_serial") == chassis
        ]

    rack.webhook.wait_for(lambda _alerts: bool(pages()))
    time.sleep(3)  # three more group intervals: nothing split off, nothing sent apart
    first, *later = pages()
    names = {(a["labels"]["alertname"], a["labels"]["gpu"]) for a in first["alerts"]}
    assert names == {("GPUNeedsReboot", g) for g in "0123"}, names
    assert {a["labels"]["tray"] for a in first["alerts"]} == {
        rack.prometheus.query(RACK_RULE)[0]["metric"]["tray"]
    }
    assert all(len(body["alerts"]) == 4 for body in later), later
    # and no page for the tray went out per GPU or per node
    others = [
        body
        for path, body in rack.webhook.received
        if path == "/gpu-hardware"
        and any(a["labels"].get("chassis_serial") == chassis for a in body["alerts"])
        and body["groupLabels"].get("chassis_serial") != chassis
    ]
    assert others == []
