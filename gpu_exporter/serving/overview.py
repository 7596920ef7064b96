"""The overview document: this host at a glance, as `/api/overview` serves it in JSON and
the live page at `/` renders it.

Built from the latest Snapshot and the `History`, never from NVML. Units are the model's
(bytes, watts, degrees Celsius, ratios 0..1, Unix seconds); a value that is not known is
`None` (JSON `null`), never 0. The shape is documented in the README ("The live page").
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from gpu_exporter import __version__
from gpu_exporter.model import DeviceSample, ProcessSample, Snapshot
from gpu_exporter.sampling.history import DEFAULT_WINDOW, WINDOWS, History, Points, Window
from gpu_exporter.sampling.verdicts import judge

Document = dict[str, Any]


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


def build(snapshot: Snapshot, history: History, window: Window, *, series: bool = True) -> Document:
    """The whole document for `window`; without the GPUs' history when not `series` (the
    page's HTML needs only the latest values: its script fetches the series)."""
    host = snapshot.host
    return {
        "version": __version__,
        "backend": snapshot.backend,
        "timestamp_seconds": snapshot.timestamp_seconds,
        "nvml_up": snapshot.nvml_up,
        "nvml_down_reason": snapshot.nvml_down_reason,  # why NVML is down; None while up
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
        "gpus": [_gpu(device, history, window if series else None) for device in snapshot.devices],
    }


def _gpu(device: DeviceSample, history: History, window: Window | None) -> Document:
    static, reading = device.static, device.reading
    memory = reading.memory if reading else None
    power = reading.power if reading else None
    temperature = reading.temperature if reading else None
    utilization = reading.utilization if reading else None
    mig = reading.mig if reading else None
    points = history.gpu(device.uuid, window) if static and window else None
    attribution = device.attribution
    return {
        "index": device.index,
        "uuid": device.uuid,
        "name": static.name if static else None,
        "up": device.up,
        "down_reason": device.down_reason,
        "gpm": device.activity is not None and device.activity.sm_seconds is not None,
        "utilization_ratio": utilization.gpu_ratio if utilization else None,
        "memory_used_bytes": memory.used_bytes if memory else None,
        "memory_total_bytes": memory.total_bytes if memory else None,
        "power_watts": power.watts if power else None,
        "power_limit_watts": power.limit_watts if power else None,
        "temperature_celsius": temperature.gpu_celsius if temperature else None,
        "slowdown_celsius": static.slowdown_temperature_celsius if static else None,
        "mig": [
            {
                "uuid": d.uuid,
                "gpu_instance": d.gpu_instance,
                "compute_instance": d.compute_instance,
                "profile": d.profile,
                "memory_used_bytes": _instance(mig, d.gpu_instance, "memory_used_bytes"),
                "memory_total_bytes": _instance(mig, d.gpu_instance, "memory_total_bytes"),
            }
            for d in (mig.devices if mig else ())
        ],
        "verdicts": [
            {"name": v.name, "summary": v.summary, "advice": v.advice}
            for v in judge(device, history)
        ],
        "process_count": attribution.process_count if attribution else None,
        "unattributed_memory_bytes": attribution.unattributed_memory_bytes if attribution else None,
        "processes": [
            _process(device.uuid, p, history)
            for p in (attribution.processes if attribution else ())
        ],
        "history": _points(points) if points else {"times": []},
    }


def _instance(mig: Any, gpu_instance: int, name: str) -> int | None:
    instance = mig.instances.get(gpu_instance) if mig else None
    return getattr(instance, name) if instance is not None else None


def _process(uuid: str, p: ProcessSample, history: History) -> Document:
    return {
        "pid": int(p.pid) if p.pid else None,  # None: the roll-up of processes beyond the cap
        "user": p.user or None,
        "process": p.process or None,
        "job": job(p),
        "gpu_instance": int(p.gpu_instance) if p.gpu_instance else None,
        "memory_used_bytes": p.memory_used_bytes,
        "sm_ratio": p.sm_ratio,
        "cpu_cores": history.cpu_cores(uuid, p.pid) if p.pid else None,
        "workers": p.workers,
    }


def job(p: ProcessSample) -> str | None:
    """The container or job a process runs in, as a person names it; None when unknown."""
    if p.slurm_job_id:
        return f"slurm job {p.slurm_job_id}"
    if p.pod_uid:
        return f"pod {p.pod_uid}"
    if p.container_id:
        return f"container {p.container_id[:12]}"
    return p.systemd_unit or None


def _points(points: Points) -> Document:
    return {"times": points.times, **points.series}
