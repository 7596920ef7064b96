"""The small fixed-size answers read from every GPU every interval, as plain ctypes.

pynvml returns these as `_PrintableStructure`s, whose `__getattribute__` and
`__setattr__` are Python: every member set or read is a Python call (about 5 us a GPU and
interval for memory, temperature and utilization together, of an idle exporter's few
hundred). Here each is a plain `ctypes.Structure` laid out as nvml.h declares it
(tests/test_nvml_header.py compares them with the header). The clocks, the performance
state and the clocks-event mask, one integer each, are read the same way: pynvml's
wrappers add a ctypes enum and a frame to each of the six calls a GPU's clocks take.

Each is one call looked up through `pynvml._nvmlGetFunctionPointer` and checked as
`pynvml._nvmlCheckReturn` does, as pynvml's own wrappers do: a missing symbol is
NVML_ERROR_FUNCTION_NOT_FOUND, and every error is raised as `pynvml.NVMLError` for
`NvmlCalls.call` to classify. What comes back is plain Python values.
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

import pynvml

_SUCCESS = pynvml.NVML_SUCCESS


class MemoryV2(ctypes.Structure):
    """`nvmlMemory_v2_t`: bytes."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("total", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ulonglong),  # the driver's own, outside `used` in v2
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class TemperatureV1(ctypes.Structure):
    """`nvmlTemperature_v1_t`: degrees Celsius of one sensor."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("sensorType", ctypes.c_uint),  # nvmlTemperatureSensors_t
        ("temperature", ctypes.c_int),
    ]


class Utilization(ctypes.Structure):
    """`nvmlUtilization_t`: percent over the driver's last sample period."""

    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def _version(structure: type[ctypes.Structure], version: int) -> int:
    """nvml.h's NVML_STRUCT_VERSION: the structure's size with the version in the top byte."""
    return ctypes.sizeof(structure) | (version << 24)


MEMORY_V2_VERSION = _version(MemoryV2, 2)  # nvmlMemory_v2
TEMPERATURE_V1_VERSION = _version(TemperatureV1, 1)  # nvmlTemperature_v1


class Memory(NamedTuple):
    """`nvmlDeviceGetMemoryInfo_v2`'s answer, bytes."""

    total: int
    reserved: int
    free: int
    used: int


class Rates(NamedTuple):
    """`nvmlDeviceGetUtilizationRates`' answer, percent."""

    gpu: int
    memory: int


def _call(symbol: str, *args: Any) -> None:
    """`symbol(*args)`; raises `pynvml.NVMLError` unless NVML_SUCCESS (as
    `pynvml._nvmlCheckReturn` does, a call less on every read)."""
    code = pynvml._nvmlGetFunctionPointer(symbol)(*args)
    if code != _SUCCESS:
        raise pynvml.NVMLError(code)


def memory_info_v2(handle: Any) -> Memory:
    """`nvmlDeviceGetMemoryInfo_v2`: its `used` leaves the driver's reservation out."""
    info = MemoryV2(MEMORY_V2_VERSION)
    _call("nvmlDeviceGetMemoryInfo_v2", handle, ctypes.byref(info))
    return Memory(info.total, info.reserved, info.free, info.used)


def temperature_v(handle: Any, sensor: int) -> int:
    """`nvmlDeviceGetTemperatureV` with the v1 structure: the sensor's degrees Celsius."""
    answer = TemperatureV1(TEMPERATURE_V1_VERSION, sensor)
    _call("nvmlDeviceGetTemperatureV", handle, ctypes.byref(answer))
    return int(answer.temperature)


def utilization_rates(handle: Any) -> Rates:
    """`nvmlDeviceGetUtilizationRates`."""
    rates = Utilization()
    _call("nvmlDeviceGetUtilizationRates", handle, ctypes.byref(rates))
    return Rates(rates.gpu, rates.memory)


def _uint(
    symbol: str, handle: Any, *args: Any, out: type[ctypes._SimpleCData[int]] = ctypes.c_uint
) -> int:
    """`symbol(handle, *args, &value)` for one integer answer."""
    value = out()
    _call(symbol, handle, *args, ctypes.byref(value))
    return int(value.value)


def clock_info(handle: Any, clock_type: int) -> int:
    """`nvmlDeviceGetClockInfo`: the clock's current MHz."""
    return _uint("nvmlDeviceGetClockInfo", handle, ctypes.c_uint(clock_type))


def performance_state(handle: Any) -> int:
    """`nvmlDeviceGetPerformanceState`: P0 (0) to P15, NVML_PSTATE_UNKNOWN (32)."""
    return _uint("nvmlDeviceGetPerformanceState", handle)


def clocks_event_reasons(handle: Any) -> int:
    """`nvmlDeviceGetCurrentClocksEventReasons`: the mask of what holds the clocks down."""
    return _uint("nvmlDeviceGetCurrentClocksEventReasons", handle, out=ctypes.c_ulonglong)
