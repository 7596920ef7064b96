"""The real program on a simulated host, scraped over HTTP like Prometheus would."""

from __future__ import annotations

import ctypes.util
import gzip
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from gpu_exporter.metrics.catalogue import METRICS
from gpu_exporter.sources.simulated import MEMORY_TOTAL_BYTES
from gpu_exporter.sources.simulated_activity import (
    INFERENCE,
    INFERENCE_SHARE_OF_GPU,
    INPUT_STARVED,
    INPUT_STARVED_DUTY,
    INPUT_STARVED_PERIOD,
    square_mean,
)
from tests.support.exporter import (
    Exporter,
    Samples,
    command,
    free_port,
    http_get,
    parse_samples,
    run_exporter,
    start_exporter,
    values,
)


@pytest.fixture
def exporter(tmp_path: Path) -> Exporter:
    running = start_exporter(["--simulate", "4", "--collect.interval", "0.2s"], tmp_path)
    yield running  # type: ignore[misc]
    running.stop()


def test_values_match_the_simulated_host(exporter: Exporter) -> None:
    s = exporter.scrape()
    assert values(s, "gpu_exporter_build_info", backend="simulated") == [1.0]
    assert values(s, "gpu_exporter_nvml_up") == [1.0]
    assert values(s, "gpu_exporter_gpus") == [4.0]
    assert values(s, "gpu_memory_total_bytes") == [float(MEMORY_TOTAL_BYTES)] * 4
    # GPU 1 is idle but holds 37.5% of its memory; GPU 2 is close to full
    assert values(s, "gpu_utilization_ratio", gpu="1") == [0.0]
    assert values(s, "gpu_memory_used_bytes", gpu="1") == [float(int(MEMORY_TOTAL_BYTES * 0.375))]
    assert values(s, "gpu_memory_used_bytes", gpu="2")[0] > 0.95 * MEMORY_TOTAL_BYTES
    assert values(s, "gpu_temperature_celsius", gpu="3")[0] >= 84
    assert values(s, "gpu_power_limit_watts") == [700.0] * 4
    assert values(s, "gpu_clock_max_hertz", gpu="0", clock="sm") == [1980e6]
    assert values(s, "gpu_temperature_threshold_celsius", gpu="0", threshold="slowdown") == [90.0]
    info = [labels for (name, labels) in s if name == "gpu_info"]
    assert len(info) == 4
    assert dict(info[0])["name"] == "NVIDIA H100 80GB HBM3"
    # the flickering GPU reads either ~0 or ~95% at any instant
    assert values(s, "gpu_utilization_ratio", gpu="0")[0] in (0.0, 0.95)
    assert "gpu_pcie_throughput_bytes_per_second" not in {name for name, _ in s}  # off by default
    # NVLink: link state per link; error counters per GPU and type, summed over 18 links
    assert len(values(s, "gpu_nvlink_link_up", gpu="0")) == 18
    errors = [dict(labels) for name, labels in s if name == "gpu_nvlink_errors_total"]
    assert len(errors) == 4 * 4 and not any("link" in labels for labels in errors)
    assert values(s, "gpu_nvlink_errors_total", gpu="3", error_type="crc_flit") == [0.0]


def test_busy_counter_rate_is_the_true_average_of_a_flickering_gpu(exporter: Exporter) -> None:
    """Over a window of a few intervals, while the live page is watched (its buffers read
    every interval); unwatched, over windows longer than their reads
    (`tests/test_read_cadence.py`)."""
    exporter.get("/api/overview")
    now = values(exporter.scrape(), "gpu_exporter_samples_total")[0]
    exporter.wait_for(lambda s: values(s, "gpu_exporter_samples_total")[0] >= now + 2)
    first = exporter.scrape()
    t0 = time.monotonic()
    time.sleep(3.0)
    second = exporter.scrape()
    elapsed = time.monotonic() - t0
    busy = values(second, "gpu_busy_seconds_total", gpu="0")[0]
    busy -= values(first, "gpu_busy_seconds_total", gpu="0")[0]
    # 95% busy half of the time: 47.5%; the window edges cost up to one interval each
    assert 0.35 < busy / elapsed < 0.60, busy / elapsed
    idle = values(second, "gpu_busy_seconds_total", gpu="1")[0]
    assert idle == 0.0


def test_gpm_counters_rate_is_the_known_activity_within_two_points(exporter: Exporter) -> None:
    """A square wave (the input-starved GPU's bursts) and constants, over 10 seconds."""

    def at(s: Samples) -> tuple[float, dict[tuple[str, str], float]]:
        when = values(s, "gpu_exporter_last_sample_timestamp_seconds")[0]
        counters = {
            ("sm", gpu): values(s, "gpu_sm_active_seconds_total", gpu=gpu)[0] for gpu in "0123"
        }
        counters[("tensor", "0")] = values(
            s, "gpu_pipe_active_seconds_total", gpu="0", pipe="tensor"
        )[0]
        counters[("mig-sm", "2")] = values(
            s, "gpu_mig_sm_active_seconds_total", gpu="3", gpu_instance="2"
        )[0]
        return when, counters

    ready = exporter.wait_for(lambda s: values(s, "gpu_mig_sm_active_seconds_total"))
    t0, first = at(ready)  # GPM needs two samples before it has anything to say
    time.sleep(10.0)
    t1, second = at(exporter.scrape())
    rate = {key: (second[key] - first[key]) / (t1 - t0) for key in first}
    bursts = square_mean(t0, t1, INPUT_STARVED_PERIOD, INPUT_STARVED_DUTY)  # ~0.5
    assert abs(rate[("sm", "0")] - INPUT_STARVED.sm * bursts) < 0.02, rate
    assert abs(rate[("tensor", "0")] - INPUT_STARVED.pipes["tensor"] * bursts) < 0.02, rate
    assert rate[("sm", "1")] == 0.0  # idle
    assert rate[("sm", "2")] < 0.2  # launch-bound: busy, yet few SMs have work
    assert abs(rate[("mig-sm", "2")] - INFERENCE.sm) < 0.02, rate  # a constant
    assert abs(rate[("sm", "3")] - INFERENCE.sm * INFERENCE_SHARE_OF_GPU) < 0.02, rate


def test_counters_never_go_backwards(exporter: Exporter) -> None:
    counters = {
        spec.name for spec in METRICS if spec.type == "counter" and spec.name.startswith("gpu_")
    }
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for _ in range(6):
        s = exporter.scrape()
        seen = {key: value for key, value in s.items() if key[0] in counters}
        for key, value in seen.items():
            assert value >= last.get(key, 0.0), key
        last.update(seen)
        time.sleep(0.25)
    names = {name for name, _labels in last}
    # busy (three GPUs: the MIG one has none), energy, GPM and NVLink counters all checked
    assert {"gpu_busy_seconds_total", "gpu_energy_joules_total"} <= names
    assert {"gpu_sm_active_seconds_total", "gpu_mig_sm_active_seconds_total"} <= names
    assert "gpu_nvlink_bytes_total" in names


def test_openmetrics_and_gzip_are_negotiated(exporter: Exporter) -> None:
    plain = exporter.get("/metrics")
    assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    om = exporter.get(
        "/metrics", {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"}
    )
    assert om.headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.text.rstrip().endswith("# EOF")
    zipped = exporter.get("/metrics", {"Accept-Encoding": "gzip"})
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert b"gpu_up{" in gzip.decompress(zipped.body)
    assert "Content-Encoding" not in plain.headers


def test_landing_page_healthz_and_404(exporter: Exporter) -> None:
    landing = exporter.get("/")
    assert landing.status == 200
    assert 'href="metrics"' in landing.text  # relative: it works under a proxy's prefix
    health = exporter.wait_health(200)
    assert health.text.startswith("ok: 4/4 GPUs up")
    assert exporter.get("/nope").status == 404


def test_healthz_fails_when_every_gpu_is_down(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yml"
    scenario.write_text("faults: {lost: [0, 1]}\n")
    args = ["--simulate", "2", "--simulate.scenario", str(scenario), "--collect.interval", "0.2s"]
    exporter = start_exporter(args, tmp_path)
    try:
        health = exporter.wait_health(503)
        assert "no GPU can be sampled" in health.text
        scenario.write_text("faults: {lost: [1]}\n")
        exporter.wait_for(lambda s: values(s, "gpu_up", gpu="0") == [1.0])
        exporter.wait_health(200)
    finally:
        exporter.stop()


def test_custom_telemetry_path_and_config_file_with_flag_override(tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text(
        "web:\n  telemetry-path: /gpu-metrics\ncollect.interval: 0.2s\n"
        "collector.pcie-throughput: true\ncollector.power: true\n"
        "collector.nvlink.per-link: true\n"
    )
    exporter = start_exporter(
        ["--simulate", "1", "--config.file", str(config), "--no-collector.power"],
        tmp_path,
        ready=False,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                result = exporter.get("/gpu-metrics")
                if result.status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        s = parse_samples(exporter.get("/gpu-metrics").text)
        assert values(s, "gpu_pcie_throughput_bytes_per_second", direction="rx")
        assert not values(s, "gpu_power_watts")  # the flag beat the file
        # NVLink error counters per link and type: 18 links x 4 types
        links = {dict(labels)["link"] for name, labels in s if name == "gpu_nvlink_errors_total"}
        assert links == {str(link) for link in range(18)}
        assert values(s, "gpu_nvlink_errors_total", link="17", error_type="crc_data") == [0.0]
        assert exporter.get("/metrics").status == 404
    finally:
        exporter.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_exit_0_within_2_seconds(tmp_path: Path, signum: int) -> None:
    exporter = start_exporter(["--simulate", "2", "--collect.interval", "0.2s"], tmp_path)
    exporter.signal(signum)
    t0 = time.monotonic()
    assert exporter.process.wait(5) == 0
    assert time.monotonic() - t0 < 2.0
    assert "shutting down" in exporter.log()


def test_once_prints_one_exposition() -> None:
    result = run_exporter(["--simulate", "2", "--once"])
    assert result.returncode == 0, result.stderr
    s = parse_samples(result.stdout)
    assert values(s, "gpu_up") == [1.0, 1.0]
    assert "SIMULATED" in result.stderr


def test_once_output_writes_the_file_atomically(tmp_path: Path) -> None:
    target = tmp_path / "gpu.prom"
    target.write_text("old content\n")
    result = run_exporter(["--simulate", "1", "--once", "--output", str(target)])
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "gpu_up{" in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.prom"]  # no temporary left


def test_once_output_into_missing_directory_exits_2(tmp_path: Path) -> None:
    result = run_exporter(["--simulate", "1", "--once", "--output", str(tmp_path / "no/gpu.prom")])
    assert result.returncode == 2
    assert "--output" in result.stderr and "Traceback" not in result.stderr


def test_json_logs_and_simulated_warning(tmp_path: Path) -> None:
    exporter = start_exporter(["--simulate", "1", "--log.format", "json"], tmp_path)
    exporter.stop()
    records = [json.loads(line) for line in exporter.log().splitlines() if line.startswith("{")]
    warnings = [r for r in records if r["level"] == "warn" and "SIMULATED" in r["msg"]]
    assert warnings, exporter.log()
    assert any(r["msg"] == "listening" for r in records)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("form", [":{port}", "[::]:{port}", "localhost:{port}"])
def test_listen_address_forms(tmp_path: Path, form: str) -> None:
    if form.startswith("[") and not _ipv6_loopback():
        pytest.skip("no IPv6 on this machine")
    port = free_port()
    args = ["--simulate", "1", "--web.listen-address", form.format(port=port)]
    process = subprocess.Popen(command(*args), stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline and status != 200:
            try:
                status = http_get(f"http://127.0.0.1:{port}/healthz").status
            except OSError:
                pass
            time.sleep(0.1)
        assert status == 200
    finally:
        process.terminate()
        process.wait(5)


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver"
)
def test_without_a_driver_it_serves_its_own_metrics_and_retries(tmp_path: Path) -> None:
    exporter = start_exporter(["--collect.interval", "0.2s"], tmp_path)
    try:
        s = exporter.wait_for(
            lambda s: (
                values(s, "gpu_exporter_nvml_init_errors_total", error="library_not_found")
                and values(s, "gpu_exporter_nvml_init_errors_total")[0] >= 2
            ),
            timeout=8,
        )
        assert values(s, "gpu_exporter_nvml_up") == [0.0]
        assert values(s, "gpu_exporter_build_info", backend="nvml") == [1.0]
        assert not values(s, "gpu_up")
        assert not values(s, "gpu_exporter_gpus")
        health = exporter.wait_health(503)
        assert "libnvidia-ml.so.1 not found" in health.text
        time.sleep(1.0)
    finally:
        exporter.stop()
    log = exporter.log()
    assert log.count("NVML unavailable") == 1, log  # logged once, not every retry
    assert "libnvidia-ml.so.1 not found" in log
