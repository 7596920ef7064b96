"""`make demo-alerts` (tools/demo_alerts.py): a real Prometheus and a real Alertmanager deliver
an alert of the simulated host to a receiver that prints it; loopback only; Ctrl-C stops all."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
import unicodedata
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support.exporter import REPO, http_get
from tools import demo_alerts, webhook_receiver

pytestmark = pytest.mark.e2e


def test_the_demo_files_pass_promtool_and_amtool_and_say_they_are_demo_only(
    tmp_path: Path,
) -> None:
    demo_alerts.write_files(tmp_path, "127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3")
    checked = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 2 rule files found" in checked.stdout + checked.stderr
    checked = subprocess.run(
        ["amtool", "check-config", str(tmp_path / "alertmanager.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for name in ("prometheus.yml", "alertmanager.yml", *demo_alerts.RULE_FILES):
        assert (tmp_path / name).read_text().startswith("# DEMO ONLY"), name
    # the rules are the repository's, but for the demo-only `for:`
    for name in demo_alerts.RULE_FILES:
        original = yaml.safe_load((demo_alerts.RULES / name).read_text())
        demo = yaml.safe_load((tmp_path / name).read_text())
        for group in (*original["groups"], *demo["groups"]):
            for rule in group["rules"]:
                rule.pop("for", None)
        assert demo == original


BANNER = "Ctrl-C stops it all."


class _Demo:
    """`python -m tools.demo_alerts ARGS` with a TMPDIR of its own (`tmp`), its stdout and
    stderr gathered in `output`, from a pipe or, with `terminal`, from a pseudo-terminal
    that is its controlling terminal (read by `wait_for`)."""

    def __init__(self, tmp: Path, *args: str, terminal: bool = False) -> None:
        self.tmp = tmp
        tmp.mkdir()
        self.output: list[str] = []
        self.terminal: int | None = None
        command = [sys.executable, "-m", "tools.demo_alerts", *args]
        env = {**os.environ, "TMPDIR": str(tmp)}
        if terminal:
            self.terminal, tty = pty.openpty()
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdin=tty,
                stdout=tty,
                stderr=tty,
                start_new_session=True,  # a session whose controlling terminal is `tty`
                preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
            )
            os.close(tty)
        else:
            self.process = subprocess.Popen(
                command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        self.reader = threading.Thread(target=self._gather, daemon=True)
        self.reader.start()
        self.children: list[psutil.Process] = []

    def _gather(self) -> None:
        for line in self.process.stdout or ():
            self.output.append(line.decode(errors="replace"))

    def text(self) -> str:
        return "".join(self.output)

    def wait_for(self, text: str, timeout: float = 120) -> None:
        """Until the demo prints `text` (on the terminal, when it has one)."""
        deadline = time.monotonic() + timeout
        while text not in self.text():
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.text()}"
            assert self.process.poll() is None, self.text()
            if self.terminal is not None and select.select([self.terminal], [], [], 0.2)[0]:
                self.output.append(os.read(self.terminal, 65536).decode(errors="replace"))
            time.sleep(0.05)

    def note_children(self) -> None:
        """Add the processes the demo runs now to `children`."""
        now = psutil.Process(self.process.pid).children(recursive=True)
        self.children.extend(child for child in now if child not in self.children)

    def assert_stopped_everything(self, status: int, last_line: str | None) -> None:
        """It exited `status` with `last_line` last (if given), no program it started runs,
        and its temporary folder (Prometheus's data) is gone."""
        assert self.process.wait(90) == status, self.text()
        self.reader.join(10)
        assert last_line is None or self.text().endswith(last_line + "\n"), self.text()
        _, alive = psutil.wait_procs(self.children, timeout=10)
        assert not alive, alive
        assert list(self.tmp.iterdir()) == [], self.text()

    def hang_up(self) -> None:
        """Close its terminal: the kernel sends it SIGHUP, and its writes there fail (EIO)."""
        if self.terminal is not None:
            os.close(self.terminal)
            self.terminal = None

    def kill(self) -> None:
        self.hang_up()
        self.process.kill()
        for child in self.children:  # in sessions of their own: a killed demo leaves them
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        self.process.wait()


def test_demo_alerts_prints_a_real_notification_listens_on_loopback_and_stops_on_ctrl_c(
    tmp_path: Path,
) -> None:
    demo = _Demo(tmp_path / "tmp")
    try:
        # a bound for a stuck demo, not a timing check (the target, 2 minutes, is measured)
        demo.wait_for("#gpuxidcritical\n", timeout=240)
        lines = demo.text().splitlines()
        at = next(i for i, line in enumerate(lines) if "GPUXidCritical" in line)
        assert (
            "gpu-hardware: FIRING GPUXidCritical gpu=2: Xid 94 on GPU 2 of 127.0.0.1:"
            in (lines[at])
        )
        match = re.search(
            r"runbook: (http://127\.0\.0\.1:\d+/runbooks#gpuxidcritical)$", lines[at + 1]
        )
        assert match, lines[at + 1]
        page = http_get(match.group(1))
        assert page.status == 200
        assert "GPUXidCritical" in page.text

        demo.note_children()
        assert len(demo.children) == 3, demo.children  # the exporter, Prometheus, Alertmanager
        listening = [
            (child.name(), c.laddr)
            for child in [psutil.Process(demo.process.pid), *demo.children]
            for c in child.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert len(listening) == 4, listening  # the receiver, exporter, Alertmanager, Prometheus
        assert {address.ip for _, address in listening} == {"127.0.0.1"}, listening

        demo.process.send_signal(signal.SIGINT)
        demo.assert_stopped_everything(
            128 + signal.SIGINT, "demo-alerts: stopped by SIGINT (Ctrl-C)"
        )
    finally:
        demo.kill()


def _post(port: int, path: bytes, body: bytes, length: bytes | None = None) -> int:
    """The status of a POST sent as raw bytes (http.client refuses control characters)."""
    length = str(len(body)).encode() if length is None else length
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(
            b"POST %s HTTP/1.1\r\nContent-Length: %s\r\n\r\n%s" % (path, length, body)
        )
        head = connection.makefile("rb").readline()
    return int(head.split()[1])


def test_the_receiver_escapes_control_characters_and_answers_400_to_what_is_not_a_webhook(
    capfd: pytest.CaptureFixture[str],
) -> None:
    out = io.StringIO()
    receiver = webhook_receiver.start_receiver(out, started=time.monotonic())
    port = receiver.server_address[1]
    try:
        hostile = {
            "alerts": [
                {
                    "status": "firing\x1b]0;pwned\x07",
                    "labels": {"alertname": "GPUXidCritical\x1b[2J\x1b[H", "gpu": "2\x9b31m"},
                    "annotations": {
                        "summary": "Xid\x00 \x7f \x85 \u202eevil\r\nfake line",
                        "runbook_url": "http://x/\\x1b" + "r" * 100_000,
                    },
                }
            ]
        }
        assert _post(port, b"/gpu-hardware\x1b[1m\x9b", json.dumps(hostile).encode()) == 200
        not_webhooks = [
            b"Traceback? not JSON",
            b"\xff\xfe not UTF-8",
            b"[" * 100_000,  # nested deeper than json's recursion
            b'{"alerts": 5}',
            b'["alerts"]',
            b'{"alerts": ["GPUXidCritical"]}',
            b'{"alerts": [{"labels": {"gpu": 2}}]}',
            b'{"alerts": [{"status": ["firing"]}]}',
        ]
        assert [_post(port, b"/x", body) for body in not_webhooks] == [400] * len(not_webhooks)
        too_big = webhook_receiver.MAX_BODY_BYTES + 1
        # answered from the head alone: the body is never sent
        assert _post(port, b"/x", b"", str(too_big).encode()) == 413
        assert _post(port, b"/x", b"", b"-1") == 400
        assert _post(port, b"/x", b"", "٣".encode()) == 400  # ASCII digits only
    finally:
        receiver.shutdown()
        receiver.server_close()
    printed = out.getvalue()
    lines = printed.splitlines()
    assert len(lines) == 2, printed  # one alert: its line and its runbook's; nothing else
    assert lines[0] == (
        "[   0s] gpu-hardware\\x1b[1m\\x9b: FIRING\\x1b]0;PWNED\\x07 GPUXidCritical\\x1b[2J\\x1b[H "
        "gpu=2\\x9b31m: Xid\\x00 \\x7f \\x85 \\u202eevil\\r\\nfake line"
    ), lines[0]
    assert lines[1].startswith("        runbook: http://x/\\\\x1b" + "r" * 100), lines[1]
    assert lines[1].endswith("r…") and len(lines[1]) < 400, lines[1]
    # nothing a terminal would act on, and no traceback (the server thread writes to stderr)
    assert not [c for c in printed if unicodedata.category(c) == "Cc" and c != "\n"], printed
    assert not [c for c in printed if unicodedata.category(c) == "Cf"], printed
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == "", captured


def test_a_closed_terminal_ctrl_backslash_sigterm_and_ctrl_c_after_a_failed_start_stop_it_all(
    tmp_path: Path,
) -> None:
    # a slow-to-stop Alertmanager, and a Prometheus that fails at once
    marker = tmp_path / "stubborn-signals"
    stubborn = tmp_path / "stubborn-alertmanager"
    stubborn.write_text(
        f"#!/bin/sh\nexec {sys.executable} {REPO / 'tests/support/stubborn_service.py'} "
        f'{marker} "$@"\n'
    )
    stubborn.chmod(0o755)
    demos = {
        "hangup": _Demo(tmp_path / "hangup", terminal=True),
        "quit": _Demo(tmp_path / "quit"),
        "term": _Demo(tmp_path / "term"),
        "failed": _Demo(
            tmp_path / "failed",
            *("--prometheus=/bin/false", f"--alertmanager={stubborn}", "--stop-timeout=3"),
        ),
    }
    try:
        # first the failed start, whose stop waits --stop-timeout for the stubborn service
        failed = demos["failed"]
        deadline = time.monotonic() + 120
        while not marker.exists():  # the stubborn Alertmanager got its SIGTERM: stopping
            assert time.monotonic() < deadline and failed.process.poll() is None, failed.text()
            failed.note_children()
            time.sleep(0.05)
        failed.process.send_signal(signal.SIGINT)

        for name in ("hangup", "quit", "term"):
            demos[name].wait_for(BANNER)
            demos[name].note_children()
            assert len(demos[name].children) == 3, demos[name].children
        demos["hangup"].hang_up()
        demos["quit"].process.send_signal(signal.SIGQUIT)
        demos["term"].process.send_signal(signal.SIGTERM)

        demos["hangup"].assert_stopped_everything(128 + signal.SIGHUP, None)  # no one reads
        demos["quit"].assert_stopped_everything(
            128 + signal.SIGQUIT, "demo-alerts: stopped by SIGQUIT (Ctrl-\\)"
        )
        demos["term"].assert_stopped_everything(
            128 + signal.SIGTERM, "demo-alerts: stopped by SIGTERM (a request to stop)"
        )
        failed.assert_stopped_everything(
            1,
            "demo-alerts: stopped after a failure: prometheus exited 1; "
            "SIGINT (Ctrl-C) while stopping",
        )
        assert len(failed.children) >= 2, failed.children  # the exporter, the stubborn one
        assert "demo-alerts: alertmanager did not stop within 3 s of SIGTERM: killed\n" in (
            failed.text()
        )
        assert marker.read_text() == "SIGTERM\n"  # SIGINT reached the demo, not its services
        assert "Traceback" not in "".join(demo.text() for demo in demos.values())
    finally:
        for demo in demos.values():
            demo.kill()
