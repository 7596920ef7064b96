"""deploy/prometheus: the example configurations pass `promtool check config`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.exporter import REPO, parse_samples, run_exporter
from tests.support.fleet import EXAMPLES, cluster_config, federation_config, write_yaml


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed: run `make system-deps`"
    return subprocess.run(
        [binary, "check", "config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=path.parent,
    )


@pytest.mark.parametrize("name", ["prometheus.yml", "federation.yml"])
def test_example_config_passes_promtool(name: str) -> None:
    result = check_config(EXAMPLES / name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_config_rejects_a_broken_config(tmp_path: Path) -> None:
    broken = tmp_path / "prometheus.yml"
    text = (
        (EXAMPLES / "prometheus.yml")
        .read_text()
        .replace("scrape_interval: 15s", "scrape_interval: 15")
    )
    broken.write_text(text)
    shutil.copytree(EXAMPLES / "rules", tmp_path / "rules")
    assert check_config(broken).returncode != 0


def test_example_scrapes_the_job_the_alerts_select_through_file_sd() -> None:
    config = yaml.safe_load((EXAMPLES / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "gpu-exporter"]
    (sd,) = job["file_sd_configs"]
    # the shipped example target file matches the discovery pattern
    matches = [p for pattern in sd["files"] for p in EXAMPLES.glob(pattern)]
    assert matches == [EXAMPLES / "targets" / "gpu-exporter-example.yml"]
    assert config["rule_files"] == ["rules/gpu-recording.yml", "rules/gpu-alerts.yml"]
    assert config["global"]["external_labels"]["cluster"]


def test_file_sd_example_has_the_file_sd_shape() -> None:
    groups = yaml.safe_load((EXAMPLES / "targets" / "gpu-exporter-example.yml").read_text())
    assert isinstance(groups, list) and groups
    for group in groups:
        assert set(group) <= {"targets", "labels"}
        for target in group["targets"]:
            host, _, port = target.rpartition(":")
            assert host and port == "9872", target
        assert all(isinstance(v, str) for v in group.get("labels", {}).values())


def test_federation_pulls_only_recording_rules_with_their_labels() -> None:
    config = yaml.safe_load((EXAMPLES / "federation.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/federate"
    assert job["honor_labels"] is True
    assert job["params"]["match[]"] == [
        '{__name__=~"(instance|instance_gpu|instance_gpu_instance|instance_gpu_pod|instance_gpu_owner|instance_owner'
        '|name|namespace):gpu_.+"}'
    ]


def test_the_fleet_test_configs_stay_valid_and_on_loopback(tmp_path: Path) -> None:
    """What tests/test_fleet.py derives from the examples is still a valid config."""
    cluster = cluster_config(tmp_path / "targets")
    assert "alerting" not in cluster, "the test must not send alerts anywhere"
    write_yaml(tmp_path / "targets" / "gpu-exporter-x.yml", [{"targets": ["127.0.0.1:1"]}])
    result = check_config(write_yaml(tmp_path / "cluster.yml", cluster))
    assert result.returncode == 0, result.stdout + result.stderr
    federation = federation_config(["127.0.0.1:9090"])
    result = check_config(write_yaml(tmp_path / "federation.yml", federation))
    assert result.returncode == 0, result.stdout + result.stderr
    targets = [
        t
        for job in federation["scrape_configs"]
        for c in job["static_configs"]
        for t in c["targets"]
    ]
    assert targets == ["127.0.0.1:9090"]


def doc_figure(text: str, row: str) -> int:
    match = re.search(rf"^\| {re.escape(row)} \| (?:up to )?(\d+)", text, re.M)
    assert match, f"docs/scaling.md has no row {row!r}"
    return int(match.group(1))


def test_scaling_doc_series_counts_match_the_exporter_and_the_rules() -> None:
    text = (REPO / "docs" / "scaling.md").read_text()
    result = run_exporter(["--simulate", "8", "--once"])
    assert result.returncode == 0, result.stderr
    samples = parse_samples(result.stdout)
    device = [
        dict(labels)
        for (_, labels) in samples
        if "gpu" in dict(labels) and "pid" not in dict(labels)
    ]
    # processes on whole GPUs (under MIG the driver has no per-process utilization); the
    # dead owner --simulate lists has its own info series, no process series
    process = [
        dict(labels)
        for (name, labels) in samples
        if name.startswith("gpu_process_") and not dict(labels).get("gpu_instance")
    ]
    pids = {(labels["gpu"], labels["pid"]) for labels in process}
    plain = [labels for labels in device if labels["gpu"] == "0"]  # an H100 without MIG
    assert len(plain) == doc_figure(text, "per GPU (device metrics)")
    instances = {
        (labels["gpu"], labels["gpu_instance"]) for labels in device if "gpu_instance" in labels
    }
    per_instance = [
        name
        for (name, labels) in samples
        if dict(labels).get("gpu_instance") and "pid" not in dict(labels)
        if name != "gpu_mig_info"
    ]
    assert instances and len(per_instance) / len(instances) == doc_figure(
        text, "per MIG GPU instance"
    )
    assert pids and len(process) / len(pids) == doc_figure(text, "per GPU process")
    rules = yaml.safe_load((EXAMPLES / "rules" / "gpu-recording.yml").read_text())
    names = [r["record"] for g in rules["groups"] for r in g["rules"]]
    per_gpu = [n for n in names if n.startswith("instance_gpu:")]
    per_model = [n for n in names if n.startswith("name:")]
    per_mig_instance = [n for n in names if n.startswith("instance_gpu_instance:")]
    per_pod = [n for n in names if n.startswith("instance_gpu_pod:")]
    per_namespace = [n for n in names if n.startswith("namespace:")]
    per_owner = [n for n in names if n.startswith("instance_gpu_owner:")]
    per_node_owner = [n for n in names if n.startswith("instance_owner:")]
    per_link = [n for n in names if n.startswith("instance_gpu_link:")]
    per_node = [n for n in names if n.startswith("instance:")]
    levels = (
        per_gpu,
        per_model,
        per_mig_instance,
        per_pod,
        per_namespace,
        per_owner,
        per_node_owner,
        per_link,
        per_node,
    )
    assert sum(len(level) for level in levels) == len(names)
    assert len(per_node) == doc_figure(text, "recording rules, per node")
    assert len(per_pod) == doc_figure(text, "recording rules, per allocation (Kubernetes)")
    assert len(per_owner) == doc_figure(text, "recording rules, per GPU and owner of its processes")
    assert len(per_node_owner) == doc_figure(text, "recording rules, per node and owner")
    assert len(per_link) == doc_figure(text, "recording rules, per NVLink link")
    assert len(per_namespace) == doc_figure(text, "recording rules, per namespace (Kubernetes)")
    assert len(per_gpu) == doc_figure(text, "recording rules, per GPU")
    assert len(per_mig_instance) == doc_figure(text, "recording rules, per MIG GPU instance")
    assert len(per_model) == doc_figure(text, "recording rules, per GPU model")
