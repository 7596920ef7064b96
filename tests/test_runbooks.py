"""/runbooks: the exporter serves docs/alerts.md, and every alert's runbook_url lands on
its section (an element whose id is the link's anchor), with the Markdown escaped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpu_exporter.config import ConfigError, load_settings
from gpu_exporter.serving.runbooks import render
from tests.support.exporter import REPO, start_exporter
from tests.support.html_ids import parse

RULES = REPO / "deploy" / "prometheus" / "rules" / "gpu-alerts.yml"


def runbook_anchors() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {
        r["alert"]: r["annotations"]["runbook_url"].rpartition("#")[2]
        for g in groups
        for r in g["rules"]
        if "alert" in r
    }


def test_the_served_page_has_a_section_for_every_alert(tmp_path: Path) -> None:
    exporter = start_exporter(["--simulate", "1"], tmp_path)
    try:
        result = exporter.get("/runbooks")
    finally:
        exporter.stop()
    assert result.status == 200
    assert result.headers["Content-Type"] == "text/html; charset=utf-8"
    page = parse(result.body.decode())
    assert set(runbook_anchors().values()) <= page.ids, set(runbook_anchors().values()) - page.ids
    text = "".join(page.text)
    assert "nvidia-smi -r -i N" in text and "Fix:" in text  # the runbooks themselves


def test_headings_carry_github_s_anchors_and_markdown_is_escaped() -> None:
    page = render(
        "# Alerts: what <each> means\n\n## GPULost\n\n`gpu_up == 0` for **a minute**: "
        "<script>alert(1)</script> [docs](../README.md) [up](#gpulost) "
        "[js](javascript:alert(1))\n\n| a | b |\n|---|---|\n\n- one\n  more\n- two\n\n"
        "```\nnvidia-smi -q <x>\n```\n"
    )
    parsed = parse(page)
    assert parsed.ids == {"alerts-what-each-means", "gpulost"}
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<code>gpu_up == 0</code>" in page and "<strong>a minute</strong>" in page
    assert '<a href="#gpulost">up</a>' in page
    assert "javascript:" not in re.sub(r"&[a-z]+;", "", "".join(re.findall(r'href="[^"]*"', page)))
    assert "<li>one more</li><li>two</li>" in page
    assert "<pre><code>nvidia-smi -q &lt;x&gt;</code></pre>" in page
    assert "<pre>| a | b |" in page


def test_the_runbooks_path_cannot_be_taken_by_the_metrics() -> None:
    with pytest.raises(ConfigError, match="runbooks"):
        load_settings(["--web.telemetry-path", "/runbooks"])


def test_runbooks_are_served_without_the_live_page_too(tmp_path: Path) -> None:
    exporter = start_exporter(["--simulate", "1", "--web.ui=false"], tmp_path)
    try:
        assert "gpulost" in parse(exporter.get("/runbooks").body.decode()).ids
        assert 'href="runbooks"' in exporter.get("/").text
    finally:
        exporter.stop()
