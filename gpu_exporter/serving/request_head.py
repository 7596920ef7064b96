"""A request's head read off the wire, and a response's head written to it (RFC 9112).

The server answers GET and HEAD from memory and never reads a body, so all it needs of
a request is the request line and the header fields. They are read here with the limits
the standard library's `http.server` had (a line of at most MAX_LINE_BYTES, at most
MAX_FIELDS header fields) and a stricter field syntax: a field name is a token followed
at once by a colon, and obsolete line folding is refused (RFC 9112 sections 5.1 and 5.2
let a server answer 400 to both; either could hide a field from one parser and not another).

This stands in for `http.server`, which imports `http.client`, and with it `ssl`, libcrypto
and the `email` package: about 7 MiB of resident memory in a server that serves no TLS.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol

MAX_LINE_BYTES = 65536  # of the request line and of each header line
MAX_FIELDS = 100  # header fields in one request

_VERSION = re.compile(r"HTTP/([0-9]{1,10})\.([0-9]{1,10})")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


class LineReader(Protocol):
    def readline(self, size: int | None = -1, /) -> bytes: ...


class BadRequest(Exception):
    """A request that gets `status` and a closed connection; `str()` says why."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class NoRequest(Exception):
    """The connection ended, or sent an empty line, where a request line belongs."""


class Headers:
    """A request's header fields: names match case-insensitively, repeats are kept."""

    def __init__(self, fields: Iterable[tuple[str, str]] = ()) -> None:
        self._fields: dict[str, list[str]] = {}
        for name, value in fields:
            self._fields.setdefault(name.lower(), []).append(value)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first field called `name`, or `default`."""
        values = self._fields.get(name.lower())
        return values[0] if values else default

    def get_all(self, name: str) -> list[str] | None:
        """Every field called `name`, in order; None when there is none."""
        return self._fields.get(name.lower())


@dataclass(frozen=True)
class RequestLine:
    method: str
    target: str  # as sent; `request_framing.origin_form` reduces it to a path
    version: tuple[int, int]  # (1, 0) or (1, 1); later 1.x versions read as 1.1

    @property
    def name(self) -> str:
        """The version as `HTTP/1.0` or `HTTP/1.1`."""
        return f"HTTP/1.{min(self.version[1], 1)}"


def read_line(rfile: LineReader, too_long: HTTPStatus, what: str) -> bytes:
    """One line (its ending included); BadRequest(`too_long`) beyond MAX_LINE_BYTES."""
    line = rfile.readline(MAX_LINE_BYTES + 1)
    if len(line) > MAX_LINE_BYTES:
        raise BadRequest(too_long, f"{what} longer than {MAX_LINE_BYTES} bytes")
    return line


def read_request_line(rfile: LineReader) -> RequestLine:
    """The request line. Raises NoRequest at the end of the connection, BadRequest for a
    line too long (414), without a version (HTTP/0.9), malformed, or not HTTP/1.x (505)."""
    raw = read_line(rfile, HTTPStatus.REQUEST_URI_TOO_LONG, "request line")
    words = raw.decode("iso-8859-1").split()
    if not words:
        raise NoRequest
    if len(words) == 2:  # HTTP/0.9 sends no headers: answer now rather than wait for them
        raise BadRequest(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported")
    if len(words) != 3:
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({' '.join(words)[:80]!r})")
    method, target, version = words
    match = _VERSION.fullmatch(version)
    if match is None:
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"Bad request version ({version[:20]!r})")
    number = (int(match[1]), int(match[2]))
    if number >= (2, 0):
        raise BadRequest(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"Invalid HTTP version ({version})")
    if number < (1, 0):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported")
    if target.startswith("//"):  # as http.server did: "//metrics" is "/metrics"
        target = "/" + target.lstrip("/")
    return RequestLine(method, target, number)


def read_headers(rfile: LineReader) -> Headers:
    """The header fields up to the empty line. BadRequest: 431 for a line too long or more
    than MAX_FIELDS fields, 400 for a line that is not `name: value` or is folded."""
    fields: list[tuple[str, str]] = []
    while True:
        raw = read_line(rfile, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "header line")
        line = raw.decode("iso-8859-1").rstrip("\r\n")
        if not line:  # the empty line, or the connection ended: the head is complete
            return Headers(fields)
        if len(fields) == MAX_FIELDS:
            raise BadRequest(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"more than {MAX_FIELDS} headers"
            )
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):  # also a folded line (leading space)
            raise BadRequest(HTTPStatus.BAD_REQUEST, "Malformed request header")
        fields.append((name, value.strip(" \t")))


def keeps_alive(request: RequestLine, headers: Headers) -> bool:
    """Whether the connection stays open after the response: HTTP/1.1 unless the client
    says `Connection: close`; HTTP/1.0 only when it says `Connection: keep-alive`."""
    options = {
        option.strip().lower()
        for value in headers.get_all("Connection") or ()
        for option in value.split(",")
    }
    if "close" in options:
        return False
    return request.version >= (1, 1) or "keep-alive" in options


def http_date(seconds: float) -> str:
    """`seconds` since the epoch as an HTTP date (RFC 9110 section 5.6.7), in GMT."""
    t = time.gmtime(seconds)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


def response_head(status: int, fields: Iterable[tuple[str, str]]) -> bytes:
    """The status line and header fields of an HTTP/1.1 response, with the empty line.

    Values must be Latin-1 (the web config allows printable ASCII only)."""
    lines = [f"HTTP/1.1 {int(status)} {HTTPStatus(status).phrase}"]
    lines.extend(f"{name}: {value}" for name, value in fields)
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")
