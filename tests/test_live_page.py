"""The live page at `/` and `/api/overview`, against the real program over loopback.

A real headless Chromium (tests/support/browser.py) loads the page of `--simulate 4` once
its history has built up; the JSON endpoint's shape, windows and bounds; basic auth in
front of the page, its assets and the endpoint; the Content-Security-Policy; nothing
from another host; and `--web.ui=false`.

The simulated host (sources/simulated.py) has one GPU per condition: GPU 0 is
input-starved, GPU 1 holds memory no process owns, GPU 2 is near OOM, GPU 3 is MIG.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from benchmarks.history_memory import snapshot, static
from gpu_exporter.config import load_settings
from gpu_exporter.daemon import Exporter as Daemon
from gpu_exporter.sampling.history import History
from gpu_exporter.serving.page import NAME_MAX_CHARS
from tests.support.browser import chromium, open_live_page, overview, strings, wait_for_history
from tests.support.exporter import Exporter, start_exporter, values
from tests.support.packaging import build, copy_source
from tests.support.web import PASSWORD, basic, call, wait_serving, write

pytestmark = pytest.mark.e2e

GPU_SERIES = {
    "times",
    "busy_ratio",
    "utilization_ratio",
    "sm_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_watts",
    "power_limit_watts",
    "temperature_celsius",
    "slowdown_celsius",
    "power_capped_ratio",
    "thermal_throttled_ratio",
}
UI_PATHS = ("/", "/static/page.js", "/static/page.css", "/api/overview")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    """`--simulate 4` sampling every 200 ms, with history built up (shared by the module)."""
    exporter = start_exporter(
        ["--simulate", "4", "--collect.interval", "200ms"], tmp_path_factory.mktemp("live")
    )
    try:
        wait_for_history(
            exporter,
            points=16,
            verdicts={"input-bound", "memory-leaked", "near-oom", "power-capped"},
        )
        yield exporter
    finally:
        exporter.stop()


def by_index(doc: Any) -> dict[int, Any]:
    return {gpu["index"]: gpu for gpu in doc["gpus"]}


# --- the page in a real browser -------------------------------------------------------


def test_the_page_in_a_browser_shows_every_gpu_its_charts_and_verdicts(
    simulated: Exporter, tmp_path: Path
) -> None:
    gpus = by_index(overview(simulated))
    with chromium() as browser:
        page = open_live_page(browser, simulated.url + "/")
        page.screenshot(path=str(tmp_path / "live-page.png"), full_page=True)

        cards = page.locator("[data-gpu-uuid]")
        assert sorted(cards.evaluate_all("cs => cs.map(c => c.dataset.gpuUuid)")) == sorted(
            gpu["uuid"] for gpu in gpus.values()
        )
        for gpu in gpus.values():
            card = page.locator(f'[data-gpu-uuid="{gpu["uuid"]}"]')
            assert gpu["name"] in card.locator("h2").inner_text()
            assert gpu["uuid"] in card.inner_text()
            points = card.locator("svg[data-series]").evaluate_all(
                "cs => cs.map(c => [c.dataset.chart, Number(c.dataset.points)])"
            )
            charts = dict(points)
            assert {"busy", "sm", "memory", "power", "temperature"} <= set(charts), charts
            assert all(n > 0 for n in charts.values()), charts
            lines = card.locator("svg[data-chart=memory] path.line").get_attribute("d")
            assert lines is not None and lines.count("L") >= 2  # a line, not a dot

        def verdict(index: int, name: str) -> str:
            card = page.locator(f'[data-gpu-uuid="{gpus[index]["uuid"]}"]')
            return card.locator(f'[data-verdict="{name}"]').inner_text()

        assert "num_workers" in verdict(0, "input-bound")
        assert "pin_memory=True" in verdict(0, "input-bound")
        # the advice's commands and settings are set as code, never as `backticks`
        code = page.locator("[data-verdict=input-bound] em code").all_inner_texts()
        assert code == ["num_workers", "pin_memory=True"], code
        advice = page.locator("ul.verdicts li em").all_inner_texts()
        assert advice and not [a for a in advice if "`" in a], advice
        leaked = verdict(1, "memory-leaked")
        assert "GiB" in leaked and "fuser -v /dev/nvidia*" in leaked
        assert "exited" in leaked  # the simulated crashed owner the driver still lists
        assert "%" in verdict(2, "near-oom")
        # the GPU at its power cap says so, with the reason
        assert "sw_power_cap" in verdict(3, "power-capped")
        # process rows carry their pid
        pids = page.locator("tr[data-pid]").evaluate_all("rs => rs.map(r => r.dataset.pid)")
        expected = [str(p["pid"]) for gpu in gpus.values() for p in gpu["processes"]]
        assert sorted(pids) == sorted(expected) and pids
        # the window buttons switch the charts' span
        page.locator('a[data-window="1h"]').click()
        page.wait_for_function("() => document.body.dataset.window === '1h'")
        assert "1 h" in (page.locator("svg[data-chart=busy]").first.text_content() or "")
    assert (tmp_path / "live-page.png").stat().st_size > 10_000


LAYOUT = """() => {
  const width = document.documentElement.clientWidth;
  const off = [...document.querySelectorAll(
    "header, section.host, article.gpu, ul.verdicts li, figure.chart, svg, p.legend, div.scroll"
  )].filter((e) => {
    const box = e.getBoundingClientRect();
    return box.left < 0 || box.right > width + 0.5;
  }).map((e) => `${e.tagName}.${e.getAttribute("class")} ${e.getBoundingClientRect().right}`);
  const lines = (e) => {
    const range = document.createRange();
    range.selectNodeContents(e);
    return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
  };
  const broken = [...document.querySelectorAll("table th, table td")]
    .filter((c) => !/\\s/.test(c.textContent.trim()) && lines(c) > 1)
    .map((c) => c.textContent);
  const scrolled = [...document.querySelectorAll("div.scroll")]
    .filter((e) => e.scrollWidth > e.clientWidth + 1)
    .map((e) => `${e.firstElementChild.className} ${e.scrollWidth} > ${e.clientWidth}`);
  const cells = [...document.querySelectorAll("table td")].filter((c) => {
    const box = c.getBoundingClientRect();
    return box.left < 0 || box.right > width + 0.5;
  }).map((c) => c.textContent);
  const uuids = [...document.querySelectorAll("table.mig code")].map(lines);
  return { width, scroll: document.documentElement.scrollWidth, off, broken, scrolled, cells,
           uuids };
}"""


@pytest.mark.parametrize("width", [360, 768, 1440])
def test_the_page_fits_a_phone_a_tablet_and_a_laptop(simulated: Exporter, width: int) -> None:
    with chromium() as browser:
        page = open_live_page(browser, simulated.url + "/", width=width)
        layout = page.evaluate(LAYOUT)
    assert layout["width"] == width
    # nothing scrolls sideways; every card, verdict, chart and table box is on screen
    assert layout["scroll"] <= width, layout
    assert layout["off"] == [], layout
    # and no word or number in a table is broken over lines
    assert layout["broken"] == [], layout
    # every column of every table on screen: none scrolls in its own box (the process
    # table's eight columns fit a tablet; on a phone each row is a grid of labelled
    # cells), and a MIG UUID takes at most two lines
    assert layout["scrolled"] == [] and layout["cells"] == [], layout
    assert layout["uuids"] and max(layout["uuids"]) <= 2, layout


def test_the_busy_chart_has_a_legend_in_the_colours_of_its_lines(simulated: Exporter) -> None:
    gpus = by_index(overview(simulated))
    with chromium() as browser:
        page = open_live_page(browser, simulated.url + "/")
        chart = page.locator("figure.chart:has(svg[data-chart=busy])").first
        keys = chart.locator(".legend .key").evaluate_all(
            """ks => ks.map((k) => [k.dataset.key, k.textContent,
                getComputedStyle(k.querySelector('.swatch')).backgroundColor])"""
        )
        strokes = dict(
            chart.locator("path.line").evaluate_all(
                "ps => ps.map((p) => [p.classList[2], getComputedStyle(p).stroke])"
            )
        )
        # a MIG GPU's busy ratio is GPM's graphics-engine activity: its legend says so
        mig = page.locator(f'[data-gpu-uuid="{gpus[3]["uuid"]}"] svg[data-chart=busy]')
        mig_keys = dict(
            mig.locator("xpath=..")
            .locator(".legend .key")
            .evaluate_all("ks => ks.map((k) => [k.dataset.key, k.textContent])")
        )
    assert mig_keys["busy_ratio"] == "graphics-engine activity (GPM)", mig_keys
    assert "not reported under MIG" in mig_keys["utilization_ratio"], mig_keys
    legend = {key: (text, colour) for key, text, colour in keys}
    assert "true busy ratio" in legend["busy_ratio"][0]
    assert "instantaneous utilization" in legend["utilization_ratio"][0]
    assert legend["busy_ratio"][1] == strokes["busy_ratio"]
    assert legend["utilization_ratio"][1] == strokes["utilization_ratio"]
    assert strokes["busy_ratio"] != strokes["utilization_ratio"]


def test_a_flickering_value_draws_as_a_band_with_its_mean_as_a_line(simulated: Exporter) -> None:
    gpus = by_index(overview(simulated))
    with chromium() as browser:
        page = open_live_page(browser, simulated.url + "/")
        svg = page.locator(f'[data-gpu-uuid="{gpus[0]["uuid"]}"] svg[data-chart=busy]')
        drawn = svg.evaluate(
            """(svg) => ({
              points: Number(svg.dataset.points),
              paths: [...svg.querySelectorAll("g.lines path")].map((p) => {
                const box = p.getBBox();
                return [p.getAttribute("class"), p.getAttribute("d"),
                        box.y, box.y + box.height, getComputedStyle(p).fillOpacity];
              }),
            })"""
        )
    paths = {cls: (d, top, bottom, opacity) for cls, d, top, bottom, opacity in drawn["paths"]}
    # each series, back to front: its band (range per column), then its mean line above
    assert list(paths) == [
        "band s0 utilization_ratio",
        "line s0 utilization_ratio",
        "band s1 busy_ratio",
        "line s1 busy_ratio",
    ]
    for name in ("utilization_ratio", "busy_ratio"):
        band, _, band_bottom, opacity = paths[f"band s{'01'[name == 'busy_ratio']} {name}"]
        line, line_top, line_bottom, _ = paths[f"line s{'01'[name == 'busy_ratio']} {name}"]
        assert band.endswith("Z") and float(opacity) < 1  # a closed, see-through area
        # the mean lies within the range, and is one vertex per column, not per point
        _, band_top, _, _ = paths[f"band s{'01'[name == 'busy_ratio']} {name}"]
        assert band_top - 0.5 <= line_top and line_bottom <= band_bottom + 0.5
        vertices = line.count("L") + line.count("M")
        assert 2 <= vertices < drawn["points"] / 2, (vertices, drawn["points"])


def test_a_young_history_says_since_when_in_the_long_windows(simulated: Exporter) -> None:
    doc = overview(simulated, "1h")
    first = min(gpu["history"]["times"][0] for gpu in doc["gpus"])
    last = doc["timestamp_seconds"]
    allowed = {
        time.strftime("%H:%M", time.gmtime(t)) for t in range(int(first) - 60, int(last) + 120, 30)
    }
    with chromium() as browser:
        page = open_live_page(browser, simulated.url + "/?window=1h")
        said = page.locator("svg[data-series] text.since").all_text_contents()
        charts = page.locator("svg[data-series]").count()
        before = page.locator("svg[data-series] rect.before").count()
    assert len(said) == charts == before and said, said
    for text in said:
        match = re.fullmatch(r"history since (\d\d:\d\d)", text)
        assert match and match.group(1) in allowed, (text, sorted(allowed))


def test_reference_lines_are_drawn_under_the_data_dashed_and_see_through(
    simulated: Exporter,
) -> None:
    gpus = by_index(overview(simulated))
    with chromium() as browser:
        page = open_live_page(browser, simulated.url + "/")
        # GPU 3 runs at 690 to 700 W under its 700 W limit line
        svg = page.locator(f'[data-gpu-uuid="{gpus[3]["uuid"]}"] svg[data-chart=power]')
        found = svg.evaluate(
            """(svg) => {
              const lines = svg.querySelector("g.lines");
              return [...svg.querySelectorAll(".ref")].map((r) => [
                r.tagName,
                Boolean(r.compareDocumentPosition(lines) & Node.DOCUMENT_POSITION_FOLLOWING),
                getComputedStyle(r).strokeDasharray,
                Number(getComputedStyle(r).strokeOpacity) * Number(getComputedStyle(r).opacity),
              ]);
            }"""
        )
        key = tuple(
            svg.locator("xpath=..")
            .locator(".legend [data-key=ref]")
            .evaluate("(k) => [k.textContent, getComputedStyle(k.firstChild).borderTopStyle]")
        )
        # no label in any plot but "history since" (drawn where there is no data yet)
        inside = page.evaluate(
            """() => [...document.querySelectorAll("svg[data-series]")].flatMap((svg) => {
              const plot = svg.querySelector("rect.plot").getBoundingClientRect();
              return [...svg.querySelectorAll("text:not(.since)")].filter((t) => {
                const box = t.getBoundingClientRect();
                return box.left < plot.right - 0.5 && box.right > plot.left + 0.5
                  && box.top < plot.bottom - 0.5 && box.bottom > plot.top + 0.5;
              }).map((t) => `${svg.dataset.chart}: ${t.textContent}`);
            })"""
        )
    assert [tag for tag, *_ in found] == ["line"], found
    for _, data_above, dashes, opacity in found:
        assert data_above, found  # painted later: the data is on top
        assert opacity < 1 and dashes not in ("", "none"), found
    # its name is in the legend, with a dashed swatch, not in the plot on the data
    assert key == ("limit: 700 W", "dashed"), key
    assert inside == [], inside


def test_mig_instances_are_a_table_with_their_own_verdicts(simulated: Exporter) -> None:
    gpus = by_index(overview(simulated))
    with chromium() as browser:
        page = open_live_page(browser, simulated.url + "/")
        table = page.locator(f'[data-gpu-uuid="{gpus[3]["uuid"]}"] table.mig')
        head = table.locator("th").all_inner_texts()
        rows = table.locator("tr[data-gpu-instance]").evaluate_all(
            "rs => rs.map((r) => [...r.cells].map((c) => c.innerText))"
        )
    assert [h.lower() for h in head] == [
        "mig instance",
        "profile",
        "memory used",
        "activity",
        "processes",
    ]
    assert [row[1].split()[0] for row in rows] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert all(re.fullmatch(r"[\d.]+ GiB of [\d.]+ GiB", row[2]) for row in rows), rows
    assert all(re.fullmatch(r"\d+%", row[3]) for row in rows), rows
    assert [row[4] for row in rows] == ["tritonserver", "none", "none"]


# --- the JSON endpoint ----------------------------------------------------------------


def test_overview_has_host_gpus_mig_verdicts_processes_and_history(simulated: Exporter) -> None:
    doc = overview(simulated)
    assert doc["backend"] == "simulated" and doc["windows"] == ["5m", "1h", "12h"]
    assert doc["window"] == {"name": "5m", "seconds": 300.0, "step_seconds": 1.0, "max_points": 301}
    assert doc["interval_seconds"] == 0.2  # --collect.interval: the charts' gap rule
    host = doc["host"]
    assert host["cpus"] > 0 and 0 < host["memory_used_bytes"] < host["memory_total_bytes"]
    assert set(host["history"]) == {"times", "cpu_ratio", "memory_used_bytes", "memory_total_bytes"}
    gpus = by_index(doc)
    assert sorted(gpus) == [0, 1, 2, 3]
    for gpu in gpus.values():
        assert set(gpu["history"]) == GPU_SERIES
        times = gpu["history"]["times"]
        assert times == sorted(times) and times[-1] <= doc["timestamp_seconds"]
        assert all(len(gpu["history"][name]) == len(times) for name in GPU_SERIES - {"times"})
        assert all(set(v) == {"name", "level", "summary", "advice"} for v in gpu["verdicts"])
    # the busy ratio is the counters' truth, the utilization the gauge's flicker
    # (its mean: one point's delta jitters with the sampler's timing on a loaded machine)
    busy = [v for v in gpus[0]["history"]["busy_ratio"] if v is not None]
    assert busy and all(0.0 <= v <= 1.0 for v in busy)
    assert 0.3 < sum(busy) / len(busy) < 0.65, busy
    # (the gauge flips between 0 and 95%; a 1-second point is the mean of its samples)
    assert all(0.0 <= v <= 0.95 for v in gpus[0]["history"]["utilization_ratio"] if v is not None)
    # MIG: no utilization reported, the busy ratio from graphics-engine activity instead
    assert set(gpus[3]["history"]["utilization_ratio"]) == {None}
    assert [gpu["busy_source"] for gpu in doc["gpus"]] == [*["busy_time"] * 3, "graphics_engine"]
    assert any(v is not None for v in gpus[3]["history"]["busy_ratio"])
    assert [m["profile"] for m in gpus[3]["mig"]] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    # processes: who holds memory, in which job, with its CPU
    [trainer] = gpus[0]["processes"]
    assert trainer["user"] == "alice" and trainer["workers"] == 4
    # the simulated trainer runs 4.2 cores (0.35 without its workers); its CPU is read
    # every 10 s and stamped with the sample's time, so on a loaded machine the first two
    # points can be 25% off (3.41 and 3.10 seen)
    assert trainer["job"].startswith("pod ") and trainer["cpu_cores"] > 2.5
    assert gpus[1]["processes"] == [] and gpus[1]["process_count"] == 0
    assert gpus[1]["unattributed_memory_bytes"] > 1024**3
    assert gpus[2]["processes"][0]["job"].startswith("slurm job ")
    assert [v["name"] for v in gpus[1]["verdicts"]] == ["memory-leaked"]


@pytest.mark.parametrize("window", ["5m", "1h", "12h"])
def test_each_window_stays_within_its_cap_and_span(simulated: Exporter, window: str) -> None:
    doc = overview(simulated, window)
    assert doc["window"]["name"] == window
    for gpu in doc["gpus"]:
        times = gpu["history"]["times"]
        assert 0 < len(times) <= doc["window"]["max_points"]
        assert times[0] >= doc["timestamp_seconds"] - doc["window"]["seconds"]
    # samples 200 ms apart: the 5-minute window's 1-second points are fewer than samples
    assert doc["window"]["step_seconds"] == {"5m": 1.0, "1h": 10.0, "12h": 60.0}[window]


@pytest.mark.parametrize("query", ["?window=2h", "?window=", "?window=5m&window=1h"])
def test_a_bad_window_is_a_400_that_names_the_choices(simulated: Exporter, query: str) -> None:
    result = simulated.get("/api/overview" + query)
    assert result.status == 400
    assert "window must be one of 5m, 1h, 12h" in result.text
    assert simulated.get("/" + query).status == 400


def test_nothing_comes_from_another_host_and_the_policy_says_so(simulated: Exporter) -> None:
    for path in UI_PATHS:
        result = simulated.get(path)
        assert result.status == 200, path
        policy = result.headers["Content-Security-Policy"]
        sources = {s for d in policy.split(";") for s in d.split()[1:]}
        assert sources == {"'self'"}, policy
        assert "default-src 'self'" in policy and "script-src 'self'" in policy
        if path != "/api/overview":
            assert not re.search(r"(https?:)?//[\w.-]", result.text), path
    page = simulated.get("/").text
    assert "<script>" not in page and " style=" not in page and "<style" not in page
    assert '<script src="static/page.js"' in page
    # relative links only: the page works behind a proxy that serves it under a prefix
    # (kubectl proxy's /api/v1/namespaces/.../proxy/, an ingress path)
    assert not re.search(r'(href|src)="/', page), page
    script = simulated.get("/static/page.js").text
    assert "fetch(" in script and not re.search(r"fetch\(\s*[`'\"]/", script)


# --- a hostile host: disguised and endless names, two GPUs with one UUID ---------------

DISGUISED = "\u202enohtyp"  # a right-to-left override: shows as "python"
LONG = "trainer_" + "x" * 9_992  # 10,000 characters with no place to break


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    """`--simulate 2` whose GPUs report one UUID (GPU 0 input-starved at 110 to 500 W,
    GPU 1 idle at 72 W), with real processes: `sleep` run as U+202E "nohtyp" on GPU 0, and
    on GPU 1 as a command whose name (its argv[0], which the 15-character kernel name
    starts) is 10,000 characters long."""
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / DISGUISED).symlink_to("/usr/bin/sleep")
    (tmp / LONG[:20]).symlink_to("/usr/bin/sleep")
    sleepers = [
        subprocess.Popen([str(tmp / DISGUISED), "600"]),
        subprocess.Popen([LONG, "600"], executable=str(tmp / LONG[:20])),
    ]
    scenario = tmp / "scenario.json"
    scenario.write_text(
        json.dumps(
            {
                "faults": {"same_uuid": [0, 1]},
                "processes": [
                    {"gpu": gpu, "pid": p.pid, "memory_bytes": 2 * 1024**3}
                    for gpu, p in enumerate(sleepers)
                ],
            }
        )
    )
    args = ["--simulate", "2", "--simulate.scenario", str(scenario), "--collect.interval", "200ms"]
    exporter = start_exporter(args, tmp)
    try:
        deadline = time.monotonic() + 60
        doc = wait_for_history(exporter, points=8, verdicts=set())
        while not all(g["processes"] and g["processes"][0]["process"] for g in doc["gpus"]):
            assert time.monotonic() < deadline, json.dumps(doc)[:2000]
            time.sleep(0.2)
            doc = overview(exporter)
        yield exporter
    finally:
        exporter.stop()
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_the_api_shows_a_disguised_name_as_a_marker_and_a_long_one_whole(
    hostile: Exporter,
) -> None:
    doc = overview(hostile)
    gpus = by_index(doc)
    assert gpus[0]["processes"][0]["process"] == "⟨U+202E⟩nohtyp"
    assert not [s for s in strings(doc) if "\u202e" in s]
    long = gpus[1]["processes"][0]["process"]
    assert long.startswith("trainer_xxxx") and len(long) > 4 * NAME_MAX_CHARS


def test_two_gpus_with_one_uuid_keep_their_own_history_and_are_logged_once(
    hostile: Exporter,
) -> None:
    gpus = by_index(overview(hostile))
    assert gpus[0]["uuid"] == gpus[1]["uuid"]
    power = {i: [w for w in gpus[i]["history"]["power_watts"] if w is not None] for i in gpus}
    assert power[1] and set(power[1]) == {72.0}, power  # idle: never the mean of the two
    assert power[0] and min(power[0]) >= 110.0, power
    busy = {i: [b for b in gpus[i]["history"]["busy_ratio"] if b is not None] for i in gpus}
    assert busy[1] and max(busy[1]) == 0.0, busy
    assert busy[0] and max(busy[0]) > 0.2, busy
    # the exposition tells them apart by `gpu` too
    samples = hostile.scrape()
    assert values(samples, "gpu_power_watts", gpu="1", uuid=gpus[1]["uuid"]) == [72.0]
    assert values(samples, "gpu_busy_seconds_total", gpu="1") == [0.0]  # its own counter
    warnings = [line for line in hostile.log().splitlines() if "same UUID" in line]
    assert len(warnings) == 1, hostile.log()
    assert gpus[0]["uuid"] in warnings[0] and "gpus=0,1" in warnings[0]


def test_the_page_keeps_its_cards_on_screen_whatever_the_names(hostile: Exporter) -> None:
    gpus = by_index(overview(hostile))
    with chromium() as browser:
        page = open_live_page(browser, hostile.url + "/")
        viewport = page.evaluate("() => document.documentElement.clientWidth")
        # nothing scrolls sideways, and the card with the long name is as wide as the other
        assert page.evaluate("() => document.documentElement.scrollWidth") <= viewport
        cards = page.locator("article.gpu")
        boxes = [cards.nth(i).bounding_box() for i in range(2)]
        assert all(box and box["x"] >= 0 and box["width"] <= viewport for box in boxes), boxes
        assert boxes[0] and boxes[1] and boxes[0]["width"] == boxes[1]["width"], boxes
        card = boxes[1]
        # the long name is cut with an ellipsis, whole on hover; every other column shows
        row = cards.nth(1).locator("tr[data-pid]")
        name = row.locator("td").nth(2).locator("span.clipped")
        assert name.get_attribute("title") == gpus[1]["processes"][0]["process"]
        shown = name.inner_text()
        assert shown.endswith("\N{HORIZONTAL ELLIPSIS}") and len(shown) <= NAME_MAX_CHARS
        cells = row.locator("td")
        assert cells.count() == 8
        for k in range(8):
            box = cells.nth(k).bounding_box()
            assert box and box["width"] > 20, (k, box)
            assert card["x"] <= box["x"] and box["x"] + box["width"] <= card["x"] + card["width"]
        assert "GiB" in cells.nth(4).inner_text()
        # the disguised name shows its override
        disguised = cards.nth(0).locator("tr[data-pid] td").nth(2)
        assert disguised.inner_text() == "⟨U+202E⟩nohtyp"
        assert disguised.locator("span.hidden-char").count() == 1
        # each twin draws its own lines
        power = [
            cards.nth(i).locator("svg[data-chart=power] path.line").get_attribute("d")
            for i in range(2)
        ]
        assert power[0] and power[1] and power[0] != power[1], power


# --- behind basic auth ----------------------------------------------------------------


def test_page_assets_and_endpoint_need_the_credentials(
    tmp_path: Path, started: Callable[..., Exporter]
) -> None:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    config = tmp_path / "web.yml"
    write(config, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    exporter = started(config=config)
    right = basic("prometheus", PASSWORD)
    wait_serving(exporter, lambda: call(exporter.port, headers=right))
    for path in UI_PATHS:
        for wrong in ({}, basic("prometheus", "wrong")):
            denied = call(exporter.port, path, headers=wrong)
            assert denied.status == 401, path
            assert b"GPU" not in denied.body and b"function" not in denied.body
        ok = call(exporter.port, path, headers=right)
        assert ok.status == 200, (path, ok.status)
    assert json.loads(call(exporter.port, "/api/overview", headers=right).body)["gpus"]
    # a browser that logs in sees the page and its script runs (its fetches log in too)
    wait_for_history(_Authed(exporter, right), points=3, verdicts=set())
    with chromium() as browser:
        page = open_live_page(browser, exporter.url + "/", credentials=("prometheus", PASSWORD))
        assert page.locator("[data-gpu-uuid]").count() == 2


class _Authed(Exporter):
    """The exporter, every request with the given headers."""

    def __init__(self, exporter: Exporter, headers: dict[str, str]) -> None:
        super().__init__(exporter.process, exporter.port, exporter.log_path, exporter.args)
        self._headers = headers

    def get(self, path: str = "/metrics", headers: dict[str, str] | None = None) -> Any:
        return super().get(path, {**self._headers, **(headers or {})})


# --- turned off -----------------------------------------------------------------------


def test_web_ui_false_serves_the_link_page_and_keeps_no_history(tmp_path: Path) -> None:
    exporter = start_exporter(
        ["--simulate", "2", "--collect.interval", "200ms", "--web.ui=false"], tmp_path
    )
    try:
        page = exporter.get("/")
        assert page.status == 200
        assert 'href="metrics"' in page.text and "data-gpu-uuid" not in page.text
        assert "Content-Security-Policy" not in page.headers
        for path in ("/static/page.js", "/api/overview"):
            assert exporter.get(path).status == 404, path
        assert exporter.get("/static/page.css").status == 200  # it styles /runbooks too
    finally:
        exporter.stop()


def test_web_ui_flag_and_config_key() -> None:
    assert load_settings([]).web_ui is True
    assert load_settings(["--web.ui=false"]).web_ui is False
    assert load_settings(["--no-web.ui"]).web_ui is False
    assert load_settings(["--web.ui"]).web_ui is True


def test_web_ui_config_file_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    path.write_text("web:\n  ui: false\n")
    assert load_settings(["--config.file", str(path)]).web_ui is False
    assert load_settings(["--config.file", str(path), "--web.ui"]).web_ui is True


def test_the_wheel_ships_the_page_script_and_style(tmp_path: Path) -> None:
    """Package data (setup.py): an installed exporter serves its page and runbooks."""
    source = copy_source(tmp_path / "source")
    wheel_path, _ = build("wheel", source, tmp_path / "dist")
    with zipfile.ZipFile(wheel_path) as wheel:
        names = set(wheel.namelist())
    static = "gpu_exporter/serving/static/"
    assert {static + "page.js", static + "page.css", static + "runbooks.html"} <= names


def test_without_nvml_the_page_says_why_no_gpu_is_shown(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yml"
    scenario.write_text("faults: {init_error: driver_not_loaded}\n")
    args = ["--simulate", "2", "--simulate.scenario", str(scenario), "--collect.interval", "200ms"]
    exporter = start_exporter(args, tmp_path)
    try:
        page = exporter.get("/")
        assert page.status == 200
        assert "NVML unavailable" in page.text and "data-gpu-uuid" not in page.text
        doc = overview(exporter)
        assert doc["gpus"] == [] and doc["nvml_up"] is False and doc["nvml_down_reason"]
    finally:
        exporter.stop()


def test_web_ui_false_keeps_no_history() -> None:
    on = Daemon(load_settings(["--simulate", "1"]), [])
    off = Daemon(load_settings(["--simulate", "1", "--web.ui=false"]), [])
    assert isinstance(on.state.history, History) and off.state.history is None
    on.publish(snapshot(0.0, [static(0)]))
    off.publish(snapshot(0.0, [static(0)]))
    assert on.state.history.gpus_kept() == 1 and off.state.history is None
