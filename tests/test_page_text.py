"""Text from the host on the live page and in `/api/overview`: invisible characters are
shown as markers (`overview.visible`), and a long name is cut on the page with its whole
text on hover (`page._clip`). Rendered from synthetic samples; tests/test_live_page.py
drives the real program and a browser."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from benchmarks.history_memory import snapshot, static
from gpu_exporter.model import Attribution, ProcessSample, Snapshot
from gpu_exporter.sampling.history import WINDOWS, History
from gpu_exporter.serving import overview, page
from gpu_exporter.serving.overview import visible
from tests.support.browser import strings

DISGUISED = "\u202enohtyp"  # shows as "python" where bidi controls are obeyed
LONG = "trainer_" + "x" * 9_992  # 10,000 characters, no place to break

HIDDEN = [
    *range(0x202A, 0x202F),  # bidi embeddings and overrides (LRE, RLE, PDF, LRO, RLO)
    *range(0x2066, 0x206A),  # bidi isolates (LRI, RLI, FSI, PDI)
    *range(0x200B, 0x2010),  # zero-width space, non-joiner, joiner; LRM, RLM
    0x2060,  # word joiner
    0xFEFF,  # zero-width no-break space (BOM)
    0x061C,  # Arabic letter mark
    0x00AD,  # soft hyphen
    0x0000,  # Cc: NUL, BEL, ESC, DEL, NEL
    0x0007,
    0x001B,
    0x007F,
    0x0085,
    0x2028,  # Zl
    0x2029,  # Zp
    0x00A0,  # Zs other than the space: no-break space, ideographic space
    0x3000,
    0x3164,  # Hangul filler: a letter drawn as nothing
    0xFE0F,  # variation selector
    0x034F,  # combining grapheme joiner
    0xE0041,  # tag letter A
    0xE000,  # Co: private use
    0x0378,  # Cn: unassigned
    0xDC80,  # Cs: a lone surrogate (surrogateescape)
]


@pytest.mark.parametrize("code", HIDDEN, ids=lambda c: f"U+{c:04X}")
def test_a_character_that_shows_nothing_is_written_as_its_code_point(code: int) -> None:
    assert visible(f"py{chr(code)}thon") == f"py⟨U+{code:04X}⟩thon"


def test_a_right_to_left_override_cannot_pass_for_python() -> None:
    assert visible(DISGUISED) == "⟨U+202E⟩nohtyp"


@pytest.mark.parametrize(
    "text", ["python3", "pt_main_thread", "my job (2)", "日本語", "Ωmega", "café", "cafe\u0301"]
)
def test_printable_text_is_left_alone(text: str) -> None:
    assert visible(text) == text


def process_snapshot(*names: str) -> Snapshot:
    """The benchmark's one GPU with one process per name, each with the name as its user
    and its systemd unit too."""
    base = snapshot(0.0, [static(0)])
    processes = tuple(
        ProcessSample(
            pid=str(100 + k), process=name, user=name, context="compute", systemd_unit=name
        )
        for k, name in enumerate(names)
    )
    device = replace(
        base.devices[0],
        attribution=Attribution(
            processes=processes, unattributed_memory_bytes=0, process_count=len(processes)
        ),
    )
    return replace(base, devices=(device,))


def build(snap: Snapshot) -> dict[str, Any]:
    history = History()
    history.add(snap)
    # through JSON, as /api/overview serves it
    doc: dict[str, Any] = json.loads(json.dumps(overview.build(snap, history, WINDOWS["5m"])))
    return doc


def render(doc: dict[str, Any]) -> str:
    html = page.render(doc, telemetry_path="/metrics", ready="ok", live="ok", simulated=True)
    return html.decode()


def test_the_api_and_the_page_show_the_override_as_a_marker() -> None:
    doc = build(process_snapshot(DISGUISED, "ok\u200bname"))
    [disguised, zero_width] = doc["gpus"][0]["processes"]
    assert disguised["process"] == disguised["user"] == "⟨U+202E⟩nohtyp"
    assert disguised["job"] == "⟨U+202E⟩nohtyp"
    assert zero_width["process"] == "ok⟨U+200B⟩name"
    assert not [s for s in strings(doc) if s != visible(s)]
    html = render(doc)
    assert not [c for c in html if c != "\n" and visible(c) != c]
    assert '<span class="hidden-char">⟨U+202E⟩</span>nohtyp' in html


def test_a_verdict_quoting_a_disguised_process_shows_the_marker() -> None:
    """The input-bound verdict names the process that burns the CPU."""
    history = History()
    base = process_snapshot(DISGUISED)
    for t in range(20):
        snap = snapshot(float(t), [static(0)])
        device = replace(
            snap.devices[0],
            busy_seconds=0.1 * t,
            attribution=replace(
                base.devices[0].attribution,  # type: ignore[arg-type]
                processes=(
                    replace(
                        base.devices[0].attribution.processes[0],  # type: ignore[union-attr]
                        cpu_seconds=4.0 * t,
                        workers=2,
                    ),
                ),
            ),
        )
        snap = replace(snap, devices=(device,))
        history.add(snap)
    doc = overview.build(snap, history, WINDOWS["5m"])
    [verdict] = [v for v in doc["gpus"][0]["verdicts"] if v["name"] == "input-bound"]
    assert "while ⟨U+202E⟩nohtyp (pid 100)" in verdict["summary"]


def test_a_long_name_is_cut_with_an_ellipsis_and_whole_on_hover() -> None:
    doc = build(process_snapshot(LONG, "python"))
    assert doc["gpus"][0]["processes"][0]["process"] == LONG  # the API keeps it whole
    html = render(doc)
    cells = re.findall(r'<span class="clipped" title="([^"]*)">([^<]*)</span>', html)
    assert cells and all(title == LONG for title, _ in cells)
    assert all(len(shown) == page.NAME_MAX_CHARS and shown.endswith("…") for _, shown in cells)
    assert len(cells) == 3  # user, process and job of the long one; python is not cut
    assert '<td class="name" data-label="process">python</td>' in html


def test_a_cut_never_splits_a_marker() -> None:
    name = "x" * (page.NAME_MAX_CHARS - 4) + "\u202e" + "y" * 10
    html = render(build(process_snapshot(name)))
    [shown] = set(re.findall(r'<span class="clipped" title="[^"]*">(.*?)…</span>', html))
    assert shown == "x" * (page.NAME_MAX_CHARS - 4)
