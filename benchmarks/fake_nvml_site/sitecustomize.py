"""Puts the fake libnvidia-ml in pynvml's place in any Python program started with this
directory on its PYTHONPATH, so the benchmark can run gpu-exporter and nvitop-exporter
against the same simulated host (`tests/support/fake_host.py`: busy H100s with GPM,
18 NVLink links and compute processes; sample buffers that fill with time).

Python imports `sitecustomize` at start-up; this one does nothing unless asked:

- FAKE_NVML_GPUS: how many GPUs (unset: do nothing);
- FAKE_NVML_REPO: the repository root, where `tests.support` lives;
- FAKE_NVML_KIND: `gb200` for the GB200s of an NVL72 compute tray on an R580 driver
  (`tests.support.fake_nvml.gb200`: NVLink5 counters, platform info, a rack-wide fabric)
  instead of the busy H100s;
- FAKE_NVML_PIDS: comma-separated PIDs of the GPU processes, dealt over the GPUs in turn;
- FAKE_NVML_DEVICES: the device file each GPU's descriptors open, as MAJOR:MINOR of a
  char device, comma-separated by GPU (GPUs beyond keep their index as minor): the stand-in
  driver's nodes, which the holder scan then looks for in place of NVIDIA's major 195
  (one major for all; a test uses the kernel's memory devices, such as 1:8, /dev/random,
  that any process may open and no service holds);
- FAKE_NVML_CALLS: a file that SIGUSR1 makes the program write its NVML call counts to
  (JSON: `answered`, calls the fake answered; `on_gpus`, those of them made on a GPU's
  handle or, for `nvmlGpmMetricsGet` (which takes none), for one GPU's samples (the rest
  are the library's: device count, event waits); `missing`, lookups of functions the fake
  lacks, which a real driver would answer; `by_function`; `fake_cpu_seconds`, the CPU
  time the program's threads spent inside the fake's Python answering those calls, which
  stands in for the driver's and is not the program's own, measured on each calling
  thread's CPU clock; `fake_cpu_seconds_by_thread`, the same per native thread id;
  `thread_names`, each live thread's Python name by native id, so per-thread CPU from
  /proc/PID/task/TID/schedstat can be named).
"""

from __future__ import annotations

import os

# calls that take no device handle but are made once per GPU: counted with the GPUs'
PER_GPU_WITHOUT_HANDLE = frozenset({"nvmlGpmMetricsGet"})


def _install() -> None:
    import json
    import signal
    import sys
    import threading
    import time
    from collections import Counter
    from typing import Any

    sys.path.append(os.environ["FAKE_NVML_REPO"])
    import pynvml

    from tests.support.fake_host import LiveFakeNvml, busy_h100

    gpus = int(os.environ["FAKE_NVML_GPUS"])
    pids = [int(p) for p in os.environ.get("FAKE_NVML_PIDS", "").split(",") if p]
    missing: Counter[str] = Counter()
    fake_cpu: dict[int, float] = {}  # thread CPU seconds inside the fake's answers, per thread id

    class CountingFake(LiveFakeNvml):
        def __getattr__(self, name: str) -> Any:
            try:
                answer = super().__getattr__(name)
            except AttributeError:
                if not name.startswith("_"):
                    missing[name] += 1
                raise
            clock = time.thread_time
            thread_id = threading.get_native_id

            def timed(*args: Any) -> int:
                started = clock()
                try:
                    return int(answer(*args))
                finally:
                    tid = thread_id()  # each thread writes only its own entry
                    fake_cpu[tid] = fake_cpu.get(tid, 0.0) + clock() - started

            return timed

    driver: dict[str, Any] = {}
    if os.environ.get("FAKE_NVML_KIND") == "gb200":
        from tests.support.fake_nvml import R580, gb200

        fakes = [gb200(i) for i in range(gpus)]
        driver["driver_version"] = R580
    else:
        fakes = [busy_h100(i, pids[i::gpus]) for i in range(gpus)]
    devices = [d.split(":") for d in os.environ.get("FAKE_NVML_DEVICES", "").split(",") if d]
    if devices:
        from gpu_exporter.attribution import holders

        holders.NVIDIA_MAJOR = int(devices[0][0])
        for fake, (_major, minor) in zip(fakes, devices, strict=False):
            fake.minor = int(minor)
    lib = CountingFake(fakes, **driver)
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()

    def dump(_signum: int, _frame: object) -> None:
        path = os.environ["FAKE_NVML_CALLS"]
        by_function: Counter[str] = Counter()
        on_gpus = 0
        for (function, gpu), n in list(lib.calls.items()):
            by_function[function] += n
            # a GPM metrics call names no handle, but computes one GPU's samples
            on_gpus += n if gpu is not None or function in PER_GPU_WITHOUT_HANDLE else 0
        counts = {
            "answered": sum(by_function.values()),
            "on_gpus": on_gpus,
            "missing": sum(missing.values()),
            "fake_cpu_seconds": sum(fake_cpu.values()),
            "fake_cpu_seconds_by_thread": {str(tid): s for tid, s in fake_cpu.items()},
            "thread_names": {str(t.native_id): t.name for t in threading.enumerate()},
            "by_function": dict(by_function),
            "missing_by_function": dict(missing),
        }
        with open(path + ".tmp", "w") as out:
            json.dump(counts, out)
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR1, dump)


if os.environ.get("FAKE_NVML_GPUS"):
    _install()
