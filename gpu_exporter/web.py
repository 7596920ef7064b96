"""The HTTP side: /metrics from the cached exposition, a landing page, /healthz.

Nothing here calls NVML. `Routes` decides what each request gets; `serve` binds the
socket and runs a threaded server with a cap on concurrent requests and per-connection
read timeouts, so slow or idle clients cannot starve Prometheus.
"""

from __future__ import annotations

import html
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpu_exporter import __version__
from gpu_exporter.exposition import Exposition, wants_gzip, wants_openmetrics

log = logging.getLogger(__name__)

STALE_INTERVALS = 3  # /healthz fails when no sample finished within this many intervals
READ_TIMEOUT_SECONDS = 10.0


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ServingState:
    """What the sampler publishes for the web side; swapped atomically."""

    exposition: Exposition | None = None
    devices_stuck: Callable[[], bool] = lambda: False


def health(state: ServingState, interval_seconds: float, now: float) -> tuple[bool, str]:
    """(healthy, reason) for /healthz."""
    exposition = state.exposition
    if exposition is None:
        return False, "no sample has finished yet"
    snapshot = exposition.snapshot
    age = now - snapshot.timestamp_seconds
    if age > STALE_INTERVALS * interval_seconds:
        return False, f"last sample finished {age:.1f}s ago (interval {interval_seconds:g}s)"
    if not snapshot.nvml_up:
        return False, f"NVML unavailable: {snapshot.nvml_down_reason}"
    if snapshot.devices and not any(d.up for d in snapshot.devices):
        reasons = "; ".join(f"GPU {d.index}: {d.down_reason}" for d in snapshot.devices)
        return False, f"no GPU can be sampled ({reasons})"
    up = sum(1 for d in snapshot.devices if d.up)
    return True, f"ok: {up}/{snapshot.gpus} GPUs up, last sample {age:.1f}s ago"


class Routes:
    """Maps a request to a response. Pure apart from reading the clock."""

    def __init__(
        self,
        state: ServingState,
        *,
        telemetry_path: str,
        interval_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.telemetry_path = telemetry_path
        self.interval_seconds = interval_seconds
        self._clock = clock

    def get(self, path: str, headers: Any) -> Response:
        path = path.split("?", 1)[0]
        if path == self.telemetry_path:
            return self._metrics(headers)
        if path == "/healthz":
            ok, reason = health(self.state, self.interval_seconds, self._clock())
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            return Response(status, (reason + "\n").encode(), _plain())
        if path == "/":
            return Response(
                HTTPStatus.OK, self._landing(), {"Content-Type": "text/html; charset=utf-8"}
            )
        return Response(HTTPStatus.NOT_FOUND, b"404 page not found\n", _plain())

    def _metrics(self, headers: Any) -> Response:
        exposition = self.state.exposition
        if exposition is None:
            return Response(
                HTTPStatus.SERVICE_UNAVAILABLE, b"no sample has finished yet\n", _plain()
            )
        openmetrics = wants_openmetrics(headers.get("Accept"))
        compressed = wants_gzip(headers.get("Accept-Encoding"))
        out = {
            "Content-Type": exposition.content_type(openmetrics=openmetrics),
            "Vary": "Accept, Accept-Encoding",
        }
        if compressed:
            out["Content-Encoding"] = "gzip"
        return Response(
            HTTPStatus.OK, exposition.body(openmetrics=openmetrics, compressed=compressed), out
        )

    def _landing(self) -> bytes:
        _, reason = health(self.state, self.interval_seconds, self._clock())
        path = html.escape(self.telemetry_path)
        return (
            "<!DOCTYPE html><html><head><title>GPU Exporter</title></head><body>"
            f"<h1>GPU Exporter {html.escape(__version__)}</h1>"
            "<p>NVIDIA GPU metrics for Prometheus, sampled through NVML.</p>"
            f'<ul><li><a href="{path}">Metrics</a></li>'
            f'<li><a href="/healthz">Health</a>: {html.escape(reason)}</li></ul>'
            "</body></html>\n"
        ).encode()


def _plain() -> dict[str, str]:
    return {"Content-Type": "text/plain; charset=utf-8"}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_SECONDS  # per-connection socket timeout: idle clients are dropped
    server_version = f"gpu-exporter/{__version__}"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes: without this, Nagle's algorithm and
        # the client's delayed ACK add ~40 ms to every keep-alive scrape
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _serve(self, *, head: bool) -> None:
        if not self.server.slots.acquire(blocking=False):
            self._send(
                Response(
                    HTTPStatus.SERVICE_UNAVAILABLE, b"too many concurrent requests\n", _plain()
                ),
                head,
            )
            return
        try:
            self._send(self.server.routes.get(self.path, self.headers), head)
        finally:
            self.server.slots.release()

    def _send(self, response: Response, head: bool) -> None:
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if not head:
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], routes: Routes, max_requests: int, family: int
    ) -> None:
        self.address_family = family
        self.routes = routes
        self.slots = threading.BoundedSemaphore(max_requests)
        super().__init__(address, _Handler, bind_and_activate=False)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that resets or times out is routine: one debug line, no traceback."""
        error = sys.exc_info()[1]
        log.debug("http connection ended", extra={"client": client_address, "error": repr(error)})

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # ":PORT" and "[::]:PORT" accept IPv4 too, as Go's net.Listen does
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class ListenError(Exception):
    """The listen address cannot be bound; the message names the address and why."""


def bind(host: str, port: int, routes: Routes, max_requests: int) -> _Server:
    """Bind the server socket; raises ListenError with one clear line."""
    family = socket.AF_INET
    bind_host = host
    if host == "":
        family, bind_host = (
            (socket.AF_INET6, "::")
            if socket.has_ipv6 and _ipv6_works()
            else (socket.AF_INET, "0.0.0.0")
        )
    elif ":" in host:
        family = socket.AF_INET6
    try:
        server = _Server((bind_host, port), routes, max_requests, family)
    except OSError as error:
        raise ListenError(
            f"cannot listen on {_show(host, port)}: {error.strerror or error}"
        ) from None
    try:
        server.server_bind()
        server.server_activate()
    except OSError as error:
        server.server_close()
        raise ListenError(
            f"cannot listen on {_show(host, port)}: {error.strerror or error}"
        ) from None
    return server


def _show(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ipv6_works() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::", 0))
        return True
    except OSError:
        return False
