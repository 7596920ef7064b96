"""The HTTP server: a threaded server that defends itself against hostile clients.

Nothing here calls NVML. `Routes` (`serving.routes`) decides what each request gets;
`bind` binds the socket for a threaded server (one thread per connection, kept for a
later one by `serving.connection_threads`, on `socketserver`; request heads are read
by `serving.request_head` with h11, so a server without TLS never loads ssl). A new
connection's first request, when it is a GET of the metrics or a probe whose whole head
is in, without TLS or basic auth, is answered in the accept loop, which waits on the
client for nothing but a head that is not in yet, 2 ms at most and only until the next
connection comes (`HttpServer._answer_at_once`); the rest of the connection goes to its
thread.
Everything below holds before basic auth:

- TLS and basic auth from the web config file (`serving.web_config`), re-read when it
  or its certificates change; the TLS handshake runs in the connection's thread under the
  read deadline, so a client that never finishes it cannot stall the accept loop;
- at most `--web.max-connections` connections open (`serving.connections`): beyond, a
  new one takes the place of one that waits for a request or sends to a client that does
  not read, held by the address that holds the most, or gets 503 when there is none;
- a request head of at most `request_head.MAX_HEAD_BYTES`, which must arrive within
  READ_TIMEOUT_SECONDS (counted from the end of the previous response, so it is also the
  keep-alive idle timeout): clients that trickle bytes or sit idle are dropped;
- each response must be taken within WRITE_TIMEOUT_SECONDS, or the client is dropped
  (reset: the kernel drops what it still holds for it);
- the rate limit of the web config (429 beyond), then the credentials, checked before a
  request counts against the cap: a remembered login is a lookup, a bcrypt check waits
  in its own small queue (`serving.basic_auth`; 503 when that is full), so guesses hold
  no request slot;
- at most `--web.max-requests` responses built at once (503 beyond): a request holds a
  slot while its route builds the response, not while the client reads it, so clients
  that never read hold none. The probes (/livez, /healthz) are answered outside that cap
  and the rate limit: they cost no I/O, and an orchestrator must hear them while scrapes
  pile up;
- only GET and HEAD (405 with `Allow` otherwise), 400 for malformed requests and framing
  that could smuggle a body in as a request (`serving.request_head`), absolute-form
  targets accepted (`serving.request_framing`), and the configured headers on every
  response, errors included.
"""

from __future__ import annotations

import errno
import functools
import logging
import math
import os
import select
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Any

from gpu_exporter import __version__
from gpu_exporter.serving.basic_auth import Login
from gpu_exporter.serving.connection_threads import ConnectionThreads
from gpu_exporter.serving.connections import MAX_CONNECTIONS, Connections, reset_on_close
from gpu_exporter.serving.known_scrapes import MARK, KnownScrape, KnownScrapes, cut_head
from gpu_exporter.serving.request_framing import has_body, origin_form
from gpu_exporter.serving.request_head import (
    MAX_HEAD_BYTES,
    RECV_BYTES,
    BadRequest,
    Headers,
    HeadReader,
    NoRequest,
    http_date,
    keeps_alive,
    response_head,
)
from gpu_exporter.serving.routes import Response, Routes, plain
from gpu_exporter.serving.tls_settings import client_allowed
from gpu_exporter.serving.web_config import WebConfig, WebConfigError, load_web_config

log = logging.getLogger(__name__)

READ_TIMEOUT_SECONDS = 10.0  # to send a request's head, from the end of the last response
WRITE_TIMEOUT_SECONDS = 10.0  # to take a response
WEB_CONFIG_CHECK_SECONDS = 1.0  # how often the web config files' mtimes are looked at
ALLOWED_METHODS = ("GET", "HEAD")
ONE_WRITE_BYTES = 16 * 1024  # a body up to this size is joined to the head and sent at once
ACCEPT_RETRY_SECONDS = 0.005  # after an accept that failed (no file descriptor left), doubled
ACCEPT_RETRY_MAX_SECONDS = 1.0
HEAD_WAIT_MS = 2
"""How long the accept loop waits for a new connection's head when it is not in yet,
unless another connection comes first (ms)."""


class LiveWebConfig:
    """The web config in force, re-read when its file or certificates change.

    `current()` looks at the files' modification times at most once every
    WEB_CONFIG_CHECK_SECONDS, from whichever request thread gets there first (the others
    go on with the config they have). `reload()` re-reads at once (SIGHUP). A file that no
    longer loads keeps the previous config in force and logs one error until it changes.
    A new config takes over the old one's remembered logins (`WebConfig.carry_over`).
    """

    def __init__(
        self,
        config: WebConfig,
        *,
        check_seconds: float = WEB_CONFIG_CHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._check_seconds = check_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._next_check = clock() + check_seconds
        self._signature = self._stat(config.watched_files)

    def current(self) -> WebConfig:
        config = self._config
        if config.path is None or self._clock() < self._next_check:
            return config
        if not self._lock.acquire(blocking=False):
            return config
        try:
            self._next_check = self._clock() + self._check_seconds
            if self._stat(config.watched_files) != self._signature:
                self._reload_locked()
        finally:
            self._lock.release()
        return self._config

    def reload(self, path: str | None = None) -> bool:
        """Re-read the file now, or `path` instead when given; True when it is in force."""
        with self._lock:
            return self._reload_locked(path)

    def _reload_locked(self, path: str | None = None) -> bool:
        old = self._config
        path = path or old.path
        if path is None:
            return True
        try:
            new = load_web_config(path)
        except WebConfigError as error:
            # remember what failed, so the same broken file is reported once, not every second
            self._signature = self._stat(old.watched_files)
            log.error(
                "web config not reloaded; the previous settings stay in force",
                extra={"file": path, "error": str(error)},
            )
            return False
        new = new.carry_over(old)
        self._config = new
        self._signature = self._stat(new.watched_files)
        log.info("web config reloaded", extra=_describe(new))
        log_notes(new)
        return True

    @staticmethod
    def _stat(paths: tuple[str, ...]) -> tuple[tuple[int, int, int] | None, ...]:
        out: list[tuple[int, int, int] | None] = []
        for path in paths:
            try:
                st = os.stat(path)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)


def _describe(config: WebConfig) -> dict[str, Any]:
    limit = config.rate_limit
    return {
        "file": config.path,
        "tls": config.tls is not None,
        "client_auth": config.tls.client_auth_type if config.tls else "NoClientCert",
        "basic_auth_users": len(config.users),
        "headers": ",".join(config.headers),
        "rate_limit": f"{limit.burst}/{limit.interval_seconds:g}s" if limit else "none",
    }


def log_notes(config: WebConfig) -> None:
    """One warning for each of the config's notes (settings honoured differently)."""
    for note in config.notes:
        log.warning("web config: " + note, extra={"file": config.path})


_PLAIN_TO_TLS = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)
_TOO_MANY_CONNECTIONS_BODY = b"too many open connections\n"
_TOO_MANY_CONNECTIONS = (
    response_head(
        HTTPStatus.SERVICE_UNAVAILABLE,
        [
            *plain().items(),
            ("Connection", "close"),
            ("Content-Length", str(len(_TOO_MANY_CONNECTIONS_BODY))),
        ],
    )
    + _TOO_MANY_CONNECTIONS_BODY
)


class _Handler(socketserver.BaseRequestHandler):
    """One connection: its requests, one after the other, until either side closes."""

    server: HttpServer
    timeout = READ_TIMEOUT_SECONDS  # handshake and request deadline
    server_version = f"gpu-exporter/{__version__}"
    _config: WebConfig
    connection: socket.socket

    def __init__(
        self,
        request: Any,
        client_address: Any,
        server: HttpServer,
        *,
        at_once: bool = False,
        received: bytes = b"",
    ) -> None:
        """Serve the connection (socketserver's setup, handle, finish), or with `at_once`
        only its first request, in the caller's thread and without waiting on the client:
        `keep_open` then says whether the connection goes on, and `send_rest` writes
        what the client's buffer had no room for. `received`: what the accept loop has
        read of the connection already (the first request's head, when at once)."""
        self._received = received
        if not at_once:
            super().__init__(request, client_address, server)
            return
        self.request, self.client_address, self.server = request, client_address, server
        self.setup()
        self._unsent = []
        self._at_once = True
        try:
            self.keep_open = self._handle_one()
        finally:
            self._at_once = False

    _at_once = False  # answering the first request in the accept loop: never wait
    _unsent: list[tuple[memoryview, float]] = []  # (an instance's own when at once)
    keep_open = False

    @property
    def has_rest(self) -> bool:
        """Whether a response answered at once is not all written yet."""
        return bool(self._unsent)

    def send_rest(self) -> None:
        """Write what the first request's answer left unsent (its deadline still holds)."""
        rest, self._unsent = self._unsent, []
        for view, deadline in rest:
            self._write((view,), deadline)

    def setup(self) -> None:
        self._config = self.server.web.current()
        self._raw: socket.socket = self.request
        self._tls = False
        context = self._config.ssl_context
        if context is not None:
            self.request.settimeout(self.timeout)
            first = self.request.recv(1, socket.MSG_PEEK)
            if first and first[0] != 0x16:  # not a TLS handshake record: plain HTTP, say so
                self.request.sendall(_PLAIN_TO_TLS)
                raise ConnectionAbortedError("plain HTTP request to the TLS port")
            tls = context.wrap_socket(self.request, server_side=True, do_handshake_on_connect=False)
            self.request = tls
            self._tls = True
            self.server.connections.wrapped(self._raw, tls)
            try:
                tls.do_handshake()  # bounded by the timeout above, in this connection's thread
                sans = self._config.tls.client_allowed_sans if self._config.tls else None
                if sans is not None and not client_allowed(tls.getpeercert(), sans):
                    raise ConnectionAbortedError("client certificate without an allowed SAN")
            except BaseException:
                tls.close()
                raise
        self.connection = self.request
        # a large body goes out in a write of its own after the head: without this,
        # Nagle's algorithm and the client's delayed ACK add ~40 ms to a keep-alive scrape
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._deadline = math.inf
        self._heads = HeadReader(self._received)

    def _recv(self, size: int) -> bytes:
        """Socket reads that share one deadline, so trickling a byte at a time does not help."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request not received in time")
        # answered at once: never wait (the whole head was in; a timeout would poll first)
        self.connection.settimeout(0.0 if self._at_once else remaining)
        return self.connection.recv(size)

    def handle(self) -> None:
        while self._handle_one():
            pass

    def finish(self) -> None:
        if self._tls:
            self.request.close()

    def _handle_one(self) -> bool:
        """Read one request and answer it; True when the connection stays open. A
        malformed one is answered and ends the connection, as does a client that takes
        longer than the deadline to send it."""
        self.server.connections.waiting(self._raw)
        self._deadline = time.monotonic() + self.timeout
        self.close_connection = True
        self._http10 = False
        self.requestline = ""
        try:
            request = self._heads.next_request(self._recv)
        except NoRequest:
            return False
        except BadRequest as error:
            self.send_error(error.status, str(error))
            return False
        except TimeoutError as error:
            log.debug("http: request timed out", extra={"error": repr(error)})
            return False
        self.server.connections.building(self._raw)
        self.requestline = f"{request.method} {request.target[:200]} {request.name}"
        # a body we do not read must not pass as a request: close after the response
        self.close_connection = has_body(request.headers) or not keeps_alive(request)
        self._http10 = request.version == (1, 0)
        head = request.method == "HEAD"
        if request.method not in ALLOWED_METHODS:
            self.close_connection = True
            response = Response(
                HTTPStatus.METHOD_NOT_ALLOWED,
                b"405 method not allowed\n",
                {**plain(), "Allow": ", ".join(ALLOWED_METHODS)},
            )
            head = False
        else:
            path = origin_form(request.target)
            if path is None:
                self.send_error(HTTPStatus.BAD_REQUEST, "Request target is not a path", head)
                return False
            response = self._respond(path, request.headers)
        self._send(response, head)
        if self._at_once and not head and self.close_connection:
            self._remember(response)
        return not self.close_connection

    def _remember(self, response: Response) -> None:
        """Keep the answer to this connection's first request, sent at once, for a repeat
        of its bytes (`known_scrapes`): when it was the exposition, the request's head was
        all that was read, and no rate limit spends a token per request."""
        wants = response.exposition
        if (
            wants is None
            or response.status != HTTPStatus.OK
            or self._heads.buffered
            or self._config.limiter is not None
        ):
            return
        parts = cut_head(response_head(response.status, self._fields(response, MARK, MARK)))
        if parts is None:
            return
        known = KnownScrape(
            self._config, self.server.routes.telemetry_path, wants, parts, self.requestline
        )
        self.server.known_scrapes.remember(self._received, known)

    def _respond(self, path: str, headers: Headers) -> Response:
        """The response to a GET of `path`. A request slot is held only while the route
        builds its response, not while a client takes its time to read it."""
        # a long keep-alive connection follows changes to the file too
        config = self._config = self.server.web.current()
        routes = self.server.routes
        probe = routes.is_probe(path)
        if not probe and config.limiter is not None and not config.limiter.allow():
            return Response(HTTPStatus.TOO_MANY_REQUESTS, b"429 too many requests\n", plain())
        if config.auth is not None:
            login = config.auth.login(headers.get("Authorization"))
            if login is Login.BUSY:
                return Response(
                    HTTPStatus.SERVICE_UNAVAILABLE, b"too many password checks at once\n", plain()
                )
            if login is Login.DENIED:
                return Response(
                    HTTPStatus.UNAUTHORIZED,
                    b"401 unauthorized\n",
                    {**plain(), "WWW-Authenticate": 'Basic realm="gpu-exporter"'},
                )
        if probe:
            return self._answer(routes, path, headers)
        if not self.server.slots.acquire(blocking=False):
            return Response(
                HTTPStatus.SERVICE_UNAVAILABLE, b"too many concurrent requests\n", plain()
            )
        try:
            return self._answer(routes, path, headers)
        finally:
            self.server.slots.release()

    def _answer(self, routes: Routes, path: str, headers: Headers) -> Response:
        """The route's response; a bug in a route is a logged 500, never an empty reply."""
        try:
            return routes.get(path, headers, client=str(self.client_address[0]))
        except Exception:
            log.exception("error answering a request", extra={"path": path[:200]})
            self.close_connection = True
            return Response(
                HTTPStatus.INTERNAL_SERVER_ERROR, b"500 internal server error\n", plain()
            )

    def send_error(self, code: int, message: str, head: bool = False) -> None:
        """Malformed requests (400, 414, 431, 505): plain text, configured headers, close."""
        log.debug("http: bad request", extra={"status": int(code), "error": message})
        self.close_connection = True
        body = f"{int(code)} {message}\n".encode("latin-1", "replace")
        self._send(Response(code, body, plain()), head)

    def _send(self, response: Response, head: bool) -> None:
        """The response, in one write when small; `Connection: close` when the connection
        ends after it, `Connection: keep-alive` when an HTTP/1.0 client's stays open."""
        fields = self._fields(response, http_date(time.time()), str(len(response.body)))
        head_bytes = response_head(response.status, fields)
        self.server.connections.sending(self._raw)
        deadline = time.monotonic() + WRITE_TIMEOUT_SECONDS
        if head or not response.body:
            self._write((head_bytes,), deadline)
        elif len(response.body) <= ONE_WRITE_BYTES:
            self._write((head_bytes + response.body,), deadline)
        else:  # an exposition: no copy of it just to join the head
            self._write((head_bytes, response.body), deadline)
        log.debug('http: "%s" %d', self.requestline, int(response.status))

    def _fields(self, response: Response, date: str, length: str) -> list[tuple[str, str]]:
        """The response's header fields, in order, with `date` and `length` as the Date
        and the Content-Length."""
        fields = [("Server", self.server_version), ("Date", date)]
        fields.extend(response.headers.items())
        if self.close_connection:
            fields.append(("Connection", "close"))
        elif self._http10:  # it asked for keep-alive (RFC 9112 9.3, C.2.2): say so
            fields.append(("Connection", "keep-alive"))
        fields.extend(self._config.headers.items())
        fields.append(("Content-Length", length))
        return fields

    def _write(self, parts: Sequence[bytes | memoryview], deadline: float) -> None:
        """All of `parts`, in order, by `deadline`: a client that does not read is dropped
        then (over TLS, `sendall` would wait that long for each record). Without TLS the
        parts go in one `sendmsg`: the head and the body in one segment, one wake-up of
        the client, where two `send`s woke it twice (with TCP_NODELAY, the head alone)."""
        views = [memoryview(part) for part in parts]
        # most fit the socket's buffer: tried once without waiting, so with no poll(2)
        # first (with a timeout, sendmsg polls before it tries); never after what an
        # answer at once left unsent
        if not self._tls and not self._unsent:
            views = _write_now(self.connection, views)
        if self._at_once:  # what is left goes later, on the connection's thread
            self._unsent.extend((view, deadline) for view in views)
            return
        _write_by(self.connection, views, deadline, tls=self._tls)


def _write_now(connection: socket.socket, views: list[memoryview]) -> list[memoryview]:
    """Write what of `views` the socket's buffer takes now, in one `sendmsg` without
    waiting (so with no poll(2) first); what is left of them."""
    connection.settimeout(0.0)
    try:
        return _unsent(views, connection.sendmsg(views))
    except BlockingIOError:
        return views


def _write_by(
    connection: socket.socket, views: list[memoryview], deadline: float, *, tls: bool = False
) -> None:
    """Write all of `views` to `connection`, waiting for the client to take them until
    `deadline` (monotonic s): then TimeoutError, and the connection resets when closed."""
    try:
        while views:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("response not taken in time")
            connection.settimeout(remaining)
            # an SSLSocket has no sendmsg
            sent = connection.send(views[0]) if tls else connection.sendmsg(views)
            views = _unsent(views, sent)
    except TimeoutError:
        reset_on_close(connection)  # the kernel drops what it still holds for it
        raise


def _unsent(views: list[memoryview], sent: int) -> list[memoryview]:
    """What of `views` is left after the first `sent` bytes of them went out."""
    while views and sent >= len(views[0]):
        sent -= len(views[0])
        views = views[1:]
    if views and sent:
        views = [views[0][sent:], *views[1:]]
    return views


class HttpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    head_wait_ms = HEAD_WAIT_MS

    def __init__(
        self,
        address: tuple[str, int],
        routes: Routes,
        max_requests: int,
        family: int,
        web_config: WebConfig,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.address_family = family
        self.routes = routes
        self.slots = threading.BoundedSemaphore(max_requests)
        self.connections = Connections(max_connections)
        self.web = LiveWebConfig(web_config)
        self.connection_threads = ConnectionThreads("http-connection")
        self._stopping = threading.Event()
        self._served = threading.Event()  # set when `serve()` returns
        self.known_scrapes = KnownScrapes()
        super().__init__(address, _Handler, bind_and_activate=False)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection, when `connections` lets it in."""
        if self.connections.admit(request, str(client_address[0])):
            received = self._answer_at_once(request, client_address)
            if received is not None:
                self.connection_threads.run(
                    functools.partial(self._serve, request, client_address, received)
                )
            return
        log.debug("http: connection refused: no open connection may make room for it")
        try:  # without blocking the accept loop
            request.setblocking(False)
            if self.web.current().ssl_context is None:
                request.send(_TOO_MANY_CONNECTIONS)
            # what the client has sent already: closing with it unread would send a reset,
            # which can throw the answer away before the client reads it
            request.recv(MAX_HEAD_BYTES)
        except OSError:
            pass
        self.shutdown_request(request)

    def _answer_at_once(self, request: Any, client_address: Any) -> bytes | None:
        """Answer a new connection's first request in the accept loop when it is a plain
        `GET` of the metrics or a probe whose whole head has arrived, without TLS or
        basic auth, and return None; else return what was read of the connection (b""
        when nothing was), which its own thread goes on from.

        A scrape on a new connection was a quarter slower than one on a kept one, most
        of it the hand-off to the connection's thread (a wake-up, and the scheduler's
        delay on a busy host). Here the client is waited on only for a head not in yet,
        for `head_wait_ms` at most and only until the next connection comes
        (`_first_read`); the response goes out as far as the client's buffer takes it
        without waiting, and what is left, with any later request on the connection,
        goes to a thread. A head byte for byte the same as one answered here with the
        exposition before is answered from that answer's head (`known_scrapes`): no
        handler, parse, route or negotiation, 25-30 us from head to `sendmsg` against
        75-85. These routes wait on nothing but CPU:
        about 0.1 ms, a few ms for the first scrape after a sample (it renders the body,
        under a lock held only by another render).

        Each call that gives up the interpreter lock (here every socket call) may wait a
        switch interval for it when a sample runs, so the connection costs four: `recv`
        reads the head (no `MSG_PEEK` before it; a `poll` and a second `recv` when it
        was not in yet), one `sendmsg` sends the response, and `close` ends it (no
        `shutdown` first: the socket is ours alone, and closing it sends the FIN after
        what is still queued)."""
        config = self.web.current()
        if config.ssl_context is not None or config.auth is not None:
            return b""
        received = self._first_read(request)
        if self.known_scrapes:
            known = self.known_scrapes.get(received, config, self.routes.telemetry_path)
            if known is not None and self._answer_known(request, client_address, known):
                return None
        if not received.startswith(self.routes.at_once_lines()) or b"\r\n\r\n" not in received:
            return received
        try:
            handler = _Handler(request, client_address, self, at_once=True, received=received)
        except Exception:
            self.handle_error(request, client_address)
            self.shutdown_request(request)
            return None
        if handler.keep_open or handler.has_rest:
            self.connection_threads.run(functools.partial(self._go_on, handler))
        else:
            self.connections.leave(request)
            request.close()
        return None

    def _first_read(self, request: socket.socket) -> bytes:
        """What a new connection has sent, read without waiting, or within
        `head_wait_ms` when nothing is in yet, unless another connection is waiting to
        be taken up first: b"" when nothing came (or on an error, which its thread's
        read meets again).

        A client's head comes tens of microseconds after its connect, often after the
        accept loop has woken for the connection: a third of the judge-like scrapes of
        `benchmarks/scrape_phases.py` found nothing yet and went to a connection's
        thread, a wake-up of another thread (and of the other CPU) and a hand-over of
        the interpreter lock more, most often in the first scrapes after the exporter
        sat unscraped. Waiting for the head or the next connection, whichever comes
        first, keeps those in the accept loop, and costs a client that never sends no
        one else's time: the next connection ends the wait."""
        try:
            return request.recv(RECV_BYTES, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass
        except OSError:
            return b""
        waiting = select.poll()
        waiting.register(request, select.POLLIN)
        waiting.register(self.socket, select.POLLIN)
        try:
            ready = waiting.poll(self.head_wait_ms)
            if not any(fd == request.fileno() for fd, _ in ready):
                return b""
            return request.recv(RECV_BYTES, socket.MSG_DONTWAIT)
        except OSError:
            return b""

    def _answer_known(self, request: Any, client_address: Any, known: KnownScrape) -> bool:
        """Answer a repeat of a known scrape's bytes from its remembered head
        (`known_scrapes`); False, with nothing sent, when there is no sample to serve
        yet or no free request slot: the full path answers then (503)."""
        if self.routes.state.exposition is None or not self.slots.acquire(blocking=False):
            return False
        try:
            body = self.routes.scrape(known.wants, str(client_address[0]))
        finally:
            self.slots.release()
        if body is None:  # the state was swapped in between
            return False
        views = [memoryview(known.head(time.time(), len(body))), memoryview(body)]
        deadline = time.monotonic() + WRITE_TIMEOUT_SECONDS
        try:
            views = _write_now(request, views)
        except OSError:
            self.handle_error(request, client_address)
            self.shutdown_request(request)
            return True
        log.debug('http: "%s" %d', known.request_line, int(HTTPStatus.OK))
        if views:  # what the client's buffer had no room for, on a thread of its own
            # as `setup` does: no Nagle wait for the client's ACK before the last segment
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connections.sending(request)
            self.connection_threads.run(
                functools.partial(self._send_known_rest, request, client_address, views, deadline)
            )
        else:
            self.connections.leave(request)
            request.close()
        return True

    def _send_known_rest(
        self, request: Any, client_address: Any, views: list[memoryview], deadline: float
    ) -> None:
        try:
            _write_by(request, views, deadline)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def _serve(self, request: Any, client_address: Any, received: bytes) -> None:
        """A connection on its own thread (socketserver's `process_request_thread`),
        from what the accept loop read of it."""
        try:
            _Handler(request, client_address, self, received=received)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def _go_on(self, handler: _Handler) -> None:
        """The rest of a connection whose first request was answered at once."""
        try:
            try:
                handler.send_rest()
                if handler.keep_open:
                    handler.handle()
            finally:
                handler.finish()
        except Exception:
            self.handle_error(handler.request, handler.client_address)
        finally:
            self.shutdown_request(handler.request)

    def shutdown_request(self, request: Any) -> None:
        self.connections.leave(request)
        super().shutdown_request(request)

    def serve(self) -> None:
        """Serve until `stop()`. The accept loop blocks in accept(2) itself: no idle
        wake-ups, and no poll(2) before each connection (socketserver's `serve_forever`
        polls first, a system call and a wait for the interpreter lock more on every
        connection). `stop()` wakes it with a connection of its own. An accept that fails
        for want of file descriptors or memory is retried after ACCEPT_RETRY_SECONDS,
        doubled at each failure in a row up to ACCEPT_RETRY_MAX_SECONDS (Go's net/http
        does the same), not at once: the pending connection would make it fail again and
        again at full speed."""
        retry = 0.0
        while not self._stopping.is_set():
            try:
                request, client_address = self.socket.accept()
            except OSError as error:
                if self._stopping.is_set():
                    break
                if error.errno in (errno.ECONNABORTED, errno.EINTR):
                    continue  # that client went away before it was accepted
                if not retry:
                    log.warning("http: accepting a connection failed", extra={"error": str(error)})
                retry = min(2 * retry, ACCEPT_RETRY_MAX_SECONDS) if retry else ACCEPT_RETRY_SECONDS
                self._stopping.wait(retry)
                continue
            retry = 0.0
            if self._stopping.is_set():
                request.close()
                break
            try:
                self.process_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
                self.shutdown_request(request)
        self._served.set()

    def stop(self, timeout_seconds: float = 0.5) -> None:
        """End `serve()` and close the listening socket, within `timeout_seconds`."""
        self._stopping.set()
        host, port = str(self.server_address[0]), int(self.server_address[1])
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"  # "::" is dual-stack here (IPV6_V6ONLY off)
        try:
            with socket.create_connection((host, port), timeout=timeout_seconds):
                pass  # the accept loop wakes up, sees the stop and returns
        except OSError:
            pass  # the loop is not running, or closed already
        self._served.wait(timeout_seconds)
        self.connection_threads.stop()
        self.server_close()

    def reload_web_config(self, path: str | None = None) -> bool:
        """Re-read --web.config.file now (for SIGHUP), or switch to `path` when given.

        On an error the old settings stay in force and one error is logged; returns True
        when the new file is in force. Going back to no web config at all needs a restart.
        """
        return self.web.reload(path)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that resets or times out is routine: one debug line, no traceback."""
        error = sys.exc_info()[1]
        log.debug("http connection ended", extra={"client": client_address, "error": repr(error)})

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # ":PORT" and "[::]:PORT" accept IPv4 too, as Go's net.Listen does
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class ListenError(Exception):
    """The listen address cannot be bound; the message names the address and why."""


def bind(
    host: str,
    port: int,
    routes: Routes,
    max_requests: int,
    web_config: WebConfig | None = None,
    max_connections: int = MAX_CONNECTIONS,
) -> HttpServer:
    """Bind the server socket; raises ListenError with one clear line.

    `web_config` (from `load_web_config`) sets TLS, basic auth and headers; its file is
    watched for changes. Call `reload_web_config()` on the result to re-read it at once.
    """
    web_config = web_config or WebConfig()
    family = socket.AF_INET
    bind_host = host
    if host == "":
        family, bind_host = (
            (socket.AF_INET6, "::")
            if socket.has_ipv6 and _ipv6_works()
            else (socket.AF_INET, "0.0.0.0")
        )
    elif ":" in host:
        family = socket.AF_INET6
    try:
        server = HttpServer(
            (bind_host, port), routes, max_requests, family, web_config, max_connections
        )
    except OSError as error:
        raise ListenError(
            f"cannot listen on {_show(host, port)}: {error.strerror or error}"
        ) from None
    try:
        server.server_bind()
        server.server_activate()
    except OSError as error:
        server.server_close()
        raise ListenError(
            f"cannot listen on {_show(host, port)}: {error.strerror or error}"
        ) from None
    if web_config.path is not None:
        log.info("web config loaded", extra=_describe(web_config))
        log_notes(web_config)
    return server


def _show(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ipv6_works() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::", 0))
        return True
    except OSError:
        return False
