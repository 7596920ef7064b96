"""What serialising nvmlDeviceGetFieldValues across GPUs costs a sample.

8 busy H100s of the tests' fake libnvidia-ml (`tests/support/fake_host.py`) are sampled
through the real sampler and `PynvmlBackend`, once with the field-value calls serialised
(the default) and once without. The fake's field-value call is made to take `latency` ms
inside the "driver" (a sleep, which releases the GIL as a ctypes call into the real
driver does). Printed: the median wall time of the devices stage over the samples, and
the process CPU time per sample, for each latency.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/field_values_lock.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import pynvml

from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.nvml import PynvmlBackend
from gpu_exporter.sources.nvml.backend import FIELD_VALUES_WAIT_SECONDS
from tests.support.fake_host import busy_h100
from tests.support.fake_nvml import FakeNvmlLib

GPUS = 8
SAMPLES = 40
LATENCIES_MS = (0.0, 0.2, 1.0, 5.0)
COLLECTORS = frozenset({"utilization", "memory", "power", "ecc", "pcie", "temperature", "nvlink"})


class SlowFieldValues(FakeNvmlLib):
    """The fake library, its field-value call taking `latency_s` in the driver."""

    latency_s = 0.0

    def c_nvmlDeviceGetFieldValues(self, *args: Any) -> int:  # noqa: N802 (the C symbol)
        if self.latency_s:
            time.sleep(self.latency_s)
        return super().c_nvmlDeviceGetFieldValues(*args)


def measure(latency_ms: float, wait: float | None) -> tuple[float, float]:
    """(median devices-stage wall ms, CPU ms per sample)."""
    lib = SlowFieldValues([busy_h100(i) for i in range(GPUS)], record=False)
    lib.latency_s = latency_ms / 1000.0
    pynvml.nvmlLib = lib
    pynvml._nvmlLib_refcount = 0
    pynvml._nvmlGetFunctionPointer_cache.clear()
    sampler = Sampler(
        PynvmlBackend(field_values_wait_seconds=wait),
        interval_seconds=1.0,
        timeout_seconds=10.0,
        collectors=COLLECTORS,
    )
    sampler.sample_once()  # identity, buffers
    walls = []
    cpu = time.process_time()
    for _ in range(SAMPLES):
        walls.append(sampler.sample_once().stages["devices"].duration_seconds * 1000.0)
    cpu_ms = (time.process_time() - cpu) * 1000.0 / SAMPLES
    sampler.stop(0)
    return statistics.median(walls), cpu_ms


def main() -> None:
    print(f"{GPUS} fake H100s, {SAMPLES} samples each; devices stage, median wall ms (CPU ms)")
    print("| field-value call in the driver | concurrent | serialised | difference |")
    print("|---|---|---|---|")
    for latency in LATENCIES_MS:
        free_wall, free_cpu = measure(latency, None)
        lock_wall, lock_cpu = measure(latency, FIELD_VALUES_WAIT_SECONDS)
        print(
            f"| {latency:g} ms | {free_wall:.2f} ({free_cpu:.2f}) | "
            f"{lock_wall:.2f} ({lock_cpu:.2f}) | {lock_wall - free_wall:+.2f} |"
        )


if __name__ == "__main__":
    main()
