"""README, the docs pages, --help and the code's catalogue stay in step."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gpu_exporter import docs
from gpu_exporter.config import OPTIONS, build_parser
from gpu_exporter.metrics.catalogue import METRICS
from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.metrics.dcgm import DCGM_BY_NAME, DCGM_LABELS
from gpu_exporter.print_config import CONFIGS
from tests.test_rules import github_anchor

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
REFERENCE = REPO / "docs" / "reference.md"
DCGM_GUIDE = REPO / "docs" / "migrating-from-dcgm-exporter.md"


def test_reference_sections_match_the_code() -> None:
    text = REFERENCE.read_text()
    assert docs.sections_in(text) == ("metrics", "label-values", "flags")
    assert docs.render(text) == text, "docs/reference.md is out of date: run `make docs`"


def test_dcgm_guide_name_map_matches_the_code() -> None:
    text = DCGM_GUIDE.read_text()
    assert docs.sections_in(text) == ("dcgm-to-gpu", "gpu-to-dcgm")
    assert docs.render(text, docs.sections_in(text)) == text, "run `make docs`"


# Fields the guide names as what dcgm-exporter has and gpu-exporter does not.
DCGM_FIELDS_WE_LACK = {
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES",
}


def test_every_name_the_dcgm_guide_writes_is_served() -> None:
    text = DCGM_GUIDE.read_text()
    ours = {m.name for m in METRICS}
    for name in set(re.findall(r"\bgpu_[a-z0-9_]+", text)) - {"gpu_instance"}:
        if name.endswith("_"):  # a family written as gpu_mig_*
            assert any(m.startswith(name) for m in ours), name
        else:
            assert name in ours, name
    # OpenMetrics' name for a counter, as the guide says it would be: the field with _total
    dcgm = {n.removesuffix("_total") for n in re.findall(r"\bDCGM_FI_[A-Za-z0-9_]+", text)}
    for prefix in {name for name in dcgm if name.endswith("_")}:  # DCGM_FI_PROF_*
        assert any(m.startswith(prefix) for m in DCGM_BY_NAME), prefix
        dcgm.remove(prefix)
    assert dcgm - set(DCGM_BY_NAME) - set(DCGM_LABELS) == DCGM_FIELDS_WE_LACK
    assert not DCGM_FIELDS_WE_LACK & set(DCGM_BY_NAME)


def test_reference_lists_every_metric_and_flag() -> None:
    text = REFERENCE.read_text()
    for metric in METRICS:
        assert f"`{metric.name}`" in text
    for option in OPTIONS:
        assert f"--{option.key}" in text
    for collector in COLLECTORS:
        assert f"collector.{collector.name}" in text


def test_readme_first_screen_has_the_two_commands() -> None:
    first_screen = "\n".join(README.read_text().splitlines()[:25])
    assert "make demo" in first_screen
    assert "make test" in first_screen


def test_help_lists_every_flag_and_collector() -> None:
    text = build_parser().format_help()
    for option in OPTIONS:
        assert f"--{option.key}" in text
    for collector in COLLECTORS:
        assert collector.name in text


def test_help_shows_that_the_negative_boolean_form_takes_no_value() -> None:
    text = build_parser().format_help()
    assert "--web.ui[=true|false], --no-web.ui\n" in text
    assert "--no-web.ui [" not in text and "--no-compat.dcgm [" not in text


def test_docs_render_rejects_a_readme_without_markers() -> None:
    with pytest.raises(ValueError, match="generated:metrics"):
        docs.render("no markers here")


def test_reference_says_of_every_counter_whether_it_can_go_backwards() -> None:
    """The README once promised that no counter goes backwards while the exporter runs, but
    a GPU reset zeroes the driver's energy and error counters, which are passed through.
    Every counter is now in one of two lists: integrated by the exporter (never goes
    backwards), or the driver's or kernel's (restarts from 0 on a reset)."""
    text = REFERENCE.read_text()
    start = text.index("Counters are of two kinds:")
    section = text[start : text.index("<!-- BEGIN generated:metrics -->", start)]
    own, passed = section.split("**The driver's or the kernel's, passed through as read**")
    assert "never going backwards" in own and "restart from 0" in passed
    assert "counters never go backwards while the exporter runs" not in text
    for spec in METRICS:
        if spec.type != "counter":
            continue
        named = f"`{spec.name}`" in section or (
            spec.name.startswith("gpu_mig_") and "the `gpu_mig_` ones" in own
        )
        assert named, f"{spec.name}: say in docs/reference.md whether it can go backwards"


# The README leads a new user: quick start, install, scrape, dashboards, alerts,
# Kubernetes, then links. Reference detail lives in docs/, so the README stays short
# enough to read (issue 22, item 11).
README_MAX_LINES = 260
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """`text` without fenced code blocks and inline code, where a link is not a link."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of the headings of `page` (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if not re.match(r"#{1,6} ", line):
            continue
        slug = github_anchor(line.lstrip("#"))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(f"{slug}-{count}" if count else slug)
    return anchors


def _pages() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def test_readme_stays_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move detail to docs/"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_every_relative_link_points_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: {linked.name} has no heading #{anchor}")
    assert not broken, f"{page.name}: {broken}"


def test_the_readme_links_every_docs_page() -> None:
    linked = {
        (REPO / target.partition("#")[0]).resolve()
        for target in LINK.findall(_prose(README.read_text()))
    }
    for page in sorted((REPO / "docs").glob("*.md")):
        assert page.resolve() in linked, f"README.md does not link {page.relative_to(REPO)}"


def test_make_docs_regenerates_every_file_with_generated_sections() -> None:
    """The markers moved once (README to docs/reference.md); `make docs` must follow them."""
    holders = {
        str(path.relative_to(REPO))
        for folder in (REPO, REPO / "docs", REPO / "benchmarks")
        for path in folder.glob("*.md")
        if docs.sections_in(path.read_text())
    } | {
        str(path.relative_to(REPO))
        for path in (REPO / "gpu_exporter" / "serving" / "static").glob("*.html")
        if docs.sections_in(path.read_text())
    }
    assert {"docs/reference.md", "gpu_exporter/serving/static/runbooks.html"} <= holders
    target = re.search(r"^docs:.*\n\t(.*)$", (REPO / "Makefile").read_text(), re.M)
    assert target, "the Makefile has no docs target"
    assert set(target.group(1).split("--write", 1)[1].split()) == holders


def test_the_readme_scrape_snippet_feeds_the_alert_rules() -> None:
    """The snippet a new user copies must name the job the shipped alerts select, or
    GPUExporterDown never fires for their exporters."""
    text = README.read_text()
    section = text[text.index("## Scrape it with Prometheus") :]
    snippet = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert len(snippet.splitlines()) <= 6, snippet
    (job,) = yaml.safe_load(snippet)["scrape_configs"]
    rules = (REPO / "deploy" / "prometheus" / "rules" / "gpu-alerts.yml").read_text()
    assert f'up{{job="{job["job_name"]}"}}' in rules
    for target in job["static_configs"][0]["targets"]:
        assert target.endswith(":9872"), target


def _section(heading: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _unwrapped(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text)


NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight")


def test_the_readme_names_the_runtime_dependencies_and_debian_packages_the_code_uses() -> None:
    intro = _unwrapped(README.read_text().split("\n## ", 1)[0])
    pyproject = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[\n(.*?)^\]", pyproject, re.M | re.S)
    assert block, "pyproject.toml declares no dependencies"
    dependencies = re.findall(r'^\s*"([A-Za-z0-9_.-]+)', block.group(1), re.M)
    assert f"its {NUMBER_WORDS[len(dependencies)]} runtime dependencies" in intro
    listed = _unwrapped(_section("Install on a GPU host")).split("Runtime dependencies:")[1]
    for name in dependencies:
        assert f"`{name}`" in listed, name
    # the packages `make system-deps` installs, as `make test` does
    makefile = (REPO / "Makefile").read_text()
    install = re.search(r"apt-get install -y -qq --no-install-recommends \\\n\s*(.*?) >", makefile)
    assert install, "the Makefile's system-deps target installs no Debian package"
    packages = install.group(1).split()
    named = re.search(r"installs the Debian packages (.*?) when they are missing", intro)
    assert named, intro
    assert re.findall(r"`([^`]+)`", named.group(1)) == packages


def test_the_readme_lists_every_print_config_name() -> None:
    install = _unwrapped(_section("Install on a GPU host"))
    listed = install.split("--print-config systemd` (also", 1)[1].split(";", 1)[0]
    names = ["systemd", *re.findall(r"`([^`]+)`", listed)]
    assert names == [" ".join(words) for words in CONFIGS]


def test_the_readme_alerts_steps_make_a_config_promtool_accepts(tmp_path: Path) -> None:
    """Steps 1 and 2 (the rule files and the alerting block) with the scrape snippet are
    a working Prometheus configuration; steps 3 and 4 name the receivers and the flag."""
    section = _section("Alerts and Alertmanager")
    commands = re.findall(r"gpu-exporter --print-config ([a-z ]+?) >\s*([^\s`]+)", section)
    assert [(words, Path(path).name) for words, path in commands] == [
        ("rules recording", "gpu-recording.yml"),
        ("rules alerts", "gpu-alerts.yml"),
        ("alertmanager", "alertmanager.yml"),
    ]
    snippet = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    example = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    assert snippet["rule_files"] == example["rule_files"]
    assert snippet["alerting"] == example["alerting"]
    scrape = _section("Scrape it with Prometheus").split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "rules").mkdir()
    for words, path in commands[:2]:
        rules = REPO / "deploy/prometheus/rules" / Path(path).name
        assert CONFIGS[tuple(words.split())] == str(rules.relative_to(REPO))
        (tmp_path / "rules" / rules.name).write_bytes(rules.read_bytes())
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({**snippet, **yaml.safe_load(scrape)}))
    checked = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 2 rule files found" in checked.stdout + checked.stderr
    receivers = yaml.safe_load((REPO / "deploy/alertmanager/alertmanager.yml").read_text())
    for receiver in receivers["receivers"]:
        assert f"`{receiver['name']}`" in section, receiver["name"]
    assert "--cluster.listen-address=\n" in section
    assert "make demo-alerts" in section
