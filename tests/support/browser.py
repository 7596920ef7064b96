"""A real headless browser for the live page: Playwright driving Debian's /usr/bin/chromium.

`make system-deps` installs the browser (`apt-get install chromium`); Playwright comes from
PyPI and never downloads one (no `playwright install`). Used by tests/test_live_page.py
and by `make screenshot` (tests/support/screenshot.py).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from playwright.sync_api import Browser, Page, sync_playwright

from gpu_exporter.serving import page as live_page
from tests.support.exporter import REPO, Exporter

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1440, "height": 900}  # a laptop screen


@contextmanager
def chromium() -> Iterator[Browser]:
    """Headless Chromium, closed afterwards."""
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: run `make system-deps`"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
        )
        try:
            yield browser
        finally:
            browser.close()


def overview(exporter: Exporter, window: str = "5m", headers: dict[str, str] | None = None) -> Any:
    result = exporter.get(f"/api/overview?window={window}", headers)
    assert result.status == 200, result.text
    return json.loads(result.body)


def strings(doc: Any) -> list[str]:
    """Every string in an overview document (or any JSON value), its keys included."""
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in (str(k), *strings(v))]
    if isinstance(doc, list):
        return [s for v in doc for s in strings(v)]
    return []


def wait_for_history(
    exporter: Exporter, points: int, verdicts: set[str], timeout: float = 90.0
) -> Any:
    """Poll /api/overview until every GPU has `points` history points and the verdicts
    named are all shown somewhere; returns that overview."""
    deadline = time.monotonic() + timeout
    doc: Any = None
    while time.monotonic() < deadline:
        doc = overview(exporter)
        shown = {v["name"] for gpu in doc["gpus"] for v in gpu["verdicts"]}
        if all(len(g["history"]["times"]) >= points for g in doc["gpus"]) and verdicts <= shown:
            return doc
        time.sleep(0.5)
    raise AssertionError(f"history not built within {timeout}s: {json.dumps(doc)[:2000]}")


def open_live_page(
    browser: Browser,
    url: str,
    *,
    credentials: tuple[str, str] | None = None,
    width: int = VIEWPORT["width"],
) -> Page:
    """Load the page in a window `width` CSS pixels wide, its clock in UTC, and wait until
    its script has drawn every chart."""
    context = browser.new_context(
        viewport={"width": width, "height": VIEWPORT["height"]},
        timezone_id="UTC",
        color_scheme="dark",
        http_credentials=(
            {"username": credentials[0], "password": credentials[1]} if credentials else None
        ),
    )
    page = context.new_page()
    page.goto(url)
    return drawn(page)


SYNTHETIC_ORIGIN = "http://exporter.test"  # never resolved: every request is answered below
STATIC = REPO / "gpu_exporter" / "serving" / "static"


def open_synthetic_page(browser: Browser, doc: Any, *, width: int = VIEWPORT["width"]) -> Page:
    """The live page of an overview document built in the test (`overview.build` over a
    `History` fed synthetic samples: minutes of history at any interval in no time), as
    the program serves it: the HTML from `page.render`, the shipped page.js and page.css,
    `doc` as /api/overview. Requests are answered by Playwright's routing, not a server.
    Waits until the script has drawn every chart, as `open_live_page` does."""
    html = live_page.render(doc, telemetry_path="/metrics", ready="ok", live="ok", simulated=True)
    bodies = {
        "/": ("text/html; charset=utf-8", html),
        "/static/page.js": ("text/javascript", (STATIC / "page.js").read_bytes()),
        "/static/page.css": ("text/css", (STATIC / "page.css").read_bytes()),
        "/api/overview": ("application/json", json.dumps(doc).encode()),
    }

    def answer(route: Any) -> None:
        path = route.request.url.removeprefix(SYNTHETIC_ORIGIN).partition("?")[0]
        if path not in bodies:
            route.fulfill(status=404, body="404 page not found\n")
            return
        content_type, body = bodies[path]
        route.fulfill(status=200, content_type=content_type, body=body)

    context = browser.new_context(
        viewport={"width": width, "height": VIEWPORT["height"]},
        timezone_id="UTC",
        color_scheme="dark",
    )
    context.route(f"{SYNTHETIC_ORIGIN}/**", answer)
    page = context.new_page()
    page.goto(SYNTHETIC_ORIGIN + "/")
    return drawn(page)


def drawn(page: Page) -> Page:
    """`page` once its script has drawn every chart."""
    page.wait_for_function(
        "() => { const charts = [...document.querySelectorAll('svg[data-series]')];"
        " return charts.length > 0 && charts.every((c) => Number(c.dataset.points) > 0); }",
        timeout=30_000,
    )
    return page
