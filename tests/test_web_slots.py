"""Request slots and connections of the server, in-process with routes that wait on the
test (issue 21): a slot is held while a response is built, not while it is read; the
number of open connections is bounded, and idle ones make room for new ones."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.serving import http
from gpu_exporter.serving.connections import Connections
from gpu_exporter.serving.http import HttpServer, bind
from gpu_exporter.serving.routes import Response, Routes, plain
from gpu_exporter.serving.web_config import load_web_config
from tests.support.certs import Pki
from tests.support.web import call, eventually, exchange, slow_readers, tls_client, tls_config

BIG = 16 * 1024 * 1024  # more than the socket buffers of both ends hold


class GatedRoutes(Routes):
    """/slow waits for the test's gate, /big is BIG bytes, the rest a line; /livez a probe."""

    def __init__(self) -> None:  # no state: nothing but the waiting is needed
        self.entered = threading.Semaphore(0)
        self.gate = threading.Event()
        self.big = b"x" * BIG

    def is_probe(self, path: str) -> bool:
        return path == "/livez"

    def at_once_lines(self) -> tuple[bytes, ...]:
        return (b"GET /livez ",)

    def get(self, path: str, headers: Any, client: str = "") -> Response:
        if path == "/slow":
            self.entered.release()
            self.gate.wait(30)
        if path == "/big":
            return Response(200, self.big, plain())
        return Response(200, b"ok\n", plain())


@contextmanager
def serving(routes: Routes, **options: Any) -> Iterator[HttpServer]:
    server = bind("127.0.0.1", 0, routes, **options)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(5)


def in_background(port: int, path: str) -> tuple[threading.Thread, list[int]]:
    statuses: list[int] = []
    thread = threading.Thread(
        target=lambda: statuses.append(call(port, path, timeout=30).status), daemon=True
    )
    thread.start()
    return thread, statuses


def test_requests_beyond_the_cap_get_503_and_the_probes_are_answered() -> None:
    routes = GatedRoutes()
    with serving(routes, max_requests=2) as server:
        port = server.server_address[1]
        waiting = [in_background(port, "/slow") for _ in range(2)]
        for _ in waiting:
            assert routes.entered.acquire(timeout=10)
        beyond = call(port, "/fast")
        assert beyond.status == 503
        assert beyond.body == b"too many concurrent requests\n"
        assert call(port, "/livez").status == 200
        routes.gate.set()
        for thread, statuses in waiting:
            thread.join(10)
            assert statuses == [200]
        assert call(port, "/fast").status == 200


def test_a_client_that_never_reads_holds_no_request_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a cap of 1, a client that asked for a large response and reads none of it
    used to hold the only slot until the write timeout: every other request got 503."""
    monkeypatch.setattr(http, "WRITE_TIMEOUT_SECONDS", 3.0)
    with serving(GatedRoutes(), max_requests=1) as server:
        port = server.server_address[1]
        (reader,) = slow_readers(port, 1, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            for _ in range(20):
                assert call(port, "/fast").status == 200
                time.sleep(0.02)
            # writes have a deadline of their own: the reader is dropped after it
            reader.settimeout(10)
            taken = 0
            started = time.monotonic()
            time.sleep(4.0)
            try:
                while chunk := reader.recv(1 << 20):
                    taken += len(chunk)
            except ConnectionResetError:
                pass  # reset: the kernel dropped what it still held for the reader
            assert taken < BIG
            assert time.monotonic() - started < 10
        finally:
            reader.close()


def connected(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]


def test_at_the_connection_limit_the_longest_idle_connection_makes_room() -> None:
    with serving(GatedRoutes(), max_requests=4, max_connections=3) as server:
        port = server.server_address[1]
        idle = connected(port, 3)
        try:
            eventually(lambda: len(server.connections) == 3, what="three connections open")
            assert call(port, "/fast").status == 200  # the first idle one was closed for it
            assert idle[0].recv(1) == b""
            idle[1].sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
            assert idle[1].recv(1024).startswith(b"HTTP/1.1 200 OK\r\n")
        finally:
            for sock in idle:
                sock.close()


def test_connections_accepted_together_make_room_in_the_order_they_were_accepted() -> None:
    """A connection waits for its first request from its accept, not from when its
    thread begins: on a busy host those threads begin in any order, and the test above
    saw its second idle connection closed instead of its first."""
    now = [0.0]
    connections = Connections(2, clock=lambda: now[0])
    pairs = [socket.socketpair() for _ in range(3)]
    for _server_end, client_end in pairs:
        client_end.settimeout(5)
    try:
        first, second, new = (server_end for server_end, _client_end in pairs)
        assert connections.admit(first, "127.0.0.1")
        now[0] = 1.0
        assert connections.admit(second, "127.0.0.1")
        now[0] = 2.0
        connections.waiting(second)  # its thread began first
        now[0] = 3.0
        connections.waiting(first)
        now[0] = 4.0
        assert connections.admit(new, "127.0.0.1")
        assert pairs[0][1].recv(1) == b""  # the first accepted was shut down
        assert len(connections) == 2
        pairs[1][1].setblocking(False)
        with pytest.raises(BlockingIOError):
            pairs[1][1].recv(1)  # the second is still open, nothing to read
    finally:
        for pair in pairs:
            for sock in pair:
                sock.close()


def test_when_every_connection_is_busy_a_new_one_gets_503() -> None:
    routes = GatedRoutes()
    with serving(routes, max_requests=4, max_connections=2) as server:
        port = server.server_address[1]
        waiting = [in_background(port, "/slow") for _ in range(2)]
        try:
            for _ in waiting:
                assert routes.entered.acquire(timeout=10)
            # answered as it is accepted, before any request
            (refused,), closed = exchange(port, b"")
            assert refused.status == 503
            assert refused.body == b"too many open connections\n"
            assert refused.headers["Connection"] == "close"
            assert closed
        finally:
            routes.gate.set()
        for thread, statuses in waiting:
            thread.join(10)
            assert statuses == [200]
        eventually(lambda: len(server.connections) == 0, what="the connections are counted out")
        assert call(port, "/fast").status == 200


@contextmanager
def being_sent_to(port: int, count: int) -> Iterator[list[socket.socket]]:
    """`count` clients that asked for /big and read nothing, once the server is writing
    each its response (its first bytes came); closed after the block."""
    readers = slow_readers(port, count, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        for reader in readers:
            reader.settimeout(10)
            assert reader.recv(1, socket.MSG_PEEK)
        yield readers
    finally:
        for reader in readers:
            reader.close()


def was_reset(reader: socket.socket) -> bool:
    """Whether the server closed `reader`'s connection: reading opens its window, so a
    live connection delivers its whole BIG response, and a closed one ends (a reset, or
    the end of what the kernel still held) before that. Reading to the end, not a fixed
    amount, leaves no race with the server's thread that sends the reset."""
    taken = 0
    try:
        while taken < BIG:
            chunk = reader.recv(1 << 20)
            if not chunk:
                return True
            taken += len(chunk)
    except ConnectionResetError:
        return True
    return False


def test_an_address_that_holds_the_most_connections_makes_room_for_another() -> None:
    """Issue 28: clients that ask for a large response and never read used to hold every
    connection until the write deadline, and a new client got 503 "too many open
    connections" (the kubelet's liveness probe among them). A connection sending a
    response for longer than the grace makes room for a new one; and a new client from
    another address takes the place of one held by the address that holds the most even
    within the grace, so that address cannot keep the connections by opening new ones
    faster than they pass the grace. Here the grace is an hour: only the share helps."""
    with serving(GatedRoutes(), max_requests=4, max_connections=3) as server:
        server.connections = Connections(3, slow_reader_grace_seconds=3600)
        port = server.server_address[1]
        with being_sent_to(port, 3) as readers:
            # the same address: its connections are still within the grace
            refused = call(port, "/fast")
            assert (refused.status, refused.body) == (503, b"too many open connections\n")
            assert call(port, "/livez", source="127.0.0.2").status == 200
            # the address that held every connection lost one of them, for the probe
            assert [was_reset(reader) for reader in readers].count(True) == 1
            assert call(port, "/fast", source="127.0.0.2").status == 200


def test_a_connection_that_sends_to_a_client_that_never_reads_makes_room_past_the_grace() -> None:
    """Issue 28, from one address: with a grace of 0 s, a connection sending a response
    that its client does not take makes room for a new connection at once."""
    with serving(GatedRoutes(), max_requests=4, max_connections=2) as server:
        server.connections = Connections(2, slow_reader_grace_seconds=0)
        with being_sent_to(server.server_address[1], 2):
            for _ in range(3):
                assert call(server.server_address[1], "/fast").status == 200


def test_over_tls_the_connection_that_makes_room_is_closed(pki: Pki, tmp_path: Path) -> None:
    """The idle connection counted out for a new one was shut down through its raw
    socket, which the TLS socket had taken over: it stayed open and served requests, so
    with TLS the cap bounded neither connections nor threads."""
    context = tls_client(pki.ca.cert)
    config = load_web_config(str(tls_config(pki, tmp_path)))
    with serving(GatedRoutes(), max_requests=4, max_connections=1, web_config=config) as server:
        port = server.server_address[1]
        idle = context.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost"
        )
        try:
            eventually(lambda: len(server.connections) == 1, what="the idle connection open")
            assert call(port, "/fast", context=context).status == 200
            try:
                idle.sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = idle.recv(1024)
            except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
                answer = b""
            assert answer == b""
        finally:
            idle.close()
