"""What RFC 9112 says about a request's framing and target, for a server that reads no bodies.

The server answers GET and HEAD and never reads a request body. What matters is that a
body is never taken for the next request on the connection (request smuggling):

- `framing_error` finds framing that cannot be trusted, which must get 400 and a closed
  connection (RFC 9112 section 6.3): Content-Length values that are not digits or that
  differ (two headers, or a list), Transfer-Encoding whose last coding is not chunked
  (an empty value included), Transfer-Encoding in an HTTP/1.0 request, and
  Transfer-Encoding next to Content-Length (allowed to be refused by section 6.1).
- `has_body` says whether a well-framed request carries a body; the connection is then
  closed after the response instead of reading on.
- `origin_form` turns the request target into the path the routes know: origin-form as
  it is, absolute-form (`http://host:port/metrics`, which section 3.2.2 says a server
  must accept) reduced to its path and query.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from gpu_exporter.serving.request_head import Headers

_DIGITS = re.compile(r"[0-9]+")
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _values(headers: Headers, name: str) -> list[str] | None:
    """Every comma-separated value of every `name` header line; None if there is none."""
    lines = headers.get_all(name)
    if lines is None:
        return None
    return [part.strip() for line in lines for part in line.split(",")]


def framing_error(headers: Headers, version: str) -> str | None:
    """Why the request's body framing cannot be trusted, or None when it can."""
    codings = _values(headers, "Transfer-Encoding")
    lengths = _values(headers, "Content-Length")
    if codings is not None:
        if version == "HTTP/1.0":
            return "Transfer-Encoding in an HTTP/1.0 request"
        if lengths is not None:
            return "both Transfer-Encoding and Content-Length"
        if codings[-1].lower() != "chunked":
            return "Transfer-Encoding does not end in chunked"
    if lengths is not None:
        if not all(_DIGITS.fullmatch(length) for length in lengths):
            return "invalid Content-Length"
        if len({int(length) for length in lengths}) > 1:
            return "conflicting Content-Length values"
    return None


def has_body(headers: Headers) -> bool:
    """Whether a request whose framing is valid carries a body."""
    if headers.get_all("Transfer-Encoding") is not None:
        return True
    lengths = _values(headers, "Content-Length")
    return lengths is not None and int(lengths[0]) > 0


def origin_form(target: str) -> str | None:
    """The path and query of the request target, or None when it has neither form."""
    if target.startswith("/"):
        return target
    if not _ABSOLUTE.match(target):
        return None
    parts = urlsplit(target)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    path = parts.path or "/"
    return f"{path}?{parts.query}" if parts.query else path
