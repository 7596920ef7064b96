"""systemd's notify protocol over a unix datagram socket (no libsystemd needed).

Under `Type=notify` the exporter sends `READY=1` after its first complete sample and,
when `WatchdogSec=` is set, `WATCHDOG=1` every half `WATCHDOG_USEC`, but only while
samples keep completing: a wedged exporter stops petting and systemd restarts it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends notifications to `NOTIFY_SOCKET`; does nothing when it is not set."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):  # abstract namespace
            address = "\0" + address[1:]
        self._address = address
        self.watchdog_seconds: float | None = None
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        if usec and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_seconds = int(usec) / 1e6

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def send(self, message: str) -> bool:
        if not self._address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(self._address)
                sock.sendall(message.encode())
            return True
        except OSError as error:
            log.warning("systemd notify failed", extra={"error": str(error)})
            return False


class Watchdog:
    """Pets systemd's watchdog every half period while `healthy()` says samples complete."""

    def __init__(self, notifier: Notifier, healthy: Callable[[], bool]) -> None:
        self._notifier = notifier
        self._healthy = healthy
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        period = self._notifier.watchdog_seconds
        if period is None:
            return
        self._thread = threading.Thread(
            target=self._run, args=(period / 2,), name="watchdog", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            if self._healthy():
                self._notifier.send("WATCHDOG=1")
            else:
                log.warning("samples are not completing: not petting the systemd watchdog")
