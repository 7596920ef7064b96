"""The live page at `/`: server-side HTML of the overview document.

Everything but the chart lines is rendered here: the links, the host row, one card per GPU
(identity, a table of MIG instances with their own verdicts, verdicts, processes) and each
chart's frame (axes, labels with units, reference lines, a legend naming each series by
its colour and each reference line with its value: a label in the plot would sit on the
data at the limit). `static/page.js` draws each series from `/api/overview` as a band
(lowest to highest per column) under its mean line, above the reference lines, broken
only where samples are missing, says "history since HH:MM" while the window is older
than the history, and refreshes the page every few seconds; `static/page.css` styles it
(dark unless the browser asks for light) and fits it to any width down to 360 px with
every table column on screen (on a phone each row is a grid of cells, each under its
column's name, `data-label`). No inline script or style, nothing from another host: the
Content-Security-Policy allows only 'self'.

Stable hooks for tests and scripts: `data-gpu-index` and `data-gpu-uuid` on each GPU card
(two boards may share a UUID: the index tells them apart), `data-verdict` on each verdict,
`data-pid` on each process row, `data-gpu-instance` on each MIG instance row,
`data-series` on each chart, `data-key` on each legend entry.

Text from the host arrives here already `visible` (overview.py). A long name is cut at
`NAME_MAX_CHARS` with an ellipsis, its whole text in the `title` attribute (shown on
hover), and the stylesheet wraps what is left, so one name never widens a card or pushes
the other columns of its table off the screen.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any

from gpu_exporter.records import Record
from gpu_exporter.sampling.thresholds import NEAR_OOM_MEMORY_RATIO
from gpu_exporter.serving.overview import MARKER, Document

GIB = 1024**3
MISSING = "\N{EN DASH}"  # a value not known
NAME_MAX_CHARS = 48  # of a name (process, user, job, GPU, MIG profile) shown; all on hover
SUMMARY_MAX_CHARS = 240  # of a verdict's summary (it may quote a process name)
# Chart geometry, in SVG user units
WIDTH, HEIGHT = 320, 132
LEFT, RIGHT, TOP, BOTTOM = 48, 312, 8, 108


@dataclass(frozen=True, repr=False)
class Chart(Record):
    """One small chart of a GPU card."""

    key: str
    title: str
    series: tuple[str, ...]  # history series drawn, back to front
    unit: str  # shown on the y axis labels
    scale: float  # raw value per displayed unit (bytes per GiB, 0.01 per percent)
    top: Callable[[Document], float | None]  # the y axis's top, raw; None: no chart
    lines: Callable[[Document], list[tuple[float, str]]]  # reference lines: raw value, label


def _ratio_top(gpu: Document) -> float:
    return 1.0


def _memory_top(gpu: Document) -> float | None:
    total = gpu["memory_total_bytes"]
    return float(total) if total else None


def _memory_lines(gpu: Document) -> list[tuple[float, str]]:
    """The OOM line: memory within NEAR_OOM_MEMORY_RATIO of total (the axis's top)."""
    total = gpu["memory_total_bytes"]
    return (
        [(total * NEAR_OOM_MEMORY_RATIO, f"near OOM ({NEAR_OOM_MEMORY_RATIO:.0%})")]
        if total
        else []
    )


def _power_top(gpu: Document) -> float | None:
    values = _known(gpu, "power_watts", "power_limit_watts")
    return max(values) * 1.1 if values else None


def _power_lines(gpu: Document) -> list[tuple[float, str]]:
    limit = gpu["power_limit_watts"]
    return [(limit, "limit")] if limit else []


def _temperature_top(gpu: Document) -> float | None:
    values = _known(gpu, "temperature_celsius", "slowdown_celsius")
    return max(100.0, *values) if values else None


def _temperature_lines(gpu: Document) -> list[tuple[float, str]]:
    slowdown = gpu["slowdown_celsius"]
    return [(slowdown, "slowdown")] if slowdown else []


def _known(gpu: Document, *names: str) -> list[float]:
    """The latest values of `names` that are known (the axes are set from them: the page
    renders without the series, which its script fetches)."""
    return [gpu[name] for name in names if gpu[name] is not None]


SERIES_LABELS = {
    "busy_ratio": "true busy ratio (a kernel ran)",
    "utilization_ratio": "instantaneous utilization (driver's sample)",
    "sm_ratio": "SMs with work",
    "memory_used_bytes": "used",
    "power_watts": "draw",
    "temperature_celsius": "GPU",
}
"""What each series drawn is, in a chart's legend (next to a swatch of its colour)."""
GRAPHICS_ENGINE_LABELS = {
    "busy_ratio": "graphics-engine activity (GPM)",
    "utilization_ratio": "utilization (not reported under MIG)",
}
"""The labels that differ on a GPU whose busy ratio is GPM's graphics-engine activity (a
MIG-enabled GPU: NVML reports it no utilization and no busy time)."""
BAND_NOTE = "line: mean; band: lowest to highest in each column of the chart"

CHARTS: tuple[Chart, ...] = (
    Chart(
        "busy",
        "Busy and utilization",
        ("utilization_ratio", "busy_ratio"),
        "%",
        0.01,
        _ratio_top,
        lambda gpu: [],
    ),
    Chart(
        "sm",
        "SM activity (GPM)",
        ("sm_ratio",),
        "%",
        0.01,
        lambda gpu: 1.0 if gpu["gpm"] else None,
        lambda gpu: [],
    ),
    Chart(
        "memory",
        "Memory used",
        ("memory_used_bytes",),
        "GiB",
        GIB,
        _memory_top,
        _memory_lines,
    ),
    Chart("power", "Power", ("power_watts",), "W", 1.0, _power_top, _power_lines),
    Chart(
        "temperature",
        "Temperature",
        ("temperature_celsius",),
        "°C",
        1.0,
        _temperature_top,
        _temperature_lines,
    ),
)


def render(
    doc: Document | None, *, telemetry_path: str, ready: str, live: str, simulated: bool
) -> bytes:
    """The whole page; `doc` is None before the first sample."""
    window = doc["window"]["name"] if doc else "5m"
    source = (
        "<strong>SIMULATED</strong> GPUs (--simulate): the data is made up"
        if simulated
        else "NVIDIA GPU metrics for Prometheus, sampled through NVML"
    )
    body = (
        _host(doc)
        + _kubernetes(doc)
        + _no_gpus(doc)
        + "".join(_card(gpu, doc) for gpu in doc["gpus"])
        + _driver_time(doc)
        if doc
        else '<p class="empty">No sample has finished yet.</p>'
    )
    buttons = "".join(
        f'<a class="window{" active" if w == window else ""}" href="?window={w}" '
        f'data-window="{w}">{w}</a>'
        for w in (doc["windows"] if doc else ["5m", "1h", "12h"])
    )
    version = escape(doc["version"]) if doc else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="dark light">'
        "<title>GPU Exporter</title>"
        '<link rel="stylesheet" href="static/page.css">'
        '<script src="static/page.js" defer></script></head>'
        f'<body data-window="{escape(window)}">'
        f"<header><h1>GPU Exporter {version}</h1><p>{source}.</p>"
        f'<nav><a href="{escape(telemetry_path.lstrip("/"))}">Metrics</a>'
        f' <a href="healthz">Readiness</a>: {escape(ready)}'
        f' <a href="livez">Liveness</a>: {escape(live)}'
        ' <a href="api/overview">JSON</a></nav>'
        f'<div class="windows">History: {buttons}</div></header>'
        f'<main id="live">{body}</main></body></html>\n'
    ).encode()


def _no_gpus(doc: Document) -> str:
    if doc["gpus"]:
        return ""
    reason = "NVML unavailable: " + doc["nvml_down_reason"] if not doc["nvml_up"] else "none seen"
    return f'<p class="empty">No GPU to show ({escape(reason or "")}).</p>'


def _kubernetes(doc: Document) -> str:
    """One line while the Kubernetes collector is on: why it is down, or what it found."""
    k = doc.get("kubernetes")
    if k is None or (k["up"] and not k["reason"]):
        return ""
    state = "Kubernetes attribution" + ("" if k["up"] else " unavailable")
    return f'<p class="kubernetes"><strong>{state}:</strong> {escape(k["reason"] or "")}</p>'


def _host(doc: Document) -> str:
    host = doc["host"]
    if host is None:
        return '<section class="host">Host: not read (collector off)</section>'
    cpu = host["history"].get("cpu_ratio", [])
    latest = next((v for v in reversed(cpu) if v is not None), None)
    return (
        '<section class="host"><strong>Host</strong>'
        f" <span>CPU {_pct(latest)} of {host['cpus']} cores</span>"
        f" <span>load {host['load1']:.2f}</span>"
        f" <span>memory {_gib(host['memory_used_bytes'])} of "
        f"{_gib(host['memory_total_bytes'])}</span></section>"
    )


DRIVER_FUNCTIONS_SHOWN = 8  # the dearest NVML functions listed under "Driver time"


def _driver_time(doc: Document) -> str:
    """Where the driver's time goes: the exporter's own NVML calls, dearest first."""
    calls = doc.get("nvml_calls")
    if not calls:
        return ""
    rows = "".join(
        f'<tr data-function="{escape(f["function"])}">'
        f'<td class="name wide" data-label="function"><code>{escape(f["function"])}</code></td>'
        f'<td data-label="calls">{f["calls"]}</td>'
        f'<td data-label="ms per second">'
        f"{_number(1e3 * f['seconds'] / calls['counted_seconds'], 3)}</td>"
        f'<td data-label="µs per call">{_number(1e6 * f["seconds"] / f["calls"], 1)}'
        f"{' (waits for events)' if f['waits'] else ''}</td></tr>"
        for f in calls["functions"][:DRIVER_FUNCTIONS_SHOWN]
    )
    return (
        '<section class="driver"><h2>Driver time</h2>'
        f"<p>The exporter spent {_number(1e3 * calls['seconds_per_second'], 2)} ms a second "
        f"inside NVML calls over the last {_elapsed(calls['counted_seconds'])}, the waits "
        "for events left out (<code>gpu_exporter_nvml_call_seconds_total</code>); a driver "
        "that polls its firmware spends that time on the host's CPU.</p>"
        '<div class="scroll"><table class="driver"><thead><tr><th class="name">function</th>'
        "<th>calls</th><th>ms per second</th><th>µs per call</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div></section>"
    )


def _card(gpu: Document, doc: Document) -> str:
    name = _clip(gpu["name"] or "unknown GPU", NAME_MAX_CHARS)
    state = (
        "" if gpu["up"] else f' <span class="down">down: {escape(gpu["down_reason"] or "")}</span>'
    )
    mig = _mig(gpu["mig"])
    charts = "".join(_chart(chart, gpu, doc) for chart in CHARTS)
    return (
        f'<article class="gpu" data-gpu-index="{gpu["index"]}" '
        f'data-gpu-uuid="{escape(gpu["uuid"])}">'
        f"<h2>GPU {gpu['index']}: {name}{state}</h2>"
        f'<p class="uuid"><code>{escape(gpu["uuid"])}</code></p>{_action(gpu)}{mig}'
        f'{_verdicts(gpu["verdicts"])}<div class="charts">{charts}</div>{_processes(gpu)}'
        "</article>"
    )


def _action(gpu: Document) -> str:
    """The GPU's recommended action (gpu_recommended_action), its reason and what to run;
    nothing where no signal was read."""
    found = gpu.get("recommended_action")
    if found is None:
        return ""
    action = escape(found["action"])
    if found["action"] == "none":
        return f'<p class="action none" data-action="{action}">Recommended action: none.</p>'
    return (
        f'<p class="action" data-action="{action}"><strong>Recommended action: {action}</strong>'
        f" (reason: <code>{escape(found['reason'])}</code>) "
        f"<em>{_code_spans(found['advice'])}</em></p>"
    )


def _mig(instances: list[Document]) -> str:
    """A MIG GPU's instances as a table, each instance's verdicts in a row below it."""
    if not instances:
        return ""
    rows = "".join(
        f'<tr data-gpu-instance="{m["gpu_instance"]}" data-mig-uuid="{escape(m["uuid"])}">'
        f"<td>GI {m['gpu_instance']} CI {m['compute_instance']}</td>"
        f'<td class="name wide">{_clip(m["profile"], NAME_MAX_CHARS)} '
        f"<code>{escape(m['uuid'])}</code></td>"
        f'<td data-label="memory used">'
        f"{_gib(m['memory_used_bytes'])} of {_gib(m['memory_total_bytes'])}</td>"
        f'<td data-label="activity">{_pct(m["activity_ratio"])}</td>'
        f'<td class="name" data-label="processes">{_names(m["processes"])}</td>'
        "</tr>"
        + (
            '<tr class="instance-verdicts"><td class="wide" colspan="5">'
            f"{_verdicts(m['verdicts'])}</td></tr>"
            if m["verdicts"]
            else ""
        )
        for m in instances
    )
    return (
        '<div class="scroll"><table class="mig"><thead><tr><th>MIG instance</th>'
        '<th class="name">profile</th><th>memory used</th><th>activity</th>'
        f'<th class="name">processes</th></tr></thead><tbody>{rows}</tbody></table></div>'
    )


def _names(names: list[str] | None) -> str:
    """The processes on a MIG instance: "none", or their names; not known: a dash."""
    if names is None:
        return MISSING
    return ", ".join(_clip(name, NAME_MAX_CHARS) for name in names) or "none"


def _verdicts(verdicts: list[Document]) -> str:
    if not verdicts:
        return '<p class="verdicts none">No verdicts: nothing looks wrong.</p>'
    items = "".join(
        f'<li data-verdict="{escape(v["name"])}" data-level="{escape(v["level"])}">'
        f"<strong>{escape(v['name'])}</strong> "
        f"{_clip(v['summary'], SUMMARY_MAX_CHARS)} <em>{_code_spans(v['advice'])}</em></li>"
        for v in verdicts
    )
    return f'<ul class="verdicts">{items}</ul>'


def _chart(chart: Chart, gpu: Document, doc: Document) -> str:
    top = chart.top(gpu)
    if top is None or top <= 0:
        return ""
    seconds = doc["window"]["seconds"]
    labels = [
        _text(LEFT - 4, _y(value, top) + 3, f"{value / chart.scale:.0f} {chart.unit}", "end")
        for value in (0.0, top / 2, top)
    ]
    labels += [
        _text(LEFT, BOTTOM + 14, f"\N{MINUS SIGN}{_duration(seconds)}", "start"),
        _text((LEFT + RIGHT) / 2, BOTTOM + 14, f"\N{MINUS SIGN}{_duration(seconds / 2)}", "middle"),
        _text(RIGHT, BOTTOM + 14, "now", "end"),
    ]
    # reference lines: named in the legend, never in the plot, where the data may sit
    lines = [(v, label) for v, label in chart.lines(gpu) if 0 < v <= top]
    refs = "".join(
        f'<line class="ref" x1="{LEFT}" x2="{RIGHT}" y1="{_y(v, top):.1f}" y2="{_y(v, top):.1f}"/>'
        for v, _ in lines
    )
    labels_of = (
        {**SERIES_LABELS, **GRAPHICS_ENGINE_LABELS}
        if gpu["busy_source"] == "graphics_engine"
        else SERIES_LABELS
    )
    legend = "".join(
        f'<span class="key" data-key="{name}"><i class="swatch {name}"></i>'
        f"{escape(labels_of[name])}</span>"
        for name in reversed(chart.series)  # front first
    ) + "".join(
        f'<span class="key" data-key="ref"><i class="swatch ref"></i>'
        f"{escape(label)}: {value / chart.scale:.0f} {chart.unit}</span>"
        for value, label in lines
    )
    return (
        f'<figure class="chart"><figcaption>{escape(chart.title)}</figcaption>'
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(chart.title)}" '
        f'data-chart="{chart.key}" data-series="{" ".join(chart.series)}" '
        f'data-top="{top!r}" data-left="{LEFT}" data-right="{RIGHT}" data-top-y="{TOP}" '
        f'data-bottom-y="{BOTTOM}" data-points="0">'
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{RIGHT - LEFT}" height="{BOTTOM - TOP}"/>'
        f'{refs}{"".join(labels)}<g class="lines"></g></svg>'
        f'<p class="legend" title="{BAND_NOTE}">{legend}</p></figure>'
    )


def _processes(gpu: Document) -> str:
    if gpu["process_count"] is None:
        return '<p class="processes none">Processes: not known (collector off).</p>'
    unattributed = gpu["unattributed_memory_bytes"]
    leak = (
        f' <span class="unattributed">{_gib(unattributed)} held by no listed process</span>'
        if unattributed
        else ""
    )
    if not gpu["processes"]:
        return f'<p class="processes none">No process on this GPU.{leak}</p>'
    rows = "".join(
        f'<tr data-pid="{"" if p["pid"] is None else p["pid"]}">'
        f'<td data-label="pid">{_cell(p["pid"])}</td>'
        f'<td class="name" data-label="user">{_clip(p["user"], NAME_MAX_CHARS)}</td>'
        f'<td class="name" data-label="process">{_clip(p["process"], NAME_MAX_CHARS)}</td>'
        f'<td class="name wide" data-label="container or job">'
        f"{_clip(p['job'], NAME_MAX_CHARS)}</td>"
        f'<td data-label="GPU memory">{_gib(p["memory_used_bytes"])}</td>'
        f'<td data-label="SM share">{_pct(p["sm_ratio"])}</td>'
        f'<td data-label="CPU cores">{_number(p["cpu_cores"], 1)}</td>'
        f'<td data-label="workers">{_cell(p["workers"])}</td></tr>'
        for p in gpu["processes"]
    )
    return (
        '<div class="scroll"><table class="processes"><thead><tr><th>pid</th>'
        '<th class="name">user</th><th class="name">process</th>'
        '<th class="name">container or job</th><th>GPU memory</th><th>SM share</th>'
        f"<th>CPU cores</th><th>workers</th></tr></thead><tbody>{rows}</tbody></table></div>"
        f"{leak}"
    )


CODE_SPAN = re.compile(r"`([^`]+)`")


def _code_spans(text: str) -> str:
    """The exporter's own text (a verdict's advice) as HTML, each `command` as code."""
    return CODE_SPAN.sub(r"<code>\1</code>", escape(text))


def _y(value: float, top: float) -> float:
    return BOTTOM - (BOTTOM - TOP) * min(value, top) / top


def _text(x: float, y: float, text: str, anchor: str, cls: str = "axis") -> str:
    return (
        f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def _elapsed(seconds: float) -> str:
    """A span of time, rounded: "45 s", "12 min", "3.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _cell(value: Any) -> str:
    return MISSING if value is None or value == "" else escape(str(value))


def _clip(text: str | None, limit: int) -> str:
    """Host-provided text as HTML: cut at `limit` characters (never inside a marker) with
    an ellipsis and the whole text in its title; the markers of invisible characters
    highlighted."""
    if not text:
        return MISSING
    if len(text) <= limit:
        return _marked(text)
    cut = limit - 1
    longest = len("⟨U+10FFFF⟩")  # a marker
    for marker in MARKER.finditer(text, max(0, cut - longest), cut + longest):
        if marker.start() < cut < marker.end():
            cut = marker.start()
    return (
        f'<span class="clipped" title="{escape(text)}">'
        f"{_marked(text[:cut])}\N{HORIZONTAL ELLIPSIS}</span>"
    )


def _marked(text: str) -> str:
    """Escaped text, each marker of an invisible character in a `hidden-char` span."""
    return MARKER.sub(lambda m: f'<span class="hidden-char">{m.group()}</span>', escape(text))


def _pct(value: float | None) -> str:
    return MISSING if value is None else f"{value:.0%}"


def _gib(value: float | None) -> str:
    return MISSING if value is None else f"{value / GIB:.1f} GiB"


def _number(value: float | None, digits: int) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"
