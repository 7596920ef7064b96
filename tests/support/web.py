"""Helpers for tests that talk to the real program over loopback: clients, polling, configs."""

from __future__ import annotations

import base64
import gc
import http.client
import io
import os
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.certs import KeyPair, Pki
from tests.support.exporter import Exporter, HttpResult

PASSWORD = "correct horse battery staple"
SIMULATE = ["--simulate", "2", "--collect.interval", "200ms"]


def write(path: Path, text: str) -> None:
    """Replace the file atomically, as config management tools do."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def tls_client(ca: Path, client: KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def call(
    port: int,
    path: str = "/metrics",
    *,
    context: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    timeout: float = 5.0,
    source: str | None = None,
) -> HttpResult:
    """One request on a fresh connection, over TLS when `context` is given, from loopback
    address `source` when given (127.0.0.2: another client than the rest of the test)."""
    conn: http.client.HTTPConnection
    bound = (source, 0) if source is not None else None
    if context is not None:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, context=context, timeout=timeout, source_address=bound
        )
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=bound)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return HttpResult(response.status, dict(response.getheaders()), response.read())
    finally:
        conn.close()


def wait_serving(exporter: Exporter, probe: Callable[[], HttpResult], timeout: float = 15) -> None:
    """Until `probe` gets 200 from /metrics (the first sample is done)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if exporter.process.poll() is not None:
            raise AssertionError(
                f"exporter exited {exporter.process.returncode}:\n{exporter.log()}"
            )
        try:
            result = probe()
            if result.status == 200:
                return
            last = result.status
        except (OSError, http.client.HTTPException) as error:
            last = error
        time.sleep(0.05)
    raise AssertionError(f"not serving within {timeout}s ({last!r}); log:\n{exporter.log()}")


def eventually(check: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def raw_request(port: int, data: bytes, timeout: float = 5.0) -> HttpResult:
    """Send bytes as they are and parse whatever comes back as an HTTP response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return HttpResult(response.status, dict(response.getheaders()), response.read())


def slow_readers(port: int, count: int, requests: bytes) -> list[socket.socket]:
    """`count` clients with a 4 KiB receive buffer that send `requests` and read nothing."""
    held = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(requests)
        held.append(sock)
    return held


def tls_config(pki: Pki, tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "web.yml"
    write(
        path,
        "tls_server_config:\n"
        f"  cert_file: {pki.server.cert}\n"
        f"  key_file: {pki.server.key}\n" + extra,
    )
    return path


class _Unclosable(io.BytesIO):
    def close(self) -> None:  # http.client closes its file after each body
        pass


class _Replay:
    def __init__(self, data: bytes) -> None:
        self.file = _Unclosable(data)

    def makefile(self, mode: str) -> io.BytesIO:
        return self.file


def exchange(port: int, data: bytes, timeout: float = 5.0) -> tuple[list[HttpResult], bool]:
    """Send bytes as they are; every response that comes back, and whether the server
    closed the connection (False: still open after `timeout` seconds of silence)."""
    received = b""
    closed = False
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        try:
            while chunk := sock.recv(65536):
                received += chunk
            closed = True
        except TimeoutError:
            pass
        except ConnectionResetError:
            closed = True
    replay = _Replay(received)
    results: list[HttpResult] = []
    while replay.file.tell() < len(received):
        response = http.client.HTTPResponse(replay)  # type: ignore[arg-type]
        response.begin()
        results.append(HttpResult(response.status, dict(response.getheaders()), response.read()))
    return results, closed


def cyclic_garbage(run: Callable[[], object]) -> list[str]:
    """The type names of our objects and sockets that `run()` leaves for the cyclic
    collector (reference cycles), with the collector off while it runs."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return [
            type(o).__name__
            for o in gc.garbage
            if type(o).__module__.startswith(("gpu_exporter", "socket"))
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
