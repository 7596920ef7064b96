"""The Xid listener survives what it did not expect: it restarts, never dies."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from gpu_exporter.model import DeviceEvent
from gpu_exporter.sources import xid
from gpu_exporter.sources.xid import XidListener


class _FlakyEvents:
    """An event set whose first wait raises a bug-like error, then delivers one Xid."""

    def __init__(self, owner: _Backend) -> None:
        self._owner = owner

    def wait(self, timeout_ms: int) -> DeviceEvent | None:
        with self._owner.lock:
            self._owner.waits += 1
            first = self._owner.waits == 1
            deliver = self._owner.waits == 2
        if first:
            raise RuntimeError("a bug in the backend")
        time.sleep(timeout_ms / 1000)
        return DeviceEvent(uuid="GPU-a", kind="xid", xid=79, event_type=8) if deliver else None

    def close(self) -> None:
        self._owner.closed += 1


class _Backend:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waits = 0
        self.opened = 0
        self.closed = 0

    def open_events(self) -> _FlakyEvents:
        self.opened += 1
        return _FlakyEvents(self)


def _wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_listener_whose_event_set_raises_restarts_and_counts_the_next_xid(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(xid, "RESTART_BACKOFF_SECONDS", (0.01,), raising=False)
    backend = _Backend()
    listener = XidListener(backend, wait_ms=5)  # type: ignore[arg-type]
    listener.start(armed=True)
    try:
        _wait_until(lambda: "GPU-a" in listener.state())
        assert listener.state()["GPU-a"].counts == {79: 1}
        assert backend.opened == 2 and backend.closed >= 1  # the failed set was closed
        assert listener.running and listener.listening
        assert "Xid listener failed; restarting" in caplog.text
    finally:
        assert listener.stop()
