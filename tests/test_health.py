"""Readiness (/healthz) and liveness (/livez, the systemd watchdog): one module decides both."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from gpu_exporter.model import DeviceSample, Snapshot
from gpu_exporter.sampling.health import STALE_INTERVALS, Health, liveness, readiness
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.exporter import command, free_port, http_get, start_exporter

NOW = 1_790_000_000.0


def snapshot(age: float, *, nvml_up: bool = True, up: tuple[bool, ...] = (True,)) -> Snapshot:
    devices = tuple(
        DeviceSample(i, None, up=u, down_reason=None if u else "gpu_is_lost")
        for i, u in enumerate(up)
    )
    return Snapshot(
        timestamp_seconds=NOW - age,
        duration_seconds=0.01,
        samples_total=1,
        backend="simulated",
        nvml_up=nvml_up,
        nvml_down_reason=None if nvml_up else "driver_not_loaded",
        devices=devices,
    )


def test_readiness_needs_a_fresh_sample_nvml_and_one_gpu() -> None:
    assert readiness(None, None, 1.0, NOW).reason == "no sample has finished yet"
    fresh = readiness(snapshot(0.5, up=(True, False)), None, 1.0, NOW)
    assert fresh.ok and fresh.reason.startswith("ok: 1/2 GPUs up")
    stale = readiness(snapshot(STALE_INTERVALS + 0.1), None, 1.0, NOW)
    assert not stale.ok and "last sample finished 3.1s ago" in stale.reason
    assert not readiness(snapshot(0.5, nvml_up=False, up=()), None, 1.0, NOW).ok
    all_down = readiness(snapshot(0.5, up=(False, False)), None, 1.0, NOW)
    assert not all_down.ok and "no GPU can be sampled" in all_down.reason
    dead = readiness(snapshot(0.5), "the sampler thread died", 1.0, NOW)
    assert not dead.ok and "sampler not running" in dead.reason


def test_liveness_follows_the_loop_whatever_the_driver_says() -> None:
    assert liveness(None, None, 1.0, 2.0, 100.0).ok  # starting
    # the loop may legitimately wait out one read deadline on a hung GPU
    assert liveness(100.0 - 4.9, None, 1.0, 2.0, 100.0).ok
    stuck = liveness(100.0 - 5.1, None, 1.0, 2.0, 100.0)
    assert not stuck.ok and "sampler loop stuck" in stuck.reason
    dead = liveness(100.0, "the sampler thread died: boom", 1.0, 2.0, 100.0)
    assert not dead.ok and "boom" in dead.reason


def test_a_wall_clock_step_neither_stales_a_fresh_sample_nor_freshens_a_stale_one() -> None:
    """Issue 48: readiness measured a sample's age on the wall clock: a step forward made
    a fresh sample stale (not ready) until the next, a step back a stalled sampler fresh
    for the step's length. On the sampler's monotonic clock neither happens."""
    fresh = replace(snapshot(0.5), monotonic_seconds=100.0)
    for step in (300.0, -300.0):
        assert readiness(fresh, None, 5.0, NOW + step, now_monotonic=100.5).ok
    stalled = replace(snapshot(0.5), monotonic_seconds=100.0 - 60.0)
    for step in (300.0, -300.0):
        assert not readiness(stalled, None, 5.0, NOW + step, now_monotonic=100.5).ok


def test_a_sampler_thread_that_dies_turns_both_probes_red() -> None:
    sampler = Sampler(
        SimulatedBackend(1),
        interval_seconds=math.inf,  # what an unvalidated interval did: wait() overflows
        timeout_seconds=1.0,
        collectors=frozenset({"memory"}),
    )
    health = Health(sampler)
    sampler.start()
    deadline = time.monotonic() + 5
    while sampler.failure() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert sampler.latest is not None  # the first sample was taken
        live, ready = health.live(), health.ready()
        assert not live.ok and "sampler thread died" in live.reason
        assert not ready.ok and "sampler thread died" in ready.reason
    finally:
        sampler.stop(0)


def test_ready_only_once_the_first_sample_is_served() -> None:
    """/healthz turned ready while the first sample was still being rendered, so a
    scrape sent on it (a readiness gate, this repository's own tests) got 503."""
    seen: list[bool] = []
    sampler: Sampler | None = None

    def publish(_snapshot: Snapshot) -> None:  # the exporter renders and serves it here
        assert sampler is not None
        seen.append(Health(sampler).ready().ok)

    sampler = Sampler(
        SimulatedBackend(1),
        interval_seconds=1.0,
        timeout_seconds=1.0,
        collectors=frozenset({"memory"}),
        on_snapshot=publish,
    )
    sampler.sample_once()
    assert seen == [False]  # not ready while it is being handed on
    assert Health(sampler).ready().ok  # and ready once it is


def write(path: Path, scenario: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(scenario))
    os.replace(tmp, path)
    time.sleep(0.02)


def test_without_a_driver_the_exporter_is_alive_but_not_ready(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    write(scenario, {"faults": {"init_error": "driver_not_loaded"}})
    args = ["--simulate", "1", "--simulate.scenario", str(scenario), "--collect.interval", "0.2s"]
    exporter = start_exporter(args, tmp_path)
    try:
        ready = exporter.wait_health(503)
        assert "NVML unavailable" in ready.text
        time.sleep(1.0)  # well past the staleness window: still alive
        live = exporter.get("/livez")
        assert live.status == 200 and live.text.startswith("alive"), live.text
        landing = exporter.get("/").text
        assert "Readiness" in landing and "Liveness" in landing
        write(scenario, {})
        exporter.wait_health(200, timeout=8)
    finally:
        exporter.stop()


def test_nvml_itself_stuck_turns_livez_and_the_watchdog_red(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    write(scenario, {})
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(3)
        port = free_port()
        env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="600000")
        args = [
            *("--simulate", "1", "--simulate.scenario", str(scenario)),
            *("--collect.interval", "0.2s", "--collect.timeout", "0.5s"),
            *("--web.listen-address", f"127.0.0.1:{port}"),
        ]
        process = subprocess.Popen(command(*args), env=env, stderr=subprocess.DEVNULL)
        try:
            assert sock.recv(4096).decode().startswith("READY=1")
            assert sock.recv(4096) == b"WATCHDOG=1"
            write(scenario, {"faults": {"library_hang": True}})
            # STALE_INTERVALS * 0.2 s + 0.5 s later the loop counts as stuck
            time.sleep(1.6)
            sock.settimeout(0.1)
            while True:  # drain what was sent before the loop got stuck
                try:
                    sock.recv(4096)
                except TimeoutError:
                    break
            sock.settimeout(1.0)
            try:
                pet = sock.recv(4096)
            except TimeoutError:
                pet = b""
            assert pet != b"WATCHDOG=1"
            live = http_get(f"http://127.0.0.1:{port}/livez")
            assert live.status == 503 and "sampler loop stuck" in live.text
            write(scenario, {})
            sock.settimeout(3)
            assert b"WATCHDOG=1" in sock.recv(4096)
            assert http_get(f"http://127.0.0.1:{port}/livez").status == 200
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(5)
