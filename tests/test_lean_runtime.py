"""Issue 14: what the running exporter loads, its own process metrics without
prometheus_client, and how promptly an idle exporter leaves on SIGTERM.

The lazy-import tests run the real program in a subprocess and read `sys.modules` as
it exits: PyYAML only with a config or scenario file, bcrypt only with a web config
that checks a login, prometheus_client never (the OpenMetrics body is ours too),
pynvml never with --simulate, ssl, http.client and the email package only with a
TLS web config (the HTTP server reads requests with h11, `serving.request_head`, and
h11 is loaded by the first request),
html and importlib.resources only once someone opens the live page (importlib.resources
alone for /runbooks, rendered at build time: the Markdown library never, the shipped
files' locator and the printing code only for --print-config), psutil never (the
host and process collectors read /proc themselves), tempfile only to write `--output`,
OpenSSL's hashlib not for a cut label value's digest (`digest`: 3.4 MiB resident),
decimal never (`statistics` brings it),
and the scenario parser and dcgm-exporter's name table only when they are asked for.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import ProcessCollector

from gpu_exporter.metrics.self_process import ProcessMetrics
from gpu_exporter.metrics.text import _go_float, write_text
from tests.support.certs import Pki
from tests.support.client_families import from_client
from tests.support.exporter import REPO, free_port, start_exporter
from tests.support.web import call, raw_request, tls_client, tls_config

_PROBE = """
import atexit, json, sys
from gpu_exporter.cli import main
report = sys.argv[1]
def dump() -> None:
    names = {"yaml", "bcrypt", "prometheus_client", "pynvml", "ssl", "http.client", "email",
             "html", "importlib.resources", "psutil", "tempfile", "gpu_exporter.metrics.dcgm",
             "h11", "gpu_exporter.print_config", "gpu_exporter.shipped",
             "grpc", "google.protobuf", "gpu_exporter.sources.kubelet.client", "markdown_it",
             "decimal"}
    with open(report, "w") as out:
        json.dump(sorted(n for n in names if n in sys.modules), out)
    with open(report + ".switch", "w") as out:
        out.write(repr(sys.getswitchinterval()))
atexit.register(dump)
sys.argv = ["gpu-exporter", *sys.argv[2:]]
raise SystemExit(main())
"""


def loaded(tmp_path: Path, *args: str) -> list[str]:
    """The watched modules the program had loaded when it exited after `args`."""
    report = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", _PROBE, str(report), *args],
        cwd=REPO,
        check=True,
        timeout=60,
        capture_output=True,
    )
    names: list[str] = json.loads(report.read_text())
    return names


def loaded_while_serving(
    tmp_path: Path,
    *args: str,
    context: ssl.SSLContext | None = None,
    pages: tuple[str, ...] = (),
) -> list[str]:
    """The watched modules the program had loaded when it was stopped with SIGTERM after
    serving a probe, a scrape, a malformed request and `pages`."""
    report = tmp_path / "modules.json"
    port = free_port()
    command = [sys.executable, "-c", _PROBE, str(report), *args]
    command += ["--web.listen-address", f"127.0.0.1:{port}"]
    program = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while program.poll() is None and time.monotonic() < deadline:
            try:
                if call(port, "/healthz", context=context).status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        assert call(port, "/metrics", context=context).status == 200
        if context is None:
            assert raw_request(port, b"GET /metrics HTTP/one\r\n\r\n").status == 400
        for page in pages:
            assert call(port, page, context=context).status == 200, page
    finally:
        program.send_signal(signal.SIGTERM)
        _, stderr = program.communicate(timeout=30)
    assert program.returncode == 0, stderr.decode()
    names: list[str] = json.loads(report.read_text())
    return names


def test_once_on_a_simulated_host_loads_no_yaml_bcrypt_prometheus_client_or_pynvml(
    tmp_path: Path,
) -> None:
    assert loaded(tmp_path, "--simulate", "2", "--once") == []


def test_writing_a_textfile_loads_tempfile(tmp_path: Path) -> None:
    output = tmp_path / "gpu.prom"
    assert loaded(tmp_path, "--simulate", "2", "--once", "--output", str(output)) == ["tempfile"]
    assert output.read_text().startswith("# HELP")


def test_a_config_file_loads_yaml(tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text("collect.interval: 2s\n")
    assert loaded(tmp_path, "--simulate", "2", "--once", "--config.file", str(config)) == ["yaml"]


def test_a_scenario_file_loads_yaml(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yml"
    scenario.write_text("processes: []\n")
    args = ["--simulate", "2", "--once", "--simulate.scenario", str(scenario)]
    assert loaded(tmp_path, *args) == ["yaml"]


def test_the_program_on_a_driver_loads_no_simulator_or_scenario_parser() -> None:
    """What `--simulate` needs is imported by it alone (the tests above all simulate)."""
    code = (
        "import sys, gpu_exporter.cli, gpu_exporter.daemon; "
        "print(sorted(m for m in sys.modules if 'simulat' in m or 'scenario' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_cut_label_value_is_digested_without_loading_openssl() -> None:
    """hashlib loads OpenSSL's libcrypto (3.4 MiB resident on the benchmark's host) for
    a digest CPython has without it; the value is SHA-256's all the same."""
    code = (
        "import hashlib as h, sys; sys.modules.pop('hashlib'); sys.modules.pop('_hashlib'); "
        "import gpu_exporter.cli, gpu_exporter.daemon; "
        "from gpu_exporter.metrics.text import capped_label_value; "
        "cut = capped_label_value('pod', 'p' * 300); "
        "print('_hashlib' in sys.modules, cut[-32:] == h.sha256(b'p' * 300).hexdigest()[:32])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_the_shipped_files_are_read_only_by_print_config(
    tmp_path: Path,
) -> None:
    """The serving tests above load neither; these show that the probe can see them."""
    assert loaded(tmp_path, "--print-config", "systemd") == [
        "gpu_exporter.print_config",
        "gpu_exporter.shipped",
    ]
    # /runbooks is HTML rendered at build time: no Markdown library, no html module
    assert loaded_while_serving(tmp_path, "--simulate", "1", pages=("/runbooks",)) == [
        "h11",
        "importlib.resources",
        "tempfile",  # importlib.resources brings it
    ]


def test_the_dcgm_name_table_is_loaded_only_in_compat_mode(tmp_path: Path) -> None:
    assert loaded(tmp_path, "--simulate", "2", "--once", "--compat.dcgm") == [
        "gpu_exporter.metrics.dcgm"
    ]


def test_grpc_and_protobuf_are_loaded_only_when_the_kubernetes_collector_reads_a_kubelet(
    tmp_path: Path,
) -> None:
    from tests.support.kubelet import FakeKubelet

    socket_path = Path(f"/tmp/lean-kubelet-{os.getpid()}.sock")
    kubelet = FakeKubelet(socket_path).start()
    try:
        args = ("--simulate", "1", "--once", "--collector.kubernetes")
        assert loaded(tmp_path, *args, "--kubernetes.pod-resources-socket", str(socket_path)) == [
            "google.protobuf",
            "gpu_exporter.sources.kubelet.client",
            "grpc",
            "ssl",  # grpcio imports it, though the kubelet's socket is plain
        ]
        # no socket: the cause is named before gRPC is loaded
        missing = str(tmp_path / "none.sock")
        assert loaded(tmp_path, *args, "--kubernetes.pod-resources-socket", missing) == [
            "gpu_exporter.sources.kubelet.client"
        ]
    finally:
        kubelet.stop()


def test_serving_scrapes_without_tls_loads_h11_and_no_ssl_http_client_email_or_page_modules(
    tmp_path: Path,
) -> None:
    """h11 (about 0.1 MiB) parses the requests; http.client, ssl and email stay out."""
    assert loaded_while_serving(tmp_path, "--simulate", "1") == ["h11"]


def test_the_live_page_loads_html_and_its_assets_with_importlib_resources(tmp_path: Path) -> None:
    assert loaded_while_serving(tmp_path, "--simulate", "1", pages=("/",)) == ["h11", "html"]
    pages = ("/", "/static/page.js")
    assert loaded_while_serving(tmp_path, "--simulate", "1", pages=pages) == [
        "h11",
        "html",
        "importlib.resources",
        "tempfile",  # importlib.resources brings it
    ]


def test_the_serving_program_hands_the_interpreter_lock_on_within_a_millisecond(
    tmp_path: Path,
) -> None:
    """A scrape thread waits at most 1 ms for the lock while the sampler runs Python
    (Python's default is 5 ms); `--once` serves nothing and keeps the default."""
    loaded_while_serving(tmp_path, "--simulate", "1")
    assert float((tmp_path / "modules.json.switch").read_text()) == pytest.approx(0.001)
    loaded(tmp_path, "--simulate", "1", "--once")
    assert float((tmp_path / "modules.json.switch").read_text()) == pytest.approx(0.005)


def test_serving_with_tls_loads_ssl(pki: Pki, tmp_path: Path) -> None:
    """The probe above can see ssl: a TLS web config loads it."""
    args = ["--simulate", "1", "--web.config.file", str(tls_config(pki, tmp_path))]
    assert "ssl" in loaded_while_serving(tmp_path, *args, context=tls_client(pki.ca.cert))


# The exporter's own process metrics ------------------------------------------------------


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """A /proc with one process, as the kernel writes its files."""
    root = tmp_path / "proc"
    me = root / "self"
    (me / "fd").mkdir(parents=True)
    for fd in range(7):
        (me / "fd" / str(fd)).touch()
    (root / "stat").write_text("cpu  1 2 3 4\nbtime 1790000000\nprocesses 5\n")
    fields = ["S", *(str(n) for n in range(1, 50))]
    fields[11], fields[12] = "1234", "567"  # utime, stime (ticks)
    fields[19], fields[20], fields[21] = "98765", "123456789", "7000"  # start, vsize, rss pages
    (me / "stat").write_text("4242 (gpu-exporter) " + " ".join(fields) + "\n")
    (me / "limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max open files            1048576              1048576              files     \n"
    )
    return root


def test_own_process_metrics_are_those_of_prometheus_clients_process_collector(
    proc: Path,
) -> None:
    ours = ProcessMetrics(proc=str(proc)).families()
    theirs = [
        from_client(m)
        for m in ProcessCollector(proc=str(proc), pid=lambda: "self", registry=None).collect()
    ]
    assert [f.name for f in ours] == [
        "process_virtual_memory_bytes",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
    ]
    assert write_text(ours) == write_text(theirs)


def test_own_process_metrics_are_absent_without_proc(tmp_path: Path) -> None:
    assert ProcessMetrics(proc=str(tmp_path / "none")).families() == []


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.5, 1e-7, 123456.0, 1234567.0, 12345678901234.0, 85520809984.0, -3e12]
    + [float("inf"), float("-inf"), float("nan")],
)
def test_go_float_formatting_is_prometheus_clients(value: float) -> None:
    from prometheus_client.utils import floatToGoString

    assert _go_float(value) == floatToGoString(value)


# SIGTERM ----------------------------------------------------------------------------------


def test_sigterm_on_an_idle_exporter_with_nvml_exits_0_promptly(tmp_path: Path) -> None:
    """The real NVML backend on the fake library (loaded by the benchmark's
    sitecustomize): between samples the sampler sleeps, the device workers wait for work
    and the Xid listener is blocked in nvmlEventSetWait; none of them may hold the exit."""
    env = {
        "FAKE_NVML_GPUS": "2",
        "FAKE_NVML_REPO": str(REPO),
        "PYTHONPATH": str(REPO / "benchmarks" / "fake_nvml_site"),
    }
    exporter = start_exporter(["--collect.interval", "1s"], tmp_path, env=env)
    try:
        body = exporter.get("/metrics").body
        assert b'backend="nvml"' in body and b'gpu_up{gpu="1"' in body
        time.sleep(1.5)  # idle: mid-interval
        exporter.signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert exporter.process.wait(10) == 0
        assert time.monotonic() - t0 < 5.0  # generous: a count of seconds, not a benchmark
    finally:
        exporter.stop()
    assert "shutting down" in exporter.log()
    assert os.environ.get("FAKE_NVML_GPUS") is None  # the fake stayed in the child
