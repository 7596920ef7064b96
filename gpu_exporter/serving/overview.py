"""The overview document: this host at a glance, as `/api/overview` serves it in JSON and
the live page at `/` renders it.

Built from the latest Snapshot and the `History`, never from NVML. Units are the model's
(bytes, watts, degrees Celsius, ratios 0..1, Unix seconds); a value that is not known is
`None` (JSON `null`), never 0. The shape is documented in docs/live-page.md.

Every string the host or the driver provides (process, user, job, GPU name, UUID, MIG
profile, reasons, verdict summaries that quote a process name) goes through `visible`:
a character that shows nothing, or shows text in another order, is written as a marker
(`⟨U+202E⟩`), so a process named U+202E "nohtyp" cannot pass for "python" on the page or
in the JSON.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

from gpu_exporter import __version__
from gpu_exporter.model import DeviceSample, ProcessSample, Snapshot
from gpu_exporter.sampling import actions
from gpu_exporter.sampling.history import (
    DEFAULT_WINDOW,
    WINDOWS,
    GpuKey,
    History,
    Points,
    Window,
    busy_source,
    gpu_key,
)
from gpu_exporter.sampling.verdicts import GpuVerdict, judge, judge_instances

Document = dict[str, Any]

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): drawn as nothing
# although some are letters or marks (the Hangul fillers, variation selectors, U+034F)
_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
MARKER = re.compile("⟨U\\+[0-9A-F]{4,6}⟩")
"""A character `visible` wrote as a marker (U+27E8 and U+27E9 around its code point)."""


def visible(text: str) -> str:
    """`text` with every character that does not show itself written as a marker
    `⟨U+XXXX⟩`: Unicode's "Other" and "Separator" categories but the ASCII space (Cc
    controls, Cf formats such as the bidi controls U+202A-U+202E and U+2066-U+2069 and the
    zero-width U+200B-U+200F, U+2060 and U+FEFF, Cs, Co, Cn, Zl, Zp, and Zs spaces other
    than U+0020), and every default-ignorable code point."""
    if text.isprintable() and not _IGNORABLE.search(text):
        return text
    return "".join(
        ch if ch.isprintable() and not _IGNORABLE.match(ch) else f"⟨U+{ord(ch):04X}⟩" for ch in text
    )


def _shown(text: str | None) -> str | None:
    """`visible`, with None and "" as None (not known)."""
    return visible(text) if text else None


class BadWindow(ValueError):
    """The `window` query parameter names no window; the message says which exist."""


def parse_window(query: str) -> Window:
    """The window a query string asks for (`window=5m|1h|12h`, default 5m)."""
    asked = parse_qs(query, keep_blank_values=True).get("window", [DEFAULT_WINDOW])
    if len(asked) != 1 or asked[0] not in WINDOWS:
        raise BadWindow(
            f"window must be one of {', '.join(WINDOWS)}, got {', '.join(map(repr, asked))}"
        )
    return WINDOWS[asked[0]]


def build(
    snapshot: Snapshot,
    history: History,
    window: Window,
    *,
    interval_seconds: float | None = None,
    series: bool = True,
) -> Document:
    """The whole document for `window`; without the GPUs' history when not `series` (the
    page's HTML needs only the latest values: its script fetches the series).
    `interval_seconds` is the sampling interval (`--collect.interval`; None: not known),
    from which the page tells samples really missing from samples merely far apart."""
    host = snapshot.host
    return {
        "version": __version__,
        "backend": snapshot.backend,
        "timestamp_seconds": snapshot.timestamp_seconds,
        "interval_seconds": interval_seconds,
        "nvml_up": snapshot.nvml_up,
        "nvml_down_reason": _shown(snapshot.nvml_down_reason),  # why NVML is down; None while up
        "window": {
            "name": window.name,
            "seconds": window.seconds,
            "step_seconds": window.tier.step_seconds,
            "max_points": window.max_points,
        },
        "windows": list(WINDOWS),
        "host": None
        if host is None
        else {
            "cpus": host.cpus,
            "load1": host.load1,
            "memory_total_bytes": host.memory_total_bytes,
            "memory_used_bytes": host.memory_total_bytes - host.memory_available_bytes,
            "history": _points(history.host(window)),
        },
        "gpus": [
            _gpu(snapshot, device, history, window if series else None)
            for device in snapshot.devices
        ],
        "kubernetes": _kubernetes(snapshot),
        "nvml_calls": _nvml_calls(snapshot),
    }


NVML_WAITS = frozenset({"nvmlEventSetWait_v2"})
"""Calls that wait by design (for the next Xid or ECC event): their seconds are no work."""


def _nvml_calls(snapshot: Snapshot) -> Document | None:
    """Where the driver's time goes: each NVML function's calls and seconds since the
    exporter started counting, dearest first (the waits last), and the driver's share of
    a second in all (the waits for events left out of it). None on a simulated host (no
    NVML call)."""
    since = snapshot.nvml_calls_seconds
    if not snapshot.nvml_calls or not since:
        return None
    functions = sorted(  # the waits last: they are no work
        snapshot.nvml_calls.items(),
        key=lambda item: (item[0] in NVML_WAITS, -item[1].seconds, item[0]),
    )
    work = sum(t.seconds for f, t in functions if f not in NVML_WAITS)
    return {
        "counted_seconds": since,
        "seconds_per_second": work / since,
        "functions": [
            {
                "function": function,
                "calls": totals.calls,
                "seconds": totals.seconds,
                "waits": function in NVML_WAITS,
            }
            for function, totals in functions
        ],
    }


def _kubernetes(snapshot: Snapshot) -> Document | None:
    """The Kubernetes collector's state; None while it is off. `reason` says why it is
    down, or what it found wrong while up (a pod using a GPU it did not ask for)."""
    k = snapshot.kubernetes
    if k is None:
        return None
    return {
        "up": k.up,
        "reason": _shown(k.reason),
        "allocations": len(k.allocations),
        "unallocated_processes": sum(u.processes for u in k.unallocated),
    }


def _gpu(
    snapshot: Snapshot, device: DeviceSample, history: History, window: Window | None
) -> Document:
    static, reading = device.static, device.reading
    memory = reading.memory if reading else None
    power = reading.power if reading else None
    temperature = reading.temperature if reading else None
    utilization = reading.utilization if reading else None
    mig = reading.mig if reading else None
    key = gpu_key(device)
    points = history.gpu(key, window) if static and window else None
    attribution = device.attribution
    processes = attribution.processes if attribution else None
    instance_verdicts = judge_instances(device, history)
    return {
        "index": device.index,
        "uuid": visible(device.uuid),
        "name": _shown(static.name) if static else None,
        "up": device.up,
        "down_reason": _shown(device.down_reason),
        "gpm": device.activity is not None and device.activity.sm_seconds is not None,
        # what the history's busy_ratio measures: "busy_time" or (MIG) "graphics_engine"
        "busy_source": busy_source(device),
        "utilization_ratio": utilization.gpu_ratio if utilization else None,
        "memory_used_bytes": memory.used_bytes if memory else None,
        "memory_total_bytes": memory.total_bytes if memory else None,
        "power_watts": power.watts if power else None,
        "power_limit_watts": power.limit_watts if power else None,
        "temperature_celsius": temperature.gpu_celsius if temperature else None,
        "slowdown_celsius": static.slowdown_temperature_celsius if static else None,
        "mig": [
            {
                "uuid": visible(d.uuid),
                "gpu_instance": d.gpu_instance,
                "compute_instance": d.compute_instance,
                "profile": visible(d.profile),
                "memory_used_bytes": _instance(mig, d.gpu_instance, "memory_used_bytes"),
                "memory_total_bytes": _instance(mig, d.gpu_instance, "memory_total_bytes"),
                "activity_ratio": _activity(mig, d.gpu_instance),
                # the processes on its GPU instance (None: attribution off)
                "processes": None
                if processes is None
                else [
                    _shown(p.process) or (f"pid {p.pid}" if p.pid else "other")
                    for p in processes
                    if p.gpu_instance == str(d.gpu_instance)
                ],
                "verdicts": _verdicts(instance_verdicts.get(d.gpu_instance, ())),
            }
            for d in (mig.devices if mig else ())
        ],
        "verdicts": _verdicts(judge(device, history)),
        "recommended_action": _recommended(snapshot, device),
        "process_count": attribution.process_count if attribution else None,
        "unattributed_memory_bytes": attribution.unattributed_memory_bytes if attribution else None,
        "processes": [
            _process(key, p, history) for p in (attribution.processes if attribution else ())
        ],
        "history": _points(points) if points else {"times": []},
    }


def _recommended(snapshot: Snapshot, device: DeviceSample) -> Document | None:
    """`gpu_recommended_action` with what to run; None where no signal was read."""
    found = actions.recommend(snapshot, device)
    if found is None:
        return None
    return {"action": found.action, "reason": found.reason, "advice": actions.ADVICE[found.action]}


def _instance(mig: Any, gpu_instance: int, name: str) -> int | None:
    instance = mig.instances.get(gpu_instance) if mig else None
    return getattr(instance, name) if instance is not None else None


def _activity(mig: Any, gpu_instance: int) -> float | None:
    """A GPU instance's graphics-engine activity (0..1) over the latest GPM interval."""
    instance = mig.instances.get(gpu_instance) if mig else None
    gpm = instance.gpm if instance is not None else None
    return gpm.graphics_engine_ratio if gpm is not None else None


def _verdicts(verdicts: tuple[GpuVerdict, ...]) -> list[Document]:
    return [
        {"name": v.name, "level": v.level, "summary": visible(v.summary), "advice": v.advice}
        for v in verdicts
    ]


def _process(key: GpuKey, p: ProcessSample, history: History) -> Document:
    return {
        "pid": int(p.pid) if p.pid else None,  # None: the roll-up of processes beyond the cap
        "user": _shown(p.user),
        "process": _shown(p.process),
        "job": _shown(job(p)),
        "gpu_instance": int(p.gpu_instance) if p.gpu_instance else None,
        "memory_used_bytes": p.memory_used_bytes,
        "sm_ratio": p.sm_ratio,
        "cpu_cores": history.cpu_cores(key, p.pid) if p.pid else None,
        "workers": p.workers,
    }


def job(p: ProcessSample) -> str | None:
    """The container or job a process runs in, as a person names it; None when unknown."""
    if p.slurm_job_id:
        return f"slurm job {p.slurm_job_id}"
    if p.pod:  # named from the kubelet's log layout (collector kubernetes)
        return f"pod {p.namespace}/{p.pod}" + (f" ({p.container})" if p.container else "")
    if p.pod_uid:
        return f"pod {p.pod_uid}"
    if p.container_id:
        return f"container {p.container_id[:12]}"
    return p.systemd_unit or None


def _points(points: Points) -> Document:
    return {"times": points.times, **points.series}
