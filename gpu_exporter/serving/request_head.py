"""A request's head read off the wire with h11, and a response's head written to it.

The server answers GET and HEAD from memory and never reads a body, so all it needs of
a request is its head: the request line and the header fields, up to the empty line.
`HeadReader` collects each head of a connection, at most MAX_HEAD_BYTES of it (a total,
request line and fields together: a client that sends more gets 414 or 431 at once,
whatever it meant to send after), and hands it to h11, a strict HTTP/1.1 parser
(RFC 9112), which refuses what a lenient one would let through: separators other than
one space in the request line, control characters (a bare CR, NUL) in a field, a field
name followed by whitespace, a Content-Length that is not one number of at most 20
digits, a Transfer-Encoding other than chunked, and an HTTP/1.1 request without exactly
one Host. Around it, this module:

- ignores empty lines before a request line (RFC 9112 section 2.2);
- answers at once a first line that is no HTTP/1.x request line (an HTTP/0.9 request
  sends no headers: waiting for them would leave the client without an answer);
- refuses obsolete line folding with 400 (h11 would join the lines; section 5.2 lets a
  server refuse them, and a folded field could be read one way here and another way by a
  proxy in front), more than MAX_FIELDS fields (431), versions from 2.0 on (505),
  Transfer-Encoding in an HTTP/1.0 request (section 6.1: the framing is faulty) or next
  to Content-Length (h11 would go by Transfer-Encoding; section 6.1 lets a server refuse
  it), and reads later HTTP/1.x versions as HTTP/1.1, which needs a Host too.

No `http.server`: it imports `http.client`, and with it `ssl`, libcrypto and the `email`
package, about 7 MiB of resident memory in a server that serves no TLS.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TypeVar

from gpu_exporter.records import Record

MAX_HEAD_BYTES = 16 * 1024  # request line and header fields of one request, together
MAX_FIELDS = 100  # header fields in one request
RECV_BYTES = 8 * 1024  # read at most this much at a time

_HEAD_END = re.compile(rb"\n\r?\n")  # the empty line, as h11 finds it
_FOLDED = re.compile(rb"\n[ \t]")  # a line that starts with whitespace
_REQUEST_LINE = re.compile(rb"[^ ]+ [^ ]+ HTTP/[0-9]\.[0-9]\r?")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


_Text = TypeVar("_Text", bytes, str, str | None)
_Answer = TypeVar("_Answer")


class BadRequest(Exception):
    """A request that gets `status` and a closed connection; `str()` says why."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class NoRequest(Exception):
    """The connection ended before a request's head was complete."""


class Headers:
    """A request's header fields: names match case-insensitively, repeats are kept.
    Read-only: a parsed head is shared by every request that sent the same bytes."""

    def __init__(self, fields: Iterable[tuple[str, str]] = ()) -> None:
        collected: dict[str, list[str]] = {}
        for name, value in fields:
            collected.setdefault(name.lower(), []).append(value)
        self._fields = {name: tuple(values) for name, values in collected.items()}

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first field called `name`, or `default`."""
        values = self._fields.get(name.lower())
        return values[0] if values else default

    def get_all(self, name: str) -> tuple[str, ...] | None:
        """Every field called `name`, in order; None when there is none."""
        return self._fields.get(name.lower())


@dataclass(frozen=True, repr=False)
class Request(Record):
    method: str
    target: str  # as sent; `request_framing.origin_form` reduces it to a path
    version: tuple[int, int]  # (1, 0) or (1, 1); later 1.x versions read as 1.1
    headers: Headers

    @property
    def name(self) -> str:
        """The version as `HTTP/1.0` or `HTTP/1.1`."""
        return f"HTTP/1.{self.version[1]}"


class HeadReader:
    """The request heads of one connection, one after the other.

    Bytes after a head (a pipelined request) are kept for the next one; at most
    MAX_HEAD_BYTES + RECV_BYTES are held. The reader holds no reference to the socket or
    its handler (the read function comes with each call): a connection's handler that
    held its reader, which held the handler's bound method, made a reference cycle, so
    each connection's objects were left to the cyclic collector, which freed them in a
    later scrape's time.
    """

    def __init__(self, received: bytes = b"") -> None:
        """`received`: what was read of the connection before (at most RECV_BYTES)."""
        self._buffer = bytearray(received)

    @property
    def buffered(self) -> int:
        """Bytes read after the last head (the start of a pipelined request)."""
        return len(self._buffer)

    def next_request(self, recv: Callable[[int], bytes]) -> Request:
        """The next request, reading more with `recv` while the head is not all in:
        `recv(n)` returns up to n bytes, b"" when the client has closed, and raises (a
        timeout) when the caller's deadline has passed. Raises NoRequest when the
        connection ends first and BadRequest for a head that gets an error status (the
        connection then ends)."""
        buffer = self._buffer
        searched = 0  # the empty line is not in buffer[:searched]
        while True:
            _drop_empty_lines(buffer)
            end = _HEAD_END.search(buffer, max(0, searched - 2))
            if end is not None:
                if end.end() > MAX_HEAD_BYTES:
                    raise _too_long(buffer)
                break
            _check_incomplete(buffer)
            searched = len(buffer)
            chunk = recv(RECV_BYTES)
            if not chunk:
                raise NoRequest
            buffer += chunk
        head = bytes(buffer[: end.end()])
        del buffer[: end.end()]
        return parse_head(head)


def _drop_empty_lines(buffer: bytearray) -> None:
    """RFC 9112 section 2.2: a server SHOULD ignore an empty line before a request line."""
    start = 0
    while True:
        if buffer.startswith(b"\n", start):
            start += 1
        elif buffer.startswith(b"\r\n", start):
            start += 2
        else:
            break
    if start:
        del buffer[:start]


def _check_incomplete(buffer: bytearray) -> None:
    """BadRequest for a head that is too long or cannot become a request, before its end."""
    newline = buffer.find(b"\n")
    if newline >= 0:
        line = bytes(buffer[:newline])
        if not _REQUEST_LINE.fullmatch(line):
            if len(line.split()) == 2:
                raise BadRequest(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported")
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"Bad request line ({line[:80]!r})")
    if len(buffer) > MAX_HEAD_BYTES:
        raise _too_long(buffer)


def _too_long(buffer: bytearray) -> BadRequest:
    """414 when the request line alone is longer than MAX_HEAD_BYTES, else 431."""
    if buffer.find(b"\n", 0, MAX_HEAD_BYTES) < 0:
        return BadRequest(
            HTTPStatus.REQUEST_URI_TOO_LONG, f"request line longer than {MAX_HEAD_BYTES} bytes"
        )
    return BadRequest(
        HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
        f"request head longer than {MAX_HEAD_BYTES} bytes",
    )


def remembered(
    longest: int, kept: int
) -> Callable[[Callable[[_Text], _Answer]], Callable[[_Text], _Answer]]:
    """For a pure function of what a client sent: its answers for the last `kept` inputs
    of at most `longest` characters (or bytes) are kept, so that a scraper, which sends
    the same head every time, is answered without parsing it again. What raises is never
    kept (it raises each time); None and longer inputs are not kept."""

    def decorate(answer: Callable[[_Text], _Answer]) -> Callable[[_Text], _Answer]:
        cached = functools.lru_cache(maxsize=kept)(answer)

        @functools.wraps(answer)
        def answer_remembered(sent: _Text) -> _Answer:
            if sent is not None and len(sent) <= longest:
                return cached(sent)
            return answer(sent)

        return answer_remembered

    return decorate


@remembered(longest=2048, kept=64)  # at most 128 KiB of heads held
def parse_head(head: bytes) -> Request:
    """The request whose head (up to and with the empty line) is `head`; BadRequest
    when h11 or the rules above refuse it. A head parsed before is not parsed again
    (`remembered`): h11's parse was a fifth of the server's CPU per scrape."""
    import h11  # with the first request: `--once` serves none

    if len(head) > MAX_HEAD_BYTES:  # the reader stops there; a caller that did not, here
        raise _too_long(bytearray(head[: MAX_HEAD_BYTES + 1]))
    if _FOLDED.search(head):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "obsolete line folding")
    if head.count(b"\n") - 2 > MAX_FIELDS:  # the lines less the request line and the end
        raise BadRequest(
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"more than {MAX_FIELDS} headers"
        )
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    connection.receive_data(head)
    try:
        event = connection.next_event()
    except h11.RemoteProtocolError as error:
        # h11 raises it again from a method of its own, so its traceback holds a frame
        # that holds it: a reference cycle (with the parser) per malformed request, for
        # the cyclic collector to free in some later scrape's time
        error.__traceback__ = None
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"Malformed request: {error}") from None
    if not isinstance(event, h11.Request):  # not reached: the head is complete
        raise BadRequest(HTTPStatus.BAD_REQUEST, "Malformed request")
    major, _, minor = event.http_version.partition(b".")
    version = (int(major), int(minor))
    if version < (1, 0):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported")
    if version >= (2, 0):
        raise BadRequest(
            HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
            f"Invalid HTTP version ({event.http_version.decode()})",
        )
    headers = Headers((name.decode(), value.decode("latin-1")) for name, value in event.headers)
    if version > (1, 1) and headers.get_all("Host") is None:
        raise BadRequest(HTTPStatus.BAD_REQUEST, "Malformed request: Missing mandatory Host")
    if headers.get_all("Transfer-Encoding") is not None:
        if version == (1, 0):
            raise BadRequest(HTTPStatus.BAD_REQUEST, "Transfer-Encoding in an HTTP/1.0 request")
        if headers.get_all("Content-Length") is not None:  # section 6.1 lets a server refuse
            raise BadRequest(HTTPStatus.BAD_REQUEST, "both Transfer-Encoding and Content-Length")
    return Request(
        event.method.decode("ascii"),
        event.target.decode("latin-1"),
        min(version, (1, 1)),
        headers,
    )


def keeps_alive(request: Request) -> bool:
    """Whether the connection stays open after the response: HTTP/1.1 unless the client
    says `Connection: close`; HTTP/1.0 only when it says `Connection: keep-alive`."""
    options = {
        option.strip().lower()
        for value in request.headers.get_all("Connection") or ()
        for option in value.split(",")
    }
    if "close" in options:
        return False
    return request.version >= (1, 1) or "keep-alive" in options


def http_date(seconds: float) -> str:
    """`seconds` since the epoch as an HTTP date (RFC 9110 section 5.6.7), in GMT."""
    return _http_date(int(seconds))


@functools.lru_cache(maxsize=2)  # the same second for every response within it
def _http_date(seconds: int) -> str:
    t = time.gmtime(seconds)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


def response_head(status: int, fields: Iterable[tuple[str, str]]) -> bytes:
    """The status line and header fields of an HTTP/1.1 response, with the empty line.

    Values must be Latin-1 (the web config allows printable ASCII only)."""
    lines = [_status_line(int(status))]
    lines.extend(f"{name}: {value}" for name, value in fields)
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


@functools.cache  # one per status the server answers with
def _status_line(status: int) -> str:
    return f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"
