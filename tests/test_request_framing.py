"""Whether a request carries a body, and its target as a path (the real server:
test_web_security; framing that cannot be trusted: test_request_head)."""

from __future__ import annotations

import pytest

from gpu_exporter.serving.request_framing import has_body, origin_form
from gpu_exporter.serving.request_head import Headers, parse_head


def headers(*lines: str) -> Headers:
    raw = "GET / HTTP/1.1\r\nHost: x\r\n" + "".join(f"{line}\r\n" for line in lines) + "\r\n"
    return parse_head(raw.encode("latin-1")).headers


def test_has_body() -> None:
    assert not has_body(headers())
    assert not has_body(headers("Content-Length: 0"))
    assert not has_body(headers("Content-Length: 000"))
    assert has_body(headers("Content-Length: 3"))
    assert has_body(headers("Content-Length: 3", "Content-Length: 3"))
    assert has_body(headers("Transfer-Encoding: chunked"))


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("/metrics", "/metrics"),
        ("/metrics?x=1", "/metrics?x=1"),
        ("//metrics", "/metrics"),  # as http.server read it
        ("///metrics?x", "/metrics?x"),
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
