"""Snapshot -> metric families: one loop over the catalogue (and, with `--compat.dcgm`,
its dcgm-exporter name table). Pure: no NVML, no I/O.

Families are built fresh from each Snapshot, so a process that exited or a GPU that
disappeared simply stops being exported. A spec whose collector was off for the sample
is skipped; a value the device did not report is left out, never written as 0 or NaN.
"""

from __future__ import annotations

from gpu_exporter.metrics.catalogue import METRICS
from gpu_exporter.metrics.specs import DEFAULT_OPTIONS, RenderOptions, end_of_render
from gpu_exporter.metrics.text import Family, write_text
from gpu_exporter.model import Snapshot


def families(snapshot: Snapshot, options: RenderOptions = DEFAULT_OPTIONS) -> list[Family]:
    """Every family with at least one series, in catalogue order."""
    out: list[Family] = []
    specs = METRICS
    if options.dcgm:  # imported here: its name table is loaded only with --compat.dcgm
        from gpu_exporter.metrics.dcgm import DCGM_METRICS

        specs += DCGM_METRICS
    for spec in specs:
        if spec.collector is not None and spec.collector not in snapshot.collectors:
            continue
        rows = [(labels, float(value)) for labels, value in spec.rows(snapshot, options)]
        if rows:
            out.append(Family(spec.name, spec.type, spec.help, spec.label_names(options), rows))
    end_of_render()
    return out


def text(snapshot: Snapshot, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The Prometheus text format of one snapshot."""
    return write_text(families(snapshot, options))
