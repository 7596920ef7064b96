"""Start Debian's real `prometheus` on 127.0.0.1 for tests, and query its HTTP API."""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
from pathlib import Path
from typing import Any

from tests.support.exporter import free_port, http_get
from tests.support.service import LocalService, start_service

CHARGEBACK_FIRST_ROWS_SECONDS = 180.0
"""How long to wait for the chargeback's first 1-minute rows: each covers the seconds since
the GPU's rows a minute before (`instance_gpu:gpu_charged:timestamp offset 1m`), so the first
come a minute after the first samples, with a minute to spare on a loaded machine. A wait
ends as soon as they are there."""


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed: run `make system-deps`")
    return binary


class Prometheus(LocalService):
    """A running Prometheus and its HTTP API."""

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

    def ranges_hold_their_start(self) -> bool:
        """Whether a range selector counts a sample exactly at its start: Prometheus before
        3.0 closes ranges at both ends (`[a, b]`), 3.0 and later leave the start out."""
        version = str(self.api("status/buildinfo")["version"])
        return int(version.split(".", 1)[0]) < 3

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])


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
    return start_service(Prometheus, args, port, log_path, workdir)
