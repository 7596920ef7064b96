"""The simulated GB200 NVL72 tray (`--simulate.hardware gb200-nvl72`) answers as Blackwell
does, and a scenario's degrading link degrades over simulated hours; the HGX H100 host
keeps answering the legacy NVLink counters."""

from __future__ import annotations

import pytest

from gpu_exporter.model import NVLINK5_ERRORS, NVLINK_LEGACY_ERRORS, NvLinkReading
from gpu_exporter.sources.scenario import Faults, ScenarioError, parse_scenario
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock

NVLINK = frozenset({"nvlink", "health"})
HOUR = 3600.0


def _nvlink(backend: SimulatedBackend, index: int = 0) -> NvLinkReading:
    reading = backend.device_reading(index, NVLINK)
    assert reading.nvlink is not None
    return reading.nvlink


def _backend(gpus: int = 4, faults: Faults | None = None) -> tuple[SimulatedBackend, FakeClock]:
    clock = FakeClock()
    backend = SimulatedBackend(
        gpus, clock=clock.wall, faults=faults, hardware="gb200-nvl72", host_id="rack-a/tray"
    )
    backend.init()
    return backend, clock


def test_a_gb200_answers_nvlink5_counters_and_not_the_legacy_ones() -> None:
    backend, clock = _backend()
    first = _nvlink(backend)
    assert set(first.error_totals) == set(NVLINK5_ERRORS)
    assert not set(first.error_totals) & set(NVLINK_LEGACY_ERRORS)
    assert len(first.links) == 18
    assert first.recovery_totals == {"successful": 0, "failed": 0, "all": 0}
    assert first.links[0].ber == {"effective": 0.0, "symbol": pytest.approx(2e-15)}
    clock.now += 60.0
    later = _nvlink(backend)
    assert later.error_totals["symbol"] > first.error_totals["symbol"]  # moving
    assert later.error_totals["effective"] == first.error_totals["effective"] == 0


def test_its_gpus_sit_four_to_a_tray_in_one_rack() -> None:
    backend, _clock = _backend(8)
    places = [backend.device_static(i).platform for i in range(8)]
    assert all(p is not None for p in places)
    trays = [p.tray for p in places if p is not None]
    assert trays[:4] == [trays[0]] * 4 and trays[4:] == [trays[4]] * 4
    assert trays[4] == (trays[0] + 1) % 18
    assert [p.module_id for p in places if p is not None] == [1, 2, 3, 4] * 2
    static = backend.device_static(0)
    assert (static.name, static.compute_capability) == ("NVIDIA GB200", "10.0")


def test_an_hgx_h100_host_keeps_the_legacy_counters_and_has_no_platform_info() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(2, clock=clock.wall)
    backend.init()
    nvlink = _nvlink(backend)
    assert set(nvlink.error_totals) == set(NVLINK_LEGACY_ERRORS)
    assert nvlink.recovery_totals == {} and nvlink.links[0].ber == {}
    assert backend.device_static(0).platform is None


def test_a_degrading_link_climbs_over_simulated_hours_and_the_others_stay_healthy() -> None:
    backend, clock = _backend(faults=Faults(nvlink_degrading={1: 7}))
    start = _nvlink(backend, 1)
    assert start.links[7].recovery_events == {"successful": 0, "failed": 0, "all": 0}
    seen = []
    for _ in range(4):
        clock.now += 6 * HOUR
        nvlink = _nvlink(backend, 1)
        seen.append((nvlink.links[7].recovery_events["all"], nvlink.links[7].ber["effective"]))
        assert nvlink.links[6].recovery_events["all"] == 0
        assert nvlink.recovery_totals["all"] == nvlink.links[7].recovery_events["all"]
    assert [events for events, _ in seen] == [24, 48, 72, 96]  # 4 an hour, for days
    assert seen[-1][1] > seen[0][1] > 0.0  # its effective BER rises
    assert _nvlink(backend, 0).recovery_totals["all"] == 0  # the other GPUs are healthy


def test_the_scenario_names_a_degrading_link_and_daemons_that_are_down() -> None:
    scenario = parse_scenario(
        {"faults": {"nvlink_degrading": {"1": 7}, "fabric_daemons_down": ["nvidia-imex"]}}
    )
    assert scenario.faults.nvlink_degrading == {1: 7}
    assert scenario.faults.fabric_daemons_down == frozenset({"nvidia-imex"})
    with pytest.raises(ScenarioError, match="between 0 and 17"):
        parse_scenario({"faults": {"nvlink_degrading": {0: 18}}})
    with pytest.raises(ScenarioError, match="unknown daemons"):
        parse_scenario({"faults": {"fabric_daemons_down": ["nvidia-fabricmanager"]}})


def test_the_simulated_daemons_run_unless_the_scenario_stops_them() -> None:
    backend, _clock = _backend(faults=Faults(fabric_daemons_down=frozenset({"nvidia-imex"})))
    assert backend.daemons_running(["nvidia-imex", "nv-fabricmanager"]) == {
        "nvidia-imex": False,
        "nv-fabricmanager": True,
    }
