"""A new connection's first scrape or probe is answered in the accept loop (issue 31: the
hand-off to a thread was most of what a fresh connection's scrape cost more), and nothing
there waits on the client: a client that never reads, sends its head in pieces, or
keeps the connection for more requests is left to a thread of its own."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpu_exporter.serving.http import HttpServer, _unsent, bind
from gpu_exporter.serving.routes import Response, Routes, plain
from tests.support.web import call, cyclic_garbage, eventually, slow_readers

BIG = 16 * 1024 * 1024  # more than the socket buffers of both ends hold


class BigMetrics(Routes):
    """/metrics is BIG bytes, /livez a probe, the rest a line."""

    telemetry_path = "/metrics"

    def __init__(self) -> None:  # no state: the bodies are all that is needed
        self.big = b"x" * BIG
        self.threads: dict[str, set[str]] = {}  # path: the threads that answered it

    def get(self, path: str, headers: Any, client: str = "") -> Response:
        self.threads.setdefault(path, set()).add(threading.current_thread().name)
        if path == "/metrics":
            return Response(200, self.big, plain())
        return Response(200, b"ok\n", plain())


@contextmanager
def serving(server: HttpServer) -> Iterator[int]:
    thread = threading.Thread(target=server.serve, name="accept-loop", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.stop()
        thread.join(5)


def _sent(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(data)
    return sock


def _response(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    sock.close()
    return received


def test_first_requests_are_answered_in_the_accept_loop_without_waiting_on_the_client() -> None:
    routes = BigMetrics()
    server = bind("127.0.0.1", 0, routes, max_requests=4)
    port = server.server_address[1]
    # connections whose heads are in before the accept loop runs (a head that is not in
    # yet when its connection is accepted goes to a thread, as before)
    close = "Host: x\r\nConnection: close\r\n\r\n"
    probes = [_sent(port, f"GET {path} HTTP/1.1\r\n{close}".encode()) for path in PATHS]
    other = _sent(port, f"GET /other HTTP/1.1\r\n{close}".encode())
    # clients that ask for 16 MiB and never read
    stuck = slow_readers(port, 3, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    halting = _sent(port, b"GET /livez HTTP/1.1\r\nHo")  # a head in pieces
    # a whole head longer than the accept loop's one read: the rest read on a thread
    long_head = _sent(port, f"GET /other HTTP/1.1\r\nX-Pad: {'p' * 12000}\r\n{close}".encode())
    pipelined = _sent(
        port,
        b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    with serving(server):
        try:
            # scrapes and probes answered in the accept loop; another path on a thread
            *small, big = (_response(sock) for sock in probes)
            for answer in small:
                assert answer.endswith(b"Connection: close\r\nContent-Length: 3\r\n\r\nok\n")
            assert big.endswith(b"\r\n\r\n" + routes.big)  # what did not fit, on a thread
            assert _response(other).endswith(b"\r\n\r\nok\n")
            assert routes.threads["/other"] == {"http-connection"}
            assert routes.threads["/livez"] == routes.threads["/healthz"] == {"accept-loop"}
            assert routes.threads["/metrics"] == {"accept-loop"}
            # the stuck clients got what their buffers take, the rest waits on threads
            # of their own: the accept loop answers on, a whole 16 MiB scrape included
            for _ in range(3):
                result = call(port, "/livez", timeout=5)
                assert (result.status, result.body) == (200, b"ok\n")
            assert len(call(port, "/metrics", timeout=30).body) == BIG
            # the rest of a head in pieces is read on the connection's thread
            halting.sendall(b"st: x\r\nConnection: close\r\n\r\n")
            assert _response(halting).startswith(b"HTTP/1.1 200 OK\r\n")
            assert _response(long_head).endswith(b"\r\n\r\nok\n")
            # the pipelined requests after the first: on the connection's thread, in order
            answers = _response(pipelined)
            assert answers.count(b"HTTP/1.1 200 OK\r\n") == 3, answers
            assert answers.endswith(b"\r\n\r\nok\n")
        finally:
            for sock in stuck:
                sock.close()
    assert routes.threads["/livez"] == {"accept-loop", "http-connection"}


PATHS = ("/livez", "/healthz", "/livez", "/metrics")


def test_a_head_that_comes_after_the_connection_is_waited_for_unless_another_comes() -> None:
    """A client's head often comes just after the accept loop took its connection up: the
    loop waits for it (`head_wait_ms`) and answers it there, not on a thread; but a
    client that never sends holds the next connection up no longer than that one takes
    to come (here the wait is made 10 s, so that a scrape answered in time shows it)."""
    routes = BigMetrics()
    routes.big = b"x" * 1000
    server = bind("127.0.0.1", 0, routes, max_requests=4)
    server.head_wait_ms = 10_000
    close = b"Host: x\r\nConnection: close\r\n\r\n"
    with serving(server) as port:
        late = socket.create_connection(("127.0.0.1", port), timeout=10)
        # taken up, the accept loop has found nothing yet, and waits
        eventually(lambda: len(server.connections) == 1, what="the connection taken up")
        late.sendall(b"GET /metrics HTTP/1.1\r\n" + close)
        assert _response(late).endswith(b"\r\n\r\n" + routes.big)
        assert routes.threads["/metrics"] == {"accept-loop"}
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            eventually(lambda: len(server.connections) == 1, what="the connection taken up")
            started = time.monotonic()
            assert call(port, "/livez", timeout=5).status == 200
            assert time.monotonic() - started < 5  # not the 10 s wait
            assert routes.threads["/livez"] == {"accept-loop"}
            silent.sendall(b"GET /other HTTP/1.1\r\n" + close)  # its thread reads it
            assert _response(silent).endswith(b"\r\n\r\nok\n")
            assert routes.threads["/other"] == {"http-connection"}
        finally:
            silent.close()


def test_what_is_left_of_a_gathered_write_after_a_partial_send() -> None:
    head, body = memoryview(b"HEAD"), memoryview(b"body...")
    left = [bytes(view) for view in _unsent([head, body], 0)]
    assert left == [b"HEAD", b"body..."]
    assert [bytes(view) for view in _unsent([head, body], 2)] == [b"AD", b"body..."]
    assert [bytes(view) for view in _unsent([head, body], 4)] == [b"body..."]
    assert [bytes(view) for view in _unsent([head, body], 7)] == [b"y..."]
    assert _unsent([head, body], 11) == []


def test_a_served_connection_leaves_nothing_for_the_cyclic_collector() -> None:
    """Each connection's handler, head reader and socket are freed when it ends, by
    reference counting: none is left in a reference cycle for the cyclic collector, which
    would free them later in whichever thread it runs in, often a scrape (at 8 GPUs a
    young collection over the last render's families, 0.6-0.9 ms, in about one scrape of
    120). Covers the answer at once, the connection's thread (a head in pieces), a kept
    connection's second request, a 404 and a malformed head (h11 raises its error again
    from a method of its own: a cycle through its traceback)."""
    routes = BigMetrics()
    routes.big = b"x" * 1000
    server = bind("127.0.0.1", 0, routes, max_requests=4)
    close = b"Host: x\r\nConnection: close\r\n\r\n"
    with serving(server) as port:
        clients = [  # (first part, the rest after 50 ms or None)
            (b"GET /metrics HTTP/1.1\r\n" + close, None),
            (b"GET /metrics HTTP/1.1\r\n", close),
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /livez HTTP/1.1\r\n" + close),
            (b"GET /nowhere HTTP/1.1\r\n" + close, None),
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\nNo colon\r\n\r\n", None),  # 400
        ]
        for first, rest in clients:  # the server's first-use objects made outside the count
            _in_pieces(port, first, rest)

        def connections() -> None:
            for _ in range(5):
                for first, rest in clients:
                    _in_pieces(port, first, rest)
            time.sleep(0.2)  # the last connection's thread ends it after the client read

        left = cyclic_garbage(connections)
    assert left == []


def _in_pieces(port: int, first: bytes, rest: bytes | None) -> bytes:
    """What the server answers to `first`, and `rest` sent 50 ms later (a head in pieces
    is served on the connection's thread)."""
    sock = _sent(port, first)
    if rest is not None:
        time.sleep(0.05)
        sock.sendall(rest)
    return _response(sock)
