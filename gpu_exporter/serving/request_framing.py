"""What RFC 9112 says about a request's body and target, for a server that reads no bodies.

The server answers GET and HEAD and never reads a request body. What matters is that a
body is never taken for the next request on the connection (request smuggling). Framing
that cannot be trusted (Content-Length values that are not one number, Transfer-Encoding
other than chunked, both at once, Transfer-Encoding in HTTP/1.0) gets 400 and a closed
connection from `request_head.parse_head` (h11 and section 6.3). Here:

- `has_body` says whether a well-framed request carries a body; the connection is then
  closed after the response instead of reading on.
- `origin_form` turns the request target into the path the routes know: origin-form as
  it is (leading slashes folded into one, as `http.server` did), absolute-form
  (`http://host:port/metrics`, which section 3.2.2 says a server must accept) reduced to
  its path and query.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from gpu_exporter.serving.request_head import MAX_HEAD_BYTES, Headers

_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def has_body(headers: Headers) -> bool:
    """Whether a request whose framing is valid carries a body."""
    if headers.get_all("Transfer-Encoding") is not None:
        return True
    length = headers.get("Content-Length")
    return length is not None and length.strip("0") != ""


def origin_form(target: str) -> str | None:
    """The path and query of the request target, or None when it has neither form."""
    if len(target) > MAX_HEAD_BYTES:  # longer than any head the server reads
        return None
    if target.startswith("//"):  # as http.server read it: "//metrics" is "/metrics"
        return "/" + target.lstrip("/")
    if target.startswith("/"):
        return target
    if not _ABSOLUTE.match(target):
        return None
    parts = urlsplit(target)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    path = parts.path or "/"
    return f"{path}?{parts.query}" if parts.query else path
