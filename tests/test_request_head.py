"""Reading request heads with h11 and writing a response's head (the real server:
test_web_security)."""

from __future__ import annotations

import email.utils
from collections.abc import Iterable

import pytest

from gpu_exporter.serving.request_head import (
    MAX_FIELDS,
    MAX_HEAD_BYTES,
    BadRequest,
    HeadReader,
    NoRequest,
    Request,
    http_date,
    keeps_alive,
    parse_head,
    response_head,
)


class Wire:
    """`recv` over chunks as a client sent them; b"" once they are used up."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = list(chunks)
        self.read = 0  # bytes handed out

    def recv(self, size: int) -> bytes:
        if not self.chunks:
            return b""
        chunk = self.chunks.pop(0)
        if len(chunk) > size:
            self.chunks.insert(0, chunk[size:])
        self.read += min(size, len(chunk))
        return chunk[:size]


def requests(*chunks: bytes) -> list[Request]:
    """Every request of a connection that sent `chunks` and closed."""
    wire = Wire(chunks)
    reader = HeadReader()
    out = []
    while True:
        try:
            out.append(reader.next_request(wire.recv))
        except NoRequest:
            return out


def refused(*chunks: bytes) -> BadRequest:
    with pytest.raises(BadRequest) as error:
        requests(*chunks)
    return error.value


@pytest.mark.parametrize(
    ("raw", "method", "target", "version"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/metrics", (1, 1)),
        (b"HEAD / HTTP/1.0\n\n", "HEAD", "/", (1, 0)),  # a bare LF ends a line too
        (b"GET //metrics HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "//metrics", (1, 1)),
        (b"GET http://h/metrics HTTP/1.1\r\nHost: h\r\n\r\n", "GET", "http://h/metrics", (1, 1)),
        (b"BREW /pot HTTP/1.2\r\nHost: x\r\n\r\n", "BREW", "/pot", (1, 1)),  # later 1.x: 1.1
    ],
)
def test_request_heads_are_split_into_method_target_version_and_fields(
    raw: bytes, method: str, target: str, version: tuple[int, int]
) -> None:
    (request,) = requests(raw)
    assert (request.method, request.target, request.version) == (method, target, version)


def test_header_names_match_case_insensitively_and_repeats_are_kept_in_order() -> None:
    (request,) = requests(
        b"GET / HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\nX-A: 1\r\nx-a:2\r\n"
        b"X-B:\t spaced \t\r\n\r\n"
    )
    h = request.headers
    assert h.get("accept") == "text/plain"
    assert h.get("X-A") == "1"
    assert h.get_all("X-a") == ("1", "2")
    assert h.get("x-b") == "spaced"
    assert h.get_all("Missing") is None
    assert h.get("Missing", "") == ""


def test_pipelined_requests_are_read_one_after_the_other_whatever_the_chunks() -> None:
    wire = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"
    whole = [r.target for r in requests(wire)]
    bytewise = [r.target for r in requests(*(wire[i : i + 1] for i in range(len(wire))))]
    assert whole == bytewise == ["/a", "/b"]


@pytest.mark.parametrize("before", [b"\r\n", b"\n", b"\r\n\r\n\n"])
def test_empty_lines_before_a_request_line_are_ignored(before: bytes) -> None:
    """RFC 9112 section 2.2; they used to end the connection without an answer."""
    head = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    assert [r.target for r in requests(before + head, before + head)] == ["/a", "/a"]
    assert [r.target for r in requests(b"\r", b"\n" + head)] == ["/a"]  # CRLF split


@pytest.mark.parametrize(
    "raw",
    [b"", b"\r\n", b"GET /metrics HTTP/1.1\r\nHost: x\r\n"],
    ids=["nothing", "an-empty-line", "a-head-cut-short"],
)
def test_a_connection_that_ends_before_a_head_is_complete_is_no_request(raw: bytes) -> None:
    assert requests(raw) == []


@pytest.mark.parametrize(
    ("raw", "status", "why"),
    [
        (b"GET /metrics\r\n", 400, "HTTP/0.9"),  # answered before any header arrives
        (b"GET /metrics HTTP/0.9\r\n\r\n", 400, "HTTP/0.9"),
        (b"GARBAGE\r\n", 400, "Bad request line"),
        (b"GET / HTTP/1.1 extra\r\n", 400, "Bad request line"),
        (b"GET / HTTP/one\r\n", 400, "Bad request line"),
        (b"GET / HTTP/1.1.1\r\n", 400, "Bad request line"),
        (b"GET / HTTP/\xb9.1\r\n", 400, "Bad request line"),  # a digit only to Unicode
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, "Invalid HTTP version"),
        (b"GET / HTTP/9.9\r\n\r\n", 505, "Invalid HTTP version"),
        # issue 21: separators other than one space (NBSP, NEL, VT, FS..US, TAB, two)
        (b"GET\xa0/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
        (b"GET /\x85HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
        (b"GET\x0b/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
        (b"GET /\x1cHTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
        (b"GET\x1f/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
        (b"GET\t/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
        (b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
        (b"GET /a\x1fb HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"),
        # issue 21: HTTP/1.1 needs exactly one Host
        (b"GET / HTTP/1.1\r\n\r\n", 400, "Host"),
        (b"GET / HTTP/1.2\r\n\r\n", 400, "Host"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, "Host"),
    ],
)
def test_bad_request_lines_are_refused_with_a_status_and_a_reason(
    raw: bytes, status: int, why: str
) -> None:
    error = refused(raw)
    assert error.status == status
    assert why in str(error)


@pytest.mark.parametrize(
    "field",
    [
        b"No colon here",
        b"X-A : whitespace before the colon",  # RFC 9112 5.1: must be refused
        b"X-A: b\r\n folded: continuation",  # obsolete line folding
        b"X-A: b\r\n\tfolded",
        b": no name",
        b"X(A): not a token",
        b"X-A: bare\rCR",  # issue 21
        b"X-A: a\x00NUL",  # issue 21
        b"X-A: a\x0bVT",
    ],
)
def test_malformed_header_fields_are_400(field: bytes) -> None:
    error = refused(b"GET / HTTP/1.1\r\nHost: x\r\n" + field + b"\r\n\r\n")
    assert error.status == 400


def test_whitespace_before_the_first_field_is_400() -> None:
    assert refused(b"GET / HTTP/1.1\r\n Host: x\r\n\r\n").status == 400


@pytest.mark.parametrize("fields", [1, MAX_FIELDS - 1])
def test_up_to_max_fields_are_read(fields: int) -> None:
    (request,) = requests(b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * fields + b"\r\n")
    assert len(request.headers.get_all("X-A") or ()) == fields


def test_more_than_max_fields_is_431() -> None:
    error = refused(b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * MAX_FIELDS + b"\r\n")
    assert error.status == 431


def test_a_head_is_bounded_in_total_and_refused_as_soon_as_it_is_too_long() -> None:
    """Issue 21: 100 fields of 64 KiB each were all kept for 10 seconds; now a head
    holds at most MAX_HEAD_BYTES, and the bytes beyond it are never read."""
    line = b"GET / HTTP/1.1\r\nHost: x\r\n"
    filler = MAX_HEAD_BYTES - len(line) - len(b"X-A: \r\n\r\n")
    (fits,) = requests(line + b"X-A: " + b"b" * filler + b"\r\n\r\n")
    assert fits.headers.get("X-A") == "b" * filler
    assert refused(line + b"X-A: " + b"b" * (filler + 1) + b"\r\n\r\n").status == 431

    field = b"X-Pad: " + b"a" * (64 * 1024 - 9) + b"\r\n"
    stream = line + field * 100  # and no empty line: the client stalls
    wire = Wire(stream[i : i + 4096] for i in range(0, len(stream), 4096))
    with pytest.raises(BadRequest) as error:
        HeadReader().next_request(wire.recv)
    assert error.value.status == 431
    assert wire.read <= MAX_HEAD_BYTES + 8192  # what was read: the limit and one chunk


def test_a_request_line_longer_than_the_head_limit_is_414() -> None:
    assert refused(b"GET /" + b"a" * MAX_HEAD_BYTES + b" HTTP/1.1\r\n").status == 414


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (b"Content-Length: " + b"9" * 5000, "Content-Length"),  # issue 21: was no answer
        (b"Content-Length: 0\r\nContent-Length: 31", "Content-Length"),
        (b"Content-Length: 5, 7", "Content-Length"),
        (b"Content-Length: -1", "Content-Length"),
        (b"Content-Length: +5", "Content-Length"),
        (b"Content-Length: 0x10", "Content-Length"),
        (b"Content-Length:", "Content-Length"),
        (b"Transfer-Encoding:\r\nContent-Length: 5", "Transfer-Encoding"),
        (b"Transfer-Encoding: chunked\r\nContent-Length: 5", "both"),
        (b"Transfer-Encoding:", "Transfer-Encoding"),
        (b"Transfer-Encoding: chunked, gzip", "Transfer-Encoding"),
        (b"Transfer-Encoding: gzip, chunked", "Transfer-Encoding"),  # codings we do not know
    ],
)
def test_framing_that_cannot_be_trusted_is_400(fields: bytes, problem: str) -> None:
    """RFC 9112 section 6.3: the body's end is unknown, so it could pass as a request."""
    error = refused(b"GET / HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n\r\n")
    assert error.status == 400
    assert problem in str(error)


def test_transfer_encoding_in_http_1_0_is_400() -> None:
    error = refused(b"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert "HTTP/1.0" in str(error)


def test_well_framed_lengths_are_read() -> None:
    for fields in (b"Content-Length: 12", b"Content-Length: 12\r\nContent-Length: 12"):
        (request,) = requests(b"GET / HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n\r\n")
        assert request.headers.get("Content-Length") == "12"


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
    field = f"Connection: {connection}\r\n" if connection else ""
    (request,) = requests(f"GET / HTTP/{version}\r\nHost: x\r\n{field}\r\n".encode())
    assert keeps_alive(request) is alive


def test_parse_head_takes_one_complete_head() -> None:
    request = parse_head(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (request.method, request.target, request.name) == ("GET", "/x", "HTTP/1.1")


def test_a_head_sent_again_is_parsed_once_and_a_refused_one_every_time() -> None:
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n"
    first = parse_head(head)
    assert parse_head(bytes(head)) is first  # a scraper's next head: no parse
    other = parse_head(head.replace(b"text/plain", b"text/html"))
    assert other is not first and other.headers.get("Accept") == "text/html"
    assert first.headers.get("Accept") == "text/plain"
    assert first.headers.get_all("accept") == ("text/plain",)  # shared, so read-only
    folded = b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"
    for _ in range(2):  # refused each time it comes
        with pytest.raises(BadRequest, match="folding"):
            parse_head(folded)
    long = b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 4000 + b"\r\n\r\n"
    assert parse_head(long) is not parse_head(long)  # not kept: the cache stays small
    assert parse_head(long).headers.get("X-Long") == "a" * 4000


@pytest.mark.parametrize("seconds", [0.0, 784111777.0, 1795000000.5, 4102444799.0])
def test_http_date_is_the_imf_fixdate_of_rfc_9110(seconds: float) -> None:
    assert http_date(seconds) == email.utils.formatdate(seconds, usegmt=True)


def test_response_head_is_a_status_line_fields_and_an_empty_line() -> None:
    head = response_head(503, [("Content-Type", "text/plain"), ("Content-Length", "4")])
    assert head == (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n"
    )
