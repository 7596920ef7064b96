"""Start Debian's real `prometheus` on 127.0.0.1 for tests, and query its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.exporter import free_port, http_get


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed: run `make system-deps`")
    return binary


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        result = http_get(f"{self.url}/api/v1/{path}?{query}", timeout=10)
        payload = json.loads(result.body or b"{}")
        if payload.get("status") != "success":
            raise AssertionError(f"{path} {params}: {result.status} {payload}")
        return payload["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query (at Unix time `at`, else now); returns the result vector."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self.api("query", **params)
        return list(data["result"])

    def wait_for(self, expr: str, timeout: float = 60.0, minimum: int = 1) -> list[dict[str, Any]]:
        """Poll an instant query until it returns at least `minimum` series."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if len(result) >= minimum:
                return result
            time.sleep(0.5)
        raise AssertionError(f"{expr!r} returned {result} after {timeout}s; log:\n{self.log()}")

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_prometheus(config_path: Path, workdir: Path, *extra_args: str) -> Prometheus:
    """Run prometheus with `config_path`, storage in `workdir`, listening on loopback."""
    port = free_port()
    log_path = workdir / f"prometheus-{port}.log"
    args = [
        prometheus_binary(),
        f"--config.file={config_path}",
        f"--storage.tsdb.path={workdir / f'data-{port}'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        *extra_args,
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    server = Prometheus(process, port, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited {process.returncode}:\n{server.log()}")
        try:
            if http_get(f"{server.url}/-/ready").status == 200:
                return server
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"prometheus did not become ready:\n{server.log()}")
