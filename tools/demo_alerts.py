"""`make demo-alerts`: an alert delivered end to end on this machine, in one command.

It runs a simulated 4-GPU exporter whose scenario raises an Xid on GPU 2 (which also runs
the simulated near-OOM job), Debian's real Prometheus with the repository's rule files, and
Debian's real Alertmanager with the repository's example routing, whose receivers post to a
tiny receiver here that prints each alert of each notification: receiver, alert name, GPU,
summary and runbook link. Everything listens on 127.0.0.1 only (Alertmanager's cluster port
is off).

Ctrl-C stops it all, and so do Ctrl-\\, a closed terminal and SIGTERM: every program it
started is stopped (killed if it takes longer than --stop-timeout), its folder is removed,
and it exits 128 + the signal's number (130 for Ctrl-C). A program that fails to start or
exits stops the demo the same way, with exit status 1 and the failure named, whatever
signal arrives while it stops.

The files it writes (a temporary folder, removed at the end) are the repository's with only
what a demo must change: the targets, the receivers' URLs, and the settings named DEMO_ONLY_*
below, which make the first notification arrive in well under 2 minutes. Never copy those
to a real setup; the README's "Alerts and Alertmanager" section gives the real steps.

This program is not part of the exporter's package: it starts other programs, and the
exporter never does.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from tools.services import (
    STOP_TIMEOUT_SECONDS,
    Services,
    StartFailed,
    Stopped,
    StopSignals,
    signal_name,
)
from tools.webhook_receiver import LOOPBACK, say, start_receiver

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "deploy" / "prometheus" / "rules"
RULE_FILES = ("gpu-recording.yml", "gpu-alerts.yml")  # GPUAllocatedButIdle needs the first
ALERTMANAGER_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"

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


@dataclass(frozen=True)
class Programs:
    """The Prometheus and Alertmanager executables, and the seconds each program the demo
    starts may take to stop after SIGTERM before it is killed."""

    prometheus: str
    alertmanager: str
    stop_timeout: float = STOP_TIMEOUT_SECONDS


def start_all(
    services: Services,
    programs: Programs,
    workdir: Path,
    exporter: str,
    alertmanager: str,
    prometheus: str,
) -> None:
    """The exporter, then Alertmanager, then Prometheus, each once it is ready."""
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
            programs.alertmanager,
            f"--config.file={workdir / 'alertmanager.yml'}",
            f"--storage.path={workdir / 'alertmanager-data'}",
            f"--web.listen-address={alertmanager}",
            "--cluster.listen-address=",  # no gossip port on 0.0.0.0:9094
        ],
        f"http://{alertmanager}/-/ready",
        workdir,
    )
    services.start(
        "prometheus",
        [
            programs.prometheus,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            f"--web.listen-address={prometheus}",
        ],
        f"http://{prometheus}/-/ready",
        workdir,
    )


def run(programs: Programs, out: TextIO = sys.stdout) -> int:
    """Run the demo until a stop signal or until a program fails, then stop every program and
    remove the folder of files (Prometheus's data included). Returns the exit status: 128 +
    the signal's number after a stop signal; 1 after a failure, named on stderr with its log,
    whatever signal arrives while stopping."""
    started = time.monotonic()
    exporter, alertmanager, prometheus = (f"{LOOPBACK}:{free_port()}" for _ in range(3))
    failure: str | None = None
    with (
        StopSignals.noted() as signals,
        tempfile.TemporaryDirectory(prefix="gpu-exporter-demo-alerts-") as tmp,
    ):
        workdir = Path(tmp)
        services = Services(workdir, signals, programs.stop_timeout)
        receiver = start_receiver(out, started)
        try:
            receiver_url = f"http://{LOOPBACK}:{receiver.server_address[1]}"
            write_files(workdir, exporter, alertmanager, receiver_url)
            start_all(services, programs, workdir, exporter, alertmanager, prometheus)
            say(
                out,
                f"gpu-exporter --simulate {GPUS}, an Xid on GPU 2:  http://{exporter}/\n"
                f"Prometheus (its alerts):  http://{prometheus}/alerts\n"
                f"Alertmanager:             http://{alertmanager}/\n"
                f"Waiting for notifications (DEMO ONLY timings: scrape and evaluation "
                f"every {DEMO_ONLY_INTERVAL}, `for:` at most {DEMO_ONLY_MAX_FOR_SECONDS}s, "
                f"group_wait {DEMO_ONLY_GROUP_WAIT}); Ctrl-C stops it all.",
            )
            failure = services.wait()
        except StartFailed as error:
            failure = str(error)
        except Stopped:
            pass
        finally:
            if failure is not None:
                say(sys.stderr, f"demo-alerts: {failure}")
            for line in services.stop():
                say(sys.stderr, f"demo-alerts: {line}")
            receiver.shutdown()
            receiver.server_close()
    if failure is not None:
        what = failure.partition("\n")[0].rstrip(":")
        late = f"; {signal_name(signals.first)} while stopping" if signals.first is not None else ""
        say(sys.stderr, f"demo-alerts: stopped after a failure: {what}{late}")
        return 1
    assert signals.first is not None  # Services.wait returns a failure or raises Stopped
    say(sys.stderr, f"demo-alerts: stopped by {signal_name(signals.first)}")
    return 128 + signals.first


def _seconds_to_stop(text: str) -> float:
    seconds = float(text)
    if not 0 <= seconds <= 3600:  # NaN included
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds from 0 to 3600")
    return seconds


def _program(parser: argparse.ArgumentParser, given: str | None, *names: str) -> str:
    """`given` (a path on the command line) or the first of `names` on PATH."""
    for name in (given,) if given is not None else names:
        found = shutil.which(name)
        if found is not None:
            return found
    if given is not None:
        parser.error(f"{given} is not an executable file")
    raise SystemExit(f"demo-alerts: {names[0]} is not installed: run `make system-deps`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make demo-alerts", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--prometheus", metavar="PATH", help="default: prometheus on PATH")
    parser.add_argument(
        "--alertmanager",
        metavar="PATH",
        help="default: prometheus-alertmanager (Debian's name) or alertmanager on PATH",
    )
    parser.add_argument(
        "--stop-timeout",
        metavar="SECONDS",
        type=_seconds_to_stop,
        default=STOP_TIMEOUT_SECONDS,
        help="seconds each program gets to stop after SIGTERM before SIGKILL (%(default)s)",
    )
    args = parser.parse_args(argv)
    programs = Programs(
        _program(parser, args.prometheus, "prometheus"),
        _program(parser, args.alertmanager, "prometheus-alertmanager", "alertmanager"),
        args.stop_timeout,
    )
    return run(programs)


if __name__ == "__main__":
    sys.exit(main())
