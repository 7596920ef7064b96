"""Faults injected through the simulated backend, against the real running program."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.exporter import Exporter, Samples, command, free_port, start_exporter, values
from tests.support.prometheus import Prometheus, start_prometheus

FAST = ["--collect.interval", "0.2s"]


def write_scenario(path: Path, scenario: dict[str, object]) -> None:
    """Replace the scenario file atomically (the exporter re-reads it when it changes)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(scenario))
    os.replace(tmp, path)
    # mtime granularity: make sure the next write is seen as a change
    time.sleep(0.02)


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.json"
    write_scenario(path, {})
    return path


def start(tmp_path: Path, scenario: Path, gpus: int = 3, *extra: str) -> Exporter:
    args = ["--simulate", str(gpus), "--simulate.scenario", str(scenario), *FAST, *extra]
    return start_exporter(args, tmp_path)


def up(samples: Samples, gpu: str) -> list[float]:
    return values(samples, "gpu_up", gpu=gpu)


def test_hang_on_one_gpu_marks_it_down_while_others_stay_fresh(
    tmp_path: Path, scenario: Path
) -> None:
    exporter = start(tmp_path, scenario, 3, "--collect.timeout", "0.5s")
    try:
        write_scenario(scenario, {"faults": {"hang": [1]}})
        s = exporter.wait_for(lambda s: up(s, "1") == [0.0])
        assert not values(s, "gpu_power_watts", gpu="1")  # its other series are dropped
        # the other GPUs keep fresh data on schedule while GPU 1's read is stuck
        t1 = values(exporter.scrape(), "gpu_exporter_last_sample_timestamp_seconds")[0]
        time.sleep(1.5)
        s = exporter.scrape()
        assert values(s, "gpu_exporter_last_sample_timestamp_seconds")[0] > t1 + 0.5
        assert up(s, "0") == [1.0] and up(s, "2") == [1.0]
        assert values(s, "gpu_power_watts", gpu="0")
        # no thread leak: one stuck reader for GPU 1 however many intervals pass
        threads = len(os.listdir(f"/proc/{exporter.process.pid}/task"))
        time.sleep(1.5)
        assert len(os.listdir(f"/proc/{exporter.process.pid}/task")) == threads
        exporter.wait_health(200)  # two of three GPUs answer
        # the call returns: the GPU comes back
        write_scenario(scenario, {})
        exporter.wait_for(lambda s: up(s, "1") == [1.0] and values(s, "gpu_power_watts", gpu="1"))
    finally:
        assert exporter.stop() == 0


def test_sigterm_during_a_hang_exits_0_within_2_seconds(tmp_path: Path, scenario: Path) -> None:
    exporter = start(tmp_path, scenario, 2, "--collect.timeout", "0.3s")
    write_scenario(scenario, {"faults": {"hang": [0, 1]}})
    exporter.wait_for(lambda s: up(s, "0") == [0.0] and up(s, "1") == [0.0])
    exporter.wait_health(503)
    t0 = time.monotonic()
    exporter.signal(signal.SIGTERM)
    assert exporter.process.wait(5) == 0
    assert time.monotonic() - t0 < 2.0


def test_gpu_lost_mid_run_then_back(tmp_path: Path, scenario: Path) -> None:
    exporter = start(tmp_path, scenario, 3)
    try:
        before = exporter.scrape()
        busy_before = values(before, "gpu_busy_seconds_total", gpu="2")[0]
        uuid = [dict(ls)["uuid"] for n, ls in before if n == "gpu_up" and dict(ls)["gpu"] == "2"]
        write_scenario(scenario, {"faults": {"lost": [2]}})
        s = exporter.wait_for(lambda s: up(s, "2") == [0.0])
        assert values(s, "gpu_up", gpu="2", uuid=uuid[0]) == [0.0]  # still named by its UUID
        assert up(s, "0") == [1.0] and up(s, "1") == [1.0]
        assert not values(s, "gpu_temperature_celsius", gpu="2")
        write_scenario(scenario, {})
        s = exporter.wait_for(lambda s: up(s, "2") == [1.0])
        assert values(s, "gpu_busy_seconds_total", gpu="2")[0] >= busy_before
        assert "GPU down" in exporter.log() and "GPU back" in exporter.log()
    finally:
        exporter.stop()


def test_nvml_failing_at_start_then_appearing(tmp_path: Path, scenario: Path) -> None:
    write_scenario(scenario, {"faults": {"init_error": "driver_not_loaded"}})
    exporter = start(tmp_path, scenario, 2)
    try:
        s = exporter.scrape()
        assert values(s, "gpu_exporter_nvml_up") == [0.0]
        assert values(s, "gpu_exporter_nvml_init_errors_total", error="driver_not_loaded")
        assert not values(s, "gpu_up")
        exporter.wait_health(503)
        write_scenario(scenario, {})
        s = exporter.wait_for(lambda s: values(s, "gpu_exporter_nvml_up") == [1.0], timeout=8)
        assert values(s, "gpu_exporter_gpus") == [2.0]
        exporter.wait_health(200)
    finally:
        exporter.stop()


def test_driver_reload_reenumerates_and_keeps_counters_monotonic(
    tmp_path: Path, scenario: Path
) -> None:
    exporter = start(tmp_path, scenario, 2)
    try:
        exporter.get("/api/overview")  # watched: the busy buffers are read every interval
        before = exporter.wait_for(
            lambda s: any(v > 0 for v in values(s, "gpu_busy_seconds_total", gpu="0"))
        )
        busy = values(before, "gpu_busy_seconds_total", gpu="0")[0]
        write_scenario(scenario, {"faults": {"init_error": "driver_not_loaded"}})
        exporter.wait_for(lambda s: values(s, "gpu_exporter_nvml_up") == [0.0])
        # the driver comes back with one more GPU
        write_scenario(scenario, {"faults": {"gpus": 3}})
        s = exporter.wait_for(
            lambda s: values(s, "gpu_exporter_nvml_up") == [1.0] and len(values(s, "gpu_up")) == 3,
            timeout=8,
        )
        assert values(s, "gpu_exporter_gpus") == [3.0]
        assert values(s, "gpu_busy_seconds_total", gpu="0")[0] >= busy
        exporter.wait_health(200)
    finally:
        exporter.stop()


def test_a_gpu_reset_restarts_the_driver_s_counters_and_none_of_the_exporter_s(
    tmp_path: Path, scenario: Path
) -> None:
    """`nvidia-smi -r` zeroes the driver's counters of that GPU without NVML re-initialising
    (gpu_energy_joules_total went 5000139 -> 280): the drop is passed through as the
    counter reset it is, while the counters the exporter integrates keep counting up."""
    exporter = start(tmp_path, scenario, 2)
    prometheus: Prometheus | None = None
    try:
        xid: dict[str, object] = {"events": [{"gpu": 0, "xid": 79}]}  # not raised again below
        write_scenario(scenario, xid)
        exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="0") == [1.0])
        config = tmp_path / "prometheus.yml"
        target = {"targets": [f"127.0.0.1:{exporter.port}"]}
        job = {"job_name": "gpu", "scrape_interval": "500ms", "static_configs": [target]}
        config.write_text(json.dumps({"scrape_configs": [job]}))
        prometheus = start_prometheus(config, tmp_path)
        energy_0 = 'gpu_energy_joules_total{gpu="0"}'
        prometheus.wait_for(f"count_over_time({energy_0}[1m]) >= 3")
        exporter.get("/api/overview")  # watched: the busy buffers are read every interval
        before = exporter.wait_for(lambda s: values(s, "gpu_busy_seconds_total", gpu="0")[0] > 0)
        energy = {gpu: values(before, "gpu_energy_joules_total", gpu=gpu)[0] for gpu in "01"}
        own = ("gpu_busy_seconds_total", "gpu_sm_active_seconds_total", "gpu_xid_errors_total")
        integrated = {name: values(before, name, gpu="0")[0] for name in own}
        assert integrated["gpu_busy_seconds_total"] > 0
        write_scenario(scenario, {**xid, "faults": {"reset": [0]}})
        s = exporter.wait_for(
            lambda s: values(s, "gpu_energy_joules_total", gpu="0")[0] < energy["0"]
        )
        assert 0 <= values(s, "gpu_energy_joules_total", gpu="0")[0] < 1e4  # from 0 again
        assert values(s, "gpu_energy_joules_total", gpu="1")[0] > energy["1"]  # not reset
        for name, seen in integrated.items():
            assert values(s, name, gpu="0")[0] >= seen, name
        assert values(s, "gpu_up", gpu="0") == [1.0]
        assert values(s, "gpu_exporter_nvml_up") == [1.0]
        help_line = "# HELP gpu_energy_joules_total Energy consumed since the driver was loaded "
        assert help_line + "or the GPU last reset" in exporter.get("/metrics").text
        # Prometheus takes the drop for the counter reset it is: rate() stays non-negative
        prometheus.wait_for(f"resets({energy_0}[1m]) == 1")
        prometheus.wait_for(f"count_over_time({energy_0}[5s]) >= 3")  # after the reset too
        assert prometheus.query("rate(gpu_energy_joules_total[1m]) < 0") == []
        (rate,) = prometheus.query(f"rate({energy_0}[1m])")
        assert 0 < float(rate["value"][1]) < 2000  # watts: a simulated H100's, not -5 MW
        assert prometheus.query('resets(gpu_busy_seconds_total{gpu="0"}[1m]) > 0') == []
    finally:
        if prometheus is not None:
            prometheus.stop()
        exporter.stop()


def test_xid_event_is_counted_and_logged_with_its_meaning(tmp_path: Path, scenario: Path) -> None:
    exporter = start(tmp_path, scenario, 2)
    try:
        assert not values(exporter.scrape(), "gpu_xid_errors_total")
        t0 = time.time()
        write_scenario(scenario, {"events": [{"gpu": 1, "xid": 79}]})
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="1", xid="79"))
        assert values(s, "gpu_xid_errors_total", gpu="1", xid="79") == [1.0]
        assert values(s, "gpu_last_xid_timestamp_seconds", gpu="1")[0] >= t0 - 1
        assert not values(s, "gpu_xid_errors_total", gpu="0")
        write_scenario(scenario, {"events": [{"gpu": 1, "xid": 79}, {"gpu": 1, "xid": 79}]})
        exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="1", xid="79") == [2.0])
        assert "fallen off the bus" in exporter.log()
    finally:
        exporter.stop()


def test_an_xid_for_a_gpu_that_fell_off_the_bus_is_counted(tmp_path: Path, scenario: Path) -> None:
    """The README's own pairing: GPU 1 lost, and its Xid 79 delivered. The listener
    once died on it (the simulated event asked the lost GPU for its UUID)."""
    exporter = start(tmp_path, scenario, 2)
    try:
        write_scenario(scenario, {"faults": {"lost": [1]}, "events": [{"gpu": 1, "xid": 79}]})
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", xid="79") == [1.0])
        assert up(s, "1") == [0.0]
        assert values(s, "gpu_exporter_stage_success", stage="xid") == [1.0]
        assert "Xid listener failed" not in exporter.log()
    finally:
        exporter.stop()


def test_xid_listener_is_rearmed_after_nvml_reinitialises(tmp_path: Path, scenario: Path) -> None:
    exporter = start(tmp_path, scenario, 1)
    try:
        write_scenario(scenario, {"faults": {"init_error": "driver_not_loaded"}})
        exporter.wait_for(lambda s: values(s, "gpu_exporter_nvml_up") == [0.0])
        write_scenario(scenario, {})
        exporter.wait_for(lambda s: values(s, "gpu_exporter_nvml_up") == [1.0], timeout=8)
        write_scenario(scenario, {"events": [{"gpu": 0, "xid": 48}]})
        exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", xid="48") == [1.0])
    finally:
        exporter.stop()


def test_events_not_supported_are_logged_once_and_left_off(tmp_path: Path, scenario: Path) -> None:
    write_scenario(scenario, {"faults": {"events_unsupported": True}})
    exporter = start(tmp_path, scenario, 1)
    try:
        write_scenario(
            scenario, {"faults": {"events_unsupported": True}, "events": [{"gpu": 0, "xid": 79}]}
        )
        time.sleep(1.0)
        s = exporter.scrape()
        assert not values(s, "gpu_xid_errors_total")
        assert values(s, "gpu_up") == [1.0]
    finally:
        exporter.stop()
    assert exporter.log().count("events are not supported") == 1


def test_sighup_turns_the_xid_listener_on_and_off(tmp_path: Path, scenario: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text("collect.interval: 0.2s\ncollector.xid: false\n")
    exporter = start_exporter(
        ["--simulate", "1", "--simulate.scenario", str(scenario), "--config.file", str(config)],
        tmp_path,
    )

    def xid_stage(s: Samples) -> list[float]:
        return values(s, "gpu_exporter_stage_success", stage="xid")

    try:
        s = exporter.scrape()
        assert not xid_stage(s) and values(s, "gpu_exporter_stage_success", stage="devices")
        config.write_text("collect.interval: 0.2s\ncollector.xid: true\n")
        exporter.signal(signal.SIGHUP)
        exporter.wait_for(lambda s: xid_stage(s) == [1.0])  # listening on NVML's events
        write_scenario(scenario, {"events": [{"gpu": 0, "xid": 79}]})
        exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", xid="79") == [1.0])

        config.write_text("collect.interval: 0.2s\ncollector.xid: false\n")
        exporter.signal(signal.SIGHUP)
        exporter.wait_for(lambda s: not xid_stage(s) and not values(s, "gpu_xid_errors_total"))
        write_scenario(scenario, {"events": [{"gpu": 0, "xid": 79}, {"gpu": 0, "xid": 79}]})
        time.sleep(1.5)  # a listener still running would take the event and log it
        assert exporter.log().count('msg="Xid error"') == 1

        config.write_text("collect.interval: 0.2s\ncollector.xid: true\n")
        exporter.signal(signal.SIGHUP)
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", xid="79") == [2.0])
        assert xid_stage(s) == [1.0]
        assert exporter.log().count('msg="Xid error"') == 2
    finally:
        assert exporter.stop() == 0


def test_sighup_applies_a_good_file_and_keeps_settings_on_a_bad_one(tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text("collect.interval: 0.2s\n")
    exporter = start_exporter(["--simulate", "1", "--config.file", str(config)], tmp_path)
    try:
        assert values(exporter.scrape(), "gpu_power_watts")
        config.write_text("collect.interval: 0.2s\ncollector.power: false\n")
        exporter.signal(signal.SIGHUP)
        exporter.wait_for(lambda s: not values(s, "gpu_power_watts") and values(s, "gpu_up"))
        config.write_text("collect.interval: [broken\n")
        exporter.signal(signal.SIGHUP)
        exporter.wait_log("reload failed, keeping the running settings")
        assert exporter.process.poll() is None
        s = exporter.scrape()
        assert values(s, "gpu_up") == [1.0] and not values(s, "gpu_power_watts")
        log = exporter.log()
        assert log.count("reload failed, keeping the running settings") == 1
        assert "invalid YAML" in log
    finally:
        assert exporter.stop() == 0


def test_systemd_notify_ready_and_watchdog_over_a_real_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(10)
        port = free_port()
        env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
        args = ["--simulate", "1", *FAST, "--web.listen-address", f"127.0.0.1:{port}"]
        process = subprocess.Popen(command(*args), env=env, stderr=subprocess.DEVNULL)
        try:
            messages: list[str] = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and messages.count("WATCHDOG=1") < 2:
                messages.append(sock.recv(4096).decode())
            assert messages[0].startswith("READY=1")
            assert messages.count("WATCHDOG=1") >= 2
            process.send_signal(signal.SIGTERM)
            assert process.wait(5) == 0
            # watchdog pings sent before the signal was handled may still be queued
            after = [sock.recv(4096).decode()]
            while "STOPPING=1" not in after[-1] and after[-1] == "WATCHDOG=1":
                after.append(sock.recv(4096).decode())
            assert "STOPPING=1" in after[-1], after
        finally:
            if process.poll() is None:
                process.kill()


def test_systemd_notify_abstract_socket(tmp_path: Path) -> None:
    name = f"gpu-exporter-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(10)
        port = free_port()
        env = dict(os.environ, NOTIFY_SOCKET="@" + name)
        args = ["--simulate", "1", *FAST, "--web.listen-address", f"127.0.0.1:{port}"]
        process = subprocess.Popen(command(*args), env=env, stderr=subprocess.DEVNULL)
        try:
            assert sock.recv(4096).decode().startswith("READY=1")
        finally:
            process.terminate()
            process.wait(5)


def test_watchdog_stops_when_samples_stop_completing(tmp_path: Path, scenario: Path) -> None:
    """A sampler stuck in a library-wide call must not pet the watchdog."""
    from gpu_exporter.systemd_notify import Notifier, Watchdog

    path = str(tmp_path / "wd.sock")
    healthy = {"value": True}
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0.5)
        notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"})
        watchdog = Watchdog(notifier, lambda: healthy["value"])
        watchdog.start()
        try:
            assert sock.recv(64) == b"WATCHDOG=1"
            healthy["value"] = False
            time.sleep(0.15)
            while True:  # drain what was sent before the switch
                try:
                    sock.recv(64)
                except TimeoutError:
                    break
            with pytest.raises(TimeoutError):
                sock.recv(64)
        finally:
            watchdog.stop()


def test_nvml_itself_stuck_turns_healthz_503_and_recovers(tmp_path: Path, scenario: Path) -> None:
    exporter = start(tmp_path, scenario, 2)
    try:
        exporter.wait_health(200)
        write_scenario(scenario, {"faults": {"library_hang": True}})
        health = exporter.wait_health(503)
        assert "last sample finished" in health.text
        assert exporter.get("/metrics").status == 200  # the last sample is still served
        write_scenario(scenario, {})
        exporter.wait_health(200)
        write_scenario(scenario, {"faults": {"library_hang": True}})
        time.sleep(0.5)
        t0 = time.monotonic()
        exporter.signal(signal.SIGTERM)
        assert exporter.process.wait(5) == 0
        assert time.monotonic() - t0 < 2.0
    finally:
        if exporter.process.poll() is None:
            exporter.process.kill()


def test_sighup_switches_to_the_web_config_the_config_file_names(tmp_path: Path) -> None:
    import base64

    import bcrypt

    def web_config(name: str, password: bytes) -> Path:
        path = tmp_path / name
        hashed = bcrypt.hashpw(password, bcrypt.gensalt(rounds=4)).decode()
        path.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
        return path

    def auth(password: str) -> dict[str, str]:
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    first = web_config("web-1.yml", b"first")
    second = web_config("web-2.yml", b"second")
    config = tmp_path / "config.yml"
    config.write_text(f"collect.interval: 0.2s\nweb.config.file: {first}\n")
    exporter = start_exporter(
        ["--simulate", "1", "--config.file", str(config)], tmp_path, ready=False
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if exporter.get("/metrics", auth("first")).status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert exporter.get("/metrics").status == 401
        config.write_text(f"collect.interval: 0.2s\nweb.config.file: {second}\n")
        exporter.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while exporter.get("/metrics", auth("second")).status != 200:
            assert time.monotonic() < deadline, exporter.log()
            time.sleep(0.1)
        assert exporter.get("/metrics", auth("first")).status == 401
    finally:
        assert exporter.stop() == 0
