"""A MIG GPU's instances on the live page: one table row each (profile, memory used and
total, activity, processes), each instance's verdicts in a row under its own. Rendered
from a synthetic sample; tests/test_live_page.py looks at the simulated MIG GPU in a
browser."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from gpu_exporter.model import MemoryPattern, ProcessSample, Snapshot
from gpu_exporter.sampling.history import WINDOWS, History
from gpu_exporter.serving import overview, page
from tests.support.snapshots import mig_snapshot

GIB = 1024**3


def mig_page() -> tuple[dict[str, object], str]:
    processes = (
        ProcessSample(
            pid="7", process="\u202enohtyp", user="u", context="compute", gpu_instance="5"
        ),
        ProcessSample(pid="8", process="server", user="u", context="compute", gpu_instance="1"),
    )
    snap = mig_snapshot(
        {1: ("3g.40gb", 39 * GIB, 40 * GIB, 0.9), 5: ("1g.10gb", GIB, 10 * GIB, 0.0)}, processes
    )
    snap = with_patterns(snap, {1: pressure(39 / 40)})
    history = History()
    history.add(snap)
    doc = json.loads(json.dumps(overview.build(snap, history, WINDOWS["5m"])))
    html = page.render(doc, telemetry_path="/metrics", ready="ok", live="ok", simulated=True)
    return doc, html.decode()


def pressure(ratio: float, drops: int = 3, pattern: str = "pressure") -> MemoryPattern:
    return MemoryPattern(pattern, drops, 0.0, 0, recent_drops=drops, used_ratio=ratio)


def with_patterns(snap: Snapshot, patterns: dict[int, MemoryPattern]) -> Snapshot:
    """The sample with its MIG instances' memory patterns (memory_patterns.py judges them;
    here they are given)."""
    return replace(snap, devices=(replace(snap.devices[0], mig_memory_patterns=patterns),))


def test_each_instance_is_a_row_with_its_memory_activity_and_processes() -> None:
    doc, html = mig_page()
    [gpu] = doc["gpus"]  # type: ignore[index]
    assert [(m["activity_ratio"], m["processes"]) for m in gpu["mig"]] == [
        (0.9, ["server"]),
        (0.0, ["⟨U+202E⟩nohtyp"]),
    ]
    rows = re.findall(r'<tr data-gpu-instance="(\d+)"[^>]*>(.*?)</tr>', html)
    assert [gi for gi, _ in rows] == ["1", "5"]
    cells = [
        re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", rows[0][1])
    ]
    assert cells == ["GI 1 CI 0", "3g.40gb MIG-1", "39.0 GiB of 40.0 GiB", "90%", "server"]
    assert '<span class="hidden-char">⟨U+202E⟩</span>nohtyp' in rows[1][1]
    assert '<ul class="mig">' not in html and "<li>GI" not in html


def test_each_instance_shows_its_own_verdicts_under_its_row() -> None:
    doc, html = mig_page()
    [gpu] = doc["gpus"]  # type: ignore[index]
    assert [[v["name"] for v in m["verdicts"]] for m in gpu["mig"]] == [
        ["near-oom"],
        ["idle-allocated"],
    ]
    table = html[html.index('<table class="mig">') : html.index("</table>")]
    order = re.findall(r'data-gpu-instance="(\d+)"|data-verdict="([\w-]+)"', table)
    assert order == [("1", ""), ("", "near-oom"), ("5", ""), ("", "idle-allocated")]
    assert "Memory 98% full and under pressure: it dropped and climbed back" in table
    assert "1 process(es) hold this instance, but it is 0% active." in table


def test_the_gpu_s_near_oom_verdict_names_every_instance_at_risk() -> None:
    snap = mig_snapshot(
        {
            1: ("3g.40gb", 39 * GIB, 40 * GIB, 0.9),
            2: ("2g.20gb", int(19.5 * GIB), 20 * GIB, 0.9),
            5: ("1g.10gb", int(9.9 * GIB), 10 * GIB, 0.9),
        },
        (),
    )
    snap = with_patterns(
        snap,
        {
            1: pressure(39 / 40),
            2: pressure(19.5 / 20, 0, "sharing"),
            5: pressure(0.99, 0, "reserved"),  # a reservation held flat: no risk
        },
    )
    history = History()
    history.add(snap)
    doc = json.loads(json.dumps(overview.build(snap, history, WINDOWS["5m"])))
    [gpu] = doc["gpus"]
    [near_oom] = [v["summary"] for v in gpu["verdicts"] if v["name"] == "near-oom"]
    assert near_oom == ("MIG instances 1 (98%, pressure), 2 (98%, sharing): near full and at risk.")
    html = page.render(doc, telemetry_path="/metrics", ready="ok", live="ok", simulated=True)
    assert near_oom in html.decode()
