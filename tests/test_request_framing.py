"""RFC 9112 framing and request targets, on parsed headers (the real server: test_web_security)."""

from __future__ import annotations

import io

import pytest

from gpu_exporter.serving.request_framing import framing_error, has_body, origin_form
from gpu_exporter.serving.request_head import Headers, read_headers


def headers(*lines: str) -> Headers:
    raw = "".join(f"{line}\r\n" for line in lines) + "\r\n"
    return read_headers(io.BytesIO(raw.encode("latin-1")))


@pytest.mark.parametrize(
    ("lines", "version", "problem"),
    [
        ((), "HTTP/1.1", None),
        (("Content-Length: 0",), "HTTP/1.1", None),
        (("Content-Length: 12",), "HTTP/1.1", None),
        (("Content-Length: 12", "Content-Length: 12"), "HTTP/1.1", None),
        (("Content-Length: 12, 12",), "HTTP/1.1", None),
        (("Transfer-Encoding: chunked",), "HTTP/1.1", None),
        (("Transfer-Encoding: gzip, chunked",), "HTTP/1.1", None),
        (("Content-Length: 0", "Content-Length: 31"), "HTTP/1.1", "conflicting Content-Length"),
        (("Content-Length: 5, 7",), "HTTP/1.1", "conflicting Content-Length"),
        (("Content-Length: -1",), "HTTP/1.1", "invalid Content-Length"),
        (("Content-Length: +5",), "HTTP/1.1", "invalid Content-Length"),
        (("Content-Length: 0x10",), "HTTP/1.1", "invalid Content-Length"),
        (("Content-Length:",), "HTTP/1.1", "invalid Content-Length"),
        (("Transfer-Encoding:", "Content-Length: 5"), "HTTP/1.1", "both Transfer-Encoding"),
        (("Transfer-Encoding: chunked", "Content-Length: 5"), "HTTP/1.1", "both"),
        (("Transfer-Encoding:",), "HTTP/1.1", "does not end in chunked"),
        (("Transfer-Encoding: chunked, gzip",), "HTTP/1.1", "does not end in chunked"),
        (("Transfer-Encoding: chunked",), "HTTP/1.0", "HTTP/1.0"),
    ],
)
def test_framing(lines: tuple[str, ...], version: str, problem: str | None) -> None:
    found = framing_error(headers(*lines), version)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_has_body() -> None:
    assert not has_body(headers())
    assert not has_body(headers("Content-Length: 0"))
    assert has_body(headers("Content-Length: 3"))
    assert has_body(headers("Transfer-Encoding: chunked"))


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("/metrics", "/metrics"),
        ("/metrics?x=1", "/metrics?x=1"),
        ("http://127.0.0.1:9872/metrics", "/metrics"),
        ("HTTP://example.com/healthz?verbose", "/healthz?verbose"),
        ("https://[::1]:9872/livez", "/livez"),
        ("http://example.com", "/"),
        ("http://example.com?x", "/?x"),
        ("ftp://example.com/metrics", None),
        ("http:///metrics", None),
        ("metrics", None),
        ("*", None),
        ("example.com:443", None),
    ],
)
def test_origin_form(target: str, path: str | None) -> None:
    assert origin_form(target) == path
