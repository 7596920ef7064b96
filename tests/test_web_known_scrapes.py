"""A scraper's request head, answered once by the full path with the exposition, is
answered again from what was remembered of it (`serving/known_scrapes.py`): the same bytes
on the wire but for the Date, the body and its length, and never where anything else
that decides the answer has changed (the web config, the telemetry path, a sample to
serve, a free request slot) or where the request was not a plain closing scrape."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpu_exporter.metrics.exposition import TEXT, BodyFormat, Exposition
from gpu_exporter.sampling.health import Verdict
from gpu_exporter.serving.http import HttpServer, bind
from gpu_exporter.serving.routes import Response, Routes, ServingState
from gpu_exporter.serving.scrape_clock import ScrapeClock
from gpu_exporter.serving.web_config import load_web_config
from tests.support.snapshots import fixed_snapshot
from tests.support.web import cyclic_garbage, slow_readers

CLOSE = b"Host: x\r\nConnection: close\r\n\r\n"
SCRAPE = b"GET /metrics HTTP/1.1\r\n" + CLOSE
BIG = 16 * 1024 * 1024  # more than the socket buffers of both ends hold


class Healthy:
    def ready(self) -> Verdict:
        return Verdict(True, "ok")

    def live(self) -> Verdict:
        return Verdict(True, "ok")


class CountingClock(ScrapeClock):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, BodyFormat]] = []

    def scraped(self, client: str, wants: BodyFormat = TEXT) -> None:
        self.seen.append((client, wants))
        super().scraped(client, wants)


class CountedRoutes(Routes):
    """The real routes, counting the scrapes that took the full path (`get`)."""

    def __init__(self, exposition: Exposition | None) -> None:
        super().__init__(
            ServingState(exposition=exposition, scrapes=CountingClock()),
            Healthy(),
            telemetry_path="/metrics",
        )
        self.full = 0
        self.big: bytes | None = None

    def get(self, path: str, headers: Any, client: str = "") -> Response:
        self.full += path == self.telemetry_path
        return super().get(path, headers, client)

    def scrape(self, wants: BodyFormat, client: str) -> bytes | None:
        body = super().scrape(wants, client)
        return self.big if self.big is not None and body is not None else body


@contextmanager
def serving(routes: Routes, **options: Any) -> Iterator[tuple[HttpServer, int]]:
    server = bind("127.0.0.1", 0, routes, max_requests=4, **options)
    # accept(2) returns once the head is in, so that every request here is read at once
    # (the server waits 2 ms at most for a head not in yet, then serves it on a thread)
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 1)
    thread = threading.Thread(target=server.serve, name="accept-loop", daemon=True)
    thread.start()
    try:
        yield server, server.server_address[1]
    finally:
        server.stop()
        thread.join(5)


def exchange(port: int, data: bytes, then: bytes | None = None) -> bytes:
    """All the server sends on a connection that sends `data` (then `then` after 50 ms)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if then is not None:
            time.sleep(0.05)
            sock.sendall(then)
        received = b""
        while chunk := sock.recv(1 << 20):
            received += chunk
    return received


def undated(response: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", response, count=1)


def exposition() -> Exposition:
    return Exposition(fixed_snapshot(1))


def test_a_repeated_scrape_is_answered_from_its_known_head_byte_for_byte(
    tmp_path: Path,
) -> None:
    config = tmp_path / "web.yml"
    config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    routes = CountedRoutes(exposition())
    heads = {
        "text": SCRAPE,
        "HTTP/1.0": b"GET /metrics HTTP/1.0\r\n\r\n",
        "gzip": b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n" + CLOSE,
        "OpenMetrics": (
            b"GET /metrics HTTP/1.1\r\n"
            b"Accept: application/openmetrics-text;version=1.0.0\r\n" + CLOSE
        ),
    }
    with serving(routes, web_config=load_web_config(str(config))) as (server, port):
        for name, head in heads.items():
            full = routes.full
            first, second, third = (exchange(port, head) for _ in range(3))
            assert routes.full == full + 1, name  # the first alone took the full path
            assert undated(first) == undated(second) == undated(third), name
            assert first.startswith(b"HTTP/1.1 200 OK\r\nServer: gpu-exporter/"), name
            assert b"\r\nX-Frame-Options: deny\r\nContent-Length: " in second, name
            assert re.search(rb"\r\nDate: \w{3}, \d\d \w{3} \d{4} [\d:]{8} GMT\r\n", third)
        assert len(server.known_scrapes) == len(heads)
        # each repeat is a scrape to the scrape clock, in the format it asked for
        clock = routes.state.scrapes
        assert isinstance(clock, CountingClock)
        assert [wants for _, wants in clock.seen] == [
            wants
            for wants in (
                BodyFormat(),
                BodyFormat(),
                BodyFormat(compressed=True),
                BodyFormat(openmetrics=True),
            )
            for _ in range(3)
        ]
        assert {client for client, _ in clock.seen} == {"127.0.0.1"}
        # a new sample: the known head with the new body and its length
        before = exchange(port, SCRAPE)
        snapshot = fixed_snapshot(2)
        routes.state.exposition = Exposition(snapshot)
        full = routes.full
        after = exchange(port, SCRAPE)
        assert routes.full == full
        body = after.split(b"\r\n\r\n", 1)[1]
        assert body == Exposition(snapshot).body(openmetrics=False, compressed=False)
        assert f"\r\nContent-Length: {len(body)}\r\n".encode() in after
        assert len(body) != len(before.split(b"\r\n\r\n", 1)[1])  # two GPUs, not one


def test_what_is_never_answered_from_a_known_head(tmp_path: Path) -> None:
    routes = CountedRoutes(exposition())
    with serving(routes) as (server, port):
        # a kept connection: its second request is read and answered (no known answer)
        kept = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", SCRAPE)
        assert kept.count(b"HTTP/1.1 200 OK\r\n") == 2
        # HEAD, a pipelined request after the head, another path, a head in two pieces
        assert b"Content-Length: " in exchange(port, b"HEAD /metrics HTTP/1.1\r\n" + CLOSE)
        piped = exchange(port, SCRAPE + b"GET /livez HTTP/1.1\r\n" + CLOSE)
        assert piped.count(b"HTTP/1.1 ") == 1  # it asked to close after the first
        assert exchange(port, b"GET /healthz HTTP/1.1\r\n" + CLOSE).endswith(b"\r\n\r\nok\n")
        assert exchange(port, b"GET /metrics HTTP/1.1\r\n", CLOSE).startswith(b"HTTP/1.1 200")
        assert len(server.known_scrapes) == 0
        for _ in range(3):
            exchange(port, SCRAPE)
        assert len(server.known_scrapes) == 1
        # a byte off a known head is a head of its own: malformed, it gets its 400
        full = routes.full
        bad = exchange(port, SCRAPE.replace(b"Host: x", b"Host x"))
        assert bad.startswith(b"HTTP/1.1 400 ")
        assert exchange(port, SCRAPE.replace(b"HTTP/1.1", b"HTTP/2.0")).startswith(b"HTTP/1.1 505 ")
        assert routes.full == full
    # a rate limit spends a token per request: nothing is kept under one
    limited = tmp_path / "limited.yml"
    limited.write_text("rate_limit:\n  interval: 1ms\n  burst: 100\n")
    routes = CountedRoutes(exposition())
    with serving(routes, web_config=load_web_config(str(limited))) as (server, port):
        for _ in range(3):
            assert exchange(port, SCRAPE).startswith(b"HTTP/1.1 200 OK\r\n")
        assert routes.full == 3
        assert len(server.known_scrapes) == 0


def test_a_known_head_follows_the_config_the_path_and_the_state(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    routes = CountedRoutes(exposition())
    with serving(routes, web_config=load_web_config(str(config))) as (server, port):
        for _ in range(2):
            assert b"\r\nX-Frame-Options: deny\r\n" in exchange(port, SCRAPE)
        # a re-read web config: its headers from the next scrape on
        config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n")
        assert server.reload_web_config()
        for _ in range(2):
            answer = exchange(port, SCRAPE)
            assert b"\r\nX-Frame-Options: sameorigin\r\n" in answer
            assert b"deny" not in answer
        # a new telemetry path (a reload of the exporter's config)
        routes.telemetry_path = "/gpu"
        assert exchange(port, SCRAPE).startswith(b"HTTP/1.1 404 ")
        routes.telemetry_path = "/metrics"
        assert exchange(port, SCRAPE).startswith(b"HTTP/1.1 200 OK\r\n")
        # every request slot taken: the full path's 503, then the known answer again
        for _ in range(4):
            assert server.slots.acquire(blocking=False)
        try:
            assert exchange(port, SCRAPE).startswith(b"HTTP/1.1 503 ")
        finally:
            for _ in range(4):
                server.slots.release()
        # no sample to serve (an exporter that lost its backend does not get here, but
        # the state's exposition is what decides): the full path's 503
        saved, routes.state.exposition = routes.state.exposition, None
        clock = routes.state.scrapes
        assert isinstance(clock, CountingClock)
        seen = len(clock.seen)
        answer = exchange(port, SCRAPE)
        assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(
            b"no sample has finished yet\n"
        )
        assert len(clock.seen) == seen + 1  # one scrape, noted once
        routes.state.exposition = saved
        full = routes.full
        assert exchange(port, SCRAPE).startswith(b"HTTP/1.1 200 OK\r\n")
        assert routes.full == full


def test_a_known_answer_larger_than_the_buffers_goes_on_on_a_thread() -> None:
    """The accept loop writes what the client's buffer takes and leaves the rest to a
    thread: a client that reads slowly or never does holds no one else up."""
    routes = CountedRoutes(exposition())
    routes.big = b"x" * BIG
    with serving(routes) as (_, port):
        for _ in range(2):
            answer = exchange(port, SCRAPE)
            assert answer.endswith(b"\r\n\r\n" + routes.big)
        assert routes.full == 1
        stuck = slow_readers(port, 3, SCRAPE)
        try:
            for _ in range(3):  # answered while three known answers wait on their readers
                assert exchange(port, b"GET /livez HTTP/1.1\r\n" + CLOSE).endswith(b"ok\n")
            assert exchange(port, SCRAPE).endswith(routes.big)
        finally:
            for sock in stuck:
                sock.close()
        assert routes.full == 1


def test_a_known_answer_leaves_nothing_for_the_cyclic_collector() -> None:
    routes = CountedRoutes(exposition())
    with serving(routes) as (_, port):
        exchange(port, SCRAPE)
        exchange(port, SCRAPE)

        def scrapes() -> None:
            for _ in range(20):
                exchange(port, SCRAPE)

        left = cyclic_garbage(scrapes)
        assert routes.full == 1
    assert left == []
