"""The fleet's Prometheus: the shipped rules and the fleet dashboard at 1,000-4,000 GPUs.

`make bench-fleet` runs it and writes its tables to benchmarks/README.md. Three parts:

- **Live** (the per-tick cost): one light loopback HTTP server serves N/8 simulated 8-GPU
  nodes. Each node's exposition is the exporter's own (`gpu-exporter --simulate 8
  --once`), with values varied per node and GPU: counters grow at a per-GPU rate (every
  seventh GPU idles while it holds memory), gauges are scaled. Debian's Prometheus
  scrapes them every 15 s with deploy/prometheus/rules/*.yml loaded, for `--minutes`.
  Then: each rule group's evaluation time as Prometheus reports it
  (`prometheus_rule_group_last_duration_seconds`, mean and max over the last minutes),
  missed iterations, head series, Prometheus' RSS, and every fleet-dashboard query
  (Grafana's defaults: the last 6 hours, 20 s interval, 1 m rate interval; median of 5
  rounds over the dashboard).
- **History** (the cost that grows with history): `--history-nodes` nodes (default 2,
  16 GPUs) get 24 hours of 15-second samples, written as OpenMetrics and turned into
  blocks by `promtool tsdb create-blocks-from openmetrics`, the series the dashboard's
  recording rules write included (computed from the same synthetic values). A
  Prometheus on those blocks scrapes the same nodes on, so every window (1 day
  included) is full. Every rule's expression and every dashboard query is then timed
  as an instant or range query, and the per-GPU cost scaled linearly to the live sizes
  (fixed overheads scaled too: an upper bound).
- **The dashboard with history, measured** (`--dashboard-history-nodes`, default 500
  nodes, 4,000 GPUs): the families the fleet dashboard's queries read, each over what they
  read of it (7 h behind the 6-hour range), backfilled the same way; a Prometheus on those
  blocks alone (no scraping, no rules) answers every query at the last minute of data.

Everything runs under `nice -n 10` and listens on 127.0.0.1 only. The figures are this
machine's, shared with other work: compare them with each other, not across machines.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from gpu_exporter.docs import write_section  # noqa: E402
from tests.support.alertmanager import (  # noqa: E402
    loopback_config,
    start_alertmanager,
    start_webhook,
)

RULE_FILES = sorted((REPO / "deploy" / "prometheus" / "rules").glob("*.yml"))
DASHBOARD = REPO / "grafana" / "dashboards" / "gpu-fleet.json"
NODE_DASHBOARD = REPO / "grafana" / "dashboards" / "gpu-node.json"
CHARGEBACK_DASHBOARD = REPO / "grafana" / "dashboards" / "gpu-chargeback.json"
CHARGEBACK_RANGE_SECONDS = 24 * 3600  # the chargeback dashboard's default range
DAY_SECONDS = 24 * 3600
GPUS_PER_NODE = 8
SCRAPE_SECONDS = 15
RULE_SECONDS = 60  # the recording groups' interval
HISTORY_HOURS = 24
# Grafana's values for the fleet dashboard's default range (6 h) on a ~1,000-pixel panel
GRAFANA = {
    "__range": "6h",
    "__range_s": "21600",
    "__interval": "20s",
    "__interval_ms": "20000",
    "__rate_interval": "1m",
    "method": "usage",  # the Chargeback dashboard's energy split (its default)
    # every filter at All, as Grafana sends it: the variable's allValue
    **{
        variable["name"]: variable["allValue"]
        for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]
        if variable.get("includeAll")
    },
}
RANGE_SECONDS = 6 * 3600
STEP_SECONDS = 20
VARIED_GAUGE = re.compile(r"_(watts|celsius|hertz|ratio)$|_bytes$")
ACTIVITY_COUNTER = re.compile(r"_seconds_total$")
SAMPLE_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{.*\})? (?P<value>\S+)$")


# --- the synthetic nodes ---------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One sample line of the template: its text before the value, and how it moves."""

    name: str
    labels: str  # `{...}` or ""
    base: float
    slope: float  # per second; 0 for gauges and counters that do not move


def _fraction(*key: object) -> float:
    """A stable pseudo-random number in [0, 1) for `key`."""
    return (zlib.crc32(repr(key).encode()) % 10_000) / 10_000


def _varied(*key: object) -> float:
    """A stable factor in [0.8, 1.2) for `key`: how a synthetic node's value departs from
    the template's."""
    return 0.8 + 0.4 * _fraction(*key)


def _gpu(labels: str) -> int | None:
    found = re.search(r'\bgpu="(\d+)"', labels)
    return int(found.group(1)) if found else None


def activity(node: int, gpu: int) -> float:
    """The busy share of `gpu` on `node`: every seventh GPU idles, the rest 0.3-0.95."""
    if (node * GPUS_PER_NODE + gpu) % 7 == 0:
        return 0.0
    return 0.3 + 0.65 * _fraction("busy", node, gpu)


TRAYS_PER_RACK = 18  # a GB200 NVL72 rack: 18 compute trays
GPUS_PER_TRAY = 4
RACK_LABELS = re.compile(r'\b(chassis_serial|cluster_uuid|slot|tray)="[^"]*"')


def template(hardware: str = "hgx-h100") -> list[tuple[str, str, float]]:
    """(name, labels, value) of every sample of the exporter's simulated host: 8 H100s
    on an HGX board, or one GB200 NVL72 compute tray (4 GPUs)."""
    gpus = GPUS_PER_TRAY if hardware == "gb200-nvl72" else GPUS_PER_NODE
    text = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "--simulate", str(gpus), "--once"]
        + ["--simulate.hardware", hardware],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ).stdout
    samples = []
    for line in text.splitlines():
        match = SAMPLE_LINE.match(line)
        if line.startswith("#") or match is None:
            continue
        samples.append((match["name"], match["labels"] or "", float(match["value"])))
    return samples


FAULT_EVERY = 25  # one node in 25 has a GPU that needs action
FAULT_TIME = float(int(time.time()))  # when the faulty GPUs logged their Xid (this run's start)


def gpus_of(samples: list[tuple[str, str, float]]) -> int:
    """How many GPUs the template's node has."""
    return len({_gpu(labels) for name, labels, _v in samples if name == "gpu_up"})


def fault_gpu(node: int, gpus: int = GPUS_PER_NODE) -> int | None:
    """The GPU of `node` (of `gpus`) with a fault, or None: one node in FAULT_EVERY."""
    return node % gpus if node % FAULT_EVERY == 3 else None


def with_faults(
    node: int, samples: list[tuple[str, str, float]], gpu: int | None
) -> list[tuple[str, str, float]]:
    """`samples` with the node's faults, so that the health series, alerts and panels
    have something to show: the faulty GPU `gpu` (fault_gpu; None: none) logged Xid 79
    at FAULT_TIME (its count and time), so its recommended action is reboot_node, reason
    xid_79; on every other faulty node its NVLink fabric is also unhealthy. (Its
    uncorrected ECC counter grows: node_series.) The template's GPUs whose owner died
    and left its memory held (the simulated host shows two) keep it only on the faulty
    nodes: elsewhere they are idle and empty, so that one GPU in a hundred, not one in
    four, holds memory no process owns (each is a GPUMemoryLeaked alert whose text
    queries Prometheus at every evaluation)."""
    if gpu is None:
        return without_leaks(samples)
    out, uuid = [], ""
    for name, labels, value in samples:
        if _gpu(labels) == gpu:
            found = re.search(r'uuid="([^"]*)"', labels)
            uuid = found[1] if found else uuid
            if name == "gpu_recommended_action":
                labels = labels.replace('action="none"', 'action="reboot_node"')
                labels = labels.replace('reason="none"', 'reason="xid_79"')
            elif name == "gpu_fabric_healthy" and node % (2 * FAULT_EVERY) == 3:
                labels, value = labels.replace('summary="healthy"', 'summary="unhealthy"'), 0.0
        out.append((name, labels, value))
    xid = f'{{gpu="{gpu}",uuid="{uuid}",xid="79"}}'
    out.append(("gpu_xid_errors_total", xid, 1.0))
    out.append(("gpu_xid_error_timestamp_seconds", xid, FAULT_TIME))
    return out


def without_leaks(samples: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    """`samples` with every GPU that holds memory no process owns (a dead owner's)
    idle and empty instead: its used and unattributed memory 0, its free memory the
    total less the driver's reserve, no dead owner."""
    leaked = {_gpu(labels) for name, labels, _v in samples if name == "gpu_memory_dead_owner_info"}
    held = {
        (name, _gpu(labels)): value
        for name, labels, value in samples
        if name in ("gpu_memory_total_bytes", "gpu_memory_reserved_bytes")
    }
    out = []
    for name, labels, value in samples:
        gpu = _gpu(labels)
        if gpu in leaked:
            if name == "gpu_memory_dead_owner_info":
                continue
            if name in ("gpu_memory_used_bytes", "gpu_memory_unattributed_bytes"):
                value = 0.0
            elif name == "gpu_memory_free_bytes":
                total = held[("gpu_memory_total_bytes", gpu)]
                value = total - held.get(("gpu_memory_reserved_bytes", gpu), 0.0)
        out.append((name, labels, value))
    return out


def node_series(
    node: int, samples: list[tuple[str, str, float]], origin: float = 0.0
) -> list[Series]:
    """The node's series; values at `origin` (seconds), where the clock that
    gpu_exporter_last_sample_timestamp_seconds reads (a second behind) starts."""
    out, faulty = [], fault_gpu(node, gpus_of(samples))
    samples = with_faults(node, samples, faulty)
    memory = _memory(node, samples)  # one factor per GPU: its memory adds up (_memory)
    for name, labels, value in samples:
        labels = in_rack(node, labels)
        gpu = _gpu(labels)
        slope = 0.0
        if name == "gpu_exporter_last_sample_timestamp_seconds":
            value, slope = origin - 1, 1.0
        elif gpu is not None and gpu == faulty and 'error_type="uncorrected"' in labels:
            slope = 0.01  # an uncorrectable ECC error every 100 s
        elif gpu is not None and ACTIVITY_COUNTER.search(name) and name.startswith("gpu_"):
            slope = activity(node, gpu) * (1.0 if "busy" in name else 0.8)
        elif name.endswith("_bytes_total"):
            slope = 1e8 * _fraction("bytes", node, name, labels)
        elif name.endswith("_joules_total"):
            slope = 200 + 400 * _fraction("power", node, gpu)
        elif name in MEMORY_HELD or name in MEMORY_FIXED:
            value = memory(name, gpu, value)
        elif VARIED_GAUGE.search(name) and value > 1 and name.startswith("gpu_"):
            value *= _varied("gauge", node, name, labels)
        out.append(Series(name, labels, value, slope))
    return out


# What a GPU's memory holds, all scaled by one factor per GPU (so that the parts still
# add up): used, and what it is made of (per process, unattributed, per MIG instance).
MEMORY_HELD = frozenset(
    {
        "gpu_memory_used_bytes",
        "gpu_memory_unattributed_bytes",
        "gpu_process_memory_used_bytes",
        "gpu_mig_memory_used_bytes",
    }
)
# What is fixed or follows from the rest: a model's memory and the driver's reserve
# (never varied), the free memory (the rest), the host's memory and what is available.
MEMORY_FIXED = frozenset(
    {
        "gpu_memory_total_bytes",
        "gpu_memory_reserved_bytes",
        "gpu_memory_free_bytes",
        "gpu_mig_memory_total_bytes",
        "gpu_host_memory_total_bytes",
        "gpu_host_memory_available_bytes",
    }
)


def _memory(
    node: int, samples: list[tuple[str, str, float]]
) -> Callable[[str, int | None, float], float]:
    """The node's memory values as a driver reports them: `memory(name, gpu, value)`, the
    value of a MEMORY_HELD or MEMORY_FIXED sample of `gpu` (None: the host's) on `node`.

    What holds, per GPU: total and reserved as the template's (a model's memory is fixed);
    used scaled by 0.8-1.2 (one factor per GPU), less where that would pass total - reserved
    or a MIG instance's used its total; what used is made of (per process, unattributed,
    per MIG instance) scaled by the same factor, so it never passes used; free exactly
    total - reserved - used (NVML's v2 memory info: total = used + free + reserved), never
    below 0. The host's memory: its total as the template's, available scaled but never
    above it. `samples` is the node's (with_faults), so an emptied GPU (without_leaks)
    stays empty, its free memory total - reserved."""
    held = {
        (name, _gpu(labels)): value
        for name, labels, value in samples
        if name in MEMORY_FIXED or name == "gpu_memory_used_bytes"
    }
    mig_total = {labels: v for name, labels, v in samples if name == "gpu_mig_memory_total_bytes"}

    def room(gpu: int | None) -> float:
        """Total less the driver's reserve: what used and free share."""
        total = held.get(("gpu_memory_total_bytes", gpu), math.inf)
        return total - held.get(("gpu_memory_reserved_bytes", gpu), 0.0)

    factors = {  # the draw, then no more than the memory allows
        _gpu(labels): _varied("memory", node, _gpu(labels))
        for name, labels, _v in samples
        if name in MEMORY_HELD
    }
    for name, labels, value in samples:
        gpu = _gpu(labels)
        if name == "gpu_memory_used_bytes" and value > 0:
            factors[gpu] = min(factors[gpu], room(gpu) / value)
        elif name == "gpu_mig_memory_used_bytes" and value > 0 and labels in mig_total:
            factors[gpu] = min(factors[gpu], mig_total[labels] / value)

    def memory(name: str, gpu: int | None, value: float) -> float:
        if name == "gpu_memory_used_bytes":
            return max(min(value * factors.get(gpu, 1.0), room(gpu)), 0.0)
        if name in MEMORY_HELD:
            return value * factors.get(gpu, 1.0)
        if name == "gpu_memory_free_bytes" and ("gpu_memory_total_bytes", gpu) in held:
            used = held.get(("gpu_memory_used_bytes", gpu), 0.0)
            return max(room(gpu) - memory("gpu_memory_used_bytes", gpu, used), 0.0)
        if name == "gpu_host_memory_available_bytes":
            total = held.get(("gpu_host_memory_total_bytes", gpu), math.inf)
            return min(value * _varied("gauge", node, name), total)
        return value  # totals and the reserve: fixed

    return memory


def in_rack(node: int, labels: str) -> str:
    """`labels` with the rack labels (where the template has them: GB200) of `node`,
    the node-th compute tray: rack node // 18, tray node % 18."""
    rack, tray = divmod(node, TRAYS_PER_RACK)
    values = {
        "chassis_serial": f"18210{rack:08d}",
        "cluster_uuid": f"00000000-0000-0000-0000-{rack:012d}",
        "slot": str(tray + 1),
        "tray": str(tray),
    }
    return RACK_LABELS.sub(lambda m: f'{m[1]}="{values[m[1]]}"', labels)


class Node:
    """The exposition of one node at any time: static text and moving counters."""

    def __init__(self, series: list[Series], origin: float) -> None:
        self.origin = origin
        self.parts: list[bytes | tuple[float, float]] = []
        static: list[str] = []
        for s in series:
            if s.slope:
                static.append(f"{s.name}{s.labels} ")
                self.parts.append("".join(static).encode())
                self.parts.append((s.base, s.slope))
                static = ["\n"]
            else:
                static.append(f"{s.name}{s.labels} {s.base!r}\n")
        self.parts.append("".join(static).encode())

    def render(self, now: float) -> bytes:
        elapsed = now - self.origin
        return b"".join(
            p if isinstance(p, bytes) else repr(p[0] + p[1] * elapsed).encode() for p in self.parts
        )


class NodeServer:
    """One loopback HTTP server for every node: GET /node/<i> is node i's exposition."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805
                try:
                    body = nodes[int(handler.path.rsplit("/", 1)[1])].render(time.time())
                except (ValueError, IndexError):
                    handler.send_error(404)
                    return
                handler.send_response(200)
                handler.send_header("Content-Type", "text/plain; version=0.0.4")
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(handler, *args: object) -> None:  # noqa: N805
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- Prometheus ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(
        self,
        workdir: Path,
        nodes: int,
        server_port: int,
        data: Path,
        remote_write: str = "",
        rule_files: list[Path] = RULE_FILES,
        forward: str = "",
        retention: str = "2d",
    ) -> None:
        """Scrapes `nodes` nodes of the server at `server_port` with `rule_files`,
        storing in `data` for `retention` (Prometheus' own default, 15 days, where
        empty: its largest blocks are then 18 hours, not 2); sends to `remote_write`
        (where given) the series whose names match `forward` (all where empty)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        targets = [
            {
                "targets": [f"127.0.0.1:{server_port}"],
                "labels": {"__metrics_path__": f"/node/{i}", "instance": f"node-{i:04d}:9872"},
            }
            for i in range(nodes)
        ]
        (workdir / "targets.json").write_text(json.dumps(targets))
        config = {
            "global": {
                "scrape_interval": f"{SCRAPE_SECONDS}s",
                "scrape_timeout": "10s",
                "evaluation_interval": f"{SCRAPE_SECONDS}s",
            },
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": "gpu-exporter",
                    "file_sd_configs": [{"files": [str(workdir / "targets.json")]}],
                },
                {
                    "job_name": "prometheus",
                    "static_configs": [{"targets": [f"127.0.0.1:{self.port}"]}],
                },
            ],
        }
        if remote_write:
            writer: dict[str, Any] = {"url": remote_write}
            if forward:
                keep = {"source_labels": ["__name__"], "regex": forward, "action": "keep"}
                writer["write_relabel_configs"] = [keep]
            config["remote_write"] = [writer]
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = (workdir / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                "nice",
                "-n",
                "10",
                "prometheus",
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *([f"--storage.tsdb.retention.time={retention}"] if retention else []),
                "--query.max-samples=200000000",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if self.get("/-/ready"):
                    return
            except OSError:
                pass
            time.sleep(1)
        raise RuntimeError("prometheus did not become ready")

    def get(self, path: str, **params: str) -> bytes:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=120) as response:
            return bytes(response.read())

    def api(self, path: str, **params: str) -> Any:
        payload = json.loads(self.get(f"/api/v1/{path}", **params))
        if payload.get("status") != "success":
            raise RuntimeError(f"{path}: {payload}")
        return payload["data"]

    def value(self, expr: str) -> float:
        result = self.api("query", query=expr)["result"]
        return float(result[0]["value"][1]) if result else math.nan

    def count(self, expr: str) -> int:
        """How many series `expr` gives now (0 for none: `count` then answers nothing)."""
        found = self.value(f"count({expr})")
        return 0 if math.isnan(found) else int(found)

    def by(self, expr: str, label: str) -> dict[str, float]:
        return {
            r["metric"][label]: float(r["value"][1])
            for r in self.api("query", query=expr)["result"]
        }

    def rule_groups(self, window: str) -> dict[str, tuple[float, float, float]]:
        """Each rule group (by its name, less the file) -> (mean and worst evaluation
        seconds over the last `window`, its interval in seconds), in name order."""
        duration = "prometheus_rule_group_last_duration_seconds"
        mean = self.by(f"avg_over_time({duration}[{window}])", "rule_group")
        peak = self.by(f"max_over_time({duration}[{window}])", "rule_group")
        interval = self.by("prometheus_rule_group_interval_seconds", "rule_group")
        return {g.split(";")[-1]: (mean[g], peak[g], interval[g]) for g in sorted(mean)}

    def timed(
        self,
        expr: str,
        instant: bool,
        repeats: int = 3,
        step: int = STEP_SECONDS,
        at: float | None = None,
        range_seconds: int = RANGE_SECONDS,
    ) -> tuple[float, int]:
        """Median seconds of `expr` (instant at `at`, or over the range that ends there;
        `at` is now unless given), and the number of series it returned."""
        times, count = [], 0
        for _ in range(repeats):
            now = time.time() if at is None else at
            params = {"query": expr}
            if instant:
                params["time"] = f"{now:.3f}"
                path = "query"
            else:
                params.update(start=f"{now - range_seconds:.3f}", end=f"{now:.3f}", step=str(step))
                path = "query_range"
            started = time.perf_counter()
            result = self.api(path, **params)["result"]
            times.append(time.perf_counter() - started)
            count = len(result)
        return statistics.median(times), count

    def settle_compaction(self, quiet: float = 90, first: float = 240) -> float:
        """Seconds until Prometheus' compactor has merged the blocks it found: it looks
        once a minute and then compacts until nothing is left to plan. Done after `quiet`
        seconds with no compaction after at least one, or none in `first` seconds."""
        started = time.monotonic()
        last, changed = 0.0, started
        while True:
            done = self.value("prometheus_tsdb_compactions_total")
            now = time.monotonic()
            if done != last:
                last, changed = done, now
            elif now - changed >= (quiet if last else first):
                return changed - started
            time.sleep(10)

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


# --- the queries -----------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    title: str
    ref: str
    expr: str
    instant: bool
    step: int = STEP_SECONDS  # seconds between a range query's points ($__interval)
    range_seconds: int = RANGE_SECONDS  # the dashboard's time range


def panels(
    path: Path = DASHBOARD, range_seconds: int = RANGE_SECONDS, **chosen: str
) -> list[Panel]:
    """Every query of the dashboard with Grafana's values at a range of `range_seconds`
    (`chosen` sets a variable, e.g. instance, to one value); a panel's minimum interval
    ("interval": "1m") raises $__interval, and so $__rate_interval and the step, as
    Grafana does, and so does its maximum of data points (the panel's width, 1,000
    points, where it sets none). Panels inside rows included."""
    dashboard = json.loads(path.read_text())
    out = []
    for panel in _walk(dashboard["panels"]):
        values = {**GRAFANA, **chosen}
        step = grafana_interval(range_seconds, panel.get("maxDataPoints", 1000))
        if "interval" in panel:
            step = max(step, int(_seconds(panel["interval"])))
        values.update(
            __range=f"{range_seconds // 3600}h",
            __range_s=str(range_seconds),
            __range_ms=str(range_seconds * 1000),
            __interval=f"{step}s",
            __interval_ms=str(step * 1000),
            __rate_interval=f"{max(step + SCRAPE_SECONDS, 4 * SCRAPE_SECONDS)}s",
        )
        for target in panel.get("targets", []):
            expr = _substitute(target["expr"], values)
            instant = bool(target.get("instant"))
            out.append(Panel(panel["title"], target["refId"], expr, instant, step, range_seconds))
    return out


def _walk(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for item in items:
        yield item
        yield from _walk(item.get("panels", []))


def grafana_interval(range_seconds: int, width: int = 1000) -> int:
    """Grafana's $__interval in seconds for a range on a panel `width` points wide: the
    range over the width, rounded as Grafana's rangeutil rounds it."""
    raw = range_seconds / width
    for below, rounded in ((17.5, 15), (25, 20), (45, 30), (90, 60), (210, 120), (450, 300)):
        if raw <= below:
            return rounded
    return 1800


def _substitute(expr: str, values: dict[str, str]) -> str:
    return re.sub(r"\$(\w+)", lambda m: values[m.group(1)], expr)


def rules() -> list[tuple[str, str, str, float]]:
    """(group, rule name, expression, group interval in seconds) of the shipped rules."""
    out = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            interval = _seconds(group.get("interval", f"{SCRAPE_SECONDS}s"))
            for rule in group["rules"]:
                name = rule.get("record") or rule.get("alert")
                out.append((group["name"], name, rule["expr"], interval))
    return out


def _seconds(duration: str) -> float:
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[duration[-1]]
    return float(duration[:-1]) * unit


# --- live ----------------------------------------------------------------------------


@dataclass
class Live:
    gpus: int
    head_series: float
    rss_gib: float
    groups: dict[str, tuple[float, float, float]]  # mean s, max s, interval s
    missed: float
    panels: list[tuple[Panel, float, int]]
    refresh_sum: float
    refresh_parallel: float
    # the chargeback dashboard at its 24-hour range (over the minutes scraped)
    chargeback: list[tuple[Panel, float, int]]
    chargeback_parallel: float

    @property
    def rule_share(self) -> float:
        """Rule evaluation time per second of wall time, all groups together."""
        return sum(mean / interval for mean, _max, interval in self.groups.values())


ROUNDS = 5  # a dashboard is timed this many times over, each query once a round


def refresh(
    prometheus: Prometheus, queries: list[Panel], at: float | None = None
) -> tuple[list[tuple[Panel, float, int]], float, float]:
    """Every query timed alone, their sum, and the seconds of one refresh that sends them
    all at once; at `at` (now unless given). Each query's figure is the median of
    ROUNDS rounds over the whole dashboard, not of repeats back to back: a rule group
    evaluating on the same cores slows the queries of one round, not every try of one
    query."""
    rounds = [
        [
            prometheus.timed(
                p.expr, p.instant, repeats=1, step=p.step, at=at, range_seconds=p.range_seconds
            )
            for p in queries
        ]
        for _ in range(ROUNDS)
    ]
    timed = [
        (p, statistics.median(r[i][0] for r in rounds), rounds[-1][i][1])
        for i, p in enumerate(queries)
    ]
    return timed, sum(t for _p, t, _n in timed), at_once(prometheus, queries, at)


def at_once(prometheus: Prometheus, queries: list[Panel], at: float | None = None) -> float:
    """Seconds until every query, sent at once as Grafana does, is answered (Prometheus
    runs up to 20 together)."""
    started = time.perf_counter()
    threads = [
        threading.Thread(
            target=prometheus.timed, args=(p.expr, p.instant, 1, p.step, at, p.range_seconds)
        )
        for p in queries
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def panels_at_once(
    prometheus: Prometheus, timed: list[tuple[Panel, float, int]], at: float | None = None
) -> dict[str, float]:
    """{panel title: seconds until its queries, sent at once, are all answered (median of
    ROUNDS rounds over the dashboard's panels)}: what a panel waits on Grafana 12 and
    later, whose Prometheus data source runs a panel's queries together
    (`prometheusRunQueriesInParallel`, on by default since 12.0; up to
    `concurrent_query_count`, 10). A panel of one query: its time alone."""
    queries: dict[str, list[Panel]] = {}
    for panel, _seconds, _n in timed:
        queries.setdefault(panel.title, []).append(panel)
    together = {title: mine for title, mine in queries.items() if len(mine) > 1}
    rounds = [
        {t: at_once(prometheus, mine, at) for t, mine in together.items()} for _ in range(ROUNDS)
    ]
    alone = _per_panel(timed)
    return {
        title: statistics.median(r[title] for r in rounds) if title in together else alone[title]
        for title in queries
    }


@contextmanager
def scraping(
    nodes: int, samples: list[tuple[str, str, float]], minutes: float, workdir: Path, label: str
) -> Iterator[tuple[Prometheus, int]]:
    """`nodes` synthetic nodes of `samples` scraped by a Prometheus with the shipped rules
    for `minutes` (progress on stderr, each line starting with `label`); yields it still
    running, with its peak RSS in bytes so far, and stops both after."""
    origin = time.time() - 3600
    server = NodeServer([Node(node_series(i, samples, origin), origin) for i in range(nodes)])
    prometheus = Prometheus(workdir, nodes, server.port, workdir / "data")
    rss_peak = 0
    try:
        deadline = time.monotonic() + minutes * 60
        while time.monotonic() < deadline:
            time.sleep(10)
            rss_peak = max(rss_peak, prometheus.rss_bytes())
            print(
                f"  {label}: {prometheus.value('prometheus_tsdb_head_series'):.0f} head series,"
                f" RSS {prometheus.rss_bytes() / 2**30:.2f} GiB",
                file=sys.stderr,
            )
        yield prometheus, rss_peak
    finally:
        prometheus.stop()
        server.stop()


def live(gpus: int, minutes: float, samples: list[tuple[str, str, float]], workdir: Path) -> Live:
    nodes = gpus // GPUS_PER_NODE
    with scraping(nodes, samples, minutes, workdir, f"{gpus} GPUs") as (prometheus, rss_peak):
        window = f"{int(min(minutes, 3) * 60)}s"
        groups = prometheus.rule_groups(window)
        missed = prometheus.value("sum(prometheus_rule_group_iterations_missed_total)")
        timed, total, parallel = refresh(prometheus, panels())
        charged = panels(CHARGEBACK_DASHBOARD, CHARGEBACK_RANGE_SECONDS)
        charged_timed, _charged_total, charged_parallel = refresh(prometheus, charged)
        head = prometheus.value("prometheus_tsdb_head_series")
        rss_peak = max(rss_peak, prometheus.rss_bytes())
    return Live(
        gpus,
        head,
        rss_peak / 2**30,
        groups,
        missed,
        timed,
        total,
        parallel,
        charged_timed,
        charged_parallel,
    )


@dataclass
class Racks:
    """The fleet dashboard on a fleet of GB200 NVL72 racks (issue 51's rack view)."""

    racks: int
    gpus: int
    head_series: float
    groups: dict[str, tuple[float, float, float]]  # mean s, max s, interval s
    missed: float
    panels: list[tuple[Panel, float, int]]  # each query one by one (median), series
    at_once: dict[str, float]  # {panel title: its queries at once}
    refresh_sum: float
    refresh_parallel: float


def racks(count: int, minutes: float, workdir: Path) -> Racks:
    """`count` racks of 18 GB200 compute trays (4 GPUs each, one node a tray) scraped
    with the shipped rules for `minutes`; then every fleet-dashboard query timed."""
    samples = template("gb200-nvl72")
    nodes = count * TRAYS_PER_RACK
    with scraping(nodes, samples, minutes, workdir, f"{count} racks") as (prometheus, _rss):
        groups = prometheus.rule_groups(f"{int(min(minutes, 3) * 60)}s")
        missed = prometheus.value("sum(prometheus_rule_group_iterations_missed_total)")
        timed, total, parallel = refresh(prometheus, panels())
        together = panels_at_once(prometheus, timed)
        head = prometheus.value("prometheus_tsdb_head_series")
    gpus = nodes * gpus_of(samples)
    return Racks(count, gpus, head, groups, missed, timed, together, total, parallel)


def racks_report(found: Racks, minutes: float) -> str:
    """The rack view's panels against the panel targets, and the whole dashboard."""
    rack_titles = [t for t in found.at_once if "rack" in t.lower() or "pod" in t.lower()]
    alone = _per_panel(found.panels)
    rows = {p.title: n for p, _s, n in found.panels}
    slowest = max(found.at_once, key=lambda t: found.at_once[t])
    slow_group, (_mean, peak, interval) = max(
        found.groups.items(), key=lambda kv: kv[1][1] / kv[1][2]
    )

    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    lines = [
        f"`make bench-fleet` on {date.today().isoformat()}, GB200 NVL72 racks: Debian's"
        f" Prometheus {_prometheus_version()}, {os.cpu_count()} cores shared with other work."
        f" {found.racks} racks of 18 compute trays ({found.gpus:,} GPUs, one node a tray:"
        " the exporter's `--simulate 4 --simulate.hardware gb200-nvl72` exposition with"
        " each tray's chassis serial, slot and tray, one node in"
        f" {FAULT_EVERY} with a GPU that logged Xid 79), scraped every 15 s with the shipped"
        f" rules for {minutes:g} minutes; every fleet-dashboard query at its 6 h range, median"
        f" of {ROUNDS} rounds.",
        "",
        "| panel | its queries at once (Grafana 12 and later) | one by one | rows | target | |",
        "|---|---|---|---|---|---|",
    ]
    for title in rack_titles:
        lines.append(
            f"| {title} | {found.at_once[title]:.2f} s | {alone[title]:.2f} s"
            f" | {rows[title]} | <= 1 s | {met(found.at_once[title] <= 1)} |"
        )
    lines += [
        f"| fleet dashboard, slowest panel: {slowest} | {found.at_once[slowest]:.2f} s"
        f" | {alone[slowest]:.2f} s | | <= 1 s | {met(found.at_once[slowest] <= 1)} |",
        f"| fleet dashboard, whole refresh | {found.refresh_parallel:.2f} s"
        f" | {found.refresh_sum:.2f} s | | <= 5 s | {met(found.refresh_parallel <= 5)} |",
        f"| slowest rule group, worst evaluation / interval: `{slow_group}` | {peak:.2f} s"
        f" / {interval:.0f} s | | | within 25% | {met(peak / interval <= 0.25)} |",
        f"| missed iterations | {found.missed:.0f} | | | none | {met(found.missed == 0)} |",
        f"| head series | {found.head_series / 1e3:,.0f} k | | | | |",
    ]
    return "\n".join(lines)


# --- history -------------------------------------------------------------------------


def recorded(node: int, samples: list[tuple[str, str, float]]) -> Iterator[tuple[str, float]]:
    """The dashboard rules' series for `node`, as the rules compute them from its values
    (constant over time here: the synthetic GPUs keep their activity): per GPU, then the
    per-node sums and counts of them."""
    per_gpu = dict(_recorded_per_gpu(node, samples))  # one value per series
    yield from per_gpu.items()
    by_family: dict[str, dict[int | None, float]] = {}
    for text, value in per_gpu.items():
        by_family.setdefault(text.split("{", 1)[0], {})[_gpu(text)] = value
    busy = by_family.get("instance_gpu:gpu_busy:ratio_rate1m", {})
    idle = by_family.get("instance_gpu:gpu_idle_holding_memory:bool_rate1m", {})
    sm = by_family.get("instance_gpu:gpu_sm_active:ratio_rate1m", {})
    tensor = by_family.get("instance_gpu:gpu_tensor_active:ratio_rate1m", {})
    series = node_series(node, samples)
    counts = {
        'instance:gpu_by_state:count_rate1m{%s,state="busy"}': sum(
            v >= 0.05 for v in busy.values()
        ),
        'instance:gpu_by_state:count_rate1m{%s,state="idle_allocated"}': sum(
            v == 1 for v in idle.values()
        ),
        'instance:gpu_by_state:count_rate1m{%s,state="free"}': sum(
            v < 0.05 and idle.get(g) != 1 for g, v in busy.items()
        ),
        "instance:gpu_lost:count{%s}": sum(s.base == 0 for s in series if s.name == "gpu_up"),
        "instance:gpu_busy:count_rate1m{%s}": len(busy),
        "instance:gpu_sm_active:count_rate1m{%s}": len(sm),
        "instance:gpu_busy_with_sm_active:count_rate1m{%s}": len(busy.keys() & sm.keys()),
        "instance:gpu_tensor_active:count_rate1m{%s}": len(tensor),
    }
    sums = {
        "instance:gpu_busy:sum_ratio_rate1m{%s}": sum(busy.values()),
        "instance:gpu_sm_active:sum_ratio_rate1m{%s}": sum(sm.values()),
        "instance:gpu_busy_with_sm_active:sum_ratio_rate1m{%s}": sum(
            busy[g] for g in sm if g in busy
        ),
        "instance:gpu_tensor_active:sum_ratio_rate1m{%s}": sum(tensor.values()),
        "instance:gpu_memory_used_bytes:sum{%s}": sum(
            s.base for s in series if s.name == "gpu_memory_used_bytes"
        ),
        "instance:gpu_memory_total_bytes:sum{%s}": sum(
            s.base for s in series if s.name == "gpu_memory_total_bytes"
        ),
    }
    node_labels = f'instance="node-{node:04d}:9872",job="gpu-exporter",gpu="all"'
    for text, count in counts.items():
        if count:  # `count by` has no series for none
            yield text % node_labels, float(count)
    for text, total in sums.items():
        yield text % node_labels, total
    yield from _recorded_rule_inputs(node, series)


def _recorded_rule_inputs(node: int, series: list[Series]) -> Iterator[tuple[str, float]]:
    """The recorded series that rules read over a window (an hour of the wasted ratio
    and the headroom, 30 minutes of the MIG process count), as gpu-recording.yml
    computes them from the node's values."""
    instance = f'instance="node-{node:04d}:9872",job="gpu-exporter"'
    busy: dict[str, float] = {}  # inner labels -> busy ratio (the busy counter first)
    for name in ("gpu_busy_seconds_total", "gpu_graphics_engine_active_seconds_total"):
        for s in series:
            if s.name == name:
                busy.setdefault(s.labels[1:-1], s.slope)
    by_name: dict[str, dict[str, float]] = {}
    for s in series:
        by_name.setdefault(s.name, {})[s.labels[1:-1]] = s.base
    processes = by_name.get("gpu_processes", {})
    for inner, ratio in busy.items():
        if inner in processes:
            wasted = (1 - ratio) * float(processes[inner] > 0)
            yield f"instance_gpu:gpu_wasted:ratio_rate5m{{{instance},{inner}}}", wasted
    total = by_name.get("gpu_memory_total_bytes", {})
    for inner, free in by_name.get("gpu_memory_free_bytes", {}).items():
        if total.get(inner):
            ratio = free / total[inner]
            yield f"instance_gpu:gpu_memory_headroom:ratio{{{instance},{inner}}}", ratio
    holders = [s.labels for s in series if s.name == "gpu_process_memory_used_bytes"]
    for inner in by_name.get("gpu_mig_memory_total_bytes", {}):
        gpu_instance = re.search(r'gpu_instance="([^"]*)"', inner)
        key = f'gpu_instance="{gpu_instance[1] if gpu_instance else ""}"'
        gpu = f'gpu="{_gpu("{" + inner + "}")}"'
        count = sum(key in h and gpu in h for h in holders)
        yield f"instance_gpu_instance:gpu_mig_processes:count{{{instance},{inner}}}", float(count)


def _recorded_per_gpu(
    node: int, samples: list[tuple[str, str, float]]
) -> Iterator[tuple[str, float]]:
    instance = f'instance="node-{node:04d}:9872",job="gpu-exporter"'
    memory: dict[int | None, dict[str, float]] = {}
    for name, labels, value in samples:
        if name in ("gpu_memory_used_bytes", "gpu_memory_total_bytes"):
            memory.setdefault(_gpu(labels), {})[name] = value
    for name, labels, value in samples:
        gpu = _gpu(labels)
        inner = labels[1:-1]
        if name == "gpu_busy_seconds_total" or name == "gpu_graphics_engine_active_seconds_total":
            busy = activity(node, gpu or 0)
            yield f"instance_gpu:gpu_busy:ratio_rate1m{{{instance},{inner}}}", busy
            held = memory.get(gpu, {})
            ratio = held.get("gpu_memory_used_bytes", 0) / held.get("gpu_memory_total_bytes", 1)
            idle = float(busy < 0.05) * float(ratio > 0.01)
            yield f"instance_gpu:gpu_idle_holding_memory:bool_rate1m{{{instance},{inner}}}", idle
            # the 5-minute roll-ups: five 1-minute points of 60 s each, and their average
            yield f"{IDLE_ROLLUP}{{{instance},{inner}}}", idle * resolution(IDLE_ROLLUP)
            yield f"instance_gpu:gpu_busy:ratio_avg5m{{{instance},{inner}}}", busy
        elif name == "gpu_throttle_active" and value == 1:
            yield f"instance_gpu:gpu_throttle_active:active{{{instance},{inner}}}", 1.0
        elif name == "gpu_process_memory_used_bytes":
            owner = {
                k: v
                for k, v in re.findall(r'(\w+)="([^"]*)"', inner)
                if k in ("gpu", "user", "container_id", "pod_uid", "slurm_job_id") and v
            }
            busy = activity(node, gpu or 0)
            labels_text = ",".join(f'{k}="{v}"' for k, v in owner.items())
            owner_labels = f"{{{instance},{labels_text}}}"
            yield (
                f"instance_gpu_owner:gpu_idle_holding_memory:bool_rate1m{owner_labels}",
                float(busy < 0.05),
            )
            yield (
                f"instance_gpu_owner:gpu_idle_holding_memory_seconds:sum5m{owner_labels}",
                float(busy < 0.05) * resolution(IDLE_ROLLUP),
            )
    for s in node_series(node, samples):  # GPM's activity: the counters' rates
        if s.name == "gpu_sm_active_seconds_total":
            yield f"instance_gpu:gpu_sm_active:ratio_rate1m{{{instance},{s.labels[1:-1]}}}", s.slope
        elif s.name == "gpu_pipe_active_seconds_total" and 'pipe="tensor"' in s.labels:
            inner = re.sub(r',?pipe="tensor"', "", s.labels[1:-1]).strip(",")
            yield f"instance_gpu:gpu_tensor_active:ratio_rate1m{{{instance},{inner}}}", s.slope


def history_families(
    nodes: int, samples: list[tuple[str, str, float]], origin: float
) -> dict[str, list[tuple[str, float, float]]]:
    """{family: [(name and labels, value at the origin, slope per second)]} of `nodes`
    nodes: the exposition's series and the dashboard rules' series."""
    families: dict[str, dict[str, tuple[float, float]]] = {}
    for node in range(nodes):
        instance = f'instance="node-{node:04d}:9872",job="gpu-exporter"'
        for s in node_series(node, samples, origin):
            inner = s.labels[1:-1]
            text = f"{s.name}{{{instance}{',' + inner if inner else ''}}}"
            families.setdefault(s.name, {})[text] = (s.base, s.slope)
            if s.name == "gpu_ecc_errors_total":  # its copy once a minute (a counter)
                copy = "instance_gpu:gpu_ecc_errors_total:sampled1m"
                families.setdefault(copy, {})[copy + text[len(s.name) :]] = (s.base, s.slope)
        for text, value in recorded(node, samples):  # one series per label set
            families.setdefault(text.split("{", 1)[0], {})[text] = (value, 0.0)
    return {name: [(t, b, sl) for t, (b, sl) in m.items()] for name, m in families.items()}


def resolution(family: str) -> int:
    """Seconds between two samples of `family`: the scrape interval for the exposition's,
    its group's interval for a recording rule's (a minute; five for the roll-ups)."""
    if ":" not in family:
        return SCRAPE_SECONDS
    return int(_recording_intervals().get(family, RULE_SECONDS))


@functools.cache
def _recording_intervals() -> dict[str, float]:
    return {name: interval for _g, name, _e, interval in rules() if ":" in name}


def write_history(
    path: Path,
    families: dict[str, list[tuple[str, float, float]]],
    start: int,
    end: int,
    origin: float,
    since: dict[str, int] | None = None,
    first_of: dict[str, int] | None = None,
) -> int:
    """OpenMetrics text of every series from `start` to `end` (seconds; a family in
    `since` from that time on, a series in `first_of` from its own time on), at its
    resolution; returns samples."""
    count = 0
    with path.open("w") as out:
        for name, members in families.items():
            step = resolution(name)
            first = max(start, (since or {}).get(name, start))
            steps = range(-(-first // step) * step, end, step)
            typed = False
            for text, base, slope in members:
                own = steps
                if first_of and text in first_of:
                    own = range(-(-max(start, first_of[text]) // step) * step, end, step)
                if not own:
                    continue
                if not typed:  # OpenMetrics names a counter without _total
                    kind = "counter" if name.endswith("_total") else "gauge"
                    out.write(f"# TYPE {name.removesuffix('_total')} {kind}\n")
                    typed = True
                out.writelines(f"{text} {base + slope * (t - origin)!r} {t}\n" for t in own)
                count += len(own)
        out.write("# EOF\n")
    return count


def backfill(
    data: Path,
    workdir: Path,
    families: dict[str, list[tuple[str, float, float]]],
    start: int,
    end: int,
    origin: float,
    since: dict[str, int] | None = None,
    first_of: dict[str, int] | None = None,
) -> int:
    """Blocks in `data` of `families` from `start` to `end` (see write_history), with
    promtool; returns samples. One file per 2-hour block: promtool reads its whole input
    once per block it writes."""
    openmetrics = workdir / "history.om"
    command = ["nice", "-n", "10", "promtool", "tsdb", "create-blocks-from", "openmetrics"]
    count = 0
    block = 2 * 3600
    for first in range(start // block * block, end, block):
        written = write_history(
            openmetrics,
            families,
            max(first, start),
            min(first + block, end),
            origin,
            since,
            first_of,
        )
        if not written:
            continue
        count += written
        created = subprocess.run(
            [*command, "--quiet", str(openmetrics), str(data)], capture_output=True, text=True
        )
        if created.returncode != 0:
            raise RuntimeError(f"promtool tsdb create-blocks-from: {created.stderr[-2000:]}")
    openmetrics.unlink(missing_ok=True)
    return count


@dataclass
class History:
    gpus: int
    samples: int
    rule_seconds: dict[str, float]  # group -> seconds per evaluation (sum of its rules)
    rule_costs: list[tuple[str, str, float]]  # group, rule, seconds
    panels: list[tuple[Panel, float, int]]
    groups_reported: dict[str, tuple[float, float, float]]
    fixed: float  # seconds of a query that reads nothing (vector(1)): HTTP, parsing

    def scaled(self, seconds: float, gpus: int) -> float:
        """`seconds` measured here, at `gpus`: what reads series grows with the GPUs."""
        return self.fixed + max(seconds - self.fixed, 0.0) * gpus / self.gpus


def history(nodes: int, samples: list[tuple[str, str, float]], workdir: Path) -> History:
    end = int(time.time()) // SCRAPE_SECONDS * SCRAPE_SECONDS
    origin = end - HISTORY_HOURS * 3600 - 3600
    families = history_families(nodes, samples, origin)
    data = workdir / "data"
    count = backfill(data, workdir, families, end - HISTORY_HOURS * 3600, end, origin)
    print(f"  history: {count / 1e6:.1f} M samples backfilled", file=sys.stderr)
    server = NodeServer([Node(node_series(i, samples, origin), origin) for i in range(nodes)])
    prometheus = Prometheus(workdir, nodes, server.port, data)
    try:
        time.sleep(150)  # every group evaluated a few times (the 1-minute ones twice)
        costs = []
        for group, name, expr, _interval in rules():
            seconds, _n = prometheus.timed(expr, instant=True)
            costs.append((group, name, seconds))
        per_group: dict[str, float] = {}
        for group, _name, seconds in costs:
            per_group[group] = per_group.get(group, 0.0) + seconds
        reported = prometheus.rule_groups("2m")
        timed, _total, _parallel = refresh(prometheus, panels())
        fixed = min(
            prometheus.timed("vector(1)", instant=True, repeats=9)[0],
            prometheus.timed("vector(1)", instant=False, repeats=9)[0],
        )
    finally:
        prometheus.stop()
        server.stop()
    return History(nodes * GPUS_PER_NODE, count, per_group, costs, timed, reported, fixed)


# --- the fleet dashboard with its range of history ----------------------------------

LOOKBACK_SECONDS = 300  # Prometheus' lookback: an instant selector reads 5 minutes back
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
WINDOW = re.compile(r"\[(\d+[smhd])[:\]]")


def dashboard_reads(
    queries: list[Panel], known: set[str] | None = None
) -> tuple[dict[str, int], int]:
    """{family: seconds before "now" that the queries read of it} and the longest of
    them: the range and its windows for a family a range query or a `$__range` window
    reads; the lookback and its window for one only read at the instant. A family is a
    name followed by `{`, or with `known`, any of those names the query mentions (the
    rules' bare selectors)."""
    reads: dict[str, int] = {}
    for query in queries:
        window = max((int(_seconds(w)) for w in WINDOW.findall(query.expr)), default=0)
        span = window + LOOKBACK_SECONDS + (0 if query.instant else query.range_seconds)
        if known is None:
            found = set(SELECTOR.findall(query.expr))
        else:
            found = set(NAME.findall(query.expr)) & known
        for family in found:
            reads[family] = max(reads.get(family, 0), span)
    return reads, max(reads.values())


@dataclass
class DashboardHistory:
    gpus: int
    hours: float  # history behind "now"
    samples: int
    backfill_seconds: float
    panels: list[tuple[Panel, float, int]]
    refresh_sum: float  # seconds, every query one by one (each the median of ROUNDS)
    refresh_parallel: float  # seconds, all at once, median of 3
    rss_gib: float


def dashboard_history(
    nodes: int, samples: list[tuple[str, str, float]], workdir: Path
) -> DashboardHistory:
    """The fleet dashboard at its default range with the history it reads behind it:
    `nodes` nodes' series of the families its queries read (the exposition's every 15 s,
    the recording rules' every minute), each over what the dashboard reads of it, rounded
    up to the hour; then every query at the last sample's time, on a Prometheus that
    neither scrapes nor evaluates rules."""
    queries = panels()
    reads, longest = dashboard_reads(queries)
    hours = math.ceil(longest / 3600)
    end = int(time.time()) // RULE_SECONDS * RULE_SECONDS
    start = end - hours * 3600
    since = {family: end - math.ceil(span / 3600) * 3600 for family, span in reads.items()}
    origin = start - 3600
    families = {
        name: members
        for name, members in history_families(nodes, samples, origin).items()
        if name in reads
    }
    data = workdir / "data"
    started = time.monotonic()
    count = backfill(data, workdir, families, start, end, origin, since)
    took = time.monotonic() - started
    print(
        f"  dashboard history: {count / 1e6:.1f} M samples of {len(families)} families"
        f" backfilled in {took:.0f} s",
        file=sys.stderr,
    )
    prometheus = Prometheus(workdir, 0, 0, data, rule_files=[])
    try:
        at = float(end - RULE_SECONDS)  # the last minute every family has a sample in
        timed, total, _parallel = refresh(prometheus, queries, at)
        parallel = statistics.median(at_once(prometheus, queries, at) for _ in range(3))
        rss = prometheus.rss_bytes()
    finally:
        prometheus.stop()
    return DashboardHistory(
        nodes * GPUS_PER_NODE, hours, count, took, timed, total, parallel, rss / 2**30
    )


# --- a day of history under the rules and both dashboards ----------------------------


VIEWED = 3  # the node the node dashboard shows: the first with a faulty GPU
IDLE_POINTS = "instance_gpu:gpu_idle_holding_memory:bool_rate1m"
IDLE_ROLLUP = "instance_gpu:gpu_idle_holding_memory_seconds:sum5m"


def node_name(node: int) -> str:
    return f"node-{node:04d}:9872"


def rule_queries() -> list[Panel]:
    """Every rule's expression as an instant query (what one evaluation reads)."""
    return [Panel(group, name, expr, True) for group, name, expr, _i in rules()]


CHARGEBACK_GROUPS = (
    "gpu-exporter.recording.chargeback",
    "gpu-exporter.recording.chargeback-idle",
    "gpu-exporter.recording.chargeback-rollup",
)


def chargeback_rule_files(workdir: Path) -> list[Path]:
    """A copy of the shipped recording rules with only the chargeback groups and the
    groups that record what they read, the 15-minute idle-power group every minute (so
    that its series is there within minutes, not a quarter of an hour)."""
    groups = [
        group
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        if any("record" in rule for rule in group["rules"])
    ]
    ours = [g for g in groups if g["name"] in CHARGEBACK_GROUPS]
    read = {n for g in ours for rule in g["rules"] for n in NAME.findall(rule["expr"])}
    keep = [
        {**g, "interval": "1m"}
        for g in groups
        if g["name"] in CHARGEBACK_GROUPS or any(r.get("record") in read for r in g["rules"])
    ]
    path = workdir / "chargeback-rules.yml"
    path.write_text(yaml.safe_dump({"groups": keep}, sort_keys=False))
    return [path]


def chargeback_recorded(
    nodes: int, samples: list[tuple[str, str, float]], workdir: Path, timeout: float = 600
) -> dict[str, list[tuple[str, float, float]]]:
    """{family: [(name and labels, value, 0)]} of every series the chargeback groups
    record for `nodes` nodes, and of the recorded series they read, as the groups wrote
    them: a Prometheus with those groups (chargeback_rule_files) scrapes the nodes until
    every GPU's energy rows are there by usage (split by idle power, or by allocation where
    it has none yet; then one more evaluation), and gives the values. The synthetic values
    hold still, so do these."""
    workdir.mkdir(parents=True, exist_ok=True)
    files = chargeback_rule_files(workdir)
    families = sorted(
        {r["record"] for g in yaml.safe_load(files[0].read_text())["groups"] for r in g["rules"]}
        & ({n for g, n, _e, _i in rules() if g in CHARGEBACK_GROUPS} | _chargeback_inputs())
    )
    origin = time.time() - 3600
    server = NodeServer([Node(node_series(i, samples, origin), origin) for i in range(nodes)])
    prometheus = Prometheus(workdir, nodes, server.port, workdir / "data", rule_files=files)
    # every GPU's energy rows by usage: split by its idle power (measured, or its
    # model's), or by allocation where it has none (a synthetic GPU that never idles)
    ready = (
        "count(instance_gpu:gpu_energy_joules:sum1m) == count(gpu_up == 1)"
        " and count(count by (instance, gpu) ("
        'instance_gpu_owner:gpu_energy_joules:sum1m{method="usage"}))'
        " == count(gpu_up == 1)"
    )
    out: dict[str, list[tuple[str, float, float]]] = {}
    rows: dict[str, list[tuple[dict[str, str], float]]] = {}  # family -> (labels, value)
    try:
        deadline = time.monotonic() + timeout
        while math.isnan(prometheus.value(ready)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the chargeback rules gave no energy rows in {timeout:.0f} s")
            time.sleep(10)
        time.sleep(RULE_SECONDS + 5)  # one more evaluation: every row from complete inputs
        for family in families:
            for r in prometheus.api("query", query=family)["result"]:
                labels = {k: v for k, v in r["metric"].items() if k != "__name__"}
                rows.setdefault(family, []).append((labels, float(r["value"][1])))
    finally:
        prometheus.stop()
        server.stop()
    for family, found in rows.items():
        out[family] = [(_series(family, labels), value, 0.0) for labels, value in found]
    for rollup, source in ROLLED_UP.items():  # the 5-minute roll-ups: five minutes' worth,
        per_owner: dict[str, float] = {}  # per node and owner (or per node)
        shape = ROLLUP_SHAPES[rollup]
        for labels, value in rows.get(source, []):
            if not shape.takes(labels):
                continue
            if shape.labels is None:
                kept = {k: v for k, v in labels.items() if k not in ROLLED_UP_DROPS}
            else:
                kept = {k: v for k, v in labels.items() if k in shape.labels}
            text = _series(rollup, {**kept, **shape.own_labels})
            per_owner[text] = per_owner.get(text, 0.0) + value * resolution(rollup) / RULE_SECONDS
        if per_owner:
            out[rollup] = [(text, value, 0.0) for text, value in per_owner.items()]
    print(
        f"  chargeback: {sum(map(len, out.values()))} recorded series of {len(out)} families",
        file=sys.stderr,
    )
    return out


def _series(family: str, labels: dict[str, str]) -> str:
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{family}{{{inner}}}"


ROLLED_UP_DROPS = ("gpu", "uuid", "gpu_instance")  # the GPU's labels the roll-ups leave out
_ROLLUP = re.compile(
    r"sum (without|by) \(([^)]*)\) \(\s*sum_over_time\((\S+?:sum1m)(\{[^}]*\})?\[5m\] offset 30s\)"
)
_MATCHER = re.compile(r'(\w+)(!?=)"([^"]*)"')


@dataclasses.dataclass(frozen=True)
class RollupShape:
    """What a roll-up keeps of the 1-minute rows it adds up."""

    source: str  # the 1-minute rows' family
    labels: frozenset[str] | None  # its labels; None: every label of its rows but the GPU's
    matchers: tuple[tuple[str, str, str], ...]  # (label, "=" or "!=", value) its rows meet
    own_labels: dict[str, str]  # those its rule sets (the per-node totals' `gpu="all"`)

    def takes(self, labels: dict[str, str]) -> bool:
        """Whether a row with `labels` is one the roll-up adds up."""
        return all(
            (labels.get(name, "") == value) == (op == "=") for name, op, value in self.matchers
        )

    @property
    def selector(self) -> str:
        """Its matchers as PromQL, "" for none."""
        return ", ".join(f'{name}{op}"{value}"' for name, op, value in self.matchers)


def _rollup_shapes() -> dict[str, RollupShape]:
    """Each rule of the chargeback's roll-up group, by the series it records."""
    out = {}
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            if group["name"] != "gpu-exporter.recording.chargeback-rollup":
                continue
            for rule in group["rules"]:
                found = _ROLLUP.search(rule["expr"])
                if found is None:
                    continue
                by = frozenset(label.strip() for label in found[2].split(","))
                out[rule["record"]] = RollupShape(
                    found[3],
                    by if found[1] == "by" else None,
                    tuple(_MATCHER.findall(found[4] or "")),
                    rule.get("labels", {}),
                )
    return out


ROLLUP_SHAPES = _rollup_shapes()
ROLLED_UP = {name: shape.source for name, shape in ROLLUP_SHAPES.items()}
"""5-minute roll-up (per node and owner, or per node) -> the 1-minute rows it adds up."""


def _minute_selector(rollup: str) -> str:
    """The 1-minute rows' selector that `rollup` adds up, its matchers included, ready
    for the rest of a `{...}` selector to follow."""
    shape = ROLLUP_SHAPES[rollup]
    return shape.source + "{" + (f"{shape.selector}, " if shape.matchers else "")


def minute_rows(queries: list[Panel]) -> list[Panel]:
    """`queries` on the chargeback's 1-minute rows in place of their 5-minute roll-ups
    (what the Chargeback dashboard read before it read the roll-ups)."""
    out = []
    for query in queries:
        expr = query.expr
        for rollup in ROLLED_UP:
            expr = expr.replace(rollup + "{", _minute_selector(rollup))
        out.append(dataclasses.replace(query, expr=expr))
    return out


def _chargeback_inputs() -> set[str]:
    """The recorded families the chargeback groups read (the idle minutes' power)."""
    recorded_names = {n for _g, n, _e, _i in rules() if ":" in n}
    ours = {n for g, n, _e, _i in rules() if g in CHARGEBACK_GROUPS}
    read = {n for g, _n, e, _i in rules() if g in CHARGEBACK_GROUPS for n in NAME.findall(e)}
    return (read & recorded_names) - ours


def what_is_read(
    nodes: int,
    viewed_nodes: set[int],
    samples: list[tuple[str, str, float]],
    end: int,
    origin: float,
    recorded_too: dict[str, list[tuple[str, float, float]]] | None = None,
) -> tuple[dict[str, list[tuple[str, float, float]]], dict[str, int], dict[str, int]]:
    """The history to backfill before `end` (see write_history): (families, when each
    family starts, when each series of `viewed_nodes` starts). Every family the rules,
    the fleet dashboard or the chargeback dashboard (at 24 h) read, over what they read
    of it, rounded up to the hour, for every node; every family the node dashboard (at
    24 h) reads, over what it reads, for `viewed_nodes` only (it shows one node). A
    family counts as read over the longest window of an expression that names it.
    `recorded_too` adds recorded families that history_families does not compute (the
    chargeback groups': chargeback_recorded)."""
    known = {name for name, _l, _v in samples} | {n for _g, n, _e, _i in rules() if ":" in n}
    known |= {"gpu_xid_errors_total", "gpu_xid_error_timestamp_seconds"}
    read = rule_queries() + panels(DASHBOARD, DAY_SECONDS)
    charge_q = panels(CHARGEBACK_DASHBOARD, DAY_SECONDS)
    every, _ = dashboard_reads(read + charge_q + minute_rows(charge_q), known)
    node_q = panels(NODE_DASHBOARD, DAY_SECONDS, instance=node_name(VIEWED))
    viewed, _ = dashboard_reads(node_q, known)

    def first(span: int) -> int:
        return end - math.ceil(span / 3600) * 3600

    families: dict[str, list[tuple[str, float, float]]] = {}
    since = {family: first(span) for family, span in every.items()}
    first_of: dict[str, int] = {}
    names = [f'instance="{node_name(i)}"' for i in viewed_nodes]
    computed = history_families(nodes, samples, origin)
    for name, members in {**computed, **(recorded_too or {})}.items():
        for text, base, slope in members:
            if name in viewed and any(n in text for n in names):
                first_of[text] = min(since.get(name, end), first(viewed[name]))
            elif name not in every:
                continue
            families.setdefault(name, []).append((text, base, slope))
    return families, since, first_of


@dataclass
class Day:
    gpus: int
    view_nodes: int  # nodes with a day of every family the node dashboard reads
    minutes: float  # of scraping and rule evaluation before the measurement
    samples: int  # backfilled
    families: int  # backfilled
    backfill_seconds: float
    groups: dict[str, tuple[float, float, float]]  # mean s, max s, interval s
    window: str  # over which the group figures are taken
    missed: float
    evaluations: float  # of every group, during the run
    fleet: list[tuple[Panel, float, int]]
    fleet_sum: float
    fleet_parallel: float
    node: list[tuple[Panel, float, int]]
    node_sum: float
    node_parallel: float
    chargeback: list[tuple[Panel, float, int]]
    chargeback_sum: float
    chargeback_parallel: float
    minute: list[tuple[Panel, float, int]]  # the chargeback dashboard on the 1-minute rows
    minute_sum: float
    minute_parallel: float
    # {panel title: its queries at once}, per dashboard: fleet, node, chargeback, 1-minute rows
    at_once_panels: tuple[dict[str, float], ...]
    # group -> seconds of its rules as instant queries, one by one, after the run (a
    # 15-minute group may not have evaluated in the minutes scraped)
    chargeback_rules: dict[str, float]
    head_series: float
    rss_gib: float  # after the dashboards
    rss_peak_gib: float
    blocks_bytes: int  # the backfilled blocks on disk
    samples_per_day: float  # appended per day at this fleet size (scrapes and rules)
    continuity: list[tuple[str, int, int, int]]  # recorded family, backfilled, live, both
    load: str  # the machine's load average before the run
    rollup_hours: tuple[float, float]  # idle-allocated GPU-hours in 24 h: roll-up, 1-minute
    charged_hours: tuple[float, float]  # allocated GPU-hours in 24 h: roll-up, 1-minute rows
    compaction_seconds: float  # until the compactor settled, before the measurement
    layout: dict[float, int]  # hours a block spans: how many, once compacted


def blocks_by_hours(data: Path) -> dict[float, int]:
    """{hours a block spans: how many blocks} of the TSDB in `data`."""
    spans: dict[float, int] = {}
    for meta in data.glob("*/meta.json"):
        block = json.loads(meta.read_text())
        hours = round((block["maxTime"] - block["minTime"]) / 3_600_000, 1)
        spans[hours] = spans.get(hours, 0) + 1
    return dict(sorted(spans.items(), reverse=True))


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def day(
    nodes: int,
    view_nodes: int,
    minutes: float,
    samples: list[tuple[str, str, float]],
    workdir: Path,
) -> Day:
    """`nodes` nodes with the history the rules and both dashboards read at a 24-hour
    range: every family read over a window or a range gets what it reads (rounded up to
    the hour: the fleet dashboard's over 24 h, GPUMissing's day of gpu_exporter_gpus,
    the rules' 30 minutes of most families), and the first `view_nodes` nodes a day of
    every family the node dashboard reads (it shows one node). Then a Prometheus with
    the rules scrapes every node on for `minutes`, and both dashboards are queried at
    24 hours, the node dashboard on node VIEWED (one of the first `view_nodes`)."""
    load = Path("/proc/loadavg").read_text().split()[:3]
    fleet_q = panels(DASHBOARD, DAY_SECONDS)
    node_q = panels(NODE_DASHBOARD, DAY_SECONDS, instance=node_name(VIEWED))
    charge_q = panels(CHARGEBACK_DASHBOARD, DAY_SECONDS)
    charged = chargeback_recorded(nodes, samples, workdir / "chargeback")
    shutil.rmtree(workdir / "chargeback")
    end = int(time.time()) // RULE_SECONDS * RULE_SECONDS
    origin = end - DAY_SECONDS - 3600
    families, since, first_of = what_is_read(
        nodes, set(range(view_nodes)), samples, end, origin, charged
    )
    data = workdir / "data"
    started = time.monotonic()
    start = min([*since.values(), *first_of.values()])
    count = backfill(data, workdir, families, start, end, origin, since, first_of)
    print(f"  day: {count / 1e6:.0f} M samples to {end}", file=sys.stderr)
    # the minutes that backfilling took, so that no window has a hole
    gap_end = int(time.time()) // SCRAPE_SECONDS * SCRAPE_SECONDS
    count += backfill(data, workdir, families, end, gap_end, origin)
    took = time.monotonic() - started
    blocks = du(data)
    print(
        f"  day: {count / 1e6:.0f} M samples of {len(families)} families backfilled in"
        f" {took / 60:.0f} min, {blocks / 2**30:.2f} GiB",
        file=sys.stderr,
    )
    server = NodeServer([Node(node_series(i, samples, origin), origin) for i in range(nodes)])
    prometheus = Prometheus(workdir, nodes, server.port, data, retention="")
    rss_peak = 0
    try:
        compaction = prometheus.settle_compaction()
        layout = blocks_by_hours(data)
        print(f"  day: compacted in {compaction / 60:.0f} min: {layout}", file=sys.stderr)
        deadline = time.monotonic() + minutes * 60
        while time.monotonic() < deadline:
            time.sleep(15)
            rss_peak = max(rss_peak, prometheus.rss_bytes())
        settled = int(max(min(minutes - 3, 10), 2) * 60)  # the first minutes warm up
        window = f"{settled}s"
        groups = prometheus.rule_groups(window)
        missed = prometheus.value("sum(prometheus_rule_group_iterations_missed_total)")
        evaluations = prometheus.value("sum(prometheus_rule_group_iterations_total)")
        per_day = 86400 * prometheus.value(
            f"rate(prometheus_tsdb_head_samples_appended_total[{window}])"
        )
        continuity = []
        for family in sorted(f for f in families if ":" in f):
            before = f"{family} @ {end - 120}"
            both = f"count_over_time({family}[{int(time.time()) - end + 180}s])"
            continuity.append(
                (
                    family,
                    prometheus.count(before),
                    prometheus.count(family),
                    prometheus.count(both),
                )
            )
        rollup_hours = (
            prometheus.value(f"sum(sum_over_time({IDLE_ROLLUP}[24h])) / 3600"),
            prometheus.value(f"sum(sum_over_time({IDLE_POINTS}[24h])) / 60"),
        )
        rolled_up = "instance_owner:gpu_allocated_seconds:sum5m"
        charged_hours = (
            prometheus.value(f"sum(sum_over_time({rolled_up}[24h])) / 3600"),
            prometheus.value(f"sum(sum_over_time({ROLLED_UP[rolled_up]}[24h])) / 3600"),
        )
        fleet, fleet_sum, _p = refresh(prometheus, fleet_q)
        fleet_parallel = statistics.median(at_once(prometheus, fleet_q) for _ in range(3))
        node, node_sum, _p = refresh(prometheus, node_q)
        node_parallel = statistics.median(at_once(prometheus, node_q) for _ in range(3))
        charge, charge_sum, _p = refresh(prometheus, charge_q)
        charge_parallel = statistics.median(at_once(prometheus, charge_q) for _ in range(3))
        minute, minute_sum, _p = refresh(prometheus, minute_rows(charge_q))
        minute_parallel = statistics.median(
            at_once(prometheus, minute_rows(charge_q)) for _ in range(3)
        )
        at_once_panels = tuple(
            panels_at_once(prometheus, timed) for timed in (fleet, node, charge, minute)
        )
        charge_rules: dict[str, float] = {}
        for group, _name, expr, _interval in rules():
            if group in CHARGEBACK_GROUPS:
                seconds, _n = prometheus.timed(expr, instant=True)
                charge_rules[group] = charge_rules.get(group, 0.0) + seconds
        head = prometheus.value("prometheus_tsdb_head_series")
        rss = prometheus.rss_bytes()
    finally:
        prometheus.stop()
        server.stop()
    return Day(
        nodes * GPUS_PER_NODE,
        view_nodes,
        minutes,
        count,
        len(families),
        took,
        groups,
        window,
        missed,
        evaluations,
        fleet,
        fleet_sum,
        fleet_parallel,
        node,
        node_sum,
        node_parallel,
        charge,
        charge_sum,
        charge_parallel,
        minute,
        minute_sum,
        minute_parallel,
        at_once_panels,
        charge_rules,
        head,
        rss / 2**30,
        max(rss, rss_peak) / 2**30,
        blocks,
        per_day,
        continuity,
        " ".join(load),
        rollup_hours,
        charged_hours,
        compaction,
        layout,
    )


def _per_panel(timed: list[tuple[Panel, float, int]]) -> dict[str, float]:
    """{panel title: its queries' seconds, one by one}"""
    out: dict[str, float] = {}
    for panel, seconds, _n in timed:
        out[panel.title] = out.get(panel.title, 0.0) + seconds
    return out


def day_report(found: Day) -> str:
    """The day's tables: rule groups against their interval, both dashboards at 24 h."""
    slowest = max(found.groups.items(), key=lambda kv: kv[1][1] / kv[1][2])
    worst = slowest[1][1] / slowest[1][2]
    fleet_panels, node_panels = _per_panel(found.fleet), _per_panel(found.node)
    charge_panels = _per_panel(found.chargeback)
    minute_panels = _per_panel(found.minute)
    charge_groups = {g: v for g, v in found.groups.items() if g in CHARGEBACK_GROUPS}
    charge_worst = max(
        (peak / interval for _m, peak, interval in charge_groups.values()), default=0
    )
    charge_rules = max(
        (s / found.groups[g][2] for g, s in found.chargeback_rules.items() if g in found.groups),
        default=0,
    )
    per_sample = found.blocks_bytes / max(found.samples, 1)
    thousands = found.gpus / 1000
    broken = [c for c in found.continuity if c[3] > max(c[1], c[2])]
    layout = ", ".join(
        f"{count} block{'s' if count > 1 else ''} of {hours:g} h"
        for hours, count in found.layout.items()
    )

    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    fleet_at_once, node_at_once, charge_at_once, minute_at_once = found.at_once_panels

    def slowest_row(name: str, alone: dict[str, float], together: dict[str, float]) -> str:
        """The slowest panel as Grafana 12 and later wait on it (its queries at once), and
        the slowest as Grafana 11 and earlier did (one by one); judged on the first."""
        now = max(together, key=lambda t: together[t])
        before = max(alone, key=lambda t: alone[t])
        return (
            f"| {name}, slowest panel: its queries at once (Grafana 12 and later) / one by"
            f" one (Grafana 11) | {now} {together[now]:.2f} s / {before} {alone[before]:.2f} s"
            f" | <= 1 s | {met(together[now] <= 1)}"
            f"{'' if alone[before] <= 1 else ' (one by one: missed)'} |"
        )

    lines = [
        f"`make bench-fleet` on {date.today().isoformat()}, a day of history: Debian's"
        f" Prometheus {_prometheus_version()}, {os.cpu_count()} cores shared with other"
        f" work (load average {found.load} when it began). {found.gpus:,} GPUs"
        f" ({found.gpus // GPUS_PER_NODE} nodes, one in {FAULT_EVERY} with a GPU that logged"
        " Xid 79 and needs a reboot, every other such node's GPU also out of the NVLink"
        " fabric); every family the rules, the fleet and the chargeback dashboards read,"
        " over what they read of it at a 24-hour range, rounded up to the hour (the"
        " chargeback groups' recorded series as they wrote them on a first Prometheus"
        " that scraped the same nodes), and for"
        f" {found.view_nodes} node(s) a day of every family the node dashboard reads:"
        f" {found.samples / 1e6:,.0f} M samples of {found.families} families in"
        f" {found.backfill_seconds / 60:.0f} minutes, {found.blocks_bytes / 2**30:.2f} GiB"
        f" of 2-hour blocks ({per_sample:.2f} bytes per sample). Then a Prometheus with"
        " the shipped rules and its default retention (15 days) compacted them as it"
        " would have over the day, before anything was measured"
        f" ({found.compaction_seconds / 60:.0f} min: {layout}), and"
        f" scraped every node on for {found.minutes:g} minutes: every"
        " window full. Groups over the last"
        f" {int(_seconds(found.window)) // 60} minutes (the first ones warm the head up).",
        "",
        f"| {found.gpus:,} GPUs, a day of history | measured | target | |",
        "|---|---|---|---|",
        f"| slowest rule group, worst evaluation / interval | `{slowest[0]}` {slowest[1][1]:.2f}"
        f" s / {slowest[1][2]:.0f} s ({worst:.0%}) | within 25% | {met(worst <= 0.25)} |",
        f"| missed iterations | {found.missed:.0f} of {found.evaluations:.0f} evaluations"
        f" | none | {met(found.missed == 0)} |",
        slowest_row("fleet dashboard", fleet_panels, fleet_at_once),
        f"| fleet dashboard, whole refresh: one by one / all at once | {found.fleet_sum:.2f}"
        f" s / {found.fleet_parallel:.2f} s | <= 5 s | {met(found.fleet_parallel <= 5)} |",
        slowest_row("node dashboard", node_panels, node_at_once),
        f"| node dashboard, whole refresh: one by one / all at once | {found.node_sum:.2f}"
        f" s / {found.node_parallel:.2f} s | <= 5 s | {met(found.node_parallel <= 5)} |",
        slowest_row("chargeback dashboard", charge_panels, charge_at_once),
        f"| chargeback dashboard, whole refresh: one by one / all at once"
        f" | {found.chargeback_sum:.2f} s / {found.chargeback_parallel:.2f} s | <= 5 s"
        f" | {met(found.chargeback_parallel <= 5)} |",
        slowest_row(
            "chargeback dashboard on the 1-minute rows (before the roll-up)",
            minute_panels,
            minute_at_once,
        ),
        f"| chargeback dashboard on the 1-minute rows, whole refresh: one by one / all at"
        f" once | {found.minute_sum:.2f} s / {found.minute_parallel:.2f} s | <= 5 s"
        f" | {met(found.minute_parallel <= 5)} |",
        f"| chargeback groups, worst evaluation / interval (reported; their rules one by"
        f" one after the run) | {charge_worst:.1%}; {charge_rules:.1%} | within 25%"
        f" | {met(max(charge_worst, charge_rules) <= 0.25)} |",
        f"| head series | {found.head_series / 1e3:,.0f} k | | |",
        f"| Prometheus RSS, peak / after the dashboards | {found.rss_peak_gib:.2f} GiB /"
        f" {found.rss_gib:.2f} GiB ({found.rss_peak_gib / thousands:.2f} GiB per 1,000"
        " GPUs) | | |",
        f"| samples appended per day | {found.samples_per_day / 1e9:.2f} G"
        f" ({found.samples_per_day / thousands / 1e6:,.0f} M per 1,000 GPUs; at"
        f" {per_sample:.2f} bytes per sample"
        f" {found.samples_per_day / thousands * per_sample / 1e9:.2f} GB per 1,000 GPUs"
        " per day) | | |",
        "",
        "Rule groups (seconds per evaluation, mean and worst; the share is the worst over"
        " the interval):",
        "",
        "| group | mean | worst | interval | worst / interval |",
        "|---|---|---|---|---|",
    ]
    for group, (mean, peak, interval) in found.groups.items():
        lines.append(
            f"| `{group}` | {mean:.3f} s | {peak:.3f} s | {interval:.0f} s"
            f" | {peak / interval:.1%} |"
        )
    for title, timed, total, parallel in (
        ("Fleet", found.fleet, found.fleet_sum, found.fleet_parallel),
        ("Node", found.node, found.node_sum, found.node_parallel),
        ("Chargeback", found.chargeback, found.chargeback_sum, found.chargeback_parallel),
        ("Chargeback (1-minute rows)", found.minute, found.minute_sum, found.minute_parallel),
    ):
        lines += [
            "",
            f"{title} dashboard at a 24-hour range (median of {ROUNDS} rounds over the"
            " dashboard, each query once a round; a range query's step is"
            " Grafana's $__interval at 24 h on a 1,000-point panel, 60 s, or the panel's"
            f" minimum; whole refresh {total:.2f} s one by one, {parallel:.2f} s all at once):",
            "",
            "| panel | query | kind | seconds | series |",
            "|---|---|---|---|---|",
        ]
        for panel, seconds, count in timed:
            kind = "instant" if panel.instant else f"range, {panel.step} s step"
            lines.append(f"| {panel.title} | {panel.ref} | {kind} | {seconds:.3f} | {count} |")
    rolled, points = found.rollup_hours
    charged, minutes = found.charged_hours
    lines += [
        "",
        "Allocated GPU-hours in the last 24 hours (every row, the remainder's included),"
        " added up by the chargeback's 5-minute roll-up (what the Chargeback dashboard"
        f" reads): {charged:,.1f}; by its 1-minute rows: {minutes:,.1f}"
        f" ({(charged - minutes) / minutes:+.2%}).",
        "",
        "Chargeback groups' rules as instant queries one by one after the run (what one"
        " evaluation reads; a 15-minute group may not have run in the minutes scraped): "
        + "; ".join(
            f"`{g}` {s:.2f} s of its {found.groups[g][2]:.0f} s"
            if g in found.groups
            else f"`{g}` {s:.2f} s"
            for g, s in found.chargeback_rules.items()
        )
        + ".",
        "",
        f"Idle-allocated GPU-hours in the last 24 hours, added up by the 5-minute roll-up"
        f" (`{IDLE_ROLLUP}`, what the fleet dashboard reads): {rolled:,.1f}; by the 1-minute"
        f" points: {points:,.1f} ({(rolled - points) / points:+.2%}).",
        "",
        "Backfilled and live recorded series join up (the same label sets before and"
        " after the bench's Prometheus started):"
        + (
            " every family."
            if not broken
            else " not for " + ", ".join(f"`{c[0]}` ({c[1]} / {c[2]} / {c[3]})" for c in broken)
        ),
    ]
    return "\n".join(lines)


# --- VictoriaMetrics -----------------------------------------------------------------


@dataclass
class Comparison:
    what: str  # a recording rule's name, or a panel's title and query letter
    prometheus: int  # series
    victoria: int
    worst: float  # the largest relative difference of a value, over series in both
    error: str  # VictoriaMetrics' error, or ""
    unmatched: int = 0  # series (label sets) in one answer and not in the other


def _results(
    api: Any, expr: str, at: float, instant: bool, range_seconds: int = RANGE_SECONDS
) -> dict[str, float]:
    """{label set: value (the last point of a range)} of `expr` at `at`."""
    if instant:
        data = api("query", query=expr, time=f"{at:.3f}")
        return {
            json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in data["result"]
        }
    data = api(
        "query_range",
        query=expr,
        start=f"{at - range_seconds:.3f}",
        end=f"{at:.3f}",
        step=str(grafana_interval(range_seconds)),
    )
    return {
        json.dumps(r["metric"], sort_keys=True): float(r["values"][-1][1])
        for r in data["result"]
        if r["values"]
    }


def _compare(what: str, ours: dict[str, float], theirs: dict[str, float], error: str) -> Comparison:
    worst = 0.0
    for key in ours.keys() & theirs.keys():
        a, b = ours[key], theirs[key]
        if math.isnan(a) and math.isnan(b):
            continue
        worst = max(worst, abs(a - b) / max(abs(a), abs(b), 1e-9))
    unmatched = len(ours.keys() ^ theirs.keys())
    return Comparison(what, len(ours), len(theirs), worst, error, unmatched)


@dataclass
class Victoria:
    comparisons: list[Comparison]
    rule_errors: list[tuple[str, str]]  # vmalert: rule, its last error
    rules_loaded: int  # rules vmalert evaluates
    prometheus_alerts: set[tuple[str, str, str]]  # firing: alertname, instance, gpu
    alertmanager_alerts: dict[tuple[str, str, str], str]  # from vmalert: key -> AM's state
    notified: set[str]  # alert names the example's receivers were sent
    minutes: float
    nodes: int
    vmalert_log: str  # where vmalert did not start: its log


class Victorias:
    """VictoriaMetrics, vmalert and Alertmanager (the shipped example, its receivers a
    local webhook) on 127.0.0.1, with the workdir's logs."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.processes: list[subprocess.Popen[bytes]] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._start(
            "victoria-metrics",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-storageDataPath={workdir / 'victoria'}",
            "-retentionPeriod=2d",
            "-search.disableCache",
        )
        self._wait(f"{self.url}/health")
        self.webhook = start_webhook()
        self.alertmanager = start_alertmanager(loopback_config(self.webhook.url), workdir)
        self.vmalert_port = 0

    def _start(self, *command: str) -> None:
        log = (self.workdir / f"{command[0]}.log").open("w")
        self.processes.append(
            subprocess.Popen(["nice", "-n", "10", *command], stdout=log, stderr=subprocess.STDOUT)
        )

    @staticmethod
    def _wait(url: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def vmalert(self) -> bool:
        """vmalert with the shipped rule files, reading and writing VictoriaMetrics and
        sending to Alertmanager; False where it did not start (its log says why)."""
        self.vmalert_port = free_port()
        self._start(
            "vmalert",
            *(f"-rule={path}" for path in RULE_FILES),
            f"-datasource.url={self.url}",
            f"-remoteWrite.url={self.url}",
            f"-notifier.url={self.alertmanager.url}",
            f"-httpListenAddr=127.0.0.1:{self.vmalert_port}",
            f"-evaluationInterval={SCRAPE_SECONDS}s",
        )
        try:
            self._wait(f"http://127.0.0.1:{self.vmalert_port}/health")
        except OSError:
            return False
        return True

    def import_history(self, path: Path) -> None:
        """The OpenMetrics file `path` (seconds) into VictoriaMetrics' Prometheus text
        import (milliseconds)."""
        with path.open() as lines:
            batch: list[str] = []
            for line in lines:
                if line.startswith("#"):
                    continue
                text, stamp = line.rsplit(" ", 1)
                batch.append(f"{text} {int(stamp) * 1000}\n")
                if len(batch) >= 100_000:
                    self._post(batch)
                    batch = []
            self._post(batch)
        with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=60):
            pass

    def _post(self, batch: list[str]) -> None:
        if batch:
            request = urllib.request.Request(
                f"{self.url}/api/v1/import/prometheus", data="".join(batch).encode()
            )
            with urllib.request.urlopen(request, timeout=120):
                pass

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=120) as response:
            payload = json.loads(response.read())
        if payload.get("status") != "success":
            raise RuntimeError(str(payload))
        return payload["data"]

    def vmalert_rules(self) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.vmalert_port}/api/v1/rules"
        with urllib.request.urlopen(url, timeout=60) as response:
            groups = json.loads(response.read())["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.alertmanager.stop()
        self.webhook.stop()


def _alert_key(labels: dict[str, str]) -> tuple[str, str, str]:
    return labels.get("alertname", ""), labels.get("instance", ""), labels.get("gpu", "")


def victoria(
    nodes: int, minutes: float, samples: list[tuple[str, str, float]], workdir: Path
) -> Victoria:
    """The shipped rules and both dashboards on VictoriaMetrics against Prometheus. The
    rules' windows (an hour; GPUMissing's day) are backfilled into both; then Prometheus
    scrapes `nodes` nodes with the rules and sends the exposition's series over
    remote_write, and vmalert evaluates the same rule files on VictoriaMetrics, writing
    its recorded series there and sending its alerts to Alertmanager. After `minutes`:
    every recorded series, every fleet- and node-dashboard query at 24 h, and
    the firing alerts, compared. The node dashboard shows node VIEWED."""
    global FAULT_TIME
    FAULT_TIME = float(int(time.time()))  # the faulty GPUs' Xid: just now
    end = int(time.time()) // RULE_SECONDS * RULE_SECONDS
    origin = end - DAY_SECONDS - 3600
    families, since, first_of = what_is_read(nodes, {VIEWED}, samples, end, origin)
    start = min([*since.values(), *first_of.values()])
    stack = Victorias(workdir)
    server = None
    prometheus = None
    try:
        # both stores get the same history; then the minutes that took, so that no
        # window has a hole when Prometheus starts scraping
        for first in (start, end):
            last = end if first == start else int(time.time()) // SCRAPE_SECONDS * SCRAPE_SECONDS
            history = workdir / "victoria.om"
            write_history(history, families, first, last, origin, since, first_of)
            stack.import_history(history)
            backfill(workdir / "data", workdir, families, first, last, origin, since, first_of)
        server = NodeServer([Node(node_series(i, samples, origin), origin) for i in range(nodes)])
        prometheus = Prometheus(
            workdir,
            nodes,
            server.port,
            workdir / "data",
            f"{stack.url}/api/v1/write",
            forward="gpu_.+|up",  # the recorded series and alerts are vmalert's
        )
        started = stack.vmalert()
        log = "" if started else (workdir / "vmalert.log").read_text()[-3000:]
        time.sleep(minutes * 60)
        at = time.time() - 60  # past VictoriaMetrics' 30 s latency offset
        recorded_names = dict.fromkeys(name for _g, name, _e, _i in rules() if ":" in name)
        checks = [(name, name, True, RANGE_SECONDS) for name in recorded_names]
        for path, chosen in ((DASHBOARD, {}), (NODE_DASHBOARD, {"instance": node_name(VIEWED)})):
            checks += [
                (f"{path.stem}: {p.title} ({p.ref})", p.expr, p.instant, p.range_seconds)
                for p in panels(path, DAY_SECONDS, **chosen)
            ]
        comparisons = []
        for what, expr, instant, range_seconds in checks:
            ours = _results(prometheus.api, expr, at, instant, range_seconds)
            try:
                theirs, error = _results(stack.api, expr, at, instant, range_seconds), ""
            except (OSError, RuntimeError, ValueError) as problem:
                theirs, error = {}, str(problem)[:200]
            comparisons.append(_compare(what, ours, theirs, error))
        vm_rules = stack.vmalert_rules() if started else []
        errors = [(r["name"], r["lastError"]) for r in vm_rules if r.get("lastError")]
        firing = {
            _alert_key(a["labels"])
            for a in prometheus.api("alerts")["alerts"]
            if a["state"] == "firing"
        }
        received = {
            _alert_key(a["labels"]): a["status"]["state"] for a in stack.alertmanager.alerts()
        }
        notified = {a["labels"]["alertname"] for _path, a in stack.webhook.alerts()}
    finally:
        if prometheus is not None:
            prometheus.stop()
        if server is not None:
            server.stop()
        stack.stop()
    return Victoria(
        comparisons, errors, len(vm_rules), firing, received, notified, minutes, nodes, log
    )


def victoria_report(found: Victoria, nodes: int) -> str:
    comparisons = found.comparisons
    differing = [c for c in comparisons if c.error or c.unmatched or c.worst > 0.01]
    empty = [c for c in comparisons if not c.error and c.prometheus == c.victoria == 0]
    series = sum(c.prometheus for c in comparisons)
    lines = [
        f"`make bench-fleet` on {date.today().isoformat()}, **VictoriaMetrics**"
        f" {_victoria_version()} (Debian's package: victoria-metrics, vmalert) and"
        f" Debian's Alertmanager {_alertmanager_version()} with the shipped example"
        " configuration (its receivers a local webhook), all on 127.0.0.1. The rules'"
        " windows backfilled into both stores (an hour, a day of `gpu_exporter_gpus` for"
        " GPUMissing); Prometheus scrapes"
        f" {nodes * GPUS_PER_NODE} GPUs with the shipped rules and sends the exposition's"
        " series (not its recorded series or alerts) over remote_write; vmalert evaluates"
        " deploy/prometheus/rules/*.yml unchanged on VictoriaMetrics, writes its recorded"
        f" series there and sends its alerts to Alertmanager; {found.minutes:g} minutes.",
        "",
    ]
    if found.vmalert_log:
        lines += ["vmalert did not start:", "", "```", found.vmalert_log, "```", ""]
    lines += [
        f"- **vmalert**: {found.rules_loaded} rules loaded and evaluated,"
        f" {len(found.rule_errors)} with an error"
        + (
            ": " + "; ".join(f"`{name}`: {error}" for name, error in found.rule_errors)
            if found.rule_errors
            else "."
        ),
        f"- **Queries**: {len(comparisons)} checks (every recorded series, vmalert's in"
        " VictoriaMetrics against Prometheus' own; every query of the fleet dashboard and"
        " of the node dashboard on one node at a 24-hour range: instant queries a minute"
        " back, range queries compared by their last point), "
        f"{series} series in Prometheus' answers."
        f" {len(comparisons) - len(differing) - len(empty)} answer the same (the same"
        f" series, values within 1%), {len(empty)} are empty in both (nothing of that"
        f" kind in this fleet), {len(differing)} differ or fail" + (":" if differing else "."),
    ]
    if differing:
        lines += [
            "",
            "| what | series in Prometheus | in VictoriaMetrics | in one only"
            " | largest relative difference | error |",
            "|---|---|---|---|---|---|",
        ]
        for c in differing:
            lines.append(
                f"| {c.what} | {c.prometheus} | {c.victoria} | {c.unmatched} | {c.worst:.1%}"
                f" | {c.error or ''} |"
            )
        lines.append("")
    both = found.prometheus_alerts & found.alertmanager_alerts.keys()
    states: dict[str, int] = {}
    for key in both:
        states[found.alertmanager_alerts[key]] = states.get(found.alertmanager_alerts[key], 0) + 1
    names = sorted({key[0] for key in found.prometheus_alerts})
    lines.append(
        f"- **Alerts**: {len(found.prometheus_alerts)} firing in Prometheus ({', '.join(names)}),"
        f" {len(found.alertmanager_alerts)} in Alertmanager from vmalert, {len(both)} the"
        " same (alert name, instance, GPU)"
        + (
            " (" + ", ".join(f"{n} {state}" for state, n in sorted(states.items())) + ")"
            if states
            else ""
        )
        + (
            "; held back by the example's inhibitions: "
            + ", ".join(
                sorted({k[0] for k, v in found.alertmanager_alerts.items() if v != "active"})
            )
            if any(v != "active" for v in found.alertmanager_alerts.values())
            else ""
        )
        + f"; the example's receivers were sent {', '.join(sorted(found.notified)) or 'nothing'}."
        + (
            " Only in Prometheus: "
            + ", ".join("/".join(k) for k in sorted(found.prometheus_alerts - both))
            + "."
            if found.prometheus_alerts - both
            else ""
        )
        + (
            " Only in Alertmanager: "
            + ", ".join("/".join(k) for k in sorted(found.alertmanager_alerts.keys() - both))
            + "."
            if found.alertmanager_alerts.keys() - both
            else ""
        )
    )
    return "\n".join(lines)


def _alertmanager_version() -> str:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "prometheus-alertmanager"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "(version unknown)"


def _victoria_version() -> str:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "victoria-metrics"], capture_output=True, text=True
    )
    return out.stdout.strip() or "(version unknown)"


# --- report --------------------------------------------------------------------------


def report(lives: list[Live], hist: History | None, minutes: float) -> str:
    lines = [
        f"`make bench-fleet` on {date.today().isoformat()}: Debian's Prometheus "
        f"{_prometheus_version()}, {os.cpu_count()} cores shared with other work, "
        f"15 s scrape and evaluation interval, {minutes:g} minutes of live scraping per size.",
        "",
        "**Live, per tick** (rule groups as Prometheus reports them; the windows of 30 minutes"
        " and more only partly filled: see the history table for full windows):",
        "",
        "| GPUs | head series | Prometheus RSS | all rule groups, per second of wall time |"
        " slowest group (mean / max) | missed iterations | fleet dashboard refresh:"
        " queries one by one / all at once | slowest panel |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in lives:
        slow_group, (mean, peak, _i) = max(run.groups.items(), key=lambda kv: kv[1][0])
        slow_panel, slow_time, _n = max(run.panels, key=lambda pt: pt[1])
        lines.append(
            f"| {run.gpus:,} | {run.head_series / 1e3:,.0f} k | {run.rss_gib:.2f} GiB |"
            f" {run.rule_share:.1%} | `{slow_group.removeprefix('gpu-exporter.')}`"
            f" {mean:.2f} / {peak:.2f} s | {run.missed:.0f} |"
            f" {run.refresh_sum:.2f} s / {run.refresh_parallel:.2f} s |"
            f" {slow_panel.title} ({slow_panel.ref}) {slow_time:.2f} s |"
        )
    if lives:
        biggest = lives[-1]
        lines += [
            "",
            f"Rule groups at {biggest.gpus:,} GPUs (mean / max seconds per evaluation, interval):",
            "",
            "| group | mean | max | interval |",
            "|---|---|---|---|",
        ]
        for group, (mean, peak, interval) in biggest.groups.items():
            lines.append(f"| `{group}` | {mean:.3f} s | {peak:.3f} s | {interval:.0f} s |")
        lines += [
            "",
            f"Fleet dashboard panels at {biggest.gpus:,} GPUs (6 h range, median of"
            f" {ROUNDS} rounds):",
            "",
            "| panel | query | kind | seconds | series |",
            "|---|---|---|---|---|",
        ]
        for panel, seconds, count in biggest.panels:
            kind = "instant" if panel.instant else "range"
            lines.append(f"| {panel.title} | {panel.ref} | {kind} | {seconds:.3f} | {count} |")
        lines += [
            "",
            f"Chargeback dashboard panels at {biggest.gpus:,} GPUs (its 24 h range, over the"
            f" {minutes:g} minutes scraped: a day's history is not measured here; median of"
            f" {ROUNDS} rounds;"
            f" all at once {biggest.chargeback_parallel:.2f} s):",
            "",
            "| panel | query | seconds | series |",
            "|---|---|---|---|",
        ]
        for panel, seconds, count in biggest.chargeback:
            lines.append(f"| {panel.title} | {panel.ref} | {seconds:.3f} | {count} |")
    if hist is not None:
        sizes = [run.gpus for run in lives] or [1000, 2000, 4000]
        lines += [
            "",
            f"**History** ({hist.gpus} GPUs with {HISTORY_HOURS} h of 15 s samples backfilled,"
            f" {hist.samples / 1e6:.0f} M samples, then scraped on: every window full). Each"
            " rule's expression timed as an instant query (median of 3), less the cost of a"
            f" query that reads nothing ({hist.fixed * 1000:.1f} ms: HTTP and parsing, which"
            " a rule evaluated inside Prometheus does not pay), summed per group and scaled"
            " linearly per GPU:",
            "",
            f"| group | interval | measured at {hist.gpus} GPUs | "
            + " | ".join(f"scaled to {g:,} GPUs" for g in sizes)
            + " |",
            "|---|---|---|" + "---|" * len(sizes),
        ]
        intervals = {group: interval for group, _n, _e, interval in rules()}
        share = dict.fromkeys(sizes, 0.0)
        for group, seconds in hist.rule_seconds.items():
            reads = sum(max(t - hist.fixed, 0.0) for g, _n, t in hist.rule_costs if g == group)
            cells = []
            for gpus in sizes:
                cells.append(f"{reads * gpus / hist.gpus:.3f} s")
                share[gpus] += reads * gpus / hist.gpus / intervals[group]
            lines.append(
                f"| `{group}` | {intervals[group]:.0f} s | {seconds * 1000:.1f} ms | "
                + " | ".join(cells)
                + " |"
            )
        lines.append(
            "| all groups, per second of wall time | | | "
            + " | ".join(f"{share[g]:.1%}" for g in sizes)
            + " |"
        )
        slowest = sorted(hist.rule_costs, key=lambda c: -c[2])[:6]
        lines += [
            "",
            "Slowest rules with full history: "
            + ", ".join(f"`{name}` {seconds * 1000:.1f} ms" for _g, name, seconds in slowest)
            + f" (at {hist.gpus} GPUs, fixed cost included).",
            "",
            f"Fleet dashboard with full history at {hist.gpus} GPUs (6 h range), and scaled"
            " (the fixed cost once, the rest per GPU):",
            "",
            "| panel | query | kind | seconds | " + " | ".join(f"{g:,} GPUs" for g in sizes) + " |",
            "|---|---|---|---|" + "---|" * len(sizes),
        ]
        for panel, seconds, _count in hist.panels:
            kind = "instant" if panel.instant else "range"
            lines.append(
                f"| {panel.title} | {panel.ref} | {kind} | {seconds:.3f} | "
                + " | ".join(f"{hist.scaled(seconds, g):.2f} s" for g in sizes)
                + " |"
            )
        total = sum(t for _p, t, _n in hist.panels)
        lines.append(
            f"| whole refresh, one by one | | | {total:.3f} | "
            + " | ".join(
                f"{sum(hist.scaled(t, g) for _p, t, _n in hist.panels):.2f} s" for g in sizes
            )
            + " |"
        )
    return "\n".join(lines)


def dashboard_report(found: DashboardHistory) -> str:
    """The fleet dashboard's queries with its default range of history, measured."""
    slowest, slowest_seconds, _n = max(found.panels, key=lambda pt: pt[1])
    per_panel: dict[str, float] = {}
    for panel, seconds, _count in found.panels:
        per_panel[panel.title] = per_panel.get(panel.title, 0.0) + seconds
    slowest_panel = max(per_panel, key=lambda title: per_panel[title])
    lines = [
        f"**The fleet dashboard with its default range of history, measured** ({found.gpus:,}"
        f" GPUs: {found.hours:g} h of the series its queries read, the exposition's every"
        " 15 s and the recorded ones every minute, each over the range and windows the"
        f" dashboard reads of it; {found.samples / 1e6:.0f} M samples backfilled in"
        f" {found.backfill_seconds / 60:.0f} minutes; a Prometheus without scraping or"
        " rules, queried at the last minute of data, 6 h range, Grafana's step; median of"
        f" 3; Prometheus RSS {found.rss_gib:.2f} GiB after the queries): **whole refresh"
        f" {found.refresh_sum:.2f} s one by one, {found.refresh_parallel:.2f} s all at once;"
        f" slowest query {slowest.title} ({slowest.ref}) {slowest_seconds:.2f} s; slowest"
        f" panel, its queries one by one, {slowest_panel} {per_panel[slowest_panel]:.2f} s.**",
        "",
        "| panel | query | kind | seconds | series |",
        "|---|---|---|---|---|",
    ]
    for panel, seconds, count in found.panels:
        kind = "instant" if panel.instant else f"range, {panel.step} s step"
        lines.append(f"| {panel.title} | {panel.ref} | {kind} | {seconds:.3f} | {count} |")
    return "\n".join(lines)


def _prometheus_version() -> str:
    out = subprocess.run(["prometheus", "--version"], capture_output=True, text=True).stdout
    found = re.search(r"version (\S+)", out)
    return found.group(1) if found else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,2000,4000", help="GPU counts, comma-separated")
    parser.add_argument("--minutes", type=float, default=3.0, help="live scraping per size")
    parser.add_argument("--history-nodes", type=int, default=2, help="0 skips the history part")
    parser.add_argument(
        "--dashboard-history-nodes",
        type=int,
        default=500,
        help="nodes for the fleet dashboard with its range of history; 0 skips it",
    )
    parser.add_argument(
        "--day-nodes", type=int, default=500, help="nodes with a day of history; 0 skips it"
    )
    parser.add_argument(
        "--day-view-nodes", type=int, default=4, help="nodes with a day of the node dashboard's"
    )
    parser.add_argument(
        "--day-minutes", type=float, default=12.0, help="scraping on the day of history"
    )
    parser.add_argument(
        "--victoria-nodes", type=int, default=10, help="0 skips the VictoriaMetrics comparison"
    )
    parser.add_argument(
        "--victoria-minutes", type=float, default=7.0, help="scraping for VictoriaMetrics"
    )
    parser.add_argument(
        "--racks",
        type=int,
        default=56,
        help="GB200 NVL72 racks for the rack view (56: 4,032 GPUs); 0 skips it",
    )
    parser.add_argument("--tmp", help="where the day's blocks go (default: the system's)")
    parser.add_argument("--write", metavar="README", help="write the tables between markers")
    args = parser.parse_args()
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed: run `make system-deps`", file=sys.stderr)
            return 2
    samples = template()
    sections: dict[str, str] = {}
    lives = []
    for gpus in (int(s) for s in args.sizes.split(",") if s):
        print(f"live: {gpus} GPUs for {args.minutes:g} minutes", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
            lives.append(live(gpus, args.minutes, samples, Path(tmp)))
    hist = None
    if args.history_nodes:
        print(f"history: {args.history_nodes} nodes, {HISTORY_HOURS} h", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-fleet-history-") as tmp:
            hist = history(args.history_nodes, samples, Path(tmp))
    if lives or hist:
        sections["fleet"] = report(lives, hist, args.minutes)
    if args.dashboard_history_nodes:
        print(f"dashboard history: {args.dashboard_history_nodes} nodes", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-fleet-dashboard-") as tmp:
            found = dashboard_history(args.dashboard_history_nodes, samples, Path(tmp))
        sections["fleet"] = sections.get("fleet", "") + "\n\n" + dashboard_report(found)
    if args.racks:
        print(f"racks: {args.racks} GB200 NVL72 racks", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-fleet-racks-") as tmp:
            found_racks = racks(args.racks, args.minutes, Path(tmp))
        sections["fleet-racks"] = racks_report(found_racks, args.minutes)
    if args.day_nodes:
        print(f"day: {args.day_nodes} nodes", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-fleet-day-", dir=args.tmp) as tmp:
            today = day(args.day_nodes, args.day_view_nodes, args.day_minutes, samples, Path(tmp))
        sections["fleet-day"] = day_report(today)
    if args.victoria_nodes and shutil.which("victoria-metrics") is None:
        sections["fleet-victoria"] = (
            "VictoriaMetrics: not installed (`apt-get install victoria-metrics`), skipped."
        )
    elif args.victoria_nodes:
        print(f"victoria-metrics: {args.victoria_nodes} nodes", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-fleet-victoria-") as tmp:
            found_vm = victoria(args.victoria_nodes, args.victoria_minutes, samples, Path(tmp))
        sections["fleet-victoria"] = victoria_report(found_vm, args.victoria_nodes)
    for name, text in sections.items():
        print(f"<!-- {name} -->\n{text}\n")
        if args.write:
            write_section(args.write, name, text.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
