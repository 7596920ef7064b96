"""Label values a real Prometheus accepts: one scraped with `label_value_length_limit` keeps
the target up when a user starts a GPU process whose name is 6 KB long, and stores one
series for each of two pods whose long names differ only at the end.

Prometheus fails the whole scrape when one label value is longer than the limit (in UTF-8
bytes), so before the cap a single process took every GPU of its node out of the fleet.
A control target serving one 258-byte value shows that this Prometheus enforces it. A cut
value ends in a digest of the whole value: before it, two values cut to the same start
made one label set, and Prometheus kept one of the two series.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.exporter import Exporter, series, start_exporter, values
from tests.support.kubelet import Container, FakeKubelet, Pod
from tests.support.prometheus import Prometheus, start_prometheus

pytestmark = pytest.mark.e2e

LIMIT = 256  # bytes; the exporter's cmdline cap, its other labels are capped at 128
PROGRAM = "labelcaptestsleeper"  # the kernel keeps its first 15 characters as `comm`
CONTROL_BODY = ('control_info{name="' + "é" * 129 + '"} 1\n').encode()  # 129 chars, 258 bytes
# two time-sliced pods on one GPU, their names of 193 characters (of the 253 a pod name
# may have) the same but for the last
PODS = ["finetune-llama-" + "x" * 176 + f"-{n}" for n in range(2)]


def cut(value: str, limit: int = 128) -> str:
    """`value` as the exporter writes it when its UTF-8 passes `limit` bytes: the start
    that fits, "…", and the first 32 hex digits of the SHA-256 of all of it."""
    data = value.encode()
    start = data[: limit - 35].decode(errors="ignore")
    return start + "…" + hashlib.sha256(data).hexdigest()[:32]


class _Control(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(CONTROL_BODY)))
        self.end_headers()
        self.wfile.write(CONTROL_BODY)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def control() -> Iterator[int]:
    """A target whose one label value is over the limit: its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Control)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    """A kubelet stand-in on a socket path short enough for a Unix socket (107 bytes)."""
    server = FakeKubelet(Path(f"/tmp/labels-kubelet-{os.getpid()}.sock")).start()
    yield server
    server.stop()


@pytest.fixture
def long_named(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process whose kernel name is cut at 15 characters and whose argv[0] starts
    with it, so the exporter completes the name from argv[0]: 6019 bytes of it."""
    sleep = os.path.realpath(shutil.which("sleep") or "/bin/sleep")
    program = tmp_path / PROGRAM
    program.symlink_to(sleep)
    argv0 = str(tmp_path / (PROGRAM + "é" * 3000))
    proc = subprocess.Popen([argv0, "600"], executable=str(program))
    yield proc
    proc.kill()
    proc.wait()


def test_huge_label_values_keep_the_target_up_and_long_pod_names_stay_two_series(
    tmp_path: Path, long_named: subprocess.Popen[bytes], control: int, kubelet: FakeKubelet
) -> None:
    assert Path(f"/proc/{long_named.pid}/comm").read_text().strip() == PROGRAM[:15]
    scenario = tmp_path / "scenario.json"
    scenario.write_text(
        json.dumps({"processes": [{"gpu": 0, "pid": long_named.pid, "memory_bytes": 2**30}]})
    )
    exporter: Exporter | None = None
    prometheus: Prometheus | None = None
    try:
        exporter = start_exporter(
            ["--simulate", "1", "--simulate.scenario", str(scenario)]
            + ["--collect.interval", "0.2s", "--collector.process.cmdline", "--compat.dcgm"]
            + ["--collector.kubernetes", "--kubernetes.refresh-interval", "1s"]
            + ["--kubernetes.pod-resources-socket", str(kubelet.socket_path)]
            + ["--kubernetes.log-directory", str(tmp_path)],
            tmp_path,
        )
        (gpu0,) = series(exporter.wait_for(lambda s: series(s, "gpu_info")), "gpu_info")
        kubelet.pods = [
            Pod("ml", name, [Container("worker", {"nvidia.com/gpu": [f"{gpu0['uuid']}::{n}"]})])
            for n, name in enumerate(PODS)
        ]
        exporter.wait_for(
            lambda s: any(
                x["pid"] == str(long_named.pid) and x["process"]
                for x in series(s, "gpu_process_memory_used_bytes")
            )
        )
        config = tmp_path / "prometheus.yml"
        jobs = [("gpu", exporter.port), ("control", control)]
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": job,
                            "label_value_length_limit": LIMIT,
                            "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                        }
                        for job, port in jobs
                    ],
                }
            )
        )
        prometheus = start_prometheus(config, tmp_path)
        # this Prometheus enforces the limit, in bytes: the control target is down
        prometheus.wait_for('up{job="control"} == 0', timeout=30)
        (down,) = [t for t in prometheus.targets() if t["labels"]["job"] == "control"]
        assert "label_value_length_limit exceeded" in down["lastError"]

        prometheus.wait_for('up{job="gpu"} == 1', timeout=30)
        (found,) = prometheus.wait_for(
            f'gpu_process_memory_used_bytes{{pid="{long_named.pid}"}}', timeout=30
        )
        labels = found["metric"]
        assert labels["process"] == cut(PROGRAM + "é" * 3000)  # 19 + 74 + 35 = 128 bytes
        assert len(labels["process"].encode()) == 128
        # the command line as the exporter reads it: its words, up to 1024 characters
        argv = Path(f"/proc/{long_named.pid}/cmdline").read_bytes().rstrip(b"\0")
        assert labels["cmdline"] == cut(argv.replace(b"\0", b" ").decode()[:1024], LIMIT)
        assert len(labels["cmdline"].encode()) <= LIMIT

        # both pods' allocation of the GPU are stored, each under its own pod label
        exporter.wait_for(lambda s: values(s, "gpu_exporter_kubernetes_up") == [1.0])
        stored = prometheus.wait_for("gpu_allocation_info", timeout=30, minimum=2)
        assert sorted(s["metric"]["pod"] for s in stored) == sorted(cut(name) for name in PODS)
        # the DCGM names carry the GPU's first owner by name, cut the same way
        (power,) = prometheus.wait_for("DCGM_FI_DEV_POWER_USAGE", timeout=30)
        assert power["metric"]["pod"] == cut(PODS[0])
        (gpu,) = [t for t in prometheus.targets() if t["labels"]["job"] == "gpu"]
        assert (gpu["health"], gpu["lastError"]) == ("up", "")
    finally:
        if prometheus is not None:
            prometheus.stop()
        if exporter is not None:
            exporter.stop()
