"""The server's open connections, at most `--web.max-connections`, and which one makes
room for a new one at the limit.

A connection is *waiting* while the server waits for a request's head on it (from its
accept, or from the end of its last response), *building* from a complete head until
its response is built, and *sending* while the response is written. At the limit a new
connection takes the place of one held by the client address that holds the most (its
own address when that holds as many):

- first the one that has been *closable* the longest: a waiting one from the moment it
  waits, a sending one SLOW_READER_GRACE_SECONDS after its response began (a scrape is
  taken in milliseconds; a client that asks and never reads is still being sent to);
- when that address holds more connections than the new one's, any of its waiting or
  sending ones, so that one address cannot hold the others out by opening connections
  faster than they become closable;
- never a building one (its route is running).

When there is none, the new connection is refused (the server answers 503). A waiting
connection is shut down, so its client sees the connection end and reconnects when it
needs to; a sending one is reset, so the kernel drops what it still holds for the client
at once instead of keeping it queued after the close (up to 2.9 MiB a connection on
loopback, where the send buffers grow to 4 MiB).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from gpu_exporter.records import Record

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 256  # open at once (--web.max-connections)
SLOW_READER_GRACE_SECONDS = 1.0  # sending one response longer: closable for a new one

_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


def reset_on_close(sock: socket.socket) -> None:
    """Make `close()` reset the connection and drop unsent data, instead of leaving the
    kernel to deliver it to a client that does not read."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    except OSError:
        pass


@dataclass(repr=False)
class _Open(Record):
    peer: str  # the client's address
    live: socket.socket  # what to shut down: the TLS socket once the handshake began
    closable_from: float | None  # monotonic seconds; None while building
    sending: bool = False


class Connections:
    """The open connections, each counted in by `admit` and out by `leave`, with the
    state its thread reports (`waiting`, `building`, `sending`)."""

    def __init__(
        self,
        limit: int,
        clock: Callable[[], float] = time.monotonic,
        slow_reader_grace_seconds: float = SLOW_READER_GRACE_SECONDS,
    ) -> None:
        self.limit = limit
        self._clock = clock
        self._grace = slow_reader_grace_seconds
        self._lock = threading.Lock()
        self._open: dict[socket.socket, _Open] = {}
        self._held: Counter[str] = Counter()  # open connections per client address

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, sock: socket.socket, peer: str) -> bool:
        """Count `sock`, from client address `peer`, in; at the limit, shut down the one
        it takes the place of. False when there is none: refuse it."""
        with self._lock:
            now = self._clock()
            if len(self._open) >= self.limit:
                victim = self._victim(peer, now)
                if victim is None:
                    return False
                self._close(victim)
            self._open[sock] = _Open(peer, sock, now)
            self._held[peer] += 1
            return True

    def _victim(self, peer: str, now: float) -> socket.socket | None:
        top, top_held = max(self._held.items(), key=lambda item: item[1])
        if self._held[peer] >= top_held:
            top = peer
        over_share = top != peer  # it holds more than the new connection's address
        candidates = [
            (state.closable_from, sock)
            for sock, state in self._open.items()
            if state.peer == top
            and state.closable_from is not None
            and (state.closable_from <= now or over_share)
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda pair: pair[0])[1]

    def _close(self, sock: socket.socket) -> None:
        state = self._forget(sock)
        if state is None:
            return
        if state.sending:
            reset_on_close(state.live)
        try:  # its thread's read or write returns at once and closes it
            # the socket's own shutdown: an SSLSocket's would also drop its TLS state,
            # which its thread is still using
            socket.socket.shutdown(state.live, socket.SHUT_RDWR)
        except OSError:
            pass
        log.debug(
            "http: connection limit reached; a connection was closed for a new one",
            extra={"client": state.peer, "sending": state.sending},
        )

    def _forget(self, sock: socket.socket) -> _Open | None:
        state = self._open.pop(sock, None)
        if state is not None:
            self._held[state.peer] -= 1
            if not self._held[state.peer]:
                del self._held[state.peer]
        return state

    def wrapped(self, sock: socket.socket, live: socket.socket) -> None:
        """`sock` is now used through `live` (its TLS socket): shut that one down."""
        with self._lock:
            if (state := self._open.get(sock)) is not None:
                state.live = live

    def waiting(self, sock: socket.socket) -> None:
        """Waiting for a request's head: closable for a new connection from now, or from
        its accept when it has not been served yet (not from when its thread began: on a
        busy host the threads of connections accepted together begin in any order)."""
        now = self._clock()
        with self._lock:
            state = self._open.get(sock)
            if state is not None and (state.closable_from is None or state.sending):
                state.closable_from = now
                state.sending = False

    def building(self, sock: socket.socket) -> None:
        """A request's response is being built: not closable."""
        self._set(sock, None, sending=False)

    def sending(self, sock: socket.socket) -> None:
        """A response is being written: closable once that takes longer than the grace."""
        self._set(sock, self._clock() + self._grace, sending=True)

    def _set(self, sock: socket.socket, closable_from: float | None, *, sending: bool) -> None:
        with self._lock:
            if (state := self._open.get(sock)) is not None:  # not closed for a new one
                state.closable_from = closable_from
                state.sending = sending

    def leave(self, sock: socket.socket) -> None:
        with self._lock:
            self._forget(sock)
