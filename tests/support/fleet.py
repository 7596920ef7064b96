"""Turn the example Prometheus configurations into ones a test can run on loopback.

The examples in deploy/prometheus/ are what operators copy; the fleet test runs them
with only what a test must change: second-long intervals, absolute paths, the file_sd
directory, the alert rules' `for:` in seconds (in their order), and the test's own
Alertmanager on 127.0.0.1 (nothing may leave 127.0.0.1).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.support.exporter import REPO

EXAMPLES = REPO / "deploy" / "prometheus"
TEST_INTERVAL = "1s"


def load_example(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLES / name).read_text()))


def _fast_globals(config: dict[str, Any]) -> None:
    config["global"].update(
        scrape_interval=TEST_INTERVAL,
        scrape_timeout=TEST_INTERVAL,
        evaluation_interval=TEST_INTERVAL,
    )
    for job in config["scrape_configs"]:
        job.pop("scrape_interval", None)
        job.pop("scrape_timeout", None)


FOR_LINE = re.compile(r"^(\s+for: )(\d+)([smh])$", re.M)
FOR_STEP_SECONDS = 2  # between two alerts whose `for:` differ: Alertmanager sees the first first


def immediate_alert_rules(dest: Path) -> Path:
    """A copy of rules/gpu-alerts.yml at `dest` whose alerts fire within seconds, in the
    order their `for:` gives (the shortest at once, each longer one FOR_STEP_SECONDS
    after the one before), every group at the test's evaluation interval; the
    expressions, labels and annotations are the file's. The order is kept because
    Alertmanager's inhibitor takes a new alert in apart from the routes: a symptom that
    reached it with its cause (GPULost with GPUNeedsReboot) was sometimes sent anyway."""
    every_evaluation_rules(EXAMPLES / "rules" / "gpu-alerts.yml", dest)
    text = dest.read_text()
    unit = {"s": 1, "m": 60, "h": 3600}
    durations = sorted({int(n) * unit[u] for _i, n, u in FOR_LINE.findall(text)})
    step = {seconds: FOR_STEP_SECONDS * rank for rank, seconds in enumerate(durations)}
    dest.write_text(FOR_LINE.sub(lambda m: f"{m[1]}{step[int(m[2]) * unit[m[3]]]}s", text))
    return dest


# The shipped 5-minute roll-ups (gpu-exporter.recording.rollup, the fleet's, and
# ...chargeback-rollup): each evaluation covers the 5 minutes that end 30 s before it;
# the fleet's count each 1-minute point as 60 seconds (the chargeback's rows are seconds).
ROLLUP_GROUPS = (
    "  - name: gpu-exporter.recording.rollup\n",
    "  - name: gpu-exporter.recording.chargeback-rollup\n",
)
ROLLUP_RULES = 14  # windows in both groups together
ROLLUP_WINDOW = "[5m] offset 30s)"
ROLLUP_POINT_SECONDS = ") * 60"


def every_evaluation_rules(source: Path, dest: Path, rollup_seconds: int | None = None) -> Path:
    """A copy at `dest` of the rule file `source` whose groups all run at the global
    evaluation interval (TEST_INTERVAL, 1 s): the shipped groups that run once a minute
    (`interval: 1m`) would make a test wait a minute for their first value. The roll-up
    groups keep their shape at that scale: a point stands for 1 s, and the group runs every
    `rollup_seconds` (the global interval unless given) over the `rollup_seconds` that
    end 0.5 s before it, as the shipped ones end 30 s before theirs: the rows they read
    are written by then. Prometheus runs each group at its own phase of the interval (a
    hash of its name and file, so of the test's directory), and a roll-up over the second
    that ends at its own evaluation, run a few milliseconds after the group whose rows it
    reads, finds that group's newest point not yet written and the one before a second
    and those milliseconds old, out of its window: nothing, at every evaluation of that
    Prometheus (a fleet test's roll-ups returned nothing for minutes on 2026-12-01)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = re.sub(r"^    interval: \S+\n", "", source.read_text(), flags=re.M)
    if any(group in text for group in ROLLUP_GROUPS):
        seconds = f"{rollup_seconds}s" if rollup_seconds else TEST_INTERVAL
        window = f"[{seconds}] offset 500ms)"
        rolled = text.replace(ROLLUP_WINDOW, window).replace(ROLLUP_POINT_SECONDS, ") * 1")
        assert rolled.count(window) == ROLLUP_RULES, "roll-up moved"
        assert ROLLUP_POINT_SECONDS not in rolled, "roll-up moved"
        if rollup_seconds:
            interval = f"    interval: {rollup_seconds}s\n"
            for group in ROLLUP_GROUPS:
                rolled = rolled.replace(group, group + interval)
        text = rolled
    dest.write_text(text)
    return dest


def cluster_config(
    targets_dir: Path, alertmanager: str | None = None, rules: dict[str, Path] | None = None
) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml, reading file_sd targets from `targets_dir`,
    sending alerts to `alertmanager` (host:port) or nowhere, with the rule files of
    `rules` (by file name) in place of the examples'."""
    config = load_example("prometheus.yml")
    _fast_globals(config)
    if alertmanager is None:
        config.pop("alerting", None)
    else:
        (manager,) = config["alerting"]["alertmanagers"]
        manager["static_configs"] = [{"targets": [alertmanager]}]
    config.pop("remote_write", None)
    rules = rules or {}
    config["rule_files"] = [
        str(
            rules.get(Path(path).name)
            or every_evaluation_rules(EXAMPLES / path, targets_dir.parent / path)
        )
        for path in config["rule_files"]
    ]
    for job in config["scrape_configs"]:
        for sd in job.get("file_sd_configs", []):
            sd["files"] = [str(targets_dir / Path(pattern).name) for pattern in sd["files"]]
            sd["refresh_interval"] = TEST_INTERVAL
    return config


def federation_config(sources: list[str]) -> dict[str, Any]:
    """deploy/prometheus/federation.yml, federating from `sources` (host:port)."""
    config = load_example("federation.yml")
    _fast_globals(config)
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": sources}]
    return config


def write_yaml(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
