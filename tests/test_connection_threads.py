"""Connections are served on threads kept between connections, never two at once on one:
a stalled client holds only its own thread."""

from __future__ import annotations

import threading
from functools import partial

from gpu_exporter.serving.connection_threads import ConnectionThreads


def test_a_stalled_connection_holds_no_other_and_threads_are_reused() -> None:
    stall = threading.Event()
    stalled = threading.Event()
    served: dict[str, int] = {}
    done = threading.Semaphore(0)

    def serve(request: str) -> None:
        served[request] = threading.get_ident()
        if request == "stalled":
            stalled.set()
            stall.wait(10)
        done.release()

    threads = ConnectionThreads("test-connection", keep_idle=2)
    threads.run(partial(serve, "stalled"))
    # on its thread before the next arrives (on a busy machine that thread may start late)
    assert stalled.wait(10)
    threads.run(partial(serve, "first"))
    assert done.acquire(timeout=10), "a connection waited for a stalled one"
    threads.run(partial(serve, "second"))
    assert done.acquire(timeout=10)
    assert served["second"] == served["first"], "the idle thread serves the next connection"
    assert served["stalled"] != served["first"]

    stall.set()
    assert done.acquire(timeout=10)
    threads.stop()
    for thread in threading.enumerate():
        if thread.name == "test-connection":
            thread.join(10)
            assert not thread.is_alive(), "stop() ends the idle threads"
