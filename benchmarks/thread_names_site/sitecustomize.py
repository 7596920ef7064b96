"""Names the threads of a Python program for the benchmark (`benchmarks/standin.py`).

Python imports `sitecustomize` at start-up; this one does nothing unless
BENCH_THREAD_NAMES names a file: then SIGUSR1 makes the program write there (JSON) each
live thread's Python name by native thread id, so per-thread CPU from
/proc/PID/task/TID/schedstat can be named. It touches nothing else: NVML is the compiled
stand-in's, loaded as a driver is.
"""

from __future__ import annotations

import os


def _install(path: str) -> None:
    import json
    import signal
    import threading

    def dump(_signum: int, _frame: object) -> None:
        names = {str(t.native_id): t.name for t in threading.enumerate()}
        with open(path + ".tmp", "w") as out:
            json.dump(names, out)
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR1, dump)


if os.environ.get("BENCH_THREAD_NAMES"):
    _install(os.environ["BENCH_THREAD_NAMES"])
