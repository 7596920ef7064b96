"""What each request gets: /metrics from the cached exposition, the probes, a landing page.

Pure apart from reading the health verdicts: no NVML, no I/O. The probes' decisions are
made in `sampling.health`; this module only turns them into responses.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

from gpu_exporter import __version__
from gpu_exporter.metrics.exposition import Exposition, wants_gzip, wants_openmetrics
from gpu_exporter.sampling.health import Verdict

PROBE_PATHS = ("/healthz", "/livez")


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ServingState:
    """What the sampler publishes for the web side; swapped atomically."""

    exposition: Exposition | None = None


class HealthView(Protocol):
    """The two health decisions (`sampling.health.Health`)."""

    def ready(self) -> Verdict: ...

    def live(self) -> Verdict: ...


def plain() -> dict[str, str]:
    return {"Content-Type": "text/plain; charset=utf-8"}


class Routes:
    """Maps a request to a response."""

    def __init__(self, state: ServingState, health: HealthView, *, telemetry_path: str) -> None:
        self.state = state
        self.health = health
        self.telemetry_path = telemetry_path

    def is_probe(self, path: str) -> bool:
        """Whether `path` is /livez or /healthz: cheap answers, served outside the request
        cap and the rate limit."""
        path = path.split("?", 1)[0]
        return path in PROBE_PATHS and path != self.telemetry_path

    def get(self, path: str, headers: Any) -> Response:
        path = path.split("?", 1)[0]
        if path == self.telemetry_path:
            return self._metrics(headers)
        if path == "/healthz":
            return _probe(self.health.ready())
        if path == "/livez":
            return _probe(self.health.live())
        if path == "/":
            return Response(
                HTTPStatus.OK, self._landing(), {"Content-Type": "text/html; charset=utf-8"}
            )
        return Response(HTTPStatus.NOT_FOUND, b"404 page not found\n", plain())

    def _metrics(self, headers: Any) -> Response:
        exposition = self.state.exposition
        if exposition is None:
            return Response(
                HTTPStatus.SERVICE_UNAVAILABLE, b"no sample has finished yet\n", plain()
            )
        openmetrics = wants_openmetrics(headers.get("Accept"))
        compressed = wants_gzip(headers.get("Accept-Encoding"))
        out = {
            "Content-Type": exposition.content_type(openmetrics=openmetrics),
            "Vary": "Accept, Accept-Encoding",
        }
        if compressed:
            out["Content-Encoding"] = "gzip"
        return Response(
            HTTPStatus.OK, exposition.body(openmetrics=openmetrics, compressed=compressed), out
        )

    def _landing(self) -> bytes:
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
            f'<ul><li><a href="{path}">Metrics</a></li>'
            f'<li><a href="/healthz">Readiness</a>: {html.escape(ready.reason)}</li>'
            f'<li><a href="/livez">Liveness</a>: {html.escape(live.reason)}</li></ul>'
            "</body></html>\n"
        ).encode()


def _probe(verdict: Verdict) -> Response:
    status = HTTPStatus.OK if verdict.ok else HTTPStatus.SERVICE_UNAVAILABLE
    return Response(status, (verdict.reason + "\n").encode(), plain())
