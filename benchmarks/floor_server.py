"""The floor of a fresh-connection scrape in Python: a server that does nothing but answer.

Each connection is accepted, its head read (without waiting when it is in; else one
blocking read), a fixed response sent with TCP_NODELAY (one `send` when the socket's
buffer takes it all, as it does over loopback), and the connection closed: no parse, no
route, no sample, no other thread. The response is a file of the exporter's own answer,
head and body as it sent them (`p99_floor.py` writes it), so the client reads the same
bytes as from the exporter and only the server differs.

With SPIN_US it spins that many microseconds of CPU between the head and the send: how
much a server's own time on the critical path costs the tail (the nineteenth sitting).
With POLL_US it polls the listening socket without blocking for up to that long after
each answer before it blocks in `accept` again, as a guest kernel's haltpoll idle loop
polls before it halts the CPU: what the host's wake-ups of a halted CPU cost the tail
(the twentieth sitting).

Usage: python floor_server.py PORT RESPONSE_FILE [SPIN_US [POLL_US]] (on 127.0.0.1 until
killed).
"""

from __future__ import annotations

import select
import socket
import sys
import time
from pathlib import Path

HEAD_BYTES = 8192  # one read: the judge's urllib client sends a head of about 150 bytes


def serve(port: int, response: bytes, spin_seconds: float = 0.0, poll_seconds: float = 0.0) -> None:
    """Answer every connection to 127.0.0.1:`port` with `response`, `spin_seconds` of
    CPU after its head, polling for the next one up to `poll_seconds` after it, until
    killed."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    whole = memoryview(response)
    waiting = select.poll()
    waiting.register(listener, select.POLLIN)
    while True:
        if poll_seconds:
            until = time.perf_counter() + poll_seconds
            while not waiting.poll(0) and time.perf_counter() < until:
                pass
        connection, _ = listener.accept()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            connection.recv(HEAD_BYTES, socket.MSG_DONTWAIT)
        except BlockingIOError:
            connection.recv(HEAD_BYTES)
        if spin_seconds:
            until = time.perf_counter() + spin_seconds
            while time.perf_counter() < until:
                pass
        connection.sendall(whole)
        connection.close()


if __name__ == "__main__":
    spin_us = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    poll_us = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    serve(int(sys.argv[1]), Path(sys.argv[2]).read_bytes(), spin_us / 1e6, poll_us / 1e6)
