"""NVML calls per interval of one GPU with MIG on, in total and per function.

One busy fake H100 (`tests/support/fake_host.py`: GPM, 18 NVLink links, the power fields
of a recent driver) is sampled through the real sampler and `PynvmlBackend` at a 1 s
interval with every default collector, for 180 intervals after the first sample, as
`tests/test_nvml_efficiency_contract.py` counts (the host's nvmlDeviceGetCount_v2 left
out). Each MIG layout of `MIG_LAYOUTS` is measured with a process on every MIG device
(busy) and on none (idle), and the GPU without MIG beside them.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/mig_calls.py [--per-function]
"""

from __future__ import annotations

import sys
from collections import Counter

import pynvml

from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.clock import FakeClock
from tests.support.fake_host import MIG_LAYOUTS, advance, busy_h100, busy_mig_h100
from tests.support.fake_nvml import FakeGpu, FakeNvmlLib
from tests.support.fake_sampling import one_second_sampler

INTERVALS = 180
COLLECT = frozenset(c.name for c in COLLECTORS if c.default_enabled) - {"host", "xid"}


def _us(clock: FakeClock) -> int:
    return int(clock.monotonic() * 1e6) + 1_000_000


def calls_per_interval(gpu: FakeGpu) -> Counter[str]:
    """The NVML calls of `gpu` per interval, by function (times INTERVALS)."""
    lib = FakeNvmlLib([gpu], record=False)
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    clock = FakeClock()
    backend = PynvmlBackend(monotonic=clock.monotonic)
    backend.init()
    sampler = one_second_sampler(backend, clock, COLLECT)
    advance(gpu, _us(clock))
    sampler.sample_once()  # the identity, the buffers, the first enumeration
    before = Counter(lib.calls)
    for _ in range(INTERVALS):
        clock.now += 1.0
        advance(gpu, _us(clock))  # the driver's sample buffers fill (none under MIG)
        sampler.sample_once()
    sampler.stop(0)
    calls = Counter(lib.calls)
    calls.subtract(before)
    out: Counter[str] = Counter()
    for (function, _gpu), n in calls.items():  # GPM metrics name no device: one GPU here
        if function != "nvmlDeviceGetCount_v2" and n:
            out[function] += n
    return out


def main() -> None:
    per_function = "--per-function" in sys.argv
    hosts = [("no MIG", busy_h100())]
    for layout in MIG_LAYOUTS:
        hosts += [(f"{layout}, busy", busy_mig_h100(layout))]
        hosts += [(f"{layout}, idle", busy_mig_h100(layout, busy=False))]
    print("| GPU | NVML calls per interval |\n|---|---|")
    for name, gpu in hosts:
        calls = calls_per_interval(gpu)
        print(f"| {name} | {sum(calls.values()) / INTERVALS:.2f} |")
        if per_function:
            for function, n in calls.most_common():
                if n / INTERVALS >= 0.05:
                    print(f"|   {function} | {n / INTERVALS:.2f} |")


if __name__ == "__main__":
    main()
