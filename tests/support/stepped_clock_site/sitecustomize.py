"""Steps the wall clock of any Python program started with this directory on its
PYTHONPATH, as NTP, PTP, a VM resume or an operator's `date` step a host's: the tests of
issue 48 run the real exporter so (`tests/test_clock_steps_e2e.py`).

Python imports `sitecustomize` at start-up, before the program's own modules, so every
`time.time` the program holds (the default arguments of its clocks included) is this
one. It does nothing unless STEPPED_CLOCK_FILE names a file; that file holds the step in
seconds (negative: back), re-read whenever it changes (write a new one and rename it into
place), and `time.time()` and `time.time_ns()` answer the real wall time plus the step.
Nothing else moves, as on a real host: CLOCK_MONOTONIC, CLOCK_BOOTTIME and /proc's start
times (the kernel's own boot time stays where it was, as a boot time read once and kept
would after a real step). Tests only: never in the package.
"""

from __future__ import annotations

import os
import time

_PATH = os.environ.get("STEPPED_CLOCK_FILE")


def _install(path: str) -> None:
    real_time, real_time_ns = time.time, time.time_ns
    seen: dict[str, object] = {"key": None}  # the file's (mtime, size, inode) last read
    steps: list[float] = [0.0]  # the step it said

    def step() -> float:
        try:
            st = os.stat(path)
        except OSError:
            return steps[0]
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != seen["key"]:
            try:
                with open(path, encoding="ascii") as handle:
                    steps[0] = float(handle.read(64).strip() or 0.0)
            except (OSError, ValueError):
                return steps[0]
            seen["key"] = key
        return steps[0]

    def stepped_time() -> float:
        return real_time() + step()

    def stepped_time_ns() -> int:
        return real_time_ns() + round(step() * 1e9)

    time.time = stepped_time
    time.time_ns = stepped_time_ns


if _PATH:
    _install(_PATH)
