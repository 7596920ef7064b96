"""README, --help and the code's catalogue stay in step."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_exporter import docs
from gpu_exporter.config import OPTIONS, build_parser
from gpu_exporter.metrics.catalogue import COLLECTORS, METRICS
from gpu_exporter.metrics.dcgm import DCGM_BY_NAME, DCGM_LABELS

README = Path(__file__).resolve().parents[1] / "README.md"
DCGM_GUIDE = README.parent / "docs" / "migrating-from-dcgm-exporter.md"


def test_readme_reference_sections_match_the_code() -> None:
    text = README.read_text()
    assert docs.render(text) == text, "README is out of date: run `make docs`"


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


def test_help_shows_that_the_negative_boolean_form_takes_no_value() -> None:
    text = build_parser().format_help()
    assert "--web.ui[=true|false], --no-web.ui\n" in text
    assert "--no-web.ui [" not in text and "--no-compat.dcgm [" not in text


def test_docs_render_rejects_a_readme_without_markers() -> None:
    import pytest

    with pytest.raises(ValueError, match="generated:metrics"):
        docs.render("no markers here")


def test_readme_says_of_every_counter_whether_it_can_go_backwards() -> None:
    """The README once promised that no counter goes backwards while the exporter runs, but
    a GPU reset zeroes the driver's energy and error counters, which are passed through.
    Every counter is now in one of two lists: integrated by the exporter (never goes
    backwards), or the driver's or kernel's (restarts from 0 on a reset)."""
    text = README.read_text()
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
        assert named, f"{spec.name}: say in the README whether it can go backwards"
