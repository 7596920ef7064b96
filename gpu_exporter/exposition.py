"""Rendering a Snapshot once, in every format a scrape may ask for.

The sampler renders after each sample; scrapes only pick bytes out of the cache, so the
cost of a scrape does not grow with the number of GPUs or processes. The OpenMetrics
and gzip variants are rendered the first time a client asks for them.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable
from typing import cast

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics import exposition as openmetrics_format
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gpu_exporter.collector import SnapshotCollector
from gpu_exporter.collector import text as collector_text
from gpu_exporter.snapshot import Snapshot

# The classic text format: understood by every Prometheus version (our names are plain ASCII).
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = openmetrics_format.CONTENT_TYPE_LATEST


_go_float = cast(Callable[[float], str], floatToGoString)  # Go's float formatting, as Prometheus


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_text(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format (0.0.4) of gauge and counter families.

    Byte-identical to `prometheus_client.generate_latest` for these types (a test pins
    that), at a fraction of its cost: label names come from the catalogue and need no
    validation or escaping, so only values are escaped.
    """
    out: list[str] = []
    for metric in registry.collect():
        if metric.type not in ("gauge", "counter"):
            raise ValueError(f"{metric.name}: unsupported metric type {metric.type}")
        name = metric.name + "_total" if metric.type == "counter" else metric.name
        help_text = metric.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {metric.type}\n")
        for sample in metric.samples:
            if sample.name.endswith("_created"):
                continue
            if sample.labels:
                labels = ",".join(
                    f'{k}="{_label_value(v)}"' for k, v in sorted(sample.labels.items())
                )
                out.append(f"{sample.name}{{{labels}}} {_go_float(sample.value)}\n")
            else:
                out.append(f"{sample.name} {_go_float(sample.value)}\n")
    return "".join(out).encode()


def wants_openmetrics(accept: str | None) -> bool:
    """Prometheus asks for OpenMetrics first in its Accept header when it wants it."""
    return bool(accept) and "application/openmetrics-text" in (accept or "")


def wants_gzip(accept_encoding: str | None) -> bool:
    for part in (accept_encoding or "").split(","):
        token, _, params = part.strip().partition(";")
        if token.strip().lower() == "gzip" and params.replace(" ", "") != "q=0":
            return True
    return False


class Exposition:
    """The rendered bodies of one snapshot."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        cmdline: bool = False,
        extra: Iterable[Collector] = (),
    ) -> None:
        self.snapshot = snapshot
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(SnapshotCollector(snapshot, cmdline=cmdline))
        extras = CollectorRegistry(auto_describe=False)
        for collector in extra:
            self._registry.register(collector)
            extras.register(collector)
        self._lock = threading.Lock()
        self._bodies: dict[tuple[bool, bool], bytes] = {}
        # the hot path: the snapshot's own series written directly, then the extras
        self._bodies[(False, False)] = collector_text(
            snapshot, cmdline=cmdline
        ).encode() + render_text(extras)

    def body(self, *, openmetrics: bool, compressed: bool) -> bytes:
        key = (openmetrics, compressed)
        body = self._bodies.get(key)
        if body is not None:
            return body
        with self._lock:
            body = self._bodies.get(key)
            if body is None:
                plain = self._bodies.get((openmetrics, False))
                if plain is None:
                    plain = openmetrics_format.generate_latest(self._registry)  # type: ignore[no-untyped-call]
                    self._bodies[(openmetrics, False)] = plain
                body = gzip.compress(plain, compresslevel=6) if compressed else plain
                self._bodies[key] = body
        return body

    def content_type(self, *, openmetrics: bool) -> str:
        return OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
