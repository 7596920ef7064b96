"""`gpu-exporter --print-config`: the files shipped with the exporter, byte for byte as the
repository holds them, a one-line list of them when asked for none or an unknown one,
and the alert rules with their runbook links moved to another base by `--runbook-url`.
(tests/test_packaging.py asks the same of a wheel installed into a clean venv.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gpu_exporter.print_config import CONFIGS, DEFAULT_RUNBOOK_BASE
from tests.support.exporter import REPO, refused, run_exporter


@pytest.mark.parametrize("words", sorted(CONFIGS), ids=" ".join)
def test_each_name_prints_the_repository_s_file_exactly(words: tuple[str, ...]) -> None:
    result = run_exporter(["--print-config", *words])
    assert result.returncode == 0, result.stderr
    assert result.stdout.encode() == (REPO / CONFIGS[words]).read_bytes()
    assert result.stderr == ""


def test_the_table_names_the_files_operators_install() -> None:
    paths = set(CONFIGS.values())
    assert {
        "deploy/systemd/gpu-exporter.service",
        "deploy/prometheus/rules/gpu-alerts.yml",
        "deploy/prometheus/rules/gpu-recording.yml",
        "deploy/alertmanager/alertmanager.yml",
        "grafana/dashboards/gpu-fleet.json",
        "grafana/dashboards/gpu-node.json",
        "docs/alerts.md",
    } <= paths
    # every dashboard of the repository has a name
    dashboards = {str(p.relative_to(REPO)) for p in (REPO / "grafana/dashboards").glob("*.json")}
    assert dashboards <= paths


@pytest.mark.parametrize("args", [[], ["rules"], ["dashboard", "nope"], ["systemd", "x", "y"]])
def test_no_or_an_unknown_name_lists_them_all_on_one_line_and_exits_2(args: list[str]) -> None:
    line = refused(["--print-config", *args])
    assert line.startswith("gpu-exporter: error: --print-config: ")
    for words in CONFIGS:
        assert " ".join(words) in line
    if args:
        assert repr(" ".join(args)) in line


@pytest.mark.parametrize("which", ["alerts", "kubernetes"])
def test_runbook_url_moves_every_runbook_link_and_nothing_else(which: str, tmp_path: Path) -> None:
    base = "https://wiki.example.com/gpu/runbooks"
    result = run_exporter(["--print-config", "rules", which, "--runbook-url", base])
    assert result.returncode == 0, result.stderr
    original = (REPO / CONFIGS[("rules", which)]).read_text()
    assert DEFAULT_RUNBOOK_BASE in original and DEFAULT_RUNBOOK_BASE not in result.stdout
    data = yaml.safe_load(result.stdout)
    groups = data["spec"]["groups"] if which == "kubernetes" else data["groups"]
    links = [r["annotations"]["runbook_url"] for g in groups for r in g["rules"] if "alert" in r]
    names = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    assert links == [f"{base}#{name.lower()}" for name in names]
    # the rest of the file is untouched, and Prometheus still loads it
    assert result.stdout.replace(base, DEFAULT_RUNBOOK_BASE) == original
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(data["spec"] if which == "kubernetes" else data))
    check = subprocess.run(
        ["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_runbook_url_is_refused_where_it_means_nothing() -> None:
    assert "--runbook-url" in refused(["--runbook-url", "https://wiki.example.com"])
    line = refused(["--print-config", "systemd", "--runbook-url", "https://wiki.example.com"])
    assert "--runbook-url" in line
    assert re.search(
        r"not an http:// or https:// URL",
        refused(["--print-config", "rules", "alerts", "--runbook-url", "wiki/runbooks"]),
    )
