"""Threads that serve connections, each kept after its connection ends for a later one.

Every connection is served on a thread of its own, so a slow or stalled client holds no
other. Starting a thread for each connection (`socketserver.ThreadingMixIn`) cost a new
connection's scrape about 0.15 ms of its 0.5 ms on the benchmark's host: the accept loop
creates the thread and waits until it has started. Here a connection goes to a thread
left idle by an earlier one when there is one (a queue hand-off), and to a new thread
otherwise; at most `keep_idle` threads wait for work, the others end with their
connection. A thread per connection at a time, as before; only their start is saved.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

KEEP_IDLE = 4  # threads kept waiting for the next connection


class ConnectionThreads:
    """Runs `serve(request, client_address)` for each connection on a thread of its own."""

    def __init__(
        self, serve: Callable[[Any, Any], None], name: str, keep_idle: int = KEEP_IDLE
    ) -> None:
        self._serve = serve
        self._name = name
        self._keep_idle = keep_idle
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[tuple[Any, Any] | None]] = []
        self._stopped = False

    def run(self, request: Any, client_address: Any) -> None:
        """Serve the connection on an idle thread, or on a new one."""
        with self._lock:
            work = self._idle.pop() if self._idle else None
        if work is None:
            work = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(work,), name=self._name, daemon=True).start()
        work.put((request, client_address))

    def stop(self) -> None:
        """End the idle threads; the busy ones end with their connection."""
        with self._lock:
            self._stopped = True
            idle, self._idle = self._idle, []
        for work in idle:
            work.put(None)

    def _work(self, work: queue.SimpleQueue[tuple[Any, Any] | None]) -> None:
        while (item := work.get()) is not None:
            self._serve(*item)
            with self._lock:
                if self._stopped or len(self._idle) >= self._keep_idle:
                    return
                self._idle.append(work)
