"""What a real GPU's driver charges, and both exporters side by side on it (issue 42).

One prepared run for a host with an NVIDIA driver, in under 5 minutes:

1. **Costs.** Times through pynvml every NVML function gpu-exporter calls (the stand-in's
   list, `standin_nvml.c`'s FUNCTIONS, that can be called without side effects), up to
   300 calls each, fewer for dear ones, on this thread's CPU clock (a driver's time is
   paid by its caller's thread); and every field id the exporter asks for
   (`gpu_exporter.sources.nvml.fields`), each in a call of its own less the call's own
   cost, next to the driver's own per-entry latency (`latencyUsec`) in one call asking
   for all of them. Adjacent dear fields one driver query serves together (a pair costs
   what one does) become one `fieldgroup.A-B`. Written as a cost file
   (`cost_file.py`'s format) that `make bench`'s stand-in charges: `bench.py --costs`.
   NVLink5's counters (Blackwell: `sources/nvml/nvlink5.py`, read on the counters'
   cadence until measured here) are timed alike, each id alone, and as the exporter reads
   them: every counter of every link in one call (`nvlink5_read_us`); so is
   nvmlDeviceGetPlatformInfo, which the stand-in does not answer. Both are written in
   the cost file's header.
2. **Side by side.** gpu-exporter (`python -m gpu_exporter --collect.interval 1s`) and
   nvitop-exporter (`--interval 1.0`; installed as the bench does, or `--nvitop PATH`)
   on 127.0.0.1, both running at once, not scraped while measured; each process's CPU
   (every thread's schedstat, as the bench) and RSS over PHASE_SECONDS per phase: idle;
   a PyTorch matmul loop starved by its "DataLoader" (a burst, then a sleep); the loop
   at full speed; 97% of the GPU's memory held by a process doing nothing (with `torch`
   importable by `--torch-python`, else those phases are left out, saying so).
3. **Report.** The issue's table (phase | ours ms/s | nvitop ms/s | ours / theirs), RSS,
   and, from one scrape of ours at the end, its `gpu_exporter_nvml_call_seconds_total`
   by function where it exports it.

    .venv/bin/python benchmarks/real_gpu.py --out /tmp/real-gpu

writes /tmp/real-gpu/nvml-costs.txt and /tmp/real-gpu/report.md. Not a test: CI has no
GPU (tests/test_bench_standin.py runs its --help and its cost-file writer).
"""

from __future__ import annotations

import argparse
import ctypes
import http.client
import itertools
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

import bench  # noqa: E402  (benchmarks/ is no package)
import cost_file  # noqa: E402
import psutil  # noqa: E402

CALLS = 300  # per function where cheap
FIELD_CALLS = 50  # single-field calls per field, where cheap
SECONDS_PER_FUNCTION = 0.4  # a dear function gets fewer calls
TIMING_BUDGET_SECONDS = 75.0  # all of part 1
DEAR_FIELD_US = 50.0  # a field dearer than this may share its driver query with a neighbour
PHASE_SECONDS = 20.0
COVERAGE_CALLS = 5  # reads of each buffer, whole and since its newest entry
COVERAGE_WAIT_SECONDS = 12.0  # between the two looks at the buffers
SETTLE_SECONDS = 5.0  # after a phase's load starts, before its window
WARM_UP_SECONDS = 8.0  # after both exporters answer
MAX_SCRAPE_BYTES = 16 << 20
SCRAPE_FILE = "metrics.txt"  # our last scrape, in --out
NVIDIA_SMI_FILE = "nvidia-smi.txt"  # nvidia-smi at that moment, in --out
SMI_QUERY = (
    "timestamp,memory.total,memory.reserved,memory.used,memory.free,temperature.gpu,"
    "temperature.memory,clocks.sm,clocks.mem,clocks.gr,clocks.video,pstate,power.draw,"
    "clocks_event_reasons.active,utilization.gpu,utilization.memory,pcie.link.gen.current,"
    "pcie.link.width.current,fan.speed,ecc.mode.current"
)
STANDIN_SOURCE = HERE / "standin_nvml" / "standin_nvml.c"

# the load on GPU 0 (or CUDA_VISIBLE_DEVICES' first): a matmul loop, full speed, starved
# or the first half of each second ("square"), or 97% of the memory held by a process
# that does nothing
LOAD = textwrap.dedent(
    """
    import sys, time, torch
    kind = sys.argv[1]
    starved = kind == "starved"
    if kind == "hold":
        free, _ = torch.cuda.mem_get_info()
        held = torch.empty(int(free * 0.97) // 4, dtype=torch.float32, device="cuda")
        print("ready", flush=True)
        while True:
            time.sleep(3600)
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    print("ready", flush=True)
    while kind == "square":  # kernels the first half of each wall-clock second
        while time.time() % 1.0 < 0.5:
            for _ in range(10):
                c = a @ b
            torch.cuda.synchronize()
        time.sleep(1.0 - time.time() % 1.0)
    while True:
        for _ in range(20 if starved else 200):
            c = a @ b
        torch.cuda.synchronize()
        if starved:
            time.sleep(0.2)  # the DataLoader has not got the next batch yet
    """
)


def stand_in_functions() -> list[str]:
    """The NVML functions the bench's stand-in answers (FUNCTIONS in standin_nvml.c):
    the ones either exporter calls."""
    text = STANDIN_SOURCE.read_text()
    start = text.index("#define FUNCTIONS(X)")
    block = text[start : text.index("\n\n", start)]
    return re.findall(r"X\((nvml\w+), [01]\)", block)


# Functions not timed, and why: they change state, block, or need MIG on.
NOT_TIMED: dict[str, str] = {
    "nvmlInitWithFlags": "initialises the library",
    "nvmlInit_v2": "initialises the library",
    "nvmlShutdown": "shuts the library down",
    "nvmlGpmSampleAlloc": "allocates (no driver call)",
    "nvmlGpmSampleFree": "frees (no driver call)",
    "nvmlEventSetCreate": "creates an event set",
    "nvmlEventSetFree": "frees an event set",
    "nvmlDeviceRegisterEvents": "registers for events",
    "nvmlEventSetWait_v2": "blocks until an event or its timeout",
    "nvmlDeviceGetComputeRunningProcesses_v2": "the older branches' symbol",
    "nvmlDeviceGetGraphicsRunningProcesses_v2": "the older branches' symbol",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "the older name of ClocksEventReasons",
}
MIG_ONLY = frozenset(
    {
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceRemainingCapacity",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetGpuInstanceById",
        "nvmlGpuInstanceGetInfo",
        "nvmlGpmMigSampleGet",
    }
)


def timers(pynvml: Any, handle: Any) -> dict[str, Callable[[], object]]:
    """A call of each function that can be timed on a GPU without MIG, by C name."""
    n = pynvml
    h = handle
    since = int((time.time() - 2) * 1e6)  # the last two seconds, as a reader would ask
    calls: dict[str, Callable[[], object]] = {
        "nvmlErrorString": lambda: n.nvmlErrorString(n.NVML_ERROR_NOT_FOUND),
        "nvmlSystemGetDriverVersion": n.nvmlSystemGetDriverVersion,
        "nvmlSystemGetCudaDriverVersion": n.nvmlSystemGetCudaDriverVersion,
        "nvmlSystemGetCudaDriverVersion_v2": n.nvmlSystemGetCudaDriverVersion_v2,
        "nvmlDeviceGetCount_v2": n.nvmlDeviceGetCount,
        "nvmlDeviceGetHandleByIndex_v2": lambda: n.nvmlDeviceGetHandleByIndex(0),
        "nvmlDeviceGetUUID": lambda: n.nvmlDeviceGetUUID(h),
        "nvmlDeviceGetName": lambda: n.nvmlDeviceGetName(h),
        "nvmlDeviceGetSerial": lambda: n.nvmlDeviceGetSerial(h),
        "nvmlDeviceGetVbiosVersion": lambda: n.nvmlDeviceGetVbiosVersion(h),
        "nvmlDeviceGetPciInfo_v3": lambda: n.nvmlDeviceGetPciInfo_v3(h),
        "nvmlDeviceGetMinorNumber": lambda: n.nvmlDeviceGetMinorNumber(h),
        "nvmlDeviceGetCudaComputeCapability": lambda: n.nvmlDeviceGetCudaComputeCapability(h),
        "nvmlDeviceGetMaxClockInfo": lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
        "nvmlDeviceGetClockInfo": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
        "nvmlDeviceGetTemperatureThreshold": lambda: n.nvmlDeviceGetTemperatureThreshold(
            h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda: n.nvmlDeviceGetMaxPcieLinkGeneration(h),
        "nvmlDeviceGetMaxPcieLinkWidth": lambda: n.nvmlDeviceGetMaxPcieLinkWidth(h),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda: n.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "nvmlDeviceGetCurrPcieLinkWidth": lambda: n.nvmlDeviceGetCurrPcieLinkWidth(h),
        "nvmlDeviceGetPcieThroughput": lambda: n.nvmlDeviceGetPcieThroughput(
            h, n.NVML_PCIE_UTIL_TX_BYTES
        ),
        "nvmlDeviceGetTemperature": lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetTemperatureV": lambda: n.nvmlDeviceGetTemperatureV(h, n.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetMarginTemperature": lambda: n.nvmlDeviceGetMarginTemperature(h),
        "nvmlDeviceGetFanSpeed": lambda: n.nvmlDeviceGetFanSpeed(h),
        "nvmlDeviceGetPowerUsage": lambda: n.nvmlDeviceGetPowerUsage(h),
        "nvmlDeviceGetEnforcedPowerLimit": lambda: n.nvmlDeviceGetEnforcedPowerLimit(h),
        "nvmlDeviceGetPowerManagementLimit": lambda: n.nvmlDeviceGetPowerManagementLimit(h),
        "nvmlDeviceGetTotalEnergyConsumption": lambda: n.nvmlDeviceGetTotalEnergyConsumption(h),
        "nvmlDeviceIsMigDeviceHandle": lambda: n.nvmlDeviceIsMigDeviceHandle(h),
        "nvmlDeviceGetPerformanceState": lambda: n.nvmlDeviceGetPerformanceState(h),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda: n.nvmlDeviceGetCurrentClocksEventReasons(
            h
        ),
        "nvmlDeviceGetPersistenceMode": lambda: n.nvmlDeviceGetPersistenceMode(h),
        "nvmlDeviceGetMigMode": lambda: n.nvmlDeviceGetMigMode(h),
        "nvmlDeviceGetUtilizationRates": lambda: n.nvmlDeviceGetUtilizationRates(h),
        "nvmlDeviceGetEncoderUtilization": lambda: n.nvmlDeviceGetEncoderUtilization(h),
        "nvmlDeviceGetDecoderUtilization": lambda: n.nvmlDeviceGetDecoderUtilization(h),
        "nvmlDeviceGetMemoryInfo": lambda: n.nvmlDeviceGetMemoryInfo(h),
        "nvmlDeviceGetMemoryInfo_v2": lambda: n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2),
        "nvmlDeviceGetNvLinkErrorCounter": lambda: n.nvmlDeviceGetNvLinkErrorCounter(
            h, 0, n.NVML_NVLINK_ERROR_DL_CRC_DATA
        ),
        **buffer_timers(n, h, since),
        "nvmlDeviceGetMaxMigDeviceCount": lambda: n.nvmlDeviceGetMaxMigDeviceCount(h),
        "nvmlGpmQueryDeviceSupport": lambda: n.nvmlGpmQueryDeviceSupport(h),
        "nvmlDeviceGetSupportedEventTypes": lambda: n.nvmlDeviceGetSupportedEventTypes(h),
        # pynvml's wrappers pass the structure as given: by reference, as the exporter
        # does (by value, R580 with pynvml 13.615 crashed the process on an H200)
        "nvmlDeviceGetGpuFabricInfo": lambda: n.nvmlDeviceGetGpuFabricInfo(
            h, ctypes.byref(n.c_nvmlGpuFabricInfo_t())
        ),
    }
    if hasattr(n, "c_nvmlGpuFabricInfo_v2_t"):

        def fabric_v() -> object:
            info = n.c_nvmlGpuFabricInfo_v2_t()
            info.version = n.nvmlGpuFabricInfo_v2
            return n.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))

        calls["nvmlDeviceGetGpuFabricInfoV"] = fabric_v
    calls.update(gpm_timers(n, h))
    return calls


def raw_call(n: Any, symbol: str, *args: Any) -> Callable[[], object]:
    """One call of the C function `symbol`, its arguments made once; NVMLError on an
    error. pynvml's wrappers of the buffer functions call twice (the size, then the
    entries); the exporter calls once into a buffer it keeps, and a driver charges per call."""
    fn = n._nvmlGetFunctionPointer(symbol)

    def call() -> object:
        ret = fn(*args)
        if ret != n.NVML_SUCCESS:
            raise n.NVMLError(ret)
        return ret

    return call


def buffer_timers(n: Any, h: Any, since: int) -> dict[str, Callable[[], object]]:
    """The functions that fill a caller's buffer, one call each into a buffer of 1024."""
    size = 1024
    samples = (n.c_nvmlSample_t * size)()
    processes = (n.c_nvmlProcessInfo_v3_t * size)()
    utilization = (n.c_nvmlProcessUtilizationSample_t * size)()
    value_type = n._nvmlValueType_t()
    counts = [ctypes.c_uint(size) for _ in range(4)]

    def reset(call: Callable[[], object], count: ctypes.c_uint) -> Callable[[], object]:
        def again() -> object:
            count.value = size
            return call()

        return again

    ref = ctypes.byref
    return {
        "nvmlDeviceGetSamples": reset(
            raw_call(
                n,
                "nvmlDeviceGetSamples",
                h,
                n._nvmlSamplingType_t(n.NVML_GPU_UTILIZATION_SAMPLES),
                ctypes.c_ulonglong(since),
                ref(value_type),
                ref(counts[0]),
                samples,
            ),
            counts[0],
        ),
        "nvmlDeviceGetComputeRunningProcesses_v3": reset(
            raw_call(n, "nvmlDeviceGetComputeRunningProcesses_v3", h, ref(counts[1]), processes),
            counts[1],
        ),
        "nvmlDeviceGetGraphicsRunningProcesses_v3": reset(
            raw_call(n, "nvmlDeviceGetGraphicsRunningProcesses_v3", h, ref(counts[2]), processes),
            counts[2],
        ),
        "nvmlDeviceGetProcessUtilization": reset(
            raw_call(
                n,
                "nvmlDeviceGetProcessUtilization",
                h,
                utilization,
                ref(counts[3]),
                ctypes.c_ulonglong(since),
            ),
            counts[3],
        ),
    }


def gpm_timers(n: Any, h: Any) -> dict[str, Callable[[], object]]:
    """nvmlGpmSampleGet into one of two samples in turn, and nvmlGpmMetricsGet on both;
    none where the GPU has no GPM."""
    try:
        if not n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
            return {}
        samples = [n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()]
        for s in samples:
            n.nvmlGpmSampleGet(h, s)
    except n.NVMLError:
        return {}
    turn = [0]

    def sample_get() -> object:
        turn[0] ^= 1
        return n.nvmlGpmSampleGet(h, samples[turn[0]])

    def metrics_get() -> object:
        request = n.c_nvmlGpmMetricsGet_t()
        request.version = n.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 4
        request.sample1, request.sample2 = samples[0], samples[1]
        for i, metric in enumerate(
            (
                n.NVML_GPM_METRIC_SM_UTIL,
                n.NVML_GPM_METRIC_SM_OCCUPANCY,
                n.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                n.NVML_GPM_METRIC_DRAM_BW_UTIL,
            )
        ):
            request.metrics[i].metricId = metric
        return n.nvmlGpmMetricsGet(request)

    return {"nvmlGpmSampleGet": sample_get, "nvmlGpmMetricsGet": metrics_get}


@dataclass
class Timing:
    name: str
    microseconds: float  # this thread's CPU per call, the median of the batches
    calls: int
    answer: str  # "ok" or the NVML error the call answered


def time_call(name: str, call: Callable[[], object], pynvml: Any, budget: float) -> Timing:
    """`call` timed on this thread's CPU clock: a first call, then up to CALLS more in
    batches of 10, within `budget` seconds; the median batch's mean."""
    answer = "ok"
    t0 = time.thread_time_ns()
    try:
        call()
    except pynvml.NVMLError as error:
        answer = str(error)
    first = (time.thread_time_ns() - t0) / 1000
    batches: list[float] = []
    calls = 1
    deadline = time.monotonic() + budget
    while calls < CALLS and time.monotonic() < deadline:
        t0 = time.thread_time_ns()
        for _ in range(10):
            try:
                call()
            except pynvml.NVMLError:
                pass
        batches.append((time.thread_time_ns() - t0) / 10_000)
        calls += 10
    return Timing(name, statistics.median(batches) if batches else first, calls, answer)


def field_entries(pynvml: Any, handle: Any, wanted: Sequence[tuple[int, int]]) -> Any:
    """A nvmlFieldValue_t array asking for each (field id, scope) of `wanted`."""
    array = (pynvml.c_nvmlFieldValue_t * len(wanted))()
    for entry, (field_id, scope) in zip(array, wanted, strict=True):
        entry.fieldId, entry.scopeId = field_id, scope
    return array


def field_call(pynvml: Any, handle: Any, wanted: Sequence[tuple[int, int]]) -> Callable[[], int]:
    """One raw nvmlDeviceGetFieldValues call for `wanted`, its array made once."""
    array = field_entries(pynvml, handle, wanted)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    count = ctypes.c_int32(len(wanted))

    def call() -> int:
        return int(fn(handle, count, ctypes.byref(array)))

    return call


def call_cpu_us(call: Callable[[], object], calls: int, budget: float) -> float:
    """Median of 5 batches of this thread's CPU per call, fewer calls where dear."""
    t0 = time.thread_time_ns()
    call()
    first = max(1.0, (time.thread_time_ns() - t0) / 1000)
    per_batch = max(1, min(calls // 5, int(budget * 1e6 / 5 / first)))
    batches = []
    for _ in range(5):
        t0 = time.thread_time_ns()
        for _ in range(per_batch):
            call()
        batches.append((time.thread_time_ns() - t0) / 1000 / per_batch)
    return statistics.median(batches)


def nvlink_links(pynvml: Any, handle: Any) -> int:
    """The GPU's NVLink links (its link-count field), 0 without NVLink."""
    from gpu_exporter.sources.nvml import fields

    try:
        (entry,) = pynvml.nvmlDeviceGetFieldValues(handle, [fields.NVLINK_LINK_COUNT])
    except pynvml.NVMLError:
        return 0
    return int(entry.value.uiVal) if entry.nvmlReturn == pynvml.NVML_SUCCESS else 0


def nvlink5_read_us(
    pynvml: Any, handle: Any, links: int, base: float, budget: float
) -> tuple[float, int, int]:
    """What one read of NVLink5's counters costs as the exporter makes it: every counter
    of every link in one nvmlDeviceGetFieldValues call, less the call's own cost
    (microseconds); with how many entries it asks for and how many the driver answered
    (0 before Blackwell: NOT_SUPPORTED)."""
    from gpu_exporter.sources.nvml import nvlink5

    wanted = [(r.field_id, r.scope) for r in nvlink5.requests(links)]
    if not wanted:
        return 0.0, 0, 0
    array = field_entries(pynvml, handle, wanted)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    answered = 0
    if fn(handle, ctypes.c_int32(len(wanted)), ctypes.byref(array)) == pynvml.NVML_SUCCESS:
        answered = sum(1 for e in array if e.nvmlReturn == pynvml.NVML_SUCCESS)
    us = call_cpu_us(field_call(pynvml, handle, wanted), FIELD_CALLS, budget) - base
    return max(0.0, us), len(wanted), answered


def platform_info_timing(pynvml: Any, handle: Any, budget: float) -> Timing:
    """nvmlDeviceGetPlatformInfo (R570+, Blackwell) as the exporter calls it: a v2
    structure by reference (`sources/nvml/platform.py`)."""
    from gpu_exporter.sources.nvml import nvml_h
    from gpu_exporter.sources.nvml import platform as nvml_platform

    info = nvml_platform.PlatformInfoV2()

    def call() -> object:
        info.version = nvml_h.nvmlPlatformInfo_v2
        return nvml_platform.get_platform_info(handle, info)

    return time_call("nvmlDeviceGetPlatformInfo", call, pynvml, budget)


def wanted_fields(pynvml: Any, handle: Any, branch: int | None) -> list[tuple[int, int]]:
    """(field id, scope) of every field the exporter asks of this GPU, each id once."""
    from gpu_exporter.metrics.collectors import COLLECTORS
    from gpu_exporter.sources.nvml import fields, nvlink5

    collectors = {c.name for c in COLLECTORS}
    requests = [
        *fields.device_requests(collectors, branch),
        *fields.counter_requests(collectors, branch),
        *fields.STATIC_REQUESTS,
    ]
    links = nvlink_links(pynvml, handle)
    if links:
        requests += fields.nvlink_requests(links, data=True, per_link_data=False)
        requests += nvlink5.requests(links)  # Blackwell's; NOT_SUPPORTED before it
    seen: dict[int, int] = {}
    for request in requests:
        seen.setdefault(request.field_id, request.scope)
    return sorted(seen.items())


def time_fields(
    pynvml: Any, handle: Any, wanted: Sequence[tuple[int, int]], budget: float
) -> tuple[list[cost_file.Cost], float]:
    """Each field's cost beyond the call's own (a single-field call less the cheapest
    one), adjacent dear fields that a pair call charges once as one group, and the
    call's own cost (the cheapest single-field call), in microseconds."""
    scopes = dict(wanted)
    per_call = budget / max(1, len(wanted)) / 2

    def cost_of(ids: Sequence[int]) -> float:
        call = field_call(pynvml, handle, [(f, scopes[f]) for f in ids])
        return call_cpu_us(call, FIELD_CALLS, per_call)

    single = {fid: cost_of([fid]) for fid in sorted(scopes)}
    base = min(single.values())
    extra = {fid: us - base for fid, us in single.items()}
    latency = driver_latencies(pynvml, handle, wanted)
    groups: list[list[int]] = []
    for fid in single:
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and min(extra[last], extra[fid]) > DEAR_FIELD_US
            and cost_of([last, fid]) - base < 1.5 * max(extra[last], extra[fid])
        ):
            groups[-1].append(fid)  # one driver query serves both
        else:
            groups.append([fid])
    costs: list[cost_file.Cost] = []
    for group in groups:
        us = statistics.median(extra[f] for f in group)
        note = "; ".join(
            f"{f}: alone {single[f]:.0f}, latencyUsec {latency.get(f, '-')}" for f in group
        )
        if len(group) > 1:
            costs.append(cost_file.Cost(cost_file.group_name(group[0], group[-1]), us, note))
        elif us >= 1.0:  # cheaper: within the call's own cost
            costs.append(cost_file.Cost(cost_file.field_name(group[0]), us, note))
    return costs, base


def driver_latencies(pynvml: Any, handle: Any, wanted: Sequence[tuple[int, int]]) -> dict[int, int]:
    """The driver's own latencyUsec of each entry of one call asking for all of them."""
    array = field_entries(pynvml, handle, wanted)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    if fn(handle, ctypes.c_int32(len(wanted)), ctypes.byref(array)) != pynvml.NVML_SUCCESS:
        return {}
    return {int(e.fieldId): int(e.latencyUsec) for e in array if e.nvmlReturn == 0}


def measure_costs(pynvml: Any, out: Path) -> Path:
    """Part 1: the cost file of GPU 0, written to out/nvml-costs.txt."""
    started = time.monotonic()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = pynvml.nvmlDeviceGetName(handle)
    driver = pynvml.nvmlSystemGetDriverVersion()
    name, driver = (v.decode() if isinstance(v, bytes) else str(v) for v in (name, driver))
    branch = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else None
    available = timers(pynvml, handle)
    functions = stand_in_functions()
    mig_on = False
    try:
        mig_on = pynvml.nvmlDeviceGetMigMode(handle)[0] == pynvml.NVML_DEVICE_MIG_ENABLE
    except pynvml.NVMLError:
        pass
    budget = TIMING_BUDGET_SECONDS * 0.6 / max(1, len(available))
    timings, skipped = [], []
    for function in functions:
        if function == "nvmlDeviceGetFieldValues":
            continue  # with the fields, below
        if function in available:
            timings.append(time_call(function, available[function], pynvml, budget))
        elif function in MIG_ONLY:
            skipped.append(f"{function} (MIG {'on: not timed here' if mig_on else 'off'})")
        else:
            skipped.append(f"{function} ({NOT_TIMED.get(function, 'no timer')})")
    fields_wanted = wanted_fields(pynvml, handle, branch)
    field_costs, base = time_fields(
        pynvml,
        handle,
        fields_wanted,
        max(5.0, TIMING_BUDGET_SECONDS - (time.monotonic() - started)),
    )
    costs = [
        cost_file.Cost(
            t.name,
            t.microseconds,
            f"{t.calls} calls" + ("" if t.answer == "ok" else f", answered {t.answer}"),
        )
        for t in timings
    ]
    costs.append(cost_file.Cost("nvmlDeviceGetFieldValues", base, "the cheapest single-field call"))
    costs += field_costs
    links = nvlink_links(pynvml, handle)
    nvlink5_us, asked, answered = nvlink5_read_us(pynvml, handle, links, base, 2.0)
    platform_timing = platform_info_timing(pynvml, handle, 1.0)
    blackwell = [
        f"NVLink5 counters ({links} links, {asked} entries, {answered} answered): one read "
        f"of all of them costs {nvlink5_us:.0f} us beyond the call's own; the exporter reads "
        "them on the counters' cadence (every cost / 0.1 ms seconds, 30 s at most).",
        f"nvmlDeviceGetPlatformInfo: {platform_timing.microseconds:.1f} us "
        f"({platform_timing.calls} calls, answered {platform_timing.answer}); read every "
        "60 s with the limits.",
    ]
    for line in blackwell:
        print(line, file=sys.stderr)
    header = [
        "What a real driver charges per NVML call, in microseconds of the calling thread's time.",
        f"Host: {name} on driver {driver}, {platform.node()} ({os.cpu_count()} CPUs); "
        f"measured {time.strftime('%Y-%m-%d')} through pynvml by benchmarks/real_gpu.py:",
        f"up to {CALLS} calls per function (fewer for dear ones), pynvml's wrapper included;",
        "a field: a single-field nvmlDeviceGetFieldValues call less the cheapest one, next to",
        "the driver's own latencyUsec in one call asking for every field; adjacent dear fields",
        "a pair of which costs what one does: one fieldgroup.",
        "Format, one a line:  NAME MICROSECONDS  (see benchmarks/cost_file.py)",
        "Not timed: " + "; ".join(skipped),
        *blackwell,
    ]
    path = out / "nvml-costs.txt"
    cost_file.write(path, [line for h in header for line in textwrap.wrap(h, 88)], costs)
    cost_file.read(path)  # the stand-in would take it whole
    print(
        f"costs of {len(costs)} calls and fields in {time.monotonic() - started:.0f} s: {path}",
        file=sys.stderr,
    )
    return path


def structs_check(pynvml: Any, handle: Any) -> list[str]:
    """`sources/nvml/structs.py`'s plain ctypes reads beside pynvml's own, one after the
    other on GPU 0: the layouts and version words against the real driver. Totals must
    agree exactly; clocks and rates may move between the two reads."""
    from gpu_exporter.sources.nvml import structs

    def pair(name: str, ours: Callable[[], Any], theirs: Callable[[], Any]) -> str:
        try:
            a: Any = ours()
        except Exception as error:  # the driver's answer is what is being checked
            a = f"error {error}"
        try:
            b: Any = theirs()
        except Exception as error:
            b = f"error {error}"
        return f"| {name} | {a} | {b} |"

    def memory() -> tuple[int, int, int, int]:
        m = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return (m.total, m.reserved, m.free, m.used)

    def rates() -> tuple[int, int]:
        u = pynvml.nvmlDeviceGetUtilizationRates(handle)
        return (u.gpu, u.memory)

    lines = ["| read | structs.py | pynvml |", "|---|---|---|"]
    lines.append(pair("memory v2", lambda: tuple(structs.memory_info_v2(handle)), memory))
    gpu_sensor = pynvml.NVML_TEMPERATURE_GPU
    lines.append(
        pair(
            "temperature V (GPU)",
            lambda: structs.temperature_v(handle, gpu_sensor),
            lambda: pynvml.nvmlDeviceGetTemperature(handle, gpu_sensor),
        )
    )
    lines.append(pair("utilization rates", lambda: tuple(structs.utilization_rates(handle)), rates))
    for clock in ("GRAPHICS", "SM", "MEM", "VIDEO"):
        kind: int = getattr(pynvml, f"NVML_CLOCK_{clock}")
        lines.append(
            pair(
                f"clock {clock}",
                partial(structs.clock_info, handle, kind),
                partial(pynvml.nvmlDeviceGetClockInfo, handle, kind),
            )
        )
    lines.append(
        pair(
            "performance state",
            lambda: structs.performance_state(handle),
            lambda: pynvml.nvmlDeviceGetPerformanceState(handle),
        )
    )
    lines.append(
        pair(
            "clocks-event reasons",
            lambda: hex(structs.clocks_event_reasons(handle)),
            lambda: hex(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        )
    )
    return lines


def buffer_coverage(pynvml: Any, handle: Any) -> list[str]:
    """With a process running kernels on GPU 0: how far back each sample buffer reaches
    (`buffer_reads.py` reads one before it wraps), its entries' spacing, and what one
    read costs this thread's CPU, read whole (since 0) and as the exporter reads it (since
    its newest entry); then again COVERAGE_WAIT_SECONDS later, to see the oldest entry move."""
    from gpu_exporter.sources.nvml import buffers

    samples = {
        "GPU samples": pynvml.NVML_GPU_UTILIZATION_SAMPLES,
        "memory-controller samples": pynvml.NVML_MEMORY_UTILIZATION_SAMPLES,
    }
    kept = {name: buffers.sample_buffer() for name in samples}
    per_process = buffers.process_sample_buffer()

    def read(kind: str, since: int) -> list[tuple[int | None, int]]:
        """(PID or None, timestamp us) of the entries, in one call as the exporter makes it."""
        if kind in samples:
            entries = buffers.samples(handle, kept[kind], samples[kind], since)
            return [(None, ts) for ts, _ in entries]
        return [
            (e.pid, e.timestamp_us) for e in buffers.process_utilization(handle, per_process, since)
        ]

    lines = [
        "| buffer | read | entries | PIDs | oldest, s ago | span s | median spacing ms "
        "| CPU us, whole / since newest |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for turn in (1, 2):
        for name in (*samples, "per-process samples"):
            try:
                costs: list[float] = []
                entries: list[tuple[int | None, int]] = []
                for _ in range(COVERAGE_CALLS):
                    t0 = time.thread_time_ns()
                    entries = read(name, 0)
                    costs.append((time.thread_time_ns() - t0) / 1e3)
                stamps = sorted(ts for _, ts in entries)
                newest = stamps[-1] if stamps else 0
                since_costs = []
                for _ in range(COVERAGE_CALLS):
                    t0 = time.thread_time_ns()
                    try:
                        read(name, newest)
                    except pynvml.NVMLError:
                        pass  # nothing newer: NOT_FOUND, costed all the same
                    since_costs.append((time.thread_time_ns() - t0) / 1e3)
            except pynvml.NVMLError as error:
                lines.append(f"| {name} | {turn} | {error} | | | | | |")
                continue
            pids = len({pid for pid, _ in entries if pid is not None}) or ""
            gaps = [b - a for a, b in itertools.pairwise(stamps) if b > a]
            ago = (time.time() * 1e6 - stamps[0]) / 1e6 if stamps else float("nan")
            span = (stamps[-1] - stamps[0]) / 1e6 if stamps else float("nan")
            spacing = statistics.median(gaps) / 1e3 if gaps else float("nan")
            lines.append(
                f"| {name} | {turn} | {len(entries)} | {pids} | {ago:.1f} | {span:.1f} | "
                f"{spacing:.0f} | {statistics.median(costs):.0f} / "
                f"{statistics.median(since_costs):.0f} |"
            )
        if turn == 1:
            time.sleep(COVERAGE_WAIT_SECONDS)
    return lines


# ---- part 2: side by side ------------------------------------------------------------


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def nvitop_program(given: str | None) -> Path | None:
    """nvitop-exporter: `given`, else the bench's (its venv, made from PyPI on first use);
    None, saying why, where it cannot be had (an offline host)."""
    if given:
        return Path(given)
    try:
        return bench.ensure_nvitop()
    except (OSError, subprocess.SubprocessError) as error:
        print(f"real_gpu.py: no nvitop-exporter ({error}): ours alone", file=sys.stderr)
        return None


@dataclass
class Phase:
    name: str
    ours_ms: float
    theirs_ms: float | None
    ours_rss: float
    theirs_rss: float | None
    # ours over the window, from scrapes just outside it: sample-buffer reads a minute
    # (`buffer_reads.py`), GPM's graphics-engine and DRAM activity (share of the time)
    buffer_reads_per_minute: float | None = None
    graphics_active: float | None = None
    dram_active: float | None = None


def counter_total(text: str, name: str) -> float | None:
    """The sum of a counter's series in one scrape (every GPU); None where absent."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            try:
                total += float(line.rsplit(" ", 1)[1])
                found = True
            except (ValueError, IndexError):
                continue
    return total if found else None


def buffer_reads(text: str) -> float | None:
    """Our nvmlDeviceGetSamples calls so far, from one scrape."""
    calls = nvml_call_seconds(text).get("nvmlDeviceGetSamples")
    return calls[1] if calls is not None else None


def rate(before: float | None, after: float | None, seconds: float) -> float | None:
    return None if before is None or after is None else (after - before) / seconds


@contextmanager
def started(command: Sequence[str], **kwargs: Any) -> Iterator[subprocess.Popen[bytes]]:
    program = subprocess.Popen(command, **kwargs)
    try:
        yield program
    finally:
        if program.poll() is None:
            program.send_signal(signal.SIGTERM)
            try:
                program.wait(10)
            except subprocess.TimeoutExpired:
                program.kill()
                program.wait()


def measure_phase(name: str, pids: Sequence[int | None], port: int) -> Phase:
    """Each program's whole-process CPU in ms/s over PHASE_SECONDS, and RSS; ours' buffer
    reads and GPM activity over the same window (scraped just before and after it)."""
    live = [p for p in pids if p is not None]
    before = scrape_text(port)
    cpu0, wall0 = {p: bench.cpu_seconds(p) for p in live}, time.monotonic()
    time.sleep(PHASE_SECONDS)
    cpu1, wall1 = {p: bench.cpu_seconds(p) for p in live}, time.monotonic()
    after = scrape_text(port)
    ms = {p: 1000 * (cpu1[p] - cpu0[p]) / (wall1 - wall0) for p in live}
    window = wall1 - wall0
    reads = rate(buffer_reads(before), buffer_reads(after), window)
    ours, theirs = pids
    assert ours is not None
    print(
        f"{name}: ours {ms[ours]:.2f} ms/s"
        + (f", nvitop-exporter {ms[theirs]:.2f}" if theirs is not None else ""),
        file=sys.stderr,
    )
    return Phase(
        name,
        ms[ours],
        ms[theirs] if theirs is not None else None,
        rss_mib(ours),
        rss_mib(theirs) if theirs is not None else None,
        buffer_reads_per_minute=None if reads is None else 60 * reads,
        graphics_active=rate(
            counter_total(before, "gpu_graphics_engine_active_seconds_total"),
            counter_total(after, "gpu_graphics_engine_active_seconds_total"),
            window,
        ),
        dram_active=rate(
            counter_total(before, "gpu_dram_active_seconds_total"),
            counter_total(after, "gpu_dram_active_seconds_total"),
            window,
        ),
    )


def torch_ready(python: str) -> bool:
    """Whether `python` imports PyTorch and sees a CUDA device."""
    try:
        ran = subprocess.run(
            [python, "-c", "import torch; assert torch.cuda.is_available()"],
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return ran.returncode == 0


@contextmanager
def load(python: str, kind: str) -> Iterator[None]:
    """The load `kind` ("busy", "starved", "square" or "hold") until the block ends."""
    with started([python, "-c", LOAD, kind], stdout=subprocess.PIPE) as program:
        assert program.stdout is not None
        if program.stdout.readline().strip() != b"ready":
            raise SystemExit("real_gpu.py: the PyTorch load did not start")
        time.sleep(SETTLE_SECONDS)
        yield


def side_by_side(
    nvitop: Path | None, torch_python: str | None
) -> tuple[list[Phase], str, str, list[str]]:
    """Part 2: both exporters at once through the phases; our last scrape; nvidia-smi's
    answers at that moment; notes."""
    notes: list[str] = []
    ours_port, theirs_port = bench.free_port(), bench.free_port()
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    phases: list[Phase] = []
    with ExitStack() as programs:
        ours = programs.enter_context(started(bench.exporter_command(ours_port), cwd=REPO, **quiet))
        pids: list[int | None] = [ours.pid, None]
        if nvitop is not None:
            command = [str(nvitop), "--bind-address", "127.0.0.1", "--port", str(theirs_port)]
            theirs = programs.enter_context(started([*command, "--interval", "1.0"], **quiet))
            pids[1] = theirs.pid
            # it renders on each scrape: its first one before the windows, as the bench
            bench.wait_ready(theirs_port, timeout=60.0, path="/metrics")
        bench.wait_ready(ours_port, timeout=60.0)
        time.sleep(WARM_UP_SECONDS)
        phases.append(measure_phase("idle, no process", pids, ours_port))
        if torch_python is None:
            notes.append("PyTorch with CUDA not importable: the load phases are left out")
        else:
            with load(torch_python, "starved"):
                phases.append(
                    measure_phase("a training loop starved by its DataLoader", pids, ours_port)
                )
            with load(torch_python, "busy"):
                phases.append(measure_phase("a training loop at full speed", pids, ours_port))
            with load(torch_python, "hold"):
                phases.append(measure_phase("97% of the memory held, idle", pids, ours_port))
        scrape = scrape_text(ours_port)
        notes.append(f"nvidia-smi at our last scrape: {NVIDIA_SMI_FILE} beside {SCRAPE_FILE}")
        smi = nvidia_smi_now()
    return phases, scrape, smi, notes


def nvidia_smi_now() -> str:
    """`nvidia-smi --query-gpu` of the values the exporter reads, and `-q`, at this moment:
    the driver's own tool beside our scrape (a check of our reads, not of our arithmetic)."""
    out = []
    query = ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv"]
    for command in (query, ["nvidia-smi", "-q"]):
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
            out.append(run.stdout + run.stderr)
        except (OSError, subprocess.SubprocessError) as error:
            out.append(f"{command[0]}: {error}\n")
    return "\n".join(out)


def scrape_text(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read(MAX_SCRAPE_BYTES)
    conn.close()
    return body.decode("utf-8", errors="replace")


def nvml_call_seconds(text: str) -> dict[str, tuple[float, float | None]]:
    """function -> (seconds, calls) from our gpu_exporter_nvml_call_seconds_total and
    gpu_exporter_nvml_calls_total; empty where ours does not export them."""
    seconds: dict[str, float] = {}
    calls: dict[str, float] = {}
    for line in text.splitlines():
        for metric, into in (
            ("gpu_exporter_nvml_call_seconds_total{", seconds),
            ("gpu_exporter_nvml_calls_total{", calls),
        ):
            if not line.startswith(metric):
                continue
            labels, _, value = line[len(metric) :].partition("} ")
            _, found, rest = labels.partition('function="')
            if not found:
                continue
            function = rest.partition('"')[0]
            try:
                into[function] = into.get(function, 0.0) + float(value.split()[0])
            except (ValueError, IndexError):
                continue
    return {f: (s, calls.get(f)) for f, s in seconds.items()}


# ---- part 3: the report ----------------------------------------------------------------


def report(
    phases: Sequence[Phase], scrape: str, notes: Sequence[str], costs: Path | None, gpu: str
) -> list[str]:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {gpu}, {platform.node()} "
        f"({os.cpu_count()} CPUs): gpu-exporter and nvitop-exporter {bench.NVITOP_VERSION} side by "
        f"side at a 1 s interval, not scraped while measured; the whole process's CPU (every "
        f"thread's schedstat) over {PHASE_SECONDS:g} s per phase.",
        "",
        "| phase | ours | nvitop-exporter | ours / theirs | RSS MiB, ours / theirs |",
        "|---|---|---|---|---|",
    ]
    for p in phases:
        theirs = "" if p.theirs_ms is None else f"{p.theirs_ms:.1f} ms/s"
        ratio = "" if not p.theirs_ms else f"**{p.ours_ms / p.theirs_ms:.1f}x**"
        rss = f"{p.ours_rss:.0f} / " + ("" if p.theirs_rss is None else f"{p.theirs_rss:.0f}")
        lines.append(f"| {p.name} | {p.ours_ms:.1f} ms/s | {theirs} | {ratio} | {rss} |")
    lines += [
        "",
        "Ours over each window: sample-buffer reads (`nvmlDeviceGetSamples`, two a read, "
        "`buffer_reads.py`) and GPM's activity, the share of the time (exactly 0 lets a "
        "GPU in use rest its buffers):",
        "",
        "| phase | buffer calls a minute | GPM graphics engine | GPM DRAM |",
        "|---|---|---|---|",
    ]
    for p in phases:
        cells = [
            "" if value is None else f"{value:{spec}}"
            for value, spec in (
                (p.buffer_reads_per_minute, ".1f"),
                (p.graphics_active, ".6f"),
                (p.dram_active, ".6f"),
            )
        ]
        lines.append(f"| {p.name} | " + " | ".join(cells) + " |")
    lines += [f"- {note}" for note in notes]
    if costs is not None:
        lines += ["", f"The driver's costs: `{costs}` (`bench.py --costs {costs}` charges them)."]
    by_function = nvml_call_seconds(scrape)
    if by_function:
        lines += [
            "",
            "Ours by NVML function since start (`gpu_exporter_nvml_call_seconds_total`), top 10:",
            "",
            "| function | seconds | calls | us per call |",
            "|---|---|---|---|",
        ]
        top = sorted(by_function.items(), key=lambda item: -item[1][0])[:10]
        for function, (seconds, calls) in top:
            per = f"{seconds / calls * 1e6:.0f}" if calls else ""
            count = "" if calls is None else f"{calls:.0f}"
            lines.append(f"| `{function}` | {seconds:.3f} | {count} | {per} |")
    else:
        lines += ["", "Ours exports no gpu_exporter_nvml_call_seconds_total (an older exporter)."]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("real-gpu"),
        metavar="DIR",
        help="where the cost file and the report go (default: %(default)s)",
    )
    parser.add_argument(
        "--nvitop",
        metavar="PATH",
        help="nvitop-exporter's program (default: the bench's venv, made on first use from PyPI)",
    )
    parser.add_argument(
        "--torch-python",
        metavar="PATH",
        default=sys.executable,
        help="a Python with PyTorch and CUDA for the load (default: this one)",
    )
    parser.add_argument("--no-costs", action="store_true", help="leave out part 1 (the costs)")
    args = parser.parse_args(argv)
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # a missing library, no driver, no GPU: all say the same
        print(
            f"real_gpu.py: no NVIDIA driver here ({error}): run it on a GPU host", file=sys.stderr
        )
        return 2
    started_at = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        gpu = pynvml.nvmlDeviceGetName(handle)
        gpu = gpu.decode() if isinstance(gpu, bytes) else str(gpu)
        gpu += f", driver {pynvml.nvmlSystemGetDriverVersion()}"
        checked = structs_check(pynvml, handle)
        costs = None if args.no_costs else measure_costs(pynvml, args.out)
    finally:
        pynvml.nvmlShutdown()
    torch_python = args.torch_python if torch_ready(args.torch_python) else None
    phases, scrape, smi, notes = side_by_side(nvitop_program(args.nvitop), torch_python)
    coverage: list[str] = []
    if torch_python is not None:
        pynvml.nvmlInit()
        try:
            with load(torch_python, "busy"):
                coverage = buffer_coverage(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    (args.out / SCRAPE_FILE).write_text(scrape)
    (args.out / NVIDIA_SMI_FILE).write_text(smi)
    lines = report(phases, scrape, notes, costs, gpu)
    lines += [
        "",
        "Our plain ctypes reads (`structs.py`) beside pynvml's, GPU 0 idle:",
        "",
        *checked,
    ]
    if coverage:
        lines += ["", "The sample buffers, a training loop at full speed on GPU 0:", "", *coverage]
    lines += ["", f"The run took {time.monotonic() - started_at:.0f} s."]
    text = "\n".join(lines) + "\n"
    (args.out / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
