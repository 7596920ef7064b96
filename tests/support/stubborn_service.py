"""A server that is slow to stop, for the tests of tools that stop the programs they start.

`python stubborn_service.py MARKER --web.listen-address=127.0.0.1:PORT [other flags]`
answers 200 to every GET on that address (so a `/-/ready` check passes), ignores SIGTERM
and SIGINT, and writes the name of each such signal to the file MARKER when it arrives:
only SIGKILL stops it. Other flags (Alertmanager's) are ignored. Standard library only.
"""

from __future__ import annotations

import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import FrameType
from typing import Any


class _Ready(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main(argv: list[str]) -> None:
    marker = Path(argv[0])
    address = next(a for a in argv if a.startswith("--web.listen-address="))
    host, _, port = address.partition("=")[2].rpartition(":")

    def note(signum: int, frame: FrameType | None) -> None:
        with open(marker, "a") as out:
            out.write(signal.Signals(signum).name + "\n")

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, note)
    HTTPServer((host, int(port)), _Ready).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
