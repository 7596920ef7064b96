"""README, --help and the code's catalogue stay in step."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter import docs
from gpu_exporter.config import OPTIONS, build_parser
from gpu_exporter.metrics.catalogue import COLLECTORS, METRICS

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_reference_sections_match_the_code() -> None:
    text = README.read_text()
    assert docs.render(text) == text, "README is out of date: run `make docs`"


def test_readme_lists_every_metric_and_flag() -> None:
    text = README.read_text()
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


def test_docs_render_rejects_a_readme_without_markers() -> None:
    import pytest

    with pytest.raises(ValueError, match="generated:metrics"):
        docs.render("no markers here")
