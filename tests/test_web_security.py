"""Web security and hostile clients, against the real program over real loopback sockets.

TLS with certificates made at test time by `openssl`, mutual TLS, basic auth with bcrypt
hashes made at test time, configured headers, method and syntax errors, request framing
and targets (RFC 9112), idle and trickling clients, the request cap and the probes beside
it, the web config re-read while running, and bad files at start.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest

from tests.support.certs import Pki
from tests.support.exporter import Exporter, run_exporter, start_exporter
from tests.support.web import (
    PASSWORD,
    SIMULATE,
    basic,
    call,
    eventually,
    exchange,
    raw_request,
    slow_readers,
    tls_client,
    tls_config,
    wait_serving,
    write,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    """One plain exporter for the tests that each send a request on a connection of their
    own and leave none open: started once, not once a test (25 starts of the same
    program), and it must answer after all of them."""
    exporter = start_exporter(list(SIMULATE), tmp_path_factory.mktemp("served"), ready=False)
    try:
        wait_serving(exporter, lambda: call(exporter.port))
        yield exporter
        assert call(exporter.port).status == 200, exporter.log()
    finally:
        exporter.stop()


@pytest.fixture(scope="module")
def password_hash() -> str:
    return bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


# --- TLS -------------------------------------------------------------------------------


def test_tls_serves_metrics_to_clients_that_trust_the_ca(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    exporter = started(config=tls_config(pki, tmp_path))
    trusted = tls_client(pki.ca.cert)
    wait_serving(exporter, lambda: call(exporter.port, context=trusted))

    result = call(exporter.port, context=trusted)
    assert result.status == 200
    assert "gpu_up{" in result.text

    # a client that trusts another CA refuses the server's certificate
    with pytest.raises(ssl.SSLCertVerificationError):
        call(exporter.port, context=tls_client(pki.rogue_ca.cert))
    # plain HTTP to the TLS port gets a clear answer, not metrics
    plain = call(exporter.port)
    assert plain.status == 400
    assert b"HTTPS" in plain.body
    # and nothing of that disturbed the server
    assert call(exporter.port, context=trusted).status == 200


def test_tls_min_version_tls13_refuses_tls12_clients(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    exporter = started(config=tls_config(pki, tmp_path, "  min_version: TLS13\n"))
    trusted = tls_client(pki.ca.cert)
    wait_serving(exporter, lambda: call(exporter.port, context=trusted))
    old = tls_client(pki.ca.cert)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        call(exporter.port, context=old)


def test_mutual_tls_admits_only_clients_with_a_certificate_from_the_client_ca(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    config = tls_config(
        pki,
        tmp_path,
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.client_ca.cert}\n",
    )
    exporter = started(config=config)
    good = tls_client(pki.ca.cert, pki.client)
    wait_serving(exporter, lambda: call(exporter.port, context=good))

    assert call(exporter.port, context=good).status == 200
    refused = (ssl.SSLError, ConnectionError, http.client.HTTPException)
    with pytest.raises(refused):  # no client certificate
        call(exporter.port, context=tls_client(pki.ca.cert))
    with pytest.raises(refused):  # a client certificate from a CA the server does not trust
        call(exporter.port, context=tls_client(pki.ca.cert, pki.rogue_client))
    with pytest.raises(refused):  # the server's own CA is not the client CA either
        call(exporter.port, context=tls_client(pki.ca.cert, pki.server))
    assert call(exporter.port, context=good).status == 200


def test_verify_client_cert_if_given_admits_no_certificate_but_not_a_bad_one(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    config = tls_config(
        pki,
        tmp_path,
        f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {pki.client_ca.cert}\n",
    )
    exporter = started(config=config)
    anonymous = tls_client(pki.ca.cert)
    wait_serving(exporter, lambda: call(exporter.port, context=anonymous))
    assert call(exporter.port, context=tls_client(pki.ca.cert, pki.client)).status == 200
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        call(exporter.port, context=tls_client(pki.ca.cert, pki.rogue_client))


# --- basic auth, headers, methods ------------------------------------------------------


def auth_config(tmp_path: Path, password_hash: str) -> Path:
    path = tmp_path / "web.yml"
    write(
        path,
        "basic_auth_users:\n"
        f"  prometheus: '{password_hash}'\n"
        "http_server_config:\n"
        "  headers:\n"
        "    X-Frame-Options: deny\n"
        "    Strict-Transport-Security: max-age=31536000\n",
    )
    return path


def test_basic_auth_right_wrong_and_missing_credentials(
    tmp_path: Path, password_hash: str, started: Callable[..., Exporter]
) -> None:
    exporter = started(config=auth_config(tmp_path, password_hash))
    right = basic("prometheus", PASSWORD)
    wait_serving(exporter, lambda: call(exporter.port, headers=right))

    ok = call(exporter.port, headers=right)
    assert ok.status == 200
    assert "gpu_up{" in ok.text
    assert call(exporter.port, "/healthz", headers=right).status != 401
    for path in ("/metrics", "/healthz", "/", "/nowhere"):
        for headers in (
            {},
            basic("prometheus", "wrong"),
            basic("prometheus", PASSWORD + "x"),
            basic("nobody", PASSWORD),
            {"Authorization": "Bearer abc"},
            {"Authorization": "Basic !!!not-base64"},
        ):
            denied = call(exporter.port, path, headers=headers)
            assert denied.status == 401, (path, headers)
            assert denied.headers["WWW-Authenticate"] == 'Basic realm="gpu-exporter"'
            assert "gpu_" not in denied.text
    head = call(exporter.port, method="HEAD")
    assert head.status == 401
    assert head.body == b""


def test_configured_headers_are_on_every_response(
    tmp_path: Path, password_hash: str, started: Callable[..., Exporter]
) -> None:
    exporter = started(config=auth_config(tmp_path, password_hash))
    right = basic("prometheus", PASSWORD)
    wait_serving(exporter, lambda: call(exporter.port, headers=right))
    responses = {
        "200": call(exporter.port, headers=right),
        "401": call(exporter.port),
        "404": call(exporter.port, "/nowhere", headers=right),
        "405": call(exporter.port, method="POST", headers=right),
        "400": raw_request(exporter.port, b"GARBAGE\r\n\r\n"),
    }
    for status, result in responses.items():
        assert str(result.status) == status
        assert result.headers.get("X-Frame-Options") == "deny", status
        assert result.headers.get("Strict-Transport-Security") == "max-age=31536000", status


def test_only_get_and_head_are_served_and_malformed_requests_get_400(
    started: Callable[..., Exporter],
) -> None:
    exporter = started()
    wait_serving(exporter, lambda: call(exporter.port))
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"):
        result = call(exporter.port, method=method)
        assert result.status == 405, method
        assert result.headers["Allow"] == "GET, HEAD"
    head = call(exporter.port, method="HEAD")
    assert head.status == 200
    assert head.body == b""
    assert int(head.headers["Content-Length"]) > 0

    for garbage, status in (
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /metrics HTTP/one\r\n\r\n", 400),
        (b"GET /metrics\r\n\r\n", 400),  # HTTP/0.9
        (b"GET /metrics HTTP/1.1\r\nNo colon here\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n", 400),  # RFC 9112 5.1
        (b"GET /metrics HTTP/1.1\r\nX-A: b\r\n folded\r\n\r\n", 400),  # obs-fold
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # TLS to plain HTTP
        (b"GET /metrics HTTP/9.9\r\n\r\n", 505),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n", 431),
    ):
        result = raw_request(exporter.port, garbage)
        assert result.status == status, garbage[:40]
        assert result.headers["Connection"] == "close"
    # a POST body is never read as the next request: the connection is closed after 405
    smuggled = raw_request(
        exporter.port,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 31\r\n\r\n"
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    assert smuggled.status == 405
    assert smuggled.headers["Connection"] == "close"
    assert call(exporter.port).status == 200


SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 0\r\nContent-Length: %d\r\n" % len(SMUGGLED),
        b"Content-Length: %d\r\nContent-Length: 0\r\n" % len(SMUGGLED),
        b"Content-Length: 0, %d\r\n" % len(SMUGGLED),
        b"Transfer-Encoding:\r\nContent-Length: %d\r\n" % len(SMUGGLED),
        b"Content-Length: %d\r\nTransfer-Encoding:\r\n" % len(SMUGGLED),
        b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n" % len(SMUGGLED),
        b"Transfer-Encoding: gzip\r\n",
        b"Content-Length: +%d\r\n" % len(SMUGGLED),
        b"Content-Length: -1\r\n",
    ],
    ids=[
        "two-lengths-0-first",
        "two-lengths-0-last",
        "length-list",
        "empty-te-then-length",
        "length-then-empty-te",
        "chunked-and-length",
        "te-not-chunked",
        "signed-length",
        "negative-length",
    ],
)
def test_framing_that_could_smuggle_a_body_in_as_a_request_gets_400_and_close(
    framing: bytes, served: Exporter
) -> None:
    """RFC 9112 section 6.3: the body's end is unknown, so the server must answer 400 and
    close; the body must never be served as a second request."""
    exporter = served
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n" + SMUGGLED
    responses, closed = exchange(exporter.port, request)
    assert [r.status for r in responses] == [400], [r.text for r in responses]
    assert responses[0].headers["Connection"] == "close"
    assert closed
    assert call(exporter.port).status == 200


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: %d\r\n" % len(SMUGGLED),
        b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(SMUGGLED), len(SMUGGLED)),
        b"Transfer-Encoding: chunked\r\n",
    ],
    ids=["length", "same-length-twice", "chunked"],
)
def test_a_well_framed_body_is_never_read_as_a_request(framing: bytes, served: Exporter) -> None:
    exporter = served
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n" + SMUGGLED
    responses, closed = exchange(exporter.port, request)
    assert [r.status for r in responses] == [200]
    assert closed  # after the response, instead of reading the body as the next request


def test_connections_stay_open_as_the_version_and_connection_header_say(
    started: Callable[..., Exporter],
) -> None:
    """HTTP/1.1 keeps the connection unless the client says close; HTTP/1.0 closes unless
    it says keep-alive. A response after which the server closes says so."""
    exporter = started()
    wait_serving(exporter, lambda: call(exporter.port))
    probe = b"GET /healthz HTTP/1.%d\r\nHost: x\r\n%s\r\n"
    for version, connection, kept in (
        (1, b"", True),
        (1, b"Connection: close\r\n", False),
        (0, b"", False),
        (0, b"Connection: keep-alive\r\n", True),
    ):
        responses, closed = exchange(exporter.port, probe % (version, connection) * 2, timeout=1.0)
        label = (version, connection)
        assert [r.status for r in responses] == ([200, 200] if kept else [200]), label
        assert closed is not kept, label
        assert (responses[-1].headers.get("Connection") == "close") is not kept, label
        if version == 0 and kept:  # issue 21: an HTTP/1.0 client is told it stays open
            assert responses[0].headers["Connection"] == "keep-alive", label
        assert responses[0].headers["Server"].startswith("gpu-exporter/"), label
        assert responses[0].headers["Date"].endswith(" GMT"), label


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"1" * 5000 + b"\r\n\r\n",
        b"GET\xa0/metrics HTTP/1.1\r\nHost: x\r\n\r\n",  # NBSP
        b"GET /metrics\x85HTTP/1.1\r\nHost: x\r\n\r\n",  # NEL
        b"GET\x0b/metrics HTTP/1.1\r\nHost: x\r\n\r\n",  # VT
        b"GET\x1c/metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /metrics\x1fHTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: bare\rCR\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\x00NUL\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    ],
    ids=[
        "5000-digit-length",
        "nbsp",
        "nel",
        "vt",
        "fs",
        "us",
        "bare-cr",
        "nul",
        "no-host",
        "two-hosts",
    ],
)
def test_requests_rfc_9112_forbids_get_400_and_close(
    request_bytes: bytes, served: Exporter
) -> None:
    """Issue 21: these were served, or (the 5000-digit length) dropped with no answer."""
    exporter = served
    responses, closed = exchange(exporter.port, request_bytes)
    assert [r.status for r in responses] == [400]
    assert responses[0].headers["Connection"] == "close"
    assert closed


def test_empty_lines_before_a_request_line_are_ignored(served: Exporter) -> None:
    """RFC 9112 section 2.2; the connection used to close without an answer."""
    exporter = served
    probe = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    closing = b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    responses, closed = exchange(exporter.port, b"\r\n" + probe + b"\r\n\n" + closing)
    assert [r.status for r in responses] == [200, 200]
    assert closed


def test_absolute_form_request_targets_are_served(served: Exporter) -> None:
    """RFC 9112 section 3.2.2: a server must accept the absolute-form."""
    exporter = served
    origin = f"http://127.0.0.1:{exporter.port}"
    for target, status, text in (
        (f"{origin}/metrics", 200, "gpu_up{"),
        (f"HTTP://localhost:{exporter.port}/healthz?verbose", 200, ""),
        ("http://another.example/livez", 200, ""),
        ("http://example.com", 200, "GPU Exporter"),
        (f"{origin}/nowhere", 404, ""),
        ("ftp://example.com/metrics", 400, ""),
        ("metrics", 400, ""),
        ("*", 400, ""),
    ):
        request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        result = raw_request(exporter.port, request.encode())
        assert result.status == status, target
        assert text in result.text, target


def test_an_http09_request_line_is_answered_at_once(served: Exporter) -> None:
    """HTTP/0.9 sends no headers after the request line: waiting for them (until the read
    timeout, 10 s) left the client without an answer."""
    exporter = served
    for line in (b"GET /metrics\r\n", b"GET /metrics\n", b"GET /\r\n"):
        responses, closed = exchange(exporter.port, line, timeout=5.0)  # half the read timeout
        assert [r.status for r in responses] == [400], line
        assert b"HTTP/0.9" in responses[0].body
        assert closed


# --- hostile clients -------------------------------------------------------------------


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_100_idle_connections_do_not_stop_scrapes(
    tls: bool, pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    exporter = started(config=tls_config(pki, tmp_path) if tls else None)
    context = tls_client(pki.ca.cert) if tls else None
    wait_serving(exporter, lambda: call(exporter.port, context=context))
    idle: list[socket.socket] = []
    try:
        for i in range(100):
            sock = socket.create_connection(("127.0.0.1", exporter.port), timeout=5)
            if i % 2 and not tls:
                # a keep-alive client that made one request and then went quiet
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                response = http.client.HTTPResponse(sock)
                response.begin()
                response.read()
                assert response.status == 200
            # the rest connected and sent nothing (over TLS: never start the handshake)
            idle.append(sock)
        for _ in range(10):
            started_at = time.monotonic()
            result = call(exporter.port, context=context, timeout=3)
            assert result.status == 200
            assert time.monotonic() - started_at < 1.0
    finally:
        for sock in idle:
            sock.close()


def test_a_client_trickling_its_request_is_dropped_after_the_read_timeout(
    started: Callable[..., Exporter],
) -> None:
    """A byte every half second never hits a per-read timeout; the request deadline does."""
    exporter = started()
    wait_serving(exporter, lambda: call(exporter.port))
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        started_at = time.monotonic()
        dropped_after = None
        while time.monotonic() - started_at < 15:
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                sock.settimeout(0.5)
                if sock.recv(1024) == b"":
                    dropped_after = time.monotonic() - started_at
                    break
            except TimeoutError:
                continue
            except ConnectionError:
                dropped_after = time.monotonic() - started_at
                break
        assert dropped_after is not None, "the trickling client was never dropped"
        assert 8 < dropped_after < 13
    assert call(exporter.port).status == 200


def test_clients_that_never_read_hold_no_request_slot(tmp_path: Path) -> None:
    """Issue 21: a request slot is held while a response is built, not while a client
    takes its time to read it. Three clients that never read a large response, with a
    cap of 2: they used to hold both slots until the write timeout, and every other
    request got 503."""
    exporter = start_exporter(
        ["--simulate", "1024", "--collect.interval", "5s", "--web.max-requests", "2"], tmp_path
    )
    try:
        size = len(exporter.get("/metrics").body)
        wmem_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
        if size < wmem_max + 256 * 1024:
            pytest.skip(f"a {size}-byte response fits in the {wmem_max}-byte send buffer")
        held = slow_readers(exporter.port, 3, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            # a path that is cheap to answer (404): what is measured is the cap, not how
            # long the live page of 1024 GPUs takes on a busy machine
            for _ in range(20):
                result = exporter.get("/no-such-page")
                assert result.status == 404, result.text
                time.sleep(0.05)
            for probe in ("/livez", "/healthz", "/healthz?verbose"):
                assert exporter.get(probe).status == 200, probe
        finally:
            for sock in held:
                sock.close()
    finally:
        exporter.stop()


def test_password_guesses_wait_in_their_own_queue_not_in_request_slots(
    tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    """Guesses at an expensive bcrypt hash are checked one at a time, and at most a few
    wait (503 beyond); they hold no request slot, so with a cap of 2 and more guesses in
    flight than that, the scraper whose login is remembered and the probes are served."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(13)).decode()
    config = tmp_path / "web.yml"
    write(config, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    exporter = started("--web.max-requests", "2", config=config)
    right = basic("prometheus", PASSWORD)
    wait_serving(exporter, lambda: call(exporter.port, headers=right, timeout=10))

    results: list[int] = []

    def guess(n: int) -> None:
        results.append(
            call(exporter.port, headers=basic("prometheus", f"guess{n}"), timeout=30).status
        )

    guesses = [threading.Thread(target=guess, args=(n,)) for n in range(8)]
    for thread in guesses:
        thread.start()
    try:
        # guesses beyond the queue are turned away at once: the queue is full now
        eventually(lambda: 503 in results, what="a guess beyond the queue gets 503")
        for path in ("/metrics", "/healthz", "/livez"):
            assert call(exporter.port, path, headers=right).status == 200, path
    finally:
        for thread in guesses:
            thread.join()
    assert set(results) <= {401, 503}
    assert 401 in results
    # the right password, checked once, is served from the cache without a bcrypt round
    started_at = time.monotonic()
    assert call(exporter.port, headers=right).status == 200
    assert time.monotonic() - started_at < 0.3


# --- reload ----------------------------------------------------------------------------


def test_web_config_is_re_read_when_it_changes(
    tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    old_hash = bcrypt.hashpw(b"old-password", bcrypt.gensalt(4)).decode()
    new_hash = bcrypt.hashpw(b"new-password", bcrypt.gensalt(4)).decode()
    config = tmp_path / "web.yml"
    write(config, f"basic_auth_users:\n  prometheus: '{old_hash}'\n")
    exporter = started(config=config)
    old, new = basic("prometheus", "old-password"), basic("prometheus", "new-password")
    wait_serving(exporter, lambda: call(exporter.port, headers=old))
    assert call(exporter.port, headers=new).status == 401

    write(config, f"basic_auth_users:\n  prometheus: '{new_hash}'\n")
    eventually(lambda: call(exporter.port, headers=new).status == 200, what="new password works")
    assert call(exporter.port, headers=old).status == 401

    # a broken file keeps the settings in force and is reported once
    write(config, "basic_auth_users:\n  prometheus: [oops\n")
    # the files are looked at (at most once a second) when requests come in
    eventually(
        lambda: (
            call(exporter.port, headers=new).status == 200
            and "web config not reloaded" in exporter.log()
        ),
        what="error logged",
    )
    for _ in range(15):
        assert call(exporter.port, headers=new).status == 200
        assert call(exporter.port, headers=old).status == 401
        time.sleep(0.2)
    errors = [line for line in exporter.log().splitlines() if "web config not reloaded" in line]
    assert len(errors) == 1, errors
    assert "level=error" in errors[0]
    assert str(config) in errors[0]
    assert "invalid YAML: line " in errors[0]

    # fixing it is picked up again
    write(config, f"basic_auth_users:\n  prometheus: '{old_hash}'\n")
    eventually(lambda: call(exporter.port, headers=old).status == 200, what="fixed file used")


def test_rotated_certificate_is_used_without_a_restart(
    pki: Pki, tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    cert.write_bytes(pki.server.cert.read_bytes())
    key.write_bytes(pki.server.key.read_bytes())
    config = tmp_path / "web.yml"
    write(config, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    exporter = started(config=config)
    first, second = tls_client(pki.ca.cert), tls_client(pki.rogue_ca.cert)
    wait_serving(exporter, lambda: call(exporter.port, context=first))

    # the certificate files change, the config file does not
    key.with_suffix(".tmp").write_bytes(pki.rogue_server.key.read_bytes())
    cert.with_suffix(".new").write_bytes(pki.rogue_server.cert.read_bytes())
    os.replace(key.with_suffix(".tmp"), key)
    os.replace(cert.with_suffix(".new"), cert)

    def rotated() -> bool:
        try:
            return call(exporter.port, context=second).status == 200
        except ssl.SSLError:
            return False

    eventually(rotated, what="the new certificate is served")
    with pytest.raises(ssl.SSLCertVerificationError):
        call(exporter.port, context=first)


# --- bad files at start ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read: No such file or directory"),
        ("basic_auth_users: [\n", "invalid YAML: line 2"),
        ("tls_server_confg: {}\n", "unknown key 'tls_server_confg'"),
        (
            "basic_auth_users:\n  prometheus: plaintext\n",
            "basic_auth_users.prometheus: not a bcrypt",
        ),
        ("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n", "nope.crt"),
        ("mismatch", "does not match cert_file"),
        ("http_server_config:\n  headers:\n    Content-Length: '0'\n", "can not be configured"),
        (
            'http_server_config:\n  headers:\n    Content-Security-Policy: "default-src \u4e2d"\n',
            "Content-Security-Policy: '\u4e2d' (U+4E2D) can not be sent in an HTTP header",
        ),
    ],
    ids=[
        "missing",
        "yaml",
        "unknown-key",
        "bad-hash",
        "no-cert",
        "key-mismatch",
        "header",
        "header-not-latin-1",
    ],
)
def test_invalid_web_config_at_start_exits_2_with_one_line(
    content: str | None, expected: str, pki: Pki, tmp_path: Path
) -> None:
    config = tmp_path / "web.yml"
    if content == "mismatch":
        content = (
            f"tls_server_config:\n  cert_file: {pki.server.cert}\n"
            f"  key_file: {pki.rogue_server.key}\n"
        )
    if content is not None:
        write(config, content)
    result = run_exporter(
        ["--simulate", "1", "--web.listen-address", "127.0.0.1:0", "--web.config.file", str(config)]
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-exporter: error: web config ")
    assert str(config) in lines[0]
    assert expected in lines[0]
    assert result.stdout == ""
