"""A bug behind a route: the client gets a 500 and the log a traceback, not an empty reply."""

from __future__ import annotations

import http.client
import logging
import threading
from typing import Any

import pytest

from gpu_exporter.serving.http import bind
from gpu_exporter.serving.routes import Response, Routes


class BrokenRoutes(Routes):
    """Routes whose /metrics raises, as a bug in a renderer would (a new connection's
    first /metrics is answered in the accept loop: the 500 comes from there)."""

    telemetry_path = "/metrics"

    def __init__(self) -> None:  # no state: nothing but the failure is needed
        pass

    def is_probe(self, path: str) -> bool:
        return path == "/livez"

    def get(self, path: str, headers: Any, client: str = "") -> Response:
        if path == "/livez":
            return Response(200, b"alive\n", {"Content-Type": "text/plain"})
        raise ImportError("cannot import name 'HTTPSHandler'")


def test_an_exception_in_a_route_is_a_logged_500_and_the_server_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = bind("127.0.0.1", 0, BrokenRoutes(), max_requests=4)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        with caplog.at_level(logging.ERROR, logger="gpu_exporter.serving.http"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics")
            answer = conn.getresponse()
            assert answer.status == 500
            assert answer.read() == b"500 internal server error\n"
            conn.close()
        assert any(r.message == "error answering a request" and r.exc_info for r in caplog.records)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/livez")
        assert conn.getresponse().status == 200  # the slot was given back, the server lives
        conn.close()
    finally:
        server.stop()
        thread.join(5)
