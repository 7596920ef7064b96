"""`make demo-alerts` (tools/demo_alerts.py): a real Prometheus and a real Alertmanager deliver
an alert of the simulated host to a receiver that prints it; loopback only; Ctrl-C stops all."""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support.exporter import REPO, http_get
from tools import demo_alerts

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


def _lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def _next_line(lines: queue.Queue[str], timeout: float, seen: list[str]) -> str:
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError("demo-alerts printed:\n" + "".join(seen)) from None
    seen.append(line)
    return line


def test_demo_alerts_prints_a_real_notification_listens_on_loopback_and_stops_on_ctrl_c() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.demo_alerts"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    children: list[psutil.Process] = []
    try:
        # a bound for a stuck demo, not a timing check (the target, 2 minutes, is measured)
        while "GPUXidCritical" not in _next_line(lines, 240, seen):
            pass
        notification = seen[-1]
        assert "gpu-hardware: FIRING GPUXidCritical gpu=2: Xid 94 on GPU 2 of 127.0.0.1:" in (
            notification
        )
        runbook = _next_line(lines, 10, seen)
        match = re.search(r"runbook: (http://127\.0\.0\.1:\d+/runbooks#gpuxidcritical)$", runbook)
        assert match, runbook
        page = http_get(match.group(1))
        assert page.status == 200
        assert "GPUXidCritical" in page.text

        children = psutil.Process(process.pid).children(recursive=True)
        assert len(children) >= 3, children  # the exporter, Prometheus, Alertmanager
        listening = [
            (child.name(), c.laddr)
            for child in [psutil.Process(process.pid), *children]
            for c in child.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert len(listening) == 4, listening  # the receiver, exporter, Alertmanager, Prometheus
        assert {address.ip for _, address in listening} == {"127.0.0.1"}, listening

        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0, "".join(seen)
        reader.join(10)
        while not lines.empty():
            seen.append(lines.get())
        assert seen[-1] == "demo-alerts: stopped\n", "".join(seen)
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, alive
    finally:
        if process.poll() is None:
            process.kill()
        for child in children:  # in sessions of their own: a killed demo leaves them
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        process.wait()
