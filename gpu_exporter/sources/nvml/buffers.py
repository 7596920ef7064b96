"""Single-call reads of NVML's variable-length answers, into buffers kept per device.

pynvml's wrappers for the sample buffer, the process lists and process utilization ask
NVML twice: once with no buffer for the count, once with a fresh array. The C API takes
a caller-sized buffer instead, so here each answer is read with one call into an array
(`Buffer`) the device keeps between intervals. When NVML answers
NVML_ERROR_INSUFFICIENT_SIZE it also says how many entries it needs: the buffer grows to
that (with headroom) and the call is made once more.

The arrays are of plain ctypes structures laid out as pynvml's (`SampleEntry`,
`ProcessInfo`, `ProcessUtilization`; a test compares them) and are decoded with one
`struct` pass: every field access on pynvml's `_PrintableStructure` goes through Python.

The C functions are looked up through `pynvml._nvmlGetFunctionPointer`, as pynvml's own
wrappers do (a missing symbol is NVML_ERROR_FUNCTION_NOT_FOUND); errors are raised as
`pynvml.NVMLError` for `NvmlCalls.call` to classify. What comes back is plain Python
values, copied out of the reused array.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any, NamedTuple

import pynvml

_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value


class SampleEntry(ctypes.Structure):
    """`nvmlSample_t`, as pynvml's `c_nvmlSample_t`."""

    _fields_ = [("timeStamp", ctypes.c_ulonglong), ("sampleValue", pynvml.c_nvmlValue_t)]


class ProcessInfo(ctypes.Structure):
    """`nvmlProcessInfo_v2_t`/`_v3_t` (one layout), as pynvml's `c_nvmlProcessInfo_v3_t`."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class ProcessUtilization(ctypes.Structure):
    """`nvmlProcessUtilizationSample_t`, as pynvml's `c_nvmlProcessUtilizationSample_t`."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("timeStamp", ctypes.c_ulonglong),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
    ]


# How one entry reads with `struct` (native order and alignment); a test checks the sizes
SAMPLE_FORMAT = struct.Struct("@QI4x")  # timestamp, value as `uiVal`
PROCESS_FORMAT = struct.Struct("@IQ8x")  # pid, used memory (the instance ids unused)
PROCESS_UTILIZATION_FORMAT = struct.Struct("@IQIIII")


class Buffer:
    """One reusable C array of `entry`; grown when NVML says it is too small."""

    def __init__(self, entry: Any, layout: struct.Struct, size: int) -> None:
        self.entry = entry
        self.layout = layout
        self.array: Any = (entry * size)()

    def __len__(self) -> int:
        return len(self.array)

    def grow(self, needed: int) -> None:
        """Room for `needed` entries and half as many again (the answer may grow)."""
        size = max(needed + needed // 2 + 4, 2 * len(self.array))
        self.array = (self.entry * size)()

    def entries(self, n: int) -> Any:
        """The first `n` entries as tuples of the layout's fields."""
        return unpack(self.array, self.layout, n)


def unpack(block: Any, layout: struct.Struct, n: int, start: int = 0) -> Any:
    """The `n` entries of `layout` from byte `start` of a ctypes object, as tuples: one
    `struct` pass instead of an attribute access per field."""
    raw = memoryview(block).cast("B")
    return layout.iter_unpack(raw[start : start + n * layout.size])


class ProcessEntry(NamedTuple):
    """One process of a running-process list."""

    pid: int
    used_memory_bytes: int | None  # None: not available (WDDM, or under MIG on the parent)


class ProcessSample(NamedTuple):
    """One per-process utilization sample (percent over the driver's sample period)."""

    pid: int
    timestamp_us: int
    sm_percent: int
    memory_percent: int
    encoder_percent: int
    decoder_percent: int


def _call_growing(buffer: Buffer, call: Any) -> int:
    """`call(count)` with the buffer's size; once more after growing on INSUFFICIENT_SIZE.

    Returns how many entries NVML filled; raises `pynvml.NVMLError` otherwise.
    """
    count = ctypes.c_uint(len(buffer))
    ret = call(count)
    if ret == pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        buffer.grow(int(count.value))
        count = ctypes.c_uint(len(buffer))
        ret = call(count)
    pynvml._nvmlCheckReturn(ret)
    return min(int(count.value), len(buffer))


def samples(
    handle: Any, buffer: Buffer, sampling_type: int, since_us: int
) -> list[tuple[int, int]]:
    """`nvmlDeviceGetSamples`: (timestamp in the driver's microseconds, percent as `uiVal`)
    of the entries, in the buffer's order, asked from `since_us` (the driver may ignore it)."""
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
    value_type = pynvml._nvmlValueType_t()
    kind = pynvml._nvmlSamplingType_t(sampling_type)
    since = ctypes.c_ulonglong(since_us)

    def call(count: ctypes.c_uint) -> int:
        return int(
            fn(handle, kind, since, ctypes.byref(value_type), ctypes.byref(count), buffer.array)
        )

    n = _call_growing(buffer, call)
    return list(buffer.entries(n))


def process_list(handle: Any, buffer: Buffer, symbol: str) -> list[ProcessEntry]:
    """`nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3` (or `_v2`, same layout)."""
    fn = pynvml._nvmlGetFunctionPointer(symbol)

    def call(count: ctypes.c_uint) -> int:
        return int(fn(handle, ctypes.byref(count), buffer.array))

    n = _call_growing(buffer, call)
    return [
        ProcessEntry(pid, None if used == _NOT_AVAILABLE else used)
        for pid, used in buffer.entries(n)
    ]


def process_utilization(handle: Any, buffer: Buffer, since_us: int) -> list[ProcessSample]:
    """`nvmlDeviceGetProcessUtilization`: per-process samples newer than `since_us`."""
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    since = ctypes.c_ulonglong(since_us)

    def call(count: ctypes.c_uint) -> int:
        return int(fn(handle, buffer.array, ctypes.byref(count), since))

    n = _call_growing(buffer, call)
    return [ProcessSample._make(entry) for entry in buffer.entries(n)]


def sample_buffer() -> Buffer:
    """Room for the driver's whole ring (about 100 entries per type on current drivers)."""
    return Buffer(SampleEntry, SAMPLE_FORMAT, 128)


def process_buffer() -> Buffer:
    """The `_v2` and `_v3` process lists share one layout (pid, memory, GI, CI)."""
    return Buffer(ProcessInfo, PROCESS_FORMAT, 32)


def process_sample_buffer() -> Buffer:
    return Buffer(ProcessUtilization, PROCESS_UTILIZATION_FORMAT, 64)
