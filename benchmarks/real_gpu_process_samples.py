"""What a real driver's per-process utilization entries mean (`process_seconds.py`).

`nvmlDeviceGetProcessUtilization(handle, since)` on a real H200 (R580) returned one entry
for a process that had run kernels without pause for 20 s (`real_gpu.py`'s buffer table,
2026-11-30): the driver keeps the newest entry per process, not one per sample period.
This run asks what that one entry stands for. A PyTorch loop on GPU 0 runs kernels for
the first half of each second and sleeps the second half (a 50% duty a 200 ms period
resolves); three readers ask, each for READ_SECONDS:

- every 50 ms, since the newest entry seen: how often the entry changes, and whether its
  share is each period's (0 or 100) or an average;
- every 1 s and every 5 s, since the newest entry seen: what a reader at the exporter's
  intervals gets (an average since the last read would read ~50 every time);
- at a few moments, one read after another with `since` SINCE_BACK_SECONDS before the
  moment: whether the share is averaged since `since` (the reads differ: 0 or ~100 at
  0.1 s back, ~50 from 1 s back) or over a window of the driver's own (they agree). The
  load repeats every second, so the 1 s and 5 s readers cannot tell these apart
  (2026-11-30: both read 51%), and `process_seconds.py` counts on the first. The first
  distance is asked again last: a driver that remembers the reads would answer it anew;

with the GPU's own sample buffer read beside each, for the duty the GPU saw. One line per
read: seconds since the start, then (timestamp ms since the start, SM %) per entry.

    python3 benchmarks/real_gpu_process_samples.py

Not a test: CI has no GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from real_gpu import load  # noqa: E402

from gpu_exporter.sources.nvml import buffers  # noqa: E402

READ_SECONDS = {0.05: 4.0, 1.0: 8.0, 5.0: 20.0}  # cadence -> how long it is read
SINCE_BACK_SECONDS = (10.0, 3.0, 1.0, 0.5, 0.1, 10.0)  # `since`, this far before a moment
MOMENTS, MOMENT_SPACING_SECONDS = 8, 1.3  # the moments: spread over the load's phases


def shown(entries: Sequence[buffers.ProcessSample], start_us: int) -> str:
    """The entries as (ms since the start, pid, SM %), or "no entry"."""
    return (
        " ".join(
            f"({(e.timestamp_us - start_us) / 1e3:.0f}, pid {e.pid}, {e.sm_percent}%)"
            for e in entries
        )
        or "no entry"
    )


def reads(pynvml: Any, handle: Any, every: float, seconds: float, start_us: int) -> list[str]:
    per_process = buffers.process_sample_buffer()
    gpu = buffers.sample_buffer()
    since = gpu_since = int(time.time() * 1e6)
    lines = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(every)
        try:
            entries = buffers.process_utilization(handle, per_process, since)
        except pynvml.NVMLError as error:
            entries, note = [], f" ({error})"
        else:
            note = ""
        try:
            gpu_entries = buffers.samples(
                handle, gpu, pynvml.NVML_GPU_UTILIZATION_SAMPLES, gpu_since
            )
        except pynvml.NVMLError:  # nothing newer than gpu_since: NOT_FOUND
            gpu_entries = []
        gpu_new = [(ts, pct) for ts, pct in gpu_entries if ts > gpu_since]
        now = (time.time() * 1e6 - start_us) / 1e6
        duty = (
            f"{sum(p for _, p in gpu_new) / len(gpu_new):.0f}% over {len(gpu_new)}"
            if gpu_new
            else "none"
        )
        lines.append(f"{now:7.2f} s: {shown(entries, start_us)}{note}; GPU buffer {duty}")
        if entries:
            since = max(since, *(e.timestamp_us for e in entries))
        if gpu_new:
            gpu_since = max(ts for ts, _ in gpu_new)
    return lines


def sinces(
    pynvml: Any,
    handle: Any,
    start_us: int,
    moments: int = MOMENTS,
    spacing: float = MOMENT_SPACING_SECONDS,
) -> list[str]:
    """At each of `moments`, `spacing` seconds apart: the entries asked with `since`
    each of SINCE_BACK_SECONDS before the moment, one read after another."""
    per_process = buffers.process_sample_buffer()
    lines = []
    for _ in range(moments):
        time.sleep(spacing)
        moment_us = int(time.time() * 1e6)
        answers = []
        for back in SINCE_BACK_SECONDS:
            try:
                entries = buffers.process_utilization(
                    handle, per_process, moment_us - round(back * 1e6)
                )
            except pynvml.NVMLError as error:
                answers.append(f"{back:g} s back: {error}")
            else:
                answers.append(f"{back:g} s back: {shown(entries, start_us)}")
        lines.append(f"{(moment_us - start_us) / 1e6:7.2f} s: " + "; ".join(answers))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--torch-python", default=sys.executable, metavar="PATH")
    args = parser.parse_args(argv)
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with load(args.torch_python, "square"):
            start_us = int(time.time() * 1e6)
            for every, seconds in READ_SECONDS.items():
                print(f"-- every {every:g} s, for {seconds:g} s", flush=True)
                for line in reads(pynvml, handle, every, seconds, start_us):
                    print(line, flush=True)
            print(f"-- {MOMENTS} moments, since {SINCE_BACK_SECONDS} s before each", flush=True)
            for line in sinces(pynvml, handle, start_us):
                print(line, flush=True)
    finally:
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
