"""The programs a tool starts (each in a session of its own) and the signals that stop the tool.

A stop signal (Ctrl-C's SIGINT, Ctrl-\\'s SIGQUIT, a closed terminal's SIGHUP, SIGTERM) is only
noted when it arrives; the tool looks at it between steps. So a signal never cuts a step
short, and above all never the stop: every program is stopped, whatever arrives meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_HOW: dict[int, str] = {
    signal.SIGINT: "Ctrl-C",
    signal.SIGQUIT: "Ctrl-\\",
    signal.SIGHUP: "its terminal closed",
    signal.SIGTERM: "a request to stop",
}

# Seconds a program may take to stop after SIGTERM before it gets SIGKILL.
STOP_TIMEOUT_SECONDS = 15.0
# Seconds a program may take to become ready (its URL answers 200).
READY_TIMEOUT_SECONDS = 60.0


class StartFailed(Exception):
    """A program exited, could not be run, or did not become ready; the message says which."""


class Stopped(Exception):
    """A stop signal arrived: stop everything and leave with 128 + its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


def signal_name(signum: int) -> str:
    """`SIGINT (Ctrl-C)`: the signal's name and what usually sends it."""
    return f"{signal.Signals(signum).name} ({_HOW.get(signum, 'a signal')})"


class StopSignals:
    """The first stop signal this process received (`first`, None while none has), noted by
    a handler that raises nothing."""

    def __init__(self) -> None:
        self.first: int | None = None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self.first is None:
            self.first = signum

    def check(self) -> None:
        """Raise Stopped if a stop signal has arrived."""
        if self.first is not None:
            raise Stopped(self.first)

    @classmethod
    @contextmanager
    def noted(cls) -> Iterator[StopSignals]:
        """Note STOP_SIGNALS while inside; the previous handlers come back on the way out.
        (A Python handler, unlike SIG_IGN, is not inherited by the programs started here.)"""
        signals = cls()
        previous = {s: signal.signal(s, signals._note) for s in STOP_SIGNALS}
        try:
            yield signals
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def tail(self) -> str:
        """The end of its log (its stdout and stderr), or a line saying the log is empty."""
        return self.log_path.read_text(errors="replace")[-2000:] or "(its log is empty)"

    def signal_group(self, signum: int) -> None:
        """Send `signum` to the program's process group (its session), only while the
        program is not reaped yet: until then its number cannot name anyone else's group."""
        if self.process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)


class Services:
    """The programs started here, each with its log file in `workdir`; stopped newest first."""

    def __init__(
        self, workdir: Path, signals: StopSignals, stop_timeout: float = STOP_TIMEOUT_SECONDS
    ) -> None:
        self.workdir = workdir
        self.signals = signals
        self.stop_timeout = stop_timeout
        self.running: list[Service] = []

    def start(self, name: str, args: list[str], ready_url: str, cwd: Path) -> None:
        """Run `args` in a session of its own (so the terminal's signals reach this tool,
        which stops it in order) until `ready_url` answers 200. Raises StartFailed, or
        Stopped when a stop signal arrives meanwhile."""
        self.signals.check()
        log_path = self.workdir / f"{name}.log"
        with open(log_path, "wb") as log:
            try:
                process = subprocess.Popen(
                    args, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
                )
            except OSError as error:
                raise StartFailed(f"{name} could not be run: {error}") from None
        service = Service(name, process, log_path)
        self.running.append(service)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            self.signals.check()
            if process.poll() is not None:
                raise StartFailed(f"{name} exited {process.returncode}:\n{service.tail()}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise StartFailed(f"{name} did not become ready:\n{service.tail()}")

    def wait(self) -> str:
        """Wait until a program stops on its own, and say which, with its log; raises Stopped
        when a stop signal arrives first."""
        while True:
            self.signals.check()
            for service in self.running:
                if service.process.poll() is not None:
                    return f"{service.name} exited {service.process.returncode}:\n{service.tail()}"
            time.sleep(0.2)

    def stop(self) -> list[str]:
        """Stop every program: SIGTERM to each one's group, then SIGKILL to any still running
        `stop_timeout` seconds later. Returns a line for each one that had to be killed."""
        for service in reversed(self.running):
            if service.process.poll() is None:
                service.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        killed = []
        for service in reversed(self.running):
            try:
                service.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                service.signal_group(signal.SIGKILL)
                killed.append(
                    f"{service.name} did not stop within {self.stop_timeout:g} s of SIGTERM: killed"
                )
                with suppress(subprocess.TimeoutExpired):
                    service.process.wait(5)
        return killed
