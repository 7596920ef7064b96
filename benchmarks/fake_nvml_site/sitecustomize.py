"""Puts the fake libnvidia-ml in pynvml's place in any Python program started with this
directory on its PYTHONPATH, so the benchmark can run gpu-exporter and nvitop-exporter
against the same simulated host (`tests/support/fake_host.py`: busy H100s with GPM,
18 NVLink links and compute processes; sample buffers that fill with time).

Python imports `sitecustomize` at start-up; this one does nothing unless asked:

- FAKE_NVML_GPUS: how many GPUs (unset: do nothing);
- FAKE_NVML_REPO: the repository root, where `tests.support` lives;
- FAKE_NVML_PIDS: comma-separated PIDs of the GPU processes, dealt over the GPUs in turn;
- FAKE_NVML_CALLS: a file that SIGUSR1 makes the program write its NVML call counts to
  (JSON: `answered`, calls the fake answered; `on_gpus`, those of them made on a GPU's
  handle (the rest are the library's: device count, event waits); `missing`, lookups of
  functions the fake
  lacks, which a real driver would answer; `by_function`; `fake_cpu_seconds`, the CPU
  time the program's threads spent inside the fake's Python answering those calls, which
  stands in for the driver's and is not the program's own).
"""

from __future__ import annotations

import os


def _install() -> None:
    import json
    import signal
    import sys
    import time
    from collections import Counter
    from typing import Any

    sys.path.append(os.environ["FAKE_NVML_REPO"])
    import pynvml

    from tests.support.fake_host import LiveFakeNvml, busy_h100

    gpus = int(os.environ["FAKE_NVML_GPUS"])
    pids = [int(p) for p in os.environ.get("FAKE_NVML_PIDS", "").split(",") if p]
    missing: Counter[str] = Counter()
    fake_cpu = [0.0]  # seconds of thread CPU time inside the fake's answers

    class CountingFake(LiveFakeNvml):
        def __getattr__(self, name: str) -> Any:
            try:
                answer = super().__getattr__(name)
            except AttributeError:
                if not name.startswith("_"):
                    missing[name] += 1
                raise
            clock = time.thread_time

            def timed(*args: Any) -> int:
                started = clock()
                try:
                    return int(answer(*args))
                finally:
                    fake_cpu[0] += clock() - started

            return timed

    lib = CountingFake([busy_h100(i, pids[i::gpus]) for i in range(gpus)])
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()

    def dump(_signum: int, _frame: object) -> None:
        path = os.environ["FAKE_NVML_CALLS"]
        by_function: Counter[str] = Counter()
        on_gpus = 0
        for (function, gpu), n in list(lib.calls.items()):
            by_function[function] += n
            on_gpus += n if gpu is not None else 0
        counts = {
            "answered": sum(by_function.values()),
            "on_gpus": on_gpus,
            "missing": sum(missing.values()),
            "fake_cpu_seconds": fake_cpu[0],
            "by_function": dict(by_function),
            "missing_by_function": dict(missing),
        }
        with open(path + ".tmp", "w") as out:
            json.dump(counts, out)
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR1, dump)


if os.environ.get("FAKE_NVML_GPUS"):
    _install()
