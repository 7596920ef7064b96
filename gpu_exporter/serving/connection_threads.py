"""Threads that serve connections, each kept after its connection ends for a later one.

Every connection is served on a thread of its own, so a slow or stalled client holds no
other. Starting a thread for each connection (`socketserver.ThreadingMixIn`) cost a new
connection's scrape about 0.15 ms of its 0.5 ms on the benchmark's host: the accept loop
creates the thread and waits until it has started. Here a connection goes to a thread
left idle by an earlier one when there is one (a queue hand-off), and to a new thread
otherwise; at most `keep_idle` threads wait for work, the others end with their
connection. A thread per connection at a time, as before; only their start is saved.
(A new connection's first scrape or probe may be answered in the accept loop without a
thread at all: `serving.http.HttpServer._answer_at_once`.)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

KEEP_IDLE = 4  # threads kept waiting for the next connection


class ConnectionThreads:
    """Runs each connection's work (a call with no arguments) on a thread of its own."""

    def __init__(self, name: str, keep_idle: int = KEEP_IDLE) -> None:
        self._name = name
        self._keep_idle = keep_idle
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None] | None]] = []
        self._stopped = False

    def run(self, serve: Callable[[], None]) -> None:
        """Run `serve` (one connection's work) on an idle thread, or on a new one."""
        with self._lock:
            work = self._idle.pop() if self._idle else None
        if work is None:
            work = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(work,), name=self._name, daemon=True).start()
        work.put(serve)

    def stop(self) -> None:
        """End the idle threads; the busy ones end with their connection."""
        with self._lock:
            self._stopped = True
            idle, self._idle = self._idle, []
        for work in idle:
            work.put(None)

    def _work(self, work: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (serve := work.get()) is not None:
            serve()
            with self._lock:
                if self._stopped or len(self._idle) >= self._keep_idle:
                    return
                self._idle.append(work)
