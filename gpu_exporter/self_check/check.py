"""The self-check itself: sample through the daemon's backend and sampler, ask
nvidia-smi in the middle, and print one table of every value on both sides.

The exporter is sampled `SAMPLES_EACH_SIDE` times before nvidia-smi is asked and as
many times after, `SPACING_SECONDS` apart (about four seconds in all), so nvidia-smi's
moment lies inside the exporter's samples. Exit codes: 0 when every value agrees, 1 on
a difference beyond tolerance or a value only one side has, 2 when the check cannot run
(nvidia-smi missing, failing or timing out; NVML down).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from gpu_exporter.config import EXIT_USAGE, Settings
from gpu_exporter.daemon import make_backend, make_sampler, warn_if_simulated
from gpu_exporter.model import DeviceSample, Snapshot
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.self_check import nvidia_smi
from gpu_exporter.self_check.compare import (
    COLLECTORS,
    QUANTITIES,
    Row,
    judge,
    nvidia_smi_answer,
)

SAMPLES_EACH_SIDE = 4
SPACING_SECONDS = 0.5
EXIT_FINDING = 1


def self_check(settings: Settings) -> int:
    """Run the check and print its table; returns the exit code."""
    try:
        executable = nvidia_smi.find_executable(settings.self_check_nvidia_smi)
    except nvidia_smi.NvidiaSmiError as error:
        return _cannot(str(error))
    warn_if_simulated(settings)
    backend = make_backend(settings)
    # only the collectors compared: the process walk and GPM would only cost time here
    sampler = make_sampler(
        replace(settings, collectors=settings.collectors & COLLECTORS), backend, retries=False
    )
    try:
        snapshots = _sample(sampler, SAMPLES_EACH_SIDE, first=True)
        answers = nvidia_smi.read(
            executable,
            [q.field for q in QUANTITIES if not q.xml],
            [f for q in QUANTITIES if q.xml for f in (q.field, q.tlimit) if f],
            settings.timeout_seconds,
        )
        snapshots += _sample(sampler, SAMPLES_EACH_SIDE, first=False)
    except nvidia_smi.NvidiaSmiError as error:
        return _cannot(str(error))
    finally:
        sampler.stop(timeout_seconds=0)
    if not any(s.nvml_up for s in snapshots):
        reason = snapshots[-1].nvml_down_reason or "unknown"
        return _cannot(f"the exporter could not read NVML ({reason})")
    rows = compare(snapshots, answers, settings.collectors)
    sys.stdout.write(table(rows))
    sys.stdout.write(summary(rows) + "\n")
    sys.stdout.flush()
    return EXIT_FINDING if any(r.finding for r in rows) else 0


def _cannot(why: str) -> int:
    print(f"gpu-exporter: self-check: {why}", file=sys.stderr)
    return EXIT_USAGE


def _sample(sampler: Sampler, count: int, *, first: bool) -> list[Snapshot]:
    """`count` snapshots `SPACING_SECONDS` apart (the pause after each of the first
    side's, before each of the second side's)."""
    out: list[Snapshot] = []
    for _ in range(count):
        if not first:
            time.sleep(SPACING_SECONDS)
        out.append(sampler.sample_once())
        if first:
            time.sleep(SPACING_SECONDS)
    return out


def compare(
    snapshots: Sequence[Snapshot], answers: nvidia_smi.Answers, collectors: frozenset[str]
) -> list[Row]:
    """A row per GPU and quantity, GPUs matched by UUID, in the exporter's order; a GPU
    only one side lists gets one row saying so."""
    seen: dict[str, list[tuple[Snapshot, DeviceSample]]] = {}
    index: dict[str, int] = {}
    for snapshot in snapshots:
        for device in snapshot.devices:
            if device.static is not None:
                seen.setdefault(device.uuid, []).append((snapshot, device))
                index[device.uuid] = device.index
    rows: list[Row] = []
    for uuid in sorted(seen, key=index.__getitem__):
        gpu = str(index[uuid])
        smi = answers.by_uuid.get(uuid)
        if smi is None:
            rows.append(Row(gpu, "uuid", uuid, "N/A", "absent", "in nvidia-smi: no such GPU"))
            continue
        for q in QUANTITIES:
            off = q.collector is not None and q.collector not in collectors
            values = [v for s, d in seen[uuid] if (v := q.exporter(s, d)) is not None]
            skipped = f"--no-collector.{q.collector}" if off else ""
            judged, answer, shown = nvidia_smi_answer(q, smi)
            rows.append(judge(gpu, judged, values, answer, skipped=skipped, shown=shown))
    for uuid in answers.by_uuid.keys() - seen.keys():
        gpu = f"smi:{answers.index.get(uuid, '?')}"
        rows.append(Row(gpu, "uuid", "N/A", uuid, "absent", "in the exporter: no such GPU"))
    return rows


HEADER = ("GPU", "QUANTITY", "EXPORTER", "NVIDIA-SMI", "VERDICT")


def table(rows: Sequence[Row]) -> str:
    """The rows as aligned columns, with a header line."""
    lines = [HEADER] + [(r.gpu, r.field, r.exporter, r.nvidia_smi, r.says) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER) - 1)]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False))
        + "  "
        + line[-1]
        + "\n"
        for line in lines
    )


def summary(rows: Sequence[Row]) -> str:
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("agree", "differ", "absent")}
    skipped = sum(1 for r in rows if r.verdict == "skipped")
    verdict = "FAILED" if counts["differ"] or counts["absent"] else "passed"
    return (
        f"self-check {verdict}: {len(rows)} values, {counts['agree']} agree, "
        f"{counts['differ']} differ, {counts['absent']} absent on one side, {skipped} skipped"
    )
