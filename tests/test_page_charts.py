"""The live page's charts at any sampling interval, in a real headless Chromium.

The charts are drawn by the shipped page.js from a document that `overview.build` makes
of a `History` fed synthetic samples (tests/support/browser.py's `open_synthetic_page`),
so an hour of history at the production default of 5 s, or at 30 s, takes no waiting.

Three GPUs, sampled with a jitter of a tenth of the interval: GPU 0 reports every sample;
GPU 1 is lost (down, no reading) for two minutes in the middle of the 5-minute window;
GPU 2 is missing from the samples for two minutes (NVML down). A line or band breaks
only where samples are missing: GPU 0 draws one unbroken stretch per series, GPUs 1 and
2 two; and a value that changes every sample draws as a band, not a zigzag, wherever
the samples are dense enough for two to share a column.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from typing import Any

import pytest
from playwright.sync_api import Page

from benchmarks.history_memory import snapshot, static
from gpu_exporter.sampling.history import WINDOWS, History
from gpu_exporter.serving import overview
from gpu_exporter.serving.page import CHARTS, LEFT, RIGHT
from tests.support.browser import chromium, open_synthetic_page

pytestmark = pytest.mark.e2e

WIDTHS = (360, 768, 1440)
HOLE = (120.0, 240.0)  # seconds before the end: GPU 1 lost, GPU 2 not sampled
POINT = re.compile(r"(-?[\d.]+) (-?[\d.]+)")  # a point of a path: "x y"


def samples(interval: float, minutes: float) -> list[Any]:
    """`minutes` of samples of three GPUs `interval` seconds apart (each late or early by
    up to a tenth of the interval), GPU 1 lost and GPU 2 not sampled within `HOLE`."""
    statics = [static(i) for i in range(3)]
    jitter = random.Random(interval)
    count = int(minutes * 60 / interval)
    end = count * interval
    out = []
    for k in range(count + 1):
        t = k * interval + jitter.uniform(-0.1, 0.1) * interval
        sample = snapshot(t, statics)
        if HOLE[0] <= end - t <= HOLE[1]:
            lost = replace(sample.devices[1], up=False, down_reason="GPU is lost", reading=None)
            sample = replace(sample, devices=(sample.devices[0], lost))
        out.append(sample)
    return out


def document(interval: float, minutes: float, window: str) -> dict[str, Any]:
    """The overview of those samples for `window`, as /api/overview serves it."""
    history = History()
    for sample in samples(interval, minutes):
        history.add(sample)
    doc = overview.build(sample, history, WINDOWS[window], interval_seconds=interval)
    parsed: dict[str, Any] = json.loads(json.dumps(doc))
    return parsed


DRAWN = """() => [...document.querySelectorAll("[data-gpu-uuid]")].map((card) => [
  Number(card.dataset.gpuIndex),
  [...card.querySelectorAll("svg[data-series]")].map((svg) => [
    svg.dataset.chart,
    [...svg.querySelectorAll("g.lines path")].map((p) => [
      p.getAttribute("class"), p.getAttribute("d"),
    ]),
  ]),
])"""


def paths(page: Page) -> dict[tuple[int, str, str], list[list[tuple[float, float]]]]:
    """Per (GPU, chart, path class): the points of each subpath of the path drawn."""
    return {
        (index, chart, cls): [
            [(float(x), float(y)) for x, y in POINT.findall(subpath)]
            for subpath in d.split("M")[1:]
        ]
        for index, charts in page.evaluate(DRAWN)
        for chart, drawn in charts
        for cls, d in drawn
    }


def band_heights(subpath: list[tuple[float, float]]) -> list[float]:
    """The height of a band in each column: its upper edge, then its lower edge back."""
    n = len(subpath) // 2
    return [subpath[-1 - i][1] - subpath[i][1] for i in range(n)]


@pytest.mark.parametrize(
    ("interval", "minutes", "window"),
    [(5.0, 6, "5m"), (30.0, 6, "5m"), (60.0, 6, "5m"), (0.1, 6, "5m"), (5.0, 65, "1h")],
    ids=["5s", "30s", "60s", "100ms", "5s-1h"],
)
def test_a_steady_series_draws_no_gap_and_missing_samples_draw_one(
    interval: float, minutes: float, window: str
) -> None:
    doc = document(interval, minutes, window)
    # GPU 2 is back in the latest sample: its card shows the history around its hole
    assert [gpu["index"] for gpu in doc["gpus"]] == [0, 1, 2]
    spacing = max(interval, doc["window"]["step_seconds"])
    per_unit = doc["window"]["seconds"] / (RIGHT - LEFT)  # seconds per SVG unit
    hole = (RIGHT - (HOLE[1] / per_unit), RIGHT - (HOLE[0] / per_unit))
    with chromium() as browser:
        for width in WIDTHS:
            page = open_synthetic_page(browser, doc, width=width)
            drawn = paths(page)
            page.context.close()
            assert {chart for _, chart, _ in drawn} == {c.key for c in CHARTS}, drawn
            # the utilization, which changes every sample, draws a band (its range in
            # each column) wherever two samples or more share a column: up to 5 s, where
            # every column holds two (but the newest, open one, and the oldest)
            [flicker] = drawn[(0, "busy", "band s0 utilization_ratio")]
            heights = band_heights(flicker)
            if interval <= 5.0:
                assert sum(h > 0.5 for h in heights) >= len(heights) - 2, heights
            for (index, chart, cls), subpaths in drawn.items():
                ranges = [(min(x for x, _ in p), max(x for x, _ in p)) for p in subpaths]
                where = (width, index, chart, cls, ranges)
                if index == 0:
                    # one stretch from the window's start to its end
                    assert len(ranges) == 1, where
                    [(first, last)] = ranges
                    assert first <= LEFT + 3 * spacing / per_unit, where
                    assert last >= RIGHT - 3 * spacing / per_unit, where
                else:
                    # two stretches, the gap where the samples are missing (and a
                    # rate's first point after it: a busy ratio needs two samples)
                    assert len(ranges) == 2, where
                    (_, before), (after, _) = ranges
                    assert before <= hole[0] + 0.5 and after >= hole[1] - 0.5, (hole, where)
                    missing = HOLE[1] - HOLE[0] + 4 * spacing
                    assert after - before <= missing / per_unit, where
