"""The choke point: every NVML call of the exporter goes through `NvmlCalls.call`.

`classify` decides what an NVML return code means; `NvmlCalls` acts on it:

- NOT_SUPPORTED / FUNCTION_NOT_FOUND / ARGUMENT_VERSION_MISMATCH: the value is None, and
  the call is remembered per device so it is not repeated every interval. pynvml's
  unversioned wrappers raise `NVMLLibraryMismatchError` (not an `NVMLError`) when the
  driver lacks the versioned symbol; that is the same "this driver cannot answer".
- GPU_IS_LOST / UNKNOWN / TIMEOUT of a whole call: `DeviceLost`. In one entry of a
  batch that answered SUCCESS (`entry_failed`), UNKNOWN and TIMEOUT only leave it out.
- UNINITIALIZED / DRIVER_NOT_LOADED / LIB_RM_VERSION_MISMATCH / LIBRARY_NOT_FOUND:
  `NvmlUnavailable`.
- Anything else: counted in `errors` (function, error) and the value is None.

A call may name codes that are an expected answer rather than an error (`quiet`): the
sample buffers answer NOT_FOUND when nothing is newer, an event wait TIMEOUT, an empty
MIG slot NOT_FOUND.

A remembered "unsupported" is not forever: real drivers answer NOT_SUPPORTED by mode
(the parent of a MIG-enabled GPU has no utilization), so the backend calls
`Device.forget` when MIG mode changes and every SLOW_REFRESH_SECONDS.

Every call is timed here too (`CallUsage`: calls and wall seconds inside, by function),
so the exporter knows what the driver costs it (`gpu_exporter_nvml_call_seconds_total`)
and can read a dear value less often (`counter_fields.py`, `buffer_cadence.py`). A
serialised call is timed from when it holds the lock, not while it waits for it.

Functions named in `NvmlCalls(serialised=...)` run one at a time across all devices
(`Serialiser`): `nvmlDeviceGetFieldValues`, which a field report says is not safe to call
concurrently (benchmarks/README.md, "Field values: one call at a time").
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pynvml

from gpu_exporter.sources.backend import CallUsage, DeviceLost, ErrorCounts, NvmlUnavailable

T = TypeVar("T")


class Outcome(enum.Enum):
    """What an NVML error code means for the exporter."""

    UNSUPPORTED = "unsupported"  # this device or driver cannot answer: leave the value out
    DEVICE_LOST = "device_lost"  # the device is gone: gpu_up 0
    NVML_DOWN = "nvml_down"  # the library is unusable: nvml_up 0, re-initialise
    ERROR = "error"  # anything else: count it, leave the value out


_UNSUPPORTED = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,  # a versioned API this driver lacks
    }
)
_DEVICE_LOST = frozenset(
    {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_TIMEOUT}
)
_NVML_DOWN = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    }
)
NOT_FOUND = frozenset({pynvml.NVML_ERROR_NOT_FOUND})  # nothing newer, or an empty slot
NO_QUIET: frozenset[int] = frozenset()


_clock = time.perf_counter  # the monotonic clock with the finest resolution


def classify(code: int | None) -> Outcome:
    """The one decision of what an NVML return code means."""
    if code in _UNSUPPORTED:
        return Outcome.UNSUPPORTED
    if code in _DEVICE_LOST:
        return Outcome.DEVICE_LOST
    if code in _NVML_DOWN:
        return Outcome.NVML_DOWN
    return Outcome.ERROR


_ERROR_NAMES: dict[int, str] = {
    value: name[len("NVML_ERROR_") :].lower()
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}


def code_name(code: int | None) -> str:
    """Short snake_case name of an NVML return code, e.g. `gpu_is_lost`."""
    if isinstance(code, int):
        return _ERROR_NAMES.get(code, f"code_{code}")
    return "unknown"


def error_name(error: pynvml.NVMLError) -> str:
    """Short snake_case name of an NVML error, e.g. `gpu_is_lost`."""
    return code_name(getattr(error, "value", None))


def text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class Device:
    """One device (or MIG device) handle plus the calls and fields it answered as
    unsupported, so they are not asked again."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.unsupported: set[str] = set()
        self.unsupported_fields: set[str] = set()
        # the device's field-value arrays, kept between intervals (`fields.FieldBatch`),
        # and `fields.read_fields`' last call (its requests and batch)
        self.field_batches: dict[Any, Any] = {}
        self.last_field_call: Any = None

    def forget(self) -> None:
        """Forget the remembered NOT_SUPPORTED answers: ask again (support changed, or
        it is time to re-probe)."""
        self.unsupported.clear()
        self.unsupported_fields.clear()
        self.last_field_call = None  # its batch left out fields unsupported until now


class Serialiser:
    """Runs a call while holding a lock shared by every device, waiting at most
    `wait_seconds` for it. A holder that overstays is taken for hung: its lock is
    abandoned and the waiter goes on under a fresh one, so a hung GPU blocks no other;
    `on_abandon` is told each time."""

    def __init__(self, wait_seconds: float, on_abandon: Callable[[], None]) -> None:
        self.wait_seconds = wait_seconds
        self._on_abandon = on_abandon
        self._lock = threading.Lock()
        self._swap = threading.Lock()

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        lock = self._lock
        while not lock.acquire(timeout=self.wait_seconds):
            with self._swap:
                if self._lock is lock:  # still the overstayed holder's: abandon it
                    self._lock = threading.Lock()
                    self._on_abandon()
                lock = self._lock
        try:
            return fn(*args)
        finally:
            lock.release()


class NvmlCalls:
    """Calls NVML and classifies every failure; counts unexpected errors in `errors`, and
    every call with the seconds spent inside it in `usage`."""

    def __init__(
        self,
        errors: ErrorCounts,
        serialised: Mapping[str, Serialiser] | None = None,
        usage: CallUsage | None = None,
    ) -> None:
        self.errors = errors
        self.serialised = dict(serialised or {})  # function name -> its serialiser
        self.usage = usage if usage is not None else CallUsage()

    def call(
        self,
        function: str,
        fn: Callable[..., T],
        *args: Any,
        device: Device | None = None,
        key: str | None = None,
        quiet: frozenset[int] = NO_QUIET,
        on_error: type[NvmlUnavailable | DeviceLost] | None = None,
    ) -> T | None:
        """Call `fn(*args)`; every NVML error is classified here and nowhere else.

        Returns None when the call is unsupported (remembered under `key` for `device`),
        answered with a `quiet` code, or failed with an unexpected error (counted; raised
        as `on_error` when the caller cannot go on without the value).
        """
        if device is not None and key is not None and key in device.unsupported:
            return None
        serialiser = self.serialised.get(function)
        try:
            if serialiser is not None:
                answer: T = serialiser.run(self.timed, function, fn, *args)
                return answer
            started = _clock()
            try:  # timed here rather than through `timed`: a frame less on every call
                return fn(*args)
            finally:
                self.usage.add(function, _clock() - started)
        except pynvml.NVMLLibraryMismatchError:  # the wrapper's versioned symbol is missing
            if device is not None and key is not None:
                device.unsupported.add(key)
            return None
        except pynvml.NVMLError as error:
            code = getattr(error, "value", None)
            if code in quiet:
                return None
            self.failed(function, code, str(error), device, key, on_error, cause=error)
            return None

    def timed(self, function: str, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, counted in `usage` under `function` with the seconds it took,
        whether it returned or raised."""
        started = _clock()
        try:
            return fn(*args)
        finally:
            self.usage.add(function, _clock() - started)

    def query(self, d: Device, key: str, fn: Callable[..., T], *args: Any) -> T | None:
        """A per-device call, cached as unsupported under `key`."""
        return self.call(fn.__name__, fn, d.handle, *args, device=d, key=key)

    def failed(
        self,
        function: str,
        code: int | None,
        message: str,
        device: Device | None,
        key: str | None,
        on_error: type[NvmlUnavailable | DeviceLost] | None = None,
        *,
        cause: BaseException | None = None,
    ) -> None:
        """Act on one failed call, or one failed entry of a batch (fields, GPM metrics)."""
        outcome = classify(code)
        name = code_name(code)
        if outcome is Outcome.NVML_DOWN:
            raise NvmlUnavailable(name, f"{function}: {message}") from cause
        if outcome is Outcome.DEVICE_LOST:
            raise DeviceLost(name, f"{function}: {message}") from cause
        if outcome is Outcome.UNSUPPORTED:
            if device is not None and key is not None:
                device.unsupported.add(key)
            return
        self.errors.add(function, name)
        if on_error is not None:
            raise on_error(name, f"{function}: {message}") from cause

    def entry_failed(self, function: str, code: int, message: str, device: Device) -> None:
        """Act on one failed entry of a batch whose call answered NVML_SUCCESS (a field
        of `nvmlDeviceGetFieldValues`, a metric of `nvmlGpmMetricsGet`): only that value
        is left out. UNKNOWN and TIMEOUT there are the entry's own failure, counted in
        `errors`, not the device's; a lost GPU or an unusable library still is what it
        says. The caller remembers an unsupported entry itself."""
        if classify(code) is Outcome.DEVICE_LOST and code != pynvml.NVML_ERROR_GPU_IS_LOST:
            self.errors.add(function, code_name(code))
            return
        self.failed(function, code, message, device, None)
