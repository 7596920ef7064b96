"""The paths the exporter serves itself, apart from the routes that serve them
(`routes.py`) so that `--web.telemetry-path` is checked against them before the data
model is loaded (`config.py`)."""

from __future__ import annotations

PROBE_PATHS = ("/healthz", "/livez")
RUNBOOKS_PATH = "/runbooks"  # the alerts' runbooks: each rule's runbook_url links here
BUILT_IN_PREFIXES = ("/api/", "/static/")  # the live page's API and assets


def built_in_route(path: str) -> str | None:
    """What the exporter serves at `path` itself, or None: the telemetry path must not take
    a probe, the live page, its API or its assets (`BUILT_IN_PREFIXES`, present and future)."""
    if path in PROBE_PATHS:
        return "probe"
    if path == "/":
        return "live page"
    if path == RUNBOOKS_PATH:
        return "runbooks"
    if path.startswith(BUILT_IN_PREFIXES) or path + "/" in BUILT_IN_PREFIXES:
        return "live page API" if path.startswith("/api") else "live page assets"
    return None
