"""Debian's real Alertmanager on 127.0.0.1 for tests, and a webhook receiver to catch what
it sends. The example configuration is run with only what a test must change: the
receivers' URLs (to the local webhook) and second-long grouping delays."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.support.exporter import REPO, free_port, http_get
from tests.support.service import LocalService, start_service

EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"


def alertmanager_binary() -> str:
    for name in ("prometheus-alertmanager", "alertmanager"):
        binary = shutil.which(name)
        if binary is not None:
            return binary
    raise RuntimeError("alertmanager is not installed: run `make system-deps`")


@dataclass
class Webhook:
    """A local HTTP server that keeps every notification posted to it, by path."""

    server: ThreadingHTTPServer
    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def alerts(self) -> list[tuple[str, dict[str, Any]]]:
        """(receiver path, alert) of every alert of every notification so far."""
        with self.lock:
            return [(path, a) for path, body in self.received for a in body["alerts"]]

    def wait_for(
        self, condition: Callable[[list[tuple[str, dict[str, Any]]]], bool], timeout: float = 60
    ) -> list[tuple[str, dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alerts = self.alerts()
            if condition(alerts):
                return alerts
            time.sleep(0.2)
        raise AssertionError(f"webhook got {self.alerts()}")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_webhook() -> Webhook:
    hook: Webhook

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with hook.lock:
                hook.received.append((self.path, json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook = Webhook(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return hook


def loopback_config(webhook_url: str, group_wait: str = "1s") -> dict[str, Any]:
    """The example, its receivers posting to `webhook_url`/<receiver>, delays in seconds:
    each route's `group_wait` as given, its `group_interval` 1 s."""
    config: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhook_url}/{receiver['name']}"
    routes = [config["route"], *config["route"].get("routes", [])]
    for route in routes:
        for key, delay in (("group_wait", group_wait), ("group_interval", "1s")):
            if key in route:
                route[key] = delay
    return config


class Alertmanager(LocalService):
    """A running Alertmanager and its v2 API."""

    def post(self, alerts: list[dict[str, Any]]) -> None:
        request = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def alerts(self) -> list[dict[str, Any]]:
        result = http_get(f"{self.url}/api/v2/alerts", timeout=10)
        return list(json.loads(result.body))


def start_alertmanager(config: dict[str, Any], workdir: Path) -> Alertmanager:
    """Run Alertmanager with `config` on loopback, clustering off."""
    port = free_port()
    config_path = workdir / f"alertmanager-{port}.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    log_path = workdir / f"alertmanager-{port}.log"
    args = [
        alertmanager_binary(),
        f"--config.file={config_path}",
        f"--storage.path={workdir / f'am-data-{port}'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    return start_service(Alertmanager, args, port, log_path, workdir)
