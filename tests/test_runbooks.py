"""/runbooks: the exporter serves docs/alerts.md as HTML rendered at build time (`make docs`
with markdown-it-py, checked in as gpu_exporter/serving/static/runbooks.html and kept in
step here), every alert's runbook_url lands on its section (an element whose id is the
link's anchor), and a browser shows its tables and code styled as the live page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpu_exporter import docs
from gpu_exporter.config import ConfigError, load_settings
from tests.support.browser import chromium
from tests.support.exporter import REPO, start_exporter
from tests.support.html_ids import parse

RULES = REPO / "deploy" / "prometheus" / "rules" / "gpu-alerts.yml"
RUNBOOKS_HTML = REPO / "gpu_exporter" / "serving" / "static" / "runbooks.html"


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


def test_the_checked_in_page_is_docs_alerts_md_rendered_now() -> None:
    text = RUNBOOKS_HTML.read_text()
    assert docs.sections_in(text) == ("runbooks",)
    assert docs.render(text, ("runbooks",)) == text, "runbooks.html is out of date: make docs"


def test_headings_carry_github_s_anchors_and_markdown_is_escaped() -> None:
    page = docs.runbooks_html(
        "# Alerts: what <each> means\n\n## GPULost\n\n`gpu_up == 0` for **a minute**: "
        "<script>alert(1)</script> [docs](../README.md) [up](#gpulost) "
        "[js](javascript:alert(1))\n\n| a | `b` |\n|---|---|\n| 1 | <x> |\n\n- one\n  more\n"
        "- two\n\n```sh\nnvidia-smi -q <x>\n```\n"
    )
    parsed = parse(page)
    assert parsed.ids == {"alerts-what-each-means", "gpulost"}
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<code>gpu_up == 0</code>" in page and "<strong>a minute</strong>" in page
    assert '<a href="#gpulost">up</a>' in page
    assert "javascript:" not in re.sub(r"&[a-z]+;", "", "".join(re.findall(r'href="[^"]*"', page)))
    assert "README.md" not in page and " docs " in page  # a repository file: its text only
    assert "<li>one\nmore</li>\n<li>two</li>" in page
    assert '<pre><code class="language-sh">nvidia-smi -q &lt;x&gt;\n</code></pre>' in page
    assert "<th><code>b</code></th>" in page and "<td>&lt;x&gt;</td>" in page
    assert "|" not in page


def test_the_runbooks_path_cannot_be_taken_by_the_metrics() -> None:
    with pytest.raises(ConfigError, match="runbooks"):
        load_settings(["--web.telemetry-path", "/runbooks"])


def test_a_browser_shows_the_runbooks_tables_and_code_styled_as_the_live_page(
    tmp_path: Path,
) -> None:
    """With the live page off too: the runbooks still use its stylesheet."""
    exporter = start_exporter(["--simulate", "1", "--web.ui=false"], tmp_path)
    try:
        assert 'href="runbooks"' in exporter.get("/").text
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 360, "height": 800}, color_scheme="dark")
            page.goto(exporter.url + "/runbooks#gpuxidcritical")
            shown = page.evaluate(
                """() => {
                  const style = (e) => getComputedStyle(e);
                  const heading = document.getElementById("gpuxidcritical");
                  const table = heading.nextElementSibling.nextElementSibling;
                  return {
                    background: style(document.body).backgroundColor,
                    font: style(document.body).fontFamily,
                    table: table.tagName,
                    head: [...table.tHead.rows[0].cells].map((c) => c.textContent),
                    xids: [...table.tBodies[0].rows].map((r) => r.cells[0].textContent),
                    code: style(document.querySelector("p code")).fontFamily,
                    block: style(document.querySelector("pre")).backgroundColor,
                    pipes: [...document.querySelectorAll("p, pre")]
                      .filter((e) => e.textContent.includes("|---")).length,
                    scroll: document.documentElement.scrollWidth,
                    top: Math.round(heading.getBoundingClientRect().top),
                  };
                }"""
            )
            page.close()
    finally:
        exporter.stop()
    # the live page's dark background and font; code in a monospace font, blocks on a card
    assert shown["background"] == "rgb(17, 20, 24)", shown
    assert "system-ui" in shown["font"] and "monospace" in shown["code"], shown
    assert shown["block"] == "rgb(26, 31, 38)", shown
    # the Xid table is a table, not pipes in a <pre>
    assert shown["table"] == "TABLE" and shown["head"] == ["Xid", "meaning", "usual action"]
    assert {"48", "79", "119"} <= set(shown["xids"]) and shown["pipes"] == 0, shown
    # on a phone nothing scrolls sideways; the link lands on the alert's section
    assert shown["scroll"] <= 360 and shown["top"] <= 1, shown
