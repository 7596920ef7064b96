"""Reading a request's head and writing a response's (the real server: test_web_security)."""

from __future__ import annotations

import email.utils
import io

import pytest

from gpu_exporter.serving.request_head import (
    MAX_FIELDS,
    MAX_LINE_BYTES,
    BadRequest,
    Headers,
    NoRequest,
    RequestLine,
    http_date,
    keeps_alive,
    read_headers,
    read_request_line,
    response_head,
)


def request_line(raw: bytes) -> RequestLine:
    return read_request_line(io.BytesIO(raw))


def headers(raw: bytes) -> Headers:
    return read_headers(io.BytesIO(raw))


@pytest.mark.parametrize(
    ("raw", "method", "target", "version"),
    [
        (b"GET /metrics HTTP/1.1\r\n", "GET", "/metrics", (1, 1)),
        (b"HEAD / HTTP/1.0\n", "HEAD", "/", (1, 0)),  # a bare LF ends a line too
        (b"GET //metrics HTTP/1.1\r\n", "GET", "/metrics", (1, 1)),  # as http.server read it
        (b"GET http://h/metrics HTTP/1.1\r\n", "GET", "http://h/metrics", (1, 1)),
        (b"BREW /pot HTTP/1.2\r\n", "BREW", "/pot", (1, 2)),
    ],
)
def test_request_lines_are_split_into_method_target_and_version(
    raw: bytes, method: str, target: str, version: tuple[int, int]
) -> None:
    line = request_line(raw)
    assert (line.method, line.target, line.version) == (method, target, version)


def test_later_http_1_versions_read_as_1_1() -> None:
    assert request_line(b"GET / HTTP/1.2\r\n").name == "HTTP/1.1"
    assert request_line(b"GET / HTTP/1.0\r\n").name == "HTTP/1.0"


@pytest.mark.parametrize(
    ("raw", "status", "why"),
    [
        (b"GET /metrics\r\n", 400, "HTTP/0.9"),
        (b"GET /metrics HTTP/0.9\r\n", 400, "HTTP/0.9"),
        (b"GARBAGE\r\n", 400, "Bad request syntax"),
        (b"GET / HTTP/1.1 extra\r\n", 400, "Bad request syntax"),
        (b"GET / HTTP/one\r\n", 400, "Bad request version"),
        (b"GET / HTTP/1.1.1\r\n", 400, "Bad request version"),
        (b"GET / HTTP/\xb9.1\r\n", 400, "Bad request version"),  # a digit only to Unicode
        (b"GET / HTTP/2.0\r\n", 505, "Invalid HTTP version"),
        (b"GET / HTTP/9.9\r\n", 505, "Invalid HTTP version"),
        (b"GET /" + b"a" * MAX_LINE_BYTES + b" HTTP/1.1\r\n", 414, "request line longer"),
    ],
)
def test_bad_request_lines_are_refused_with_a_status_and_a_reason(
    raw: bytes, status: int, why: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        request_line(raw)
    assert refused.value.status == status
    assert why in str(refused.value)


@pytest.mark.parametrize("raw", [b"", b"\r\n", b"   \r\n"])
def test_no_request_line_is_no_request(raw: bytes) -> None:
    with pytest.raises(NoRequest):
        request_line(raw)


def test_header_names_match_case_insensitively_and_repeats_are_kept_in_order() -> None:
    h = headers(b"Accept: text/plain\r\nX-A: 1\r\nx-a:2\r\nX-B:\t spaced \t\r\n\r\nnot: read\r\n")
    assert h.get("accept") == "text/plain"
    assert h.get("X-A") == "1"
    assert h.get_all("X-a") == ["1", "2"]
    assert h.get("x-b") == "spaced"
    assert h.get("Not") is None
    assert h.get_all("Missing") is None
    assert h.get("Missing", "") == ""


def test_headers_end_at_the_end_of_the_connection_too() -> None:
    assert headers(b"X-A: 1\r\n").get("X-A") == "1"


@pytest.mark.parametrize(
    "raw",
    [
        b"No colon here\r\n\r\n",
        b"X-A : whitespace before the colon\r\n\r\n",  # RFC 9112 5.1: must be refused
        b"X-A: b\r\n folded: continuation\r\n\r\n",  # obsolete line folding
        b"X-A: b\r\n\tfolded\r\n\r\n",
        b": no name\r\n\r\n",
        b"X(A): not a token\r\n\r\n",
    ],
)
def test_malformed_header_lines_are_400(raw: bytes) -> None:
    with pytest.raises(BadRequest) as refused:
        headers(raw)
    assert refused.value.status == 400
    assert "Malformed request header" in str(refused.value)


def test_more_than_max_fields_or_a_line_too_long_is_431() -> None:
    assert len(headers(b"X-A: b\r\n" * MAX_FIELDS + b"\r\n").get_all("X-A") or ()) == MAX_FIELDS
    with pytest.raises(BadRequest) as refused:
        headers(b"X-A: b\r\n" * (MAX_FIELDS + 1) + b"\r\n")
    assert refused.value.status == 431
    long = b"X-A: " + b"b" * (MAX_LINE_BYTES - 7) + b"\r\n"
    assert len(long) == MAX_LINE_BYTES
    assert headers(long + b"\r\n").get("X-A") == "b" * (MAX_LINE_BYTES - 7)
    with pytest.raises(BadRequest) as refused:
        headers(b"X-A: b" + long)
    assert refused.value.status == 431


@pytest.mark.parametrize(
    ("version", "connection", "alive"),
    [
        ("1.1", None, True),
        ("1.1", "close", False),
        ("1.1", "Keep-Alive, Close", False),
        ("1.0", None, False),
        ("1.0", "keep-alive", True),
        ("1.0", "Upgrade, Keep-Alive", True),
    ],
)
def test_keep_alive_follows_the_version_and_the_connection_header(
    version: str, connection: str | None, alive: bool
) -> None:
    line = request_line(f"GET / HTTP/{version}\r\n".encode())
    h = headers(f"Connection: {connection}\r\n\r\n".encode() if connection else b"\r\n")
    assert keeps_alive(line, h) is alive


@pytest.mark.parametrize("seconds", [0.0, 784111777.0, 1795000000.5, 4102444799.0])
def test_http_date_is_the_imf_fixdate_of_rfc_9110(seconds: float) -> None:
    assert http_date(seconds) == email.utils.formatdate(seconds, usegmt=True)


def test_response_head_is_a_status_line_fields_and_an_empty_line() -> None:
    head = response_head(503, [("Content-Type", "text/plain"), ("Content-Length", "4")])
    assert head == (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n"
    )
