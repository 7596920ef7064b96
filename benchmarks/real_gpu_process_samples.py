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
        shown = " ".join(
            f"({(e.timestamp_us - start_us) / 1e3:.0f}, pid {e.pid}, {e.sm_percent}%)"
            for e in entries
        )
        duty = (
            f"{sum(p for _, p in gpu_new) / len(gpu_new):.0f}% over {len(gpu_new)}"
            if gpu_new
            else "none"
        )
        lines.append(f"{now:7.2f} s: {shown or 'no entry'}{note}; GPU buffer {duty}")
        if entries:
            since = max(since, *(e.timestamp_us for e in entries))
        if gpu_new:
            gpu_since = max(ts for ts, _ in gpu_new)
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
    finally:
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
