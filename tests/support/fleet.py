"""Turn the example Prometheus configurations into ones a test can run on loopback.

The examples in deploy/prometheus/ are what operators copy; the fleet test runs them
with only what a test must change: second-long intervals, absolute paths, the file_sd
directory, and no Alertmanager (nothing may leave 127.0.0.1).
"""

from __future__ import annotations

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


def cluster_config(targets_dir: Path) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml, reading file_sd targets from `targets_dir`."""
    config = load_example("prometheus.yml")
    _fast_globals(config)
    config.pop("alerting", None)
    config.pop("remote_write", None)
    config["rule_files"] = [str(EXAMPLES / path) for path in config["rule_files"]]
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
