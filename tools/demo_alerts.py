"""`make demo-alerts`: an alert delivered end to end on this machine, in one command.

It runs a simulated 4-GPU exporter whose scenario raises an Xid on GPU 2 (which also runs
the simulated near-OOM job), Debian's real Prometheus with the repository's rule files, and
Debian's real Alertmanager with the repository's example routing, whose receivers post to a
tiny receiver here that prints each alert of each notification: receiver, alert name, GPU,
summary and runbook link. Everything listens on 127.0.0.1 only (Alertmanager's cluster port
is off) and Ctrl-C stops it all.

The files it writes (a temporary folder, removed at the end) are the repository's with only
what a demo must change: the targets, the receivers' URLs, and the settings named DEMO_ONLY_*
below, which make the first notification arrive in well under 2 minutes. Never copy those
to a real setup; the README's "Alerts and Alertmanager" section gives the real steps.

This program is not part of the exporter's package: it starts other programs, and the
exporter never does.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import yaml

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "deploy" / "prometheus" / "rules"
RULE_FILES = ("gpu-recording.yml", "gpu-alerts.yml")  # GPUAllocatedButIdle needs the first
ALERTMANAGER_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
LOOPBACK = "127.0.0.1"

GPUS = 4
# GPU 2 of the simulated host is the near-OOM job: one Xid there fires GPUXidCritical at once
# (it has no `for:`), and GPUMemoryNearFull follows.
SCENARIO: dict[str, Any] = {"events": [{"gpu": 2, "xid": 94}]}

# DEMO ONLY: a real setup keeps deploy/prometheus/prometheus.yml's 15 s (docs/scaling.md).
DEMO_ONLY_INTERVAL = "5s"
# DEMO ONLY: every alert's `for:` is cut to at most this many seconds (the rules say 1m to
# 30m, so that a passing blip does not page anyone).
DEMO_ONLY_MAX_FOR_SECONDS = 20
# DEMO ONLY: Alertmanager's group_wait and group_interval (the example: 30s and 5m or 30m).
DEMO_ONLY_GROUP_WAIT = "5s"
DEMO_ONLY_GROUP_INTERVAL = "30s"

DEMO_HEADER = (
    "# DEMO ONLY, written by `make demo-alerts` (tools/demo_alerts.py): {what}.\n"
    "# Never copy this file to a real setup: use the repository's {original}.\n"
)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _seconds(duration: str) -> float:
    """A Prometheus duration of one unit (`90s`, `5m`, `1h`) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    for unit in ("ms", "s", "m", "h", "d"):
        if duration.endswith(unit) and duration[: -len(unit)].isdigit():
            return int(duration[: -len(unit)]) * units[unit]
    raise ValueError(f"unexpected duration {duration!r}")


def demo_rules(text: str) -> dict[str, Any]:
    """A rule file with every alert's `for:` cut to DEMO_ONLY_MAX_FOR_SECONDS at most."""
    rules: dict[str, Any] = yaml.safe_load(text)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule and _seconds(rule["for"]) > DEMO_ONLY_MAX_FOR_SECONDS:
                rule["for"] = f"{DEMO_ONLY_MAX_FOR_SECONDS}s"
    return rules


def prometheus_config(exporter: str, alertmanager: str) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml's rules and alerting, for one local exporter."""
    return {
        "global": {
            "scrape_interval": DEMO_ONLY_INTERVAL,
            "evaluation_interval": DEMO_ONLY_INTERVAL,
            "external_labels": {"cluster": "demo"},
        },
        "rule_files": list(RULE_FILES),
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [
            {"job_name": "gpu-exporter", "static_configs": [{"targets": [exporter]}]}
        ],
    }


def alertmanager_config(receiver_url: str) -> dict[str, Any]:
    """The example routing, every receiver posting to `receiver_url`/<receiver name>."""
    config: dict[str, Any] = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text())
    for receiver in config["receivers"]:
        receiver["webhook_configs"] = [{"url": f"{receiver_url}/{receiver['name']}"}]
    for route in [config["route"], *config["route"].get("routes", [])]:
        route["group_wait"] = DEMO_ONLY_GROUP_WAIT
        route["group_interval"] = DEMO_ONLY_GROUP_INTERVAL
    return config


def write_files(workdir: Path, exporter: str, alertmanager: str, receiver_url: str) -> None:
    """The scenario, prometheus.yml with its two rule files, and alertmanager.yml."""
    (workdir / "scenario.yml").write_text(yaml.safe_dump(SCENARIO))
    for name in RULE_FILES:
        rules = demo_rules((RULES / name).read_text())
        header = DEMO_HEADER.format(
            what=f"every `for:` cut to at most {DEMO_ONLY_MAX_FOR_SECONDS}s",
            original=f"deploy/prometheus/rules/{name}",
        )
        (workdir / name).write_text(header + yaml.safe_dump(rules, sort_keys=False))
    header = DEMO_HEADER.format(
        what=f"scrape and evaluation every {DEMO_ONLY_INTERVAL}",
        original="deploy/prometheus/prometheus.yml",
    )
    config = yaml.safe_dump(prometheus_config(exporter, alertmanager), sort_keys=False)
    (workdir / "prometheus.yml").write_text(header + config)
    header = DEMO_HEADER.format(
        what=f"group_wait {DEMO_ONLY_GROUP_WAIT}, group_interval {DEMO_ONLY_GROUP_INTERVAL}",
        original="deploy/alertmanager/alertmanager.yml",
    )
    config = yaml.safe_dump(alertmanager_config(receiver_url), sort_keys=False)
    (workdir / "alertmanager.yml").write_text(header + config)


def describe(receiver: str, alert: dict[str, Any], elapsed: float) -> str:
    """Two lines for one alert of a notification, `elapsed` seconds after the start: what
    and where, then its runbook."""
    labels, annotations = alert.get("labels", {}), alert.get("annotations", {})
    where = " ".join(f"{k}={labels[k]}" for k in ("gpu", "gpu_instance") if k in labels)
    status = str(alert.get("status", "?")).upper()
    summary = annotations.get("summary", "")
    return (
        f"[{elapsed:4.0f}s] {receiver}: {status} {labels.get('alertname', '?')} "
        f"{where}: {summary}\n"
        f"        runbook: {annotations.get('runbook_url', '(none)')}"
    )


def start_receiver(out: TextIO, started: float) -> ThreadingHTTPServer:
    """A webhook receiver on 127.0.0.1 that prints every alert posted to it, with the seconds
    since `started` (time.monotonic())."""
    lock = threading.Lock()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver = self.path.strip("/")
            with lock:
                for alert in json.loads(body).get("alerts", []):
                    elapsed = time.monotonic() - started
                    print(describe(receiver, alert, elapsed), file=out, flush=True)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((LOOPBACK, 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def find_binary(*names: str) -> str:
    for name in names:
        binary = shutil.which(name)
        if binary is not None:
            return binary
    raise SystemExit(f"demo-alerts: {names[0]} is not installed: run `make system-deps`")


class Services:
    """The programs the demo started, each with its log file; stopped in reverse order."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.running: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, args: list[str], ready_url: str, cwd: Path) -> None:
        log_path = self.workdir / f"{name}.log"
        with open(log_path, "wb") as log:
            # a session of its own: Ctrl-C reaches this program, which stops them in order
            process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
            )
        self.running.append((name, process, log_path))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"demo-alerts: {name} exited:\n{self._tail(log_path)}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"demo-alerts: {name} did not become ready:\n{self._tail(log_path)}")

    def exited(self) -> str | None:
        """The name and log of a program that stopped on its own, if one did."""
        for name, process, log_path in self.running:
            if process.poll() is not None:
                return f"{name} exited {process.returncode}:\n{self._tail(log_path)}"
        return None

    def stop(self) -> None:
        for _, process, _ in reversed(self.running):
            if process.poll() is None:
                process.terminate()
        for _, process, _ in reversed(self.running):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    @staticmethod
    def _tail(log_path: Path) -> str:
        return log_path.read_text(errors="replace")[-2000:]


class Stop(Exception):
    """Ctrl-C or SIGTERM: stop the services and leave."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    for again in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the stop short
        signal.signal(again, signal.SIG_IGN)
    raise Stop


@contextmanager
def stop_on_signals() -> Iterator[None]:
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except Stop:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run(out: TextIO = sys.stdout) -> int:
    started = time.monotonic()
    prometheus = find_binary("prometheus")
    alertmanager = find_binary("prometheus-alertmanager", "alertmanager")
    exporter_port, prometheus_port, alertmanager_port = free_port(), free_port(), free_port()
    exporter = f"{LOOPBACK}:{exporter_port}"
    with tempfile.TemporaryDirectory(prefix="gpu-exporter-demo-alerts-") as tmp:
        workdir = Path(tmp)
        services = Services(workdir)
        receiver = start_receiver(out, started)
        with stop_on_signals():
            try:
                receiver_url = f"http://{LOOPBACK}:{receiver.server_address[1]}"
                write_files(workdir, exporter, f"{LOOPBACK}:{alertmanager_port}", receiver_url)
                services.start(
                    "gpu-exporter",
                    [
                        *(sys.executable, "-m", "gpu_exporter", "--simulate", str(GPUS)),
                        f"--simulate.scenario={workdir / 'scenario.yml'}",
                        f"--web.listen-address={exporter}",
                    ],
                    f"http://{exporter}/livez",
                    REPO,
                )
                services.start(
                    "alertmanager",
                    [
                        alertmanager,
                        f"--config.file={workdir / 'alertmanager.yml'}",
                        f"--storage.path={workdir / 'alertmanager-data'}",
                        f"--web.listen-address={LOOPBACK}:{alertmanager_port}",
                        "--cluster.listen-address=",  # no gossip port on 0.0.0.0:9094
                    ],
                    f"http://{LOOPBACK}:{alertmanager_port}/-/ready",
                    workdir,
                )
                services.start(
                    "prometheus",
                    [
                        prometheus,
                        f"--config.file={workdir / 'prometheus.yml'}",
                        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
                        f"--web.listen-address={LOOPBACK}:{prometheus_port}",
                    ],
                    f"http://{LOOPBACK}:{prometheus_port}/-/ready",
                    workdir,
                )
                print(
                    f"gpu-exporter --simulate {GPUS}, an Xid on GPU 2:  http://{exporter}/\n"
                    f"Prometheus (its alerts):  http://{LOOPBACK}:{prometheus_port}/alerts\n"
                    f"Alertmanager:             http://{LOOPBACK}:{alertmanager_port}/\n"
                    f"Waiting for notifications (DEMO ONLY timings: scrape and evaluation "
                    f"every {DEMO_ONLY_INTERVAL}, `for:` at most {DEMO_ONLY_MAX_FOR_SECONDS}s, "
                    f"group_wait {DEMO_ONLY_GROUP_WAIT}); Ctrl-C stops it all.",
                    file=out,
                    flush=True,
                )
                while (failure := services.exited()) is None:
                    time.sleep(0.5)
                print(f"demo-alerts: {failure}", file=sys.stderr)
                return 1
            finally:
                services.stop()
                receiver.shutdown()
                receiver.server_close()
    print("demo-alerts: stopped", file=out, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="make demo-alerts", description=__doc__.split("\n\n")[0] if __doc__ else None
    ).parse_args(argv)
    return run()


if __name__ == "__main__":
    sys.exit(main())
