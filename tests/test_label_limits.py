"""Label values a real Prometheus accepts: one scraped with `label_value_length_limit` keeps
the target up when a user starts a GPU process whose name is 6 KB long.

Prometheus fails the whole scrape when one label value is longer than the limit (in UTF-8
bytes), so before the cap a single process took every GPU of its node out of the fleet.
A control target serving one 258-byte value shows that this Prometheus enforces it.
"""

from __future__ import annotations

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

from tests.support.exporter import Exporter, series, start_exporter
from tests.support.prometheus import Prometheus, start_prometheus

pytestmark = pytest.mark.e2e

LIMIT = 256  # bytes; the exporter's cmdline cap, its other labels are capped at 128
PROGRAM = "labelcaptestsleeper"  # the kernel keeps its first 15 characters as `comm`
CONTROL_BODY = ('control_info{name="' + "é" * 129 + '"} 1\n').encode()  # 129 chars, 258 bytes


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


def test_a_huge_process_name_keeps_the_target_up_under_label_value_length_limit(
    tmp_path: Path, long_named: subprocess.Popen[bytes], control: int
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
            + ["--collect.interval", "0.2s", "--collector.process.cmdline"],
            tmp_path,
        )
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
        assert labels["process"] == PROGRAM + "é" * 53 + "…"  # 19 + 106 + 3 = 128 bytes
        assert len(labels["process"].encode()) == 128
        argv = Path(f"/proc/{long_named.pid}/cmdline").read_bytes().replace(b"\0", b" ")
        assert labels["cmdline"] == argv[: LIMIT - 3].decode(errors="ignore") + "…"
        assert len(labels["cmdline"].encode()) <= LIMIT
        (gpu,) = [t for t in prometheus.targets() if t["labels"]["job"] == "gpu"]
        assert (gpu["health"], gpu["lastError"]) == ("up", "")
    finally:
        if prometheus is not None:
            prometheus.stop()
        if exporter is not None:
            exporter.stop()
