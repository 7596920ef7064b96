"""A server a test runs on 127.0.0.1 (Prometheus, Alertmanager): started, waited for on its
`/-/ready` endpoint, its log kept in a file, stopped at the end."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.support.exporter import http_get


@dataclass
class LocalService:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


S = TypeVar("S", bound=LocalService)


def start_service(
    kind: type[S], args: list[str], port: int, log_path: Path, workdir: Path, timeout: float = 30
) -> S:
    """Run `args` (a server listening on 127.0.0.1:`port`) until its `/-/ready` answers 200."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    server = kind(process, port, log_path)
    name = Path(args[0]).name
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{name} exited {process.returncode}:\n{server.log()}")
        try:
            if http_get(f"{server.url}/-/ready").status == 200:
                return server
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"{name} did not become ready:\n{server.log()}")
