"""The webhook receiver of `make demo-alerts`: it prints each alert that Alertmanager posts.

Any local user can post to it, so what it prints is made safe for a terminal first: every
control character (C0, DEL, C1, and the format and line-separator code points such as
U+202E RIGHT-TO-LEFT OVERRIDE) is written as an escape (`\\x1b`), which also defuses every
escape sequence, since each starts with one. A body is read only up to MAX_BODY_BYTES, and
one that is not an Alertmanager webhook notification (its JSON, "version": "4") is answered
400 without a word on the terminal.
"""

from __future__ import annotations

import json
import threading
import time
import unicodedata
from contextlib import suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket
from typing import Any, TextIO

LOOPBACK = "127.0.0.1"

# A notification of the demo's 4 GPUs is a few KB; Alertmanager's largest real ones (hundreds
# of alerts in a group) stay under this.
MAX_BODY_BYTES = 1 << 20
# Characters of one field (a label, the summary, the receiver's name) printed at most.
MAX_FIELD_CHARS = 300
# Seconds a client may take to send its head and body.
CLIENT_TIMEOUT_SECONDS = 10


class NotAWebhook(ValueError):
    """A body that is not an Alertmanager webhook notification."""


@dataclass(frozen=True)
class Alert:
    """One alert of a notification, as posted (strings only, not yet made printable)."""

    status: str
    labels: dict[str, str]
    annotations: dict[str, str]


def printable(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """`text` safe to write to a terminal: a backslash doubled; each character of Unicode's
    categories C (controls, formats, surrogates, private use, unassigned), Zl and Zp
    escaped as Python escapes it (`\\n`, `\\x1b`, `\\u202e`); at most `limit` characters
    of `text` kept (then `…`)."""
    kept = []
    for char in text[:limit]:
        category = unicodedata.category(char)
        if char == "\\":
            kept.append("\\\\")
        elif category[0] == "C" or category in ("Zl", "Zp"):
            kept.append(char.encode("unicode_escape").decode("ascii"))  # \x1b, \u202e
        else:
            kept.append(char)
    return "".join(kept) + ("…" if len(text) > limit else "")


def _strings(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise NotAWebhook(f"{what} is not an object of strings")
    return value


def alerts_in(body: bytes) -> list[Alert]:
    """The alerts of one webhook notification; NotAWebhook for anything else (not UTF-8 JSON,
    no `alerts` list, an alert that is not an object, labels that are not strings)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as error:  # RecursionError: "[[[[…" nested deep
        raise NotAWebhook("not JSON") from error
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        raise NotAWebhook("no `alerts` list")
    alerts = []
    for alert in payload["alerts"]:
        if not isinstance(alert, dict) or not isinstance(alert.get("status", ""), str):
            raise NotAWebhook("an alert is not an object with a string `status`")
        alerts.append(
            Alert(
                alert.get("status", "?"),
                _strings(alert.get("labels", {}), "labels"),
                _strings(alert.get("annotations", {}), "annotations"),
            )
        )
    return alerts


def describe(receiver: str, alert: Alert, elapsed: float) -> str:
    """Two printable lines for one alert of a notification, `elapsed` seconds after the
    start: what and where, then its runbook."""
    labels, annotations = alert.labels, alert.annotations
    where = " ".join(f"{k}={printable(labels[k])}" for k in ("gpu", "gpu_instance") if k in labels)
    return (
        f"[{elapsed:4.0f}s] {printable(receiver)}: {printable(alert.status.upper())} "
        f"{printable(labels.get('alertname', '?'))} {where}: "
        f"{printable(annotations.get('summary', ''))}\n"
        f"        runbook: {printable(annotations.get('runbook_url', '(none)'))}"
    )


def say(stream: TextIO, text: str) -> None:
    """Print `text` on `stream`, if anyone can read it: a closed terminal answers EIO and a
    gone reader EPIPE, and neither may stop what the demo is doing (stopping, often)."""
    with suppress(OSError):
        print(text, file=stream, flush=True)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: socket | tuple[bytes, socket], client_address: Any) -> None:
        """A client that drops or stalls its connection is its own business: no traceback
        reaches the demo's terminal."""


def start_receiver(out: TextIO, started: float) -> ThreadingHTTPServer:
    """A webhook receiver on 127.0.0.1 (a port of the kernel's choice) that prints every
    alert posted to it, with the seconds since `started` (time.monotonic())."""
    lock = threading.Lock()

    class Receiver(BaseHTTPRequestHandler):
        timeout = CLIENT_TIMEOUT_SECONDS

        def do_POST(self) -> None:
            length = self.headers.get("Content-Length", "")
            if "Transfer-Encoding" in self.headers or not length:
                self.send_error(411, "a Content-Length and no Transfer-Encoding expected")
                return
            if not (length.isascii() and length.isdigit() and len(length) <= 10):
                self.send_error(400, "bad Content-Length")
                return
            if int(length) > MAX_BODY_BYTES:
                self.send_error(413, f"a notification is at most {MAX_BODY_BYTES} bytes")
                return
            body = self.rfile.read(int(length))
            try:
                alerts = alerts_in(body)
            except NotAWebhook as error:
                self.send_error(400, "not an Alertmanager webhook notification", str(error))
                return
            receiver = self.path.strip("/")
            with lock:
                for alert in alerts:
                    say(out, describe(receiver, alert, time.monotonic() - started))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _QuietServer((LOOPBACK, 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
