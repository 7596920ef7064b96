"""What each request gets: /metrics from the cached exposition, the probes, the live page
(`/`, its assets under /static/ and `/api/overview`), or the bare link page with
`--web.ui=false`, and the alerts' runbooks at /runbooks (HTML rendered at build time,
styled by the page's stylesheet, which is served with the page off too).

Pure apart from reading the health verdicts and the history: no NVML, no I/O (the page's
assets are read from the package once). The probes' decisions are made in
`sampling.health`; this module only turns them into responses.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import cache
from http import HTTPStatus
from typing import Any, Protocol

from gpu_exporter import __version__
from gpu_exporter.metrics.exposition import BodyFormat, Exposition
from gpu_exporter.records import Record
from gpu_exporter.sampling.health import Verdict
from gpu_exporter.sampling.history import History
from gpu_exporter.serving import overview
from gpu_exporter.serving.negotiation import wants_gzip, wants_openmetrics
from gpu_exporter.serving.paths import PROBE_PATHS, RUNBOOKS_PATH
from gpu_exporter.serving.scrape_clock import ScrapeClock

OVERVIEW_PATH = "/api/overview"
WATCHED_SECONDS = 60.0
"""How long after the live page or its API was last asked for the GPUs' sample buffers are
still read every interval, so its busy chart shows every interval as it comes
(`sampling/buffer_reads.py`)."""
ASSETS = {
    "/static/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/static/page.css": ("page.css", "text/css; charset=utf-8"),
}
SHARED_ASSETS = frozenset({"/static/page.css"})  # styles /runbooks too: served with the page off
RUNBOOKS_PAGE = "runbooks.html"
"""/runbooks: docs/alerts.md rendered at build time (`make docs`, gpu_exporter/docs.py)."""
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'"
)
"""The live page's policy: scripts, styles and requests from this exporter only."""


@dataclass(repr=False)
class Response(Record):
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    exposition: BodyFormat | None = None  # the body is the exposition in this format


@dataclass(repr=False)
class ServingState(Record):
    """What the sampler publishes for the web side; swapped atomically."""

    exposition: Exposition | None = None
    history: History | None = None  # None with --web.ui=false: no live page, no /api/
    scrapes: ScrapeClock = field(default_factory=ScrapeClock)  # when /metrics is asked for
    page_seen: float | None = None  # monotonic time the live page or its API was last asked for

    def watched(self, within_seconds: float = WATCHED_SECONDS) -> bool:
        """Whether someone looked at the live page (or /api/overview) that recently."""
        seen = self.page_seen
        return seen is not None and time.monotonic() - seen <= within_seconds


class HealthView(Protocol):
    """The two health decisions (`sampling.health.Health`)."""

    def ready(self) -> Verdict: ...

    def live(self) -> Verdict: ...


def plain() -> dict[str, str]:
    return {"Content-Type": "text/plain; charset=utf-8"}


class Routes:
    """Maps a request to a response."""

    _at_once_lines: tuple[str, tuple[bytes, ...]] = ("", ())  # a telemetry path, its lines

    def __init__(
        self,
        state: ServingState,
        health: HealthView,
        *,
        telemetry_path: str,
        interval_seconds: float | None = None,
    ) -> None:
        self.state = state
        self.health = health
        self.telemetry_path = telemetry_path
        self.interval_seconds = interval_seconds  # --collect.interval: the page's gap rule

    def is_probe(self, path: str) -> bool:
        """Whether `path` is /livez or /healthz: cheap answers, served outside the request
        cap and the rate limit (the telemetry path can never be one: `built_in_route`)."""
        return path.split("?", 1)[0] in PROBE_PATHS

    def at_once_lines(self) -> tuple[bytes, ...]:
        """How a request line begins (`GET /metrics `) for the paths answered from what the
        last sample left, in about 0.1 ms and without waiting on anything, which the server
        may answer in its accept loop: the telemetry path and the probes. Read on every new
        connection, so it follows a reload that changes the telemetry path."""
        path = self.telemetry_path
        if self._at_once_lines[0] != path:
            lines = tuple(f"GET {p} ".encode("latin-1", "replace") for p in (path, *PROBE_PATHS))
            self._at_once_lines = (path, lines)  # one assignment: never half updated
        return self._at_once_lines[1]

    def get(self, path: str, headers: Any, client: str = "") -> Response:
        """The response to a GET of `path` from `client` (its address)."""
        path, _, query = path.partition("?")
        if path == self.telemetry_path:
            return self._metrics(headers, client)
        if path == "/healthz":
            return _probe(self.health.ready())
        if path == "/livez":
            return _probe(self.health.live())
        if path == RUNBOOKS_PATH:
            return Response(
                HTTPStatus.OK, _asset(RUNBOOKS_PAGE), ui_headers("text/html; charset=utf-8")
            )
        history = self.state.history
        if path == "/" and history is None:
            return Response(
                HTTPStatus.OK, self._landing(), {"Content-Type": "text/html; charset=utf-8"}
            )
        if history is not None and path in ("/", OVERVIEW_PATH):
            self.state.page_seen = time.monotonic()  # the busy chart is read every interval
            try:
                window = overview.parse_window(query)
            except overview.BadWindow as error:
                return Response(HTTPStatus.BAD_REQUEST, f"{error}\n".encode(), plain())
            exposition = self.state.exposition
            doc = (
                None
                if exposition is None
                else overview.build(
                    exposition.snapshot,
                    history,
                    window,
                    interval_seconds=self.interval_seconds,
                    series=path == OVERVIEW_PATH,
                )
            )
            return self._page(doc) if path == "/" else self._overview(doc)
        if path in ASSETS and (history is not None or path in SHARED_ASSETS):
            name, content_type = ASSETS[path]
            return Response(HTTPStatus.OK, _asset(name), ui_headers(content_type))
        return Response(HTTPStatus.NOT_FOUND, b"404 page not found\n", plain())

    def _overview(self, doc: overview.Document | None) -> Response:
        if doc is None:
            return Response(
                HTTPStatus.SERVICE_UNAVAILABLE, b"no sample has finished yet\n", plain()
            )
        body = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
        return Response(HTTPStatus.OK, body, ui_headers("application/json"))

    def _page(self, doc: overview.Document | None) -> Response:
        from gpu_exporter.serving import page  # with `html`: only once someone looks

        body = page.render(
            doc,
            telemetry_path=self.telemetry_path,
            ready=self.health.ready().reason,
            live=self.health.live().reason,
            simulated=doc is not None and doc["backend"] == "simulated",
        )
        return Response(HTTPStatus.OK, body, ui_headers("text/html; charset=utf-8"))

    def _metrics(self, headers: Any, client: str) -> Response:
        wants = BodyFormat(
            wants_openmetrics(headers.get("Accept")), wants_gzip(headers.get("Accept-Encoding"))
        )
        body = self.scrape(wants, client)
        if body is None:
            return Response(
                HTTPStatus.SERVICE_UNAVAILABLE, b"no sample has finished yet\n", plain()
            )
        out = {
            "Content-Type": Exposition.content_type(openmetrics=wants.openmetrics),
            "Vary": "Accept, Accept-Encoding",
        }
        if wants.compressed:
            out["Content-Encoding"] = "gzip"
        return Response(HTTPStatus.OK, body, out, exposition=wants)

    def scrape(self, wants: BodyFormat, client: str) -> bytes | None:
        """The exposition's body in `wants` for a scrape by `client` (its address), noted
        in the scrape clock; None before the first sample has finished."""
        self.state.scrapes.scraped(client, wants)
        exposition = self.state.exposition
        if exposition is None:
            return None
        return exposition.body(openmetrics=wants.openmetrics, compressed=wants.compressed)

    def _landing(self) -> bytes:
        import html  # its entity table is 0.5 MiB: loaded only once someone looks

        ready = self.health.ready()
        live = self.health.live()
        path = html.escape(self.telemetry_path)
        exposition = self.state.exposition
        simulated = exposition is not None and exposition.snapshot.backend == "simulated"
        source = (
            "<strong>SIMULATED</strong> GPUs (--simulate): the data is made up"
            if simulated
            else "NVIDIA GPU metrics for Prometheus, sampled through NVML"
        )
        return (
            "<!DOCTYPE html><html><head><title>GPU Exporter</title></head><body>"
            f"<h1>GPU Exporter {html.escape(__version__)}</h1>"
            f"<p>{source}.</p>"
            f'<ul><li><a href="{path.lstrip("/")}">Metrics</a></li>'
            f'<li><a href="healthz">Readiness</a>: {html.escape(ready.reason)}</li>'
            f'<li><a href="livez">Liveness</a>: {html.escape(live.reason)}</li>'
            '<li><a href="runbooks">Alert runbooks</a></li></ul>'
            "</body></html>\n"
        ).encode()


def ui_headers(content_type: str) -> dict[str, str]:
    """Headers of the live page's responses: its Content-Security-Policy and no sniffing."""
    return {
        "Content-Type": content_type,
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-cache",
    }


@cache
def _asset(name: str) -> bytes:
    """A file of the page shipped in the package (`serving/static/`), read once."""
    from importlib import resources  # brings tempfile, shutil, bz2, lzma: 1.5 MiB

    return resources.files("gpu_exporter.serving").joinpath("static").joinpath(name).read_bytes()


def _probe(verdict: Verdict) -> Response:
    status = HTTPStatus.OK if verdict.ok else HTTPStatus.SERVICE_UNAVAILABLE
    return Response(status, (verdict.reason + "\n").encode(), plain())
