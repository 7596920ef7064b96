"""`PynvmlBackend`: the one module that talks to NVML through `pynvml` (nvidia-ml-py).

Every driver call, event registration included, goes through `PynvmlBackend._call`, the
single choke point that maps NVML's error codes onto the exporter's model
(`classify` decides, `_call` acts):

- NOT_SUPPORTED / FUNCTION_NOT_FOUND / ARGUMENT_VERSION_MISMATCH: the value is None, and
  the call is remembered per device so it is not repeated every interval. pynvml's
  unversioned wrappers raise `NVMLLibraryMismatchError` (not an `NVMLError`) when the
  driver lacks the versioned symbol; that is the same "this driver cannot answer".
- GPU_IS_LOST / UNKNOWN / TIMEOUT: `DeviceLost`.
- UNINITIALIZED / DRIVER_NOT_LOADED / LIB_RM_VERSION_MISMATCH / LIBRARY_NOT_FOUND:
  `NvmlUnavailable`.
- Anything else: counted in `errors` (function, error) and the value is None.

A call may name codes that are an expected answer rather than an error (`quiet`): the
sample buffers answer NOT_FOUND when nothing is newer, an event wait TIMEOUT.
"""

from __future__ import annotations

import ctypes
import enum
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import pynvml

from gpu_exporter.model import (
    CLOCK_NAMES,
    THROTTLE_REASONS,
    ClocksReading,
    DeviceEvent,
    DeviceReading,
    DeviceStatic,
    DriverInfo,
    EccReading,
    GpuProcess,
    HostProcess,
    MemoryReading,
    ModesReading,
    PcieReading,
    PcieThroughputReading,
    PowerReading,
    ProcessUtilization,
    TemperatureReading,
    UtilizationDomain,
    UtilizationReading,
    UtilizationSample,
)
from gpu_exporter.sources.backend import (
    DeviceLost,
    ErrorCounts,
    NvmlUnavailable,
    read_device,
)

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
NO_DATA = frozenset({pynvml.NVML_ERROR_NOT_FOUND})  # sample buffers with nothing newer


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


_CLOCK_IDS: dict[str, int] = {
    "graphics": pynvml.NVML_CLOCK_GRAPHICS,
    "sm": pynvml.NVML_CLOCK_SM,
    "memory": pynvml.NVML_CLOCK_MEM,
    "video": pynvml.NVML_CLOCK_VIDEO,
}

_SAMPLING_TYPES: dict[str, int] = {
    "gpu": pynvml.NVML_GPU_UTILIZATION_SAMPLES,
    "memory_controller": pynvml.NVML_MEMORY_UTILIZATION_SAMPLES,
}

# Field values read with one nvmlDeviceGetFieldValues call per device and interval:
# name -> (field id, collector that wants it).
_FIELDS: dict[str, tuple[int, str]] = {
    "ecc_mode": (pynvml.NVML_FI_DEV_ECC_CURRENT, "modes"),
    "ecc_corrected_errors": (pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, "ecc"),
    "ecc_uncorrected_errors": (pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, "ecc"),
    "retired_pages_single_bit": (pynvml.NVML_FI_DEV_RETIRED_SBE, "ecc"),
    "retired_pages_double_bit": (pynvml.NVML_FI_DEV_RETIRED_DBE, "ecc"),
    "retired_pages_pending": (pynvml.NVML_FI_DEV_RETIRED_PENDING, "ecc"),
    "remapped_rows_correctable": (pynvml.NVML_FI_DEV_REMAPPED_COR, "ecc"),
    "remapped_rows_uncorrectable": (pynvml.NVML_FI_DEV_REMAPPED_UNC, "ecc"),
    "remapped_rows_pending": (pynvml.NVML_FI_DEV_REMAPPED_PENDING, "ecc"),
    "remapped_rows_failed": (pynvml.NVML_FI_DEV_REMAPPED_FAILURE, "ecc"),
    "memory_temperature_celsius": (pynvml.NVML_FI_DEV_MEMORY_TEMP, "temperature"),
    "energy_millijoules": (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, "power"),
    "pcie_replay_errors": (pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, "pcie"),
}

_FIELD_MEMBERS: dict[int, str] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _field_number(field: Any) -> float:
    """The numeric value of a `c_nvmlFieldValue_t` according to its `valueType`."""
    member = _FIELD_MEMBERS.get(int(field.valueType), "ullVal")
    return float(getattr(field.value, member))


class _Device:
    """One device handle plus the calls and fields it answered as unsupported."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.unsupported: set[str] = set()
        self.unsupported_fields: set[str] = set()


_NO_QUIET: frozenset[int] = frozenset()


class PynvmlBackend:
    """The real NVIDIA driver, through `pynvml`. Safe to call from several threads."""

    kind = "nvml"

    def __init__(self) -> None:
        self.errors = ErrorCounts()
        self._lock = threading.Lock()
        self._devices: dict[int, _Device] = {}
        self._initialised = False

    # The choke point -----------------------------------------------------------------

    def _call(
        self,
        function: str,
        fn: Callable[..., T],
        *args: Any,
        device: _Device | None = None,
        key: str | None = None,
        quiet: frozenset[int] = _NO_QUIET,
        on_error: type[NvmlUnavailable | DeviceLost] | None = None,
    ) -> T | None:
        """Call `fn(*args)`; every NVML error is classified here and nowhere else.

        Returns None when the call is unsupported (remembered under `key` for `device`),
        answered with a `quiet` code, or failed with an unexpected error (counted; raised
        as `on_error` when the caller cannot go on without the value).
        """
        if device is not None and key is not None and key in device.unsupported:
            return None
        try:
            return fn(*args)
        except pynvml.NVMLLibraryMismatchError:  # the wrapper's versioned symbol is missing
            if device is not None and key is not None:
                device.unsupported.add(key)
            return None
        except pynvml.NVMLError as error:
            code = getattr(error, "value", None)
            if code in quiet:
                return None
            self._failed(function, code, str(error), device, key, on_error, cause=error)
            return None

    def _failed(
        self,
        function: str,
        code: int | None,
        message: str,
        device: _Device | None,
        key: str | None,
        on_error: type[NvmlUnavailable | DeviceLost] | None,
        *,
        cause: BaseException | None = None,
    ) -> None:
        """Act on one failed call (or one failed field of a field-values batch)."""
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

    def _query(self, d: _Device, key: str, fn: Callable[..., T], *args: Any) -> T | None:
        """A per-device call, cached as unsupported under `key`."""
        return self._call(fn.__name__, fn, d.handle, *args, device=d, key=key)

    # Library lifecycle -------------------------------------------------------------

    def init(self) -> None:
        """Initialise the library; every failure here means NVML is unavailable."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            code = getattr(error, "value", None)
            reason = str(error)
            if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                reason = "libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
            raise NvmlUnavailable(code_name(code), reason) from error
        with self._lock:
            self._devices.clear()
            self._initialised = True

    def shutdown(self) -> None:
        with self._lock:
            if not self._initialised:
                return
            self._initialised = False
            self._devices.clear()
        try:
            self._call("nvmlShutdown", pynvml.nvmlShutdown)
        except (NvmlUnavailable, DeviceLost):
            pass

    def driver_info(self) -> DriverInfo:
        driver = self._call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
        cuda = self._call(
            "nvmlSystemGetCudaDriverVersion_v2", pynvml.nvmlSystemGetCudaDriverVersion_v2
        )
        cuda_text = None
        if isinstance(cuda, int) and cuda > 0:
            cuda_text = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        return DriverInfo(
            driver_version=_text(driver) if driver is not None else None,
            cuda_driver_version=cuda_text,
        )

    def device_count(self) -> int:
        count = self._call(
            "nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount, on_error=NvmlUnavailable
        )
        if count is None:
            raise NvmlUnavailable("not_supported", "nvmlDeviceGetCount: not supported")
        return int(count)

    def _device(self, index: int) -> _Device:
        with self._lock:
            device = self._devices.get(index)
        if device is not None:
            return device
        handle = self._call(
            "nvmlDeviceGetHandleByIndex",
            pynvml.nvmlDeviceGetHandleByIndex,
            index,
            on_error=DeviceLost,
        )
        if handle is None:
            raise DeviceLost("not_supported", f"nvmlDeviceGetHandleByIndex({index}): no handle")
        device = _Device(handle)
        with self._lock:
            self._devices[index] = device
        return device

    # Static facts ------------------------------------------------------------------

    def device_static(self, index: int) -> DeviceStatic:
        d = self._device(index)
        q = self._query
        uuid = q(d, "uuid", pynvml.nvmlDeviceGetUUID)
        if uuid is None:
            raise DeviceLost("no_uuid", f"GPU {index} did not report a UUID")
        name = q(d, "name", pynvml.nvmlDeviceGetName)
        pci = q(d, "pci", pynvml.nvmlDeviceGetPciInfo)
        serial = q(d, "serial", pynvml.nvmlDeviceGetSerial)
        vbios = q(d, "vbios", pynvml.nvmlDeviceGetVbiosVersion)
        cc = q(d, "cuda_compute_capability", pynvml.nvmlDeviceGetCudaComputeCapability)
        max_clocks: dict[str, float] = {}
        for clock in CLOCK_NAMES:
            mhz = q(d, f"max_clock_{clock}", pynvml.nvmlDeviceGetMaxClockInfo, _CLOCK_IDS[clock])
            if mhz is not None:
                max_clocks[clock] = float(mhz) * 1e6
        slowdown = q(
            d,
            "threshold_slowdown",
            pynvml.nvmlDeviceGetTemperatureThreshold,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        )
        shutdown = q(
            d,
            "threshold_shutdown",
            pynvml.nvmlDeviceGetTemperatureThreshold,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
        )
        max_gen = q(d, "pcie_max_gen", pynvml.nvmlDeviceGetMaxPcieLinkGeneration)
        max_width = q(d, "pcie_max_width", pynvml.nvmlDeviceGetMaxPcieLinkWidth)
        serial_text = _text(serial) if serial is not None else None
        return DeviceStatic(
            index=index,
            uuid=_text(uuid),
            name=_text(name) if name is not None else "",
            pci_bus_id=_text(pci.busId) if pci is not None else None,
            serial=serial_text if serial_text not in ("", "0") else None,
            vbios_version=_text(vbios) if vbios is not None else None,
            compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
            max_clocks_hertz=max_clocks,
            slowdown_temperature_celsius=float(slowdown) if slowdown is not None else None,
            shutdown_temperature_celsius=float(shutdown) if shutdown is not None else None,
            pcie_max_generation=int(max_gen) if max_gen is not None else None,
            pcie_max_width=int(max_width) if max_width is not None else None,
        )

    # Dynamic values ----------------------------------------------------------------

    def device_reading(self, index: int, collectors: frozenset[str]) -> DeviceReading:
        reader = _NvmlReader(self, self._device(index), collectors)
        return read_device(reader, collectors)

    def field_values(self, d: _Device, collectors: Collection[str]) -> dict[str, float]:
        """One nvmlDeviceGetFieldValues call for every wanted, supported field."""
        wanted = [
            key
            for key, (_field_id, collector) in _FIELDS.items()
            if collector in collectors and key not in d.unsupported_fields
        ]
        if not wanted:
            return {}
        raw = self._query(
            d, "field_values", pynvml.nvmlDeviceGetFieldValues, [_FIELDS[k][0] for k in wanted]
        )
        if raw is None:
            return {}
        out: dict[str, float] = {}
        for key, field in zip(wanted, raw, strict=True):
            code = int(field.nvmlReturn)
            if code == pynvml.NVML_SUCCESS:
                out[key] = _field_number(field)
                continue
            if classify(code) is Outcome.UNSUPPORTED:
                d.unsupported_fields.add(key)
            else:
                error = pynvml.NVMLError(code)
                message = f"field {key}: {error}"
                self._failed("nvmlDeviceGetFieldValues", code, message, d, None, None, cause=error)
        return out

    def utilization_samples(
        self, index: int, domain: UtilizationDomain, since_us: int
    ) -> Sequence[UtilizationSample] | None:
        d = self._device(index)
        key = f"samples_{domain}"
        result = self._call(
            "nvmlDeviceGetSamples",
            pynvml.nvmlDeviceGetSamples,
            d.handle,
            _SAMPLING_TYPES[domain],
            since_us,
            device=d,
            key=key,
            quiet=NO_DATA,
        )
        if result is None:
            return None if key in d.unsupported else []
        _value_type, samples = result
        return sorted(
            (
                UtilizationSample(int(s.timeStamp), min(1.0, _sample_value(s) / 100.0))
                for s in samples
                if int(s.timeStamp) > since_us
            ),
            key=lambda s: s.timestamp_us,
        )

    def processes(self, index: int) -> Sequence[GpuProcess] | None:
        d = self._device(index)
        compute = self._process_list(
            d,
            "compute_processes",
            pynvml.nvmlDeviceGetComputeRunningProcesses_v3,
            pynvml.nvmlDeviceGetComputeRunningProcesses_v2,
        )
        graphics = self._process_list(
            d,
            "graphics_processes",
            pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3,
            pynvml.nvmlDeviceGetGraphicsRunningProcesses_v2,
        )
        if compute is None and graphics is None:
            return None
        out: list[GpuProcess] = []
        for context, procs in (("compute", compute or []), ("graphics", graphics or [])):
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                out.append(
                    GpuProcess(
                        pid=int(p.pid),
                        context="compute" if context == "compute" else "graphics",
                        used_memory_bytes=int(used) if isinstance(used, int) else None,
                    )
                )
        return out

    def _process_list(
        self,
        d: _Device,
        key: str,
        v3: Callable[[Any], list[Any]],
        v2: Callable[[Any], list[Any]],
    ) -> list[Any] | None:
        """The `_v3` process list (R510+), else `_v2` (R470 and older LTS branches)."""
        procs = self._query(d, key, v3)
        if procs is None and key in d.unsupported:
            procs = self._query(d, f"{key}_v2", v2)
        return procs

    def process_utilization(self, index: int, since_us: int) -> Sequence[ProcessUtilization] | None:
        d = self._device(index)
        key = "process_utilization"
        samples = self._call(
            "nvmlDeviceGetProcessUtilization",
            pynvml.nvmlDeviceGetProcessUtilization,
            d.handle,
            since_us,
            device=d,
            key=key,
            quiet=NO_DATA,
        )
        if samples is None:
            return None if key in d.unsupported else []
        return [
            ProcessUtilization(
                pid=int(s.pid),
                timestamp_us=int(s.timeStamp),
                sm_ratio=min(1.0, s.smUtil / 100.0),
                memory_controller_ratio=min(1.0, s.memUtil / 100.0),
            )
            for s in samples
            if int(s.timeStamp) > since_us
        ]

    def host_process(self, pid: int) -> HostProcess | None:
        """The real driver knows nothing of the host side: /proc is asked."""
        return None

    # Events ------------------------------------------------------------------------

    def open_events(self) -> PynvmlEventSet | None:
        """Create an event set and register every device that supports Xid/ECC events."""
        event_set = self._call(
            "nvmlEventSetCreate", pynvml.nvmlEventSetCreate, on_error=NvmlUnavailable
        )
        if event_set is None:
            return None  # the event API is not supported here
        try:
            uuids = self._register_devices(event_set)
        except BaseException:
            self.free_event_set(event_set)
            raise
        if not uuids:
            self.free_event_set(event_set)
            return None
        return PynvmlEventSet(self, event_set, uuids)

    def _register_devices(self, event_set: Any) -> dict[int, str]:
        """Register each device for the wanted events it supports: handle address -> uuid."""
        uuids: dict[int, str] = {}
        for index in range(self.device_count()):
            try:
                d = self._device(index)
                supported = self._call(
                    "nvmlDeviceGetSupportedEventTypes",
                    pynvml.nvmlDeviceGetSupportedEventTypes,
                    d.handle,
                )
                wanted = int(supported or 0) & _WANTED_EVENTS
                if not wanted:
                    continue
                uuid = self._call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, d.handle)
                if uuid is None:
                    continue
                registered = self._call(
                    "nvmlDeviceRegisterEvents",
                    _register_events,
                    d.handle,
                    wanted,
                    event_set,
                )
                if registered:
                    uuids[_handle_key(d.handle)] = _text(uuid)
            except DeviceLost:
                continue  # the sampler reports it down; register the others
        return uuids

    def wait_event(
        self, event_set: Any, uuids: dict[int, str], timeout_ms: int
    ) -> DeviceEvent | None:
        """The next event on `event_set`, or None after `timeout_ms`."""
        try:
            data = self._call(
                "nvmlEventSetWait_v2",
                pynvml.nvmlEventSetWait_v2,
                event_set,
                timeout_ms,
                quiet=frozenset({pynvml.NVML_ERROR_TIMEOUT}),
                on_error=NvmlUnavailable,
            )
        except DeviceLost:
            # A registered GPU fell off the bus: the sampler reports it down; keep
            # waiting for the other devices, without spinning on a repeated error.
            time.sleep(timeout_ms / 1000.0)
            return None
        if data is None:
            return None
        event_type = int(data.eventType)
        kind = _EVENT_KINDS.get(event_type, "other")
        return DeviceEvent(
            uuid=uuids.get(_handle_key(data.device), ""),
            kind=kind,  # type: ignore[arg-type]
            xid=int(data.eventData) if kind == "xid" else None,
            event_type=event_type,
        )

    def free_event_set(self, event_set: Any) -> None:
        try:
            self._call("nvmlEventSetFree", pynvml.nvmlEventSetFree, event_set)
        except (NvmlUnavailable, DeviceLost):
            pass  # the library is gone, and the set with it


class _NvmlReader:
    """One device's readings in one interval; the field values are fetched once."""

    def __init__(self, backend: PynvmlBackend, d: _Device, collectors: Collection[str]) -> None:
        self._backend = backend
        self._d = d
        self._fields = backend.field_values(d, collectors)

    def _q(self, key: str, fn: Callable[..., T], *args: Any) -> T | None:
        return self._backend._query(self._d, key, fn, *args)

    def _field(self, key: str) -> float | None:
        return self._fields.get(key)

    def _int_field(self, key: str) -> int | None:
        value = self._fields.get(key)
        return int(value) if value is not None else None

    def _flag_field(self, key: str) -> bool | None:
        value = self._fields.get(key)
        return value != 0 if value is not None else None

    def utilization(self) -> UtilizationReading:
        rates = self._q("utilization", pynvml.nvmlDeviceGetUtilizationRates)
        enc = self._q("encoder", pynvml.nvmlDeviceGetEncoderUtilization)
        dec = self._q("decoder", pynvml.nvmlDeviceGetDecoderUtilization)
        return UtilizationReading(
            gpu_ratio=rates.gpu / 100.0 if rates is not None else None,
            memory_controller_ratio=rates.memory / 100.0 if rates is not None else None,
            encoder_ratio=enc[0] / 100.0 if enc is not None else None,
            decoder_ratio=dec[0] / 100.0 if dec is not None else None,
        )

    def memory(self) -> MemoryReading:
        info = self._q("memory_v2", nvml_device_get_memory_info_v2)
        reserved = int(info.reserved) if info is not None else None
        if info is None:
            info = self._q("memory", pynvml.nvmlDeviceGetMemoryInfo)
        if info is None:
            return MemoryReading()
        return MemoryReading(
            total_bytes=int(info.total),
            used_bytes=int(info.used),
            free_bytes=int(info.free),
            reserved_bytes=reserved,
        )

    def temperature(self) -> TemperatureReading:
        temp = self._q("temperature", pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
        fan = self._q("fan", pynvml.nvmlDeviceGetFanSpeed)
        return TemperatureReading(
            gpu_celsius=float(temp) if temp is not None else None,
            memory_celsius=self._field("memory_temperature_celsius"),
            fan_speed_ratio=fan / 100.0 if fan is not None else None,
        )

    def power(self) -> PowerReading:
        power = self._q("power", pynvml.nvmlDeviceGetPowerUsage)
        limit = self._q("power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit)
        energy = self._field("energy_millijoules")
        return PowerReading(
            watts=power / 1000.0 if power is not None else None,
            limit_watts=limit / 1000.0 if limit is not None else None,
            energy_joules=energy / 1000.0 if energy is not None else None,
        )

    def clocks(self) -> ClocksReading:
        hertz: dict[str, float] = {}
        for clock in CLOCK_NAMES:
            mhz = self._q(f"clock_{clock}", pynvml.nvmlDeviceGetClockInfo, _CLOCK_IDS[clock])
            if mhz is not None:
                hertz[clock] = float(mhz) * 1e6
        pstate = self._q("pstate", pynvml.nvmlDeviceGetPerformanceState)
        mask = self._q("clocks_event_reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons)
        return ClocksReading(
            hertz=hertz,
            performance_state=(
                int(pstate)
                if pstate is not None and int(pstate) != pynvml.NVML_PSTATE_UNKNOWN
                else None
            ),
            throttle_reasons=(
                {
                    reason: bool(int(mask) & (1 << bit))
                    for bit, reason in enumerate(THROTTLE_REASONS)
                }
                if mask is not None
                else None
            ),
        )

    def pcie(self) -> PcieReading:
        gen = self._q("pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration)
        width = self._q("pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth)
        return PcieReading(
            generation=int(gen) if gen is not None else None,
            width=int(width) if width is not None else None,
            replay_errors=self._int_field("pcie_replay_errors"),
        )

    def pcie_throughput(self) -> PcieThroughputReading:
        tx = self._q("pcie_tx", pynvml.nvmlDeviceGetPcieThroughput, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        rx = self._q("pcie_rx", pynvml.nvmlDeviceGetPcieThroughput, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        return PcieThroughputReading(
            tx_bytes_per_second=tx * 1000.0 if tx is not None else None,  # KB/s
            rx_bytes_per_second=rx * 1000.0 if rx is not None else None,
        )

    def ecc(self) -> EccReading:
        return EccReading(
            corrected_errors=self._int_field("ecc_corrected_errors"),
            uncorrected_errors=self._int_field("ecc_uncorrected_errors"),
            retired_pages_single_bit=self._int_field("retired_pages_single_bit"),
            retired_pages_double_bit=self._int_field("retired_pages_double_bit"),
            retired_pages_pending=self._flag_field("retired_pages_pending"),
            remapped_rows_correctable=self._int_field("remapped_rows_correctable"),
            remapped_rows_uncorrectable=self._int_field("remapped_rows_uncorrectable"),
            remapped_rows_pending=self._flag_field("remapped_rows_pending"),
            remapped_rows_failed=self._flag_field("remapped_rows_failed"),
        )

    def modes(self) -> ModesReading:
        persistence = self._q("persistence", pynvml.nvmlDeviceGetPersistenceMode)
        mig = self._q("mig", pynvml.nvmlDeviceGetMigMode)
        return ModesReading(
            persistence=(
                persistence == pynvml.NVML_FEATURE_ENABLED if persistence is not None else None
            ),
            mig=mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE if mig is not None else None,
            ecc=self._flag_field("ecc_mode"),
        )


def _throttle_reasons(mask: int) -> dict[str, bool]:
    return {reason: bool(mask & (1 << bit)) for bit, reason in enumerate(THROTTLE_REASONS)}


def nvml_device_get_memory_info_v2(handle: Any) -> Any:
    """`nvmlDeviceGetMemoryInfo` v2, which also reports the driver's reservation."""
    return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)


def _sample_value(sample: Any) -> float:
    return float(sample.sampleValue.uiVal)


def _register_events(handle: Any, mask: int, event_set: Any) -> bool:
    pynvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
    return True


_EVENT_KINDS: dict[int, str] = {
    pynvml.nvmlEventTypeXidCriticalError: "xid",
    pynvml.nvmlEventTypeSingleBitEccError: "ecc_single_bit",
    pynvml.nvmlEventTypeDoubleBitEccError: "ecc_double_bit",
}
_WANTED_EVENTS = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
)


class PynvmlEventSet:
    """An `nvmlEventSet_t` with every supporting device registered."""

    def __init__(self, backend: PynvmlBackend, event_set: Any, uuids: dict[int, str]) -> None:
        self._backend = backend
        self._set = event_set
        self._uuids = uuids  # device handle address -> uuid

    def wait(self, timeout_ms: int) -> DeviceEvent | None:
        return self._backend.wait_event(self._set, self._uuids, timeout_ms)

    def close(self) -> None:
        self._backend.free_event_set(self._set)


def _handle_key(handle: Any) -> int:
    """A hashable identity for a device handle (a ctypes pointer)."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)
