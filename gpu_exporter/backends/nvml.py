"""`PynvmlBackend`: the one module that talks to NVML through `pynvml` (nvidia-ml-py).

Every driver call goes through `_Device.query`, the single choke point that maps
NVML's error codes onto the exporter's model (see `backends.base`):

- NOT_SUPPORTED / FUNCTION_NOT_FOUND: the field is None, and the call is remembered
  per device so it is not repeated every interval. pynvml's unversioned wrappers raise
  `NVMLLibraryMismatchError` (not an `NVMLError`) when the driver lacks the versioned
  symbol; that is the same "this driver cannot answer" and is handled alike.
- GPU_IS_LOST / UNKNOWN / TIMEOUT: `DeviceLost`.
- UNINITIALIZED / DRIVER_NOT_LOADED / LIB_RM_VERSION_MISMATCH / LIBRARY_NOT_FOUND:
  `NvmlUnavailable`.
- Anything else: counted in `errors` (function, error) and the field is None.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pynvml

from gpu_exporter.backends.base import (
    CLOCK_NAMES,
    THROTTLE_REASONS,
    DeviceEvent,
    DeviceLost,
    DeviceReading,
    DeviceStatic,
    DriverInfo,
    ErrorCounts,
    GpuProcess,
    NvmlUnavailable,
    ProcessUtilization,
    UtilizationDomain,
    UtilizationSample,
)

T = TypeVar("T")

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
_NO_DATA = frozenset({pynvml.NVML_ERROR_NOT_FOUND})  # sample buffers with nothing newer

_ERROR_NAMES: dict[int, str] = {
    value: name[len("NVML_ERROR_") :].lower()
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}

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

# Field values read with one nvmlDeviceGetFieldValues call per device and interval.
_FIELDS: dict[str, int] = {
    "ecc_mode": pynvml.NVML_FI_DEV_ECC_CURRENT,
    "ecc_corrected_errors": pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
    "ecc_uncorrected_errors": pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
    "retired_pages_single_bit": pynvml.NVML_FI_DEV_RETIRED_SBE,
    "retired_pages_double_bit": pynvml.NVML_FI_DEV_RETIRED_DBE,
    "retired_pages_pending": pynvml.NVML_FI_DEV_RETIRED_PENDING,
    "remapped_rows_correctable": pynvml.NVML_FI_DEV_REMAPPED_COR,
    "remapped_rows_uncorrectable": pynvml.NVML_FI_DEV_REMAPPED_UNC,
    "remapped_rows_pending": pynvml.NVML_FI_DEV_REMAPPED_PENDING,
    "remapped_rows_failed": pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
    "memory_temperature_celsius": pynvml.NVML_FI_DEV_MEMORY_TEMP,
    "energy_millijoules": pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
    "pcie_replay_errors": pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
}
_FIELD_COLLECTORS: dict[str, str] = {
    "ecc_mode": "modes",
    "memory_temperature_celsius": "temperature",
    "energy_millijoules": "power",
    "pcie_replay_errors": "pcie",
}  # the rest belong to "ecc"


def error_name(error: pynvml.NVMLError) -> str:
    """Short snake_case name of an NVML error code, e.g. `gpu_is_lost`."""
    code = getattr(error, "value", None)
    if isinstance(code, int):
        return _ERROR_NAMES.get(code, f"code_{code}")
    return "unknown"


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _field_number(field: Any) -> float:
    """The numeric value of a `c_nvmlFieldValue_t` according to its `valueType`."""
    value_type = int(field.valueType)
    member = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }.get(value_type, "ullVal")
    return float(getattr(field.value, member))


class _Device:
    """One device handle plus the calls it answered as unsupported."""

    def __init__(self, handle: Any, errors: ErrorCounts) -> None:
        self.handle = handle
        self.unsupported: set[str] = set()
        self.unsupported_fields: set[str] = set()
        self._errors = errors

    def query(self, key: str, fn: Callable[..., T], *args: Any) -> T | None:
        """Call `fn(handle, *args)`; the choke point for NVML error classification.

        `key` names the call for the unsupported cache and the error counter (a call
        with several argument variants, such as clocks, has one key per variant).
        """
        if key in self.unsupported:
            return None
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError as error:
            self._classify(key, fn.__name__, error)
            return None
        except pynvml.NVMLLibraryMismatchError:  # wrapper's versioned symbol is missing
            self.unsupported.add(key)
            return None

    def _classify(self, key: str, function: str, error: pynvml.NVMLError) -> None:
        code = getattr(error, "value", None)
        if code in _UNSUPPORTED:
            self.unsupported.add(key)
        elif code not in _NO_DATA:
            raise_for(function, error)
            self._errors.add(function, error_name(error))


def raise_for(function: str, error: pynvml.NVMLError) -> None:
    """Raise the exporter's exception for errors that take down a device or NVML."""
    code = getattr(error, "value", None)
    if code in _NVML_DOWN:
        raise NvmlUnavailable(error_name(error), f"{function}: {error}") from error
    if code in _DEVICE_LOST:
        raise DeviceLost(error_name(error), f"{function}: {error}") from error


class PynvmlBackend:
    """The real NVIDIA driver, through `pynvml`. Safe to call from several threads."""

    kind = "nvml"

    def __init__(self) -> None:
        self.errors = ErrorCounts()
        self._lock = threading.Lock()
        self._devices: dict[int, _Device] = {}
        self._initialised = False

    # Library lifecycle -------------------------------------------------------------

    def init(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            code = getattr(error, "value", None)
            reason = str(error)
            if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                reason = "libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
            raise NvmlUnavailable(error_name(error), reason) from error
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
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """A library-wide call: every error means NVML is unusable or the call failed."""
        try:
            return fn(*args)
        except pynvml.NVMLError as error:
            raise_for(fn.__name__, error)
            self.errors.add(fn.__name__, error_name(error))
            raise NvmlUnavailable(error_name(error), f"{fn.__name__}: {error}") from error

    def driver_info(self) -> DriverInfo:
        driver = self._optional(pynvml.nvmlSystemGetDriverVersion)
        cuda = self._optional(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        cuda_text = None
        if isinstance(cuda, int) and cuda > 0:
            cuda_text = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        return DriverInfo(
            driver_version=_text(driver) if driver is not None else None,
            cuda_driver_version=cuda_text,
        )

    def _optional(self, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except pynvml.NVMLError as error:
            if getattr(error, "value", None) in _UNSUPPORTED:
                return None
            raise_for(fn.__name__, error)
            self.errors.add(fn.__name__, error_name(error))
            return None

    def device_count(self) -> int:
        return int(self._call(pynvml.nvmlDeviceGetCount))

    def _device(self, index: int) -> _Device:
        with self._lock:
            device = self._devices.get(index)
        if device is not None:
            return device
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as error:
            raise_for("nvmlDeviceGetHandleByIndex", error)
            self.errors.add("nvmlDeviceGetHandleByIndex", error_name(error))
            raise DeviceLost(error_name(error), f"nvmlDeviceGetHandleByIndex: {error}") from error
        device = _Device(handle, self.errors)
        with self._lock:
            self._devices[index] = device
        return device

    # Static facts ------------------------------------------------------------------

    def device_static(self, index: int) -> DeviceStatic:
        d = self._device(index)
        uuid = d.query("uuid", pynvml.nvmlDeviceGetUUID)
        if uuid is None:
            raise DeviceLost("no_uuid", f"GPU {index} did not report a UUID")
        name = d.query("name", pynvml.nvmlDeviceGetName)
        pci = d.query("pci", pynvml.nvmlDeviceGetPciInfo)
        serial = d.query("serial", pynvml.nvmlDeviceGetSerial)
        vbios = d.query("vbios", pynvml.nvmlDeviceGetVbiosVersion)
        cc = d.query("cuda_compute_capability", pynvml.nvmlDeviceGetCudaComputeCapability)
        max_clocks: dict[str, float] = {}
        for clock in CLOCK_NAMES:
            mhz = d.query(f"max_clock_{clock}", pynvml.nvmlDeviceGetMaxClockInfo, _CLOCK_IDS[clock])
            if mhz is not None:
                max_clocks[clock] = float(mhz) * 1e6
        slowdown = d.query(
            "threshold_slowdown",
            pynvml.nvmlDeviceGetTemperatureThreshold,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        )
        shutdown = d.query(
            "threshold_shutdown",
            pynvml.nvmlDeviceGetTemperatureThreshold,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
        )
        max_gen = d.query("pcie_max_gen", pynvml.nvmlDeviceGetMaxPcieLinkGeneration)
        max_width = d.query("pcie_max_width", pynvml.nvmlDeviceGetMaxPcieLinkWidth)
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
        d = self._device(index)
        values: dict[str, Any] = {}
        fields = self._field_values(d, collectors)
        if "utilization" in collectors:
            rates = d.query("utilization", pynvml.nvmlDeviceGetUtilizationRates)
            if rates is not None:
                values["utilization_ratio"] = rates.gpu / 100.0
                values["memory_controller_utilization_ratio"] = rates.memory / 100.0
            enc = d.query("encoder", pynvml.nvmlDeviceGetEncoderUtilization)
            if enc is not None:
                values["encoder_utilization_ratio"] = enc[0] / 100.0
            dec = d.query("decoder", pynvml.nvmlDeviceGetDecoderUtilization)
            if dec is not None:
                values["decoder_utilization_ratio"] = dec[0] / 100.0
        if "memory" in collectors:
            self._memory(d, values)
        if "temperature" in collectors:
            temp = d.query(
                "temperature", pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU
            )
            if temp is not None:
                values["temperature_celsius"] = float(temp)
            if "memory_temperature_celsius" in fields:
                values["memory_temperature_celsius"] = fields["memory_temperature_celsius"]
            fan = d.query("fan", pynvml.nvmlDeviceGetFanSpeed)
            if fan is not None:
                values["fan_speed_ratio"] = fan / 100.0
        if "power" in collectors:
            power = d.query("power", pynvml.nvmlDeviceGetPowerUsage)
            if power is not None:
                values["power_watts"] = power / 1000.0
            limit = d.query("power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit)
            if limit is not None:
                values["power_limit_watts"] = limit / 1000.0
            if "energy_millijoules" in fields:
                values["energy_joules"] = fields["energy_millijoules"] / 1000.0
        if "clocks" in collectors:
            self._clocks(d, values)
        if "pcie" in collectors:
            gen = d.query("pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration)
            width = d.query("pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth)
            values["pcie_generation"] = int(gen) if gen is not None else None
            values["pcie_width"] = int(width) if width is not None else None
            if "pcie_replay_errors" in fields:
                values["pcie_replay_errors"] = int(fields["pcie_replay_errors"])
        if "pcie-throughput" in collectors:
            tx = d.query(
                "pcie_tx", pynvml.nvmlDeviceGetPcieThroughput, pynvml.NVML_PCIE_UTIL_TX_BYTES
            )
            rx = d.query(
                "pcie_rx", pynvml.nvmlDeviceGetPcieThroughput, pynvml.NVML_PCIE_UTIL_RX_BYTES
            )
            values["pcie_tx_bytes_per_second"] = tx * 1000.0 if tx is not None else None
            values["pcie_rx_bytes_per_second"] = rx * 1000.0 if rx is not None else None
        if "ecc" in collectors:
            for key in (
                "ecc_corrected_errors",
                "ecc_uncorrected_errors",
                "retired_pages_single_bit",
                "retired_pages_double_bit",
                "remapped_rows_correctable",
                "remapped_rows_uncorrectable",
            ):
                if key in fields:
                    values[key] = int(fields[key])
            for key in ("retired_pages_pending", "remapped_rows_pending", "remapped_rows_failed"):
                if key in fields:
                    values[key] = fields[key] != 0
        if "modes" in collectors:
            persistence = d.query("persistence", pynvml.nvmlDeviceGetPersistenceMode)
            if persistence is not None:
                values["persistence_mode"] = persistence == pynvml.NVML_FEATURE_ENABLED
            mig = d.query("mig", pynvml.nvmlDeviceGetMigMode)
            if mig is not None:
                values["mig_mode"] = mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE
            if "ecc_mode" in fields:
                values["ecc_mode"] = fields["ecc_mode"] != 0
        return DeviceReading(**values)

    def _memory(self, d: _Device, values: dict[str, Any]) -> None:
        info = d.query("memory_v2", nvml_device_get_memory_info_v2)
        if info is not None:
            values["memory_reserved_bytes"] = int(info.reserved)
        else:
            info = d.query("memory", pynvml.nvmlDeviceGetMemoryInfo)
        if info is not None:
            values["memory_total_bytes"] = int(info.total)
            values["memory_used_bytes"] = int(info.used)
            values["memory_free_bytes"] = int(info.free)

    def _clocks(self, d: _Device, values: dict[str, Any]) -> None:
        clocks: dict[str, float] = {}
        for clock in CLOCK_NAMES:
            mhz = d.query(f"clock_{clock}", pynvml.nvmlDeviceGetClockInfo, _CLOCK_IDS[clock])
            if mhz is not None:
                clocks[clock] = float(mhz) * 1e6
        values["clocks_hertz"] = clocks
        pstate = d.query("pstate", pynvml.nvmlDeviceGetPerformanceState)
        if pstate is not None and int(pstate) != pynvml.NVML_PSTATE_UNKNOWN:
            values["performance_state"] = int(pstate)
        mask = d.query("clocks_event_reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons)
        if mask is not None:
            values["throttle_reasons"] = {
                reason: bool(int(mask) & (1 << bit)) for bit, reason in enumerate(THROTTLE_REASONS)
            }

    def _field_values(self, d: _Device, collectors: frozenset[str]) -> dict[str, float]:
        """One nvmlDeviceGetFieldValues call for every wanted, supported field."""
        wanted = [
            key
            for key in _FIELDS
            if _FIELD_COLLECTORS.get(key, "ecc") in collectors and key not in d.unsupported_fields
        ]
        if not wanted:
            return {}
        raw = d.query("field_values", pynvml.nvmlDeviceGetFieldValues, [_FIELDS[k] for k in wanted])
        if raw is None:
            return {}
        out: dict[str, float] = {}
        for key, field in zip(wanted, raw, strict=True):
            ret = int(field.nvmlReturn)
            if ret == pynvml.NVML_SUCCESS:
                out[key] = _field_number(field)
            elif ret in _UNSUPPORTED:
                d.unsupported_fields.add(key)
            else:
                raise_for(f"nvmlDeviceGetFieldValues({key})", pynvml.NVMLError(ret))
                self.errors.add("nvmlDeviceGetFieldValues", _ERROR_NAMES.get(ret, f"code_{ret}"))
        return out

    def utilization_samples(
        self, index: int, domain: UtilizationDomain, since_us: int
    ) -> Sequence[UtilizationSample] | None:
        d = self._device(index)
        key = f"samples_{domain}"
        if key in d.unsupported:
            return None
        result = d.query(key, pynvml.nvmlDeviceGetSamples, _SAMPLING_TYPES[domain], since_us)
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

    def open_events(self) -> PynvmlEventSet | None:
        return open_events(self)

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

    @staticmethod
    def _process_list(
        d: _Device, key: str, v3: Callable[[Any], list[Any]], v2: Callable[[Any], list[Any]]
    ) -> list[Any] | None:
        """The `_v3` process list (R510+), else `_v2` (R470 and older LTS branches)."""
        procs = d.query(key, v3)
        if procs is None and key in d.unsupported:
            procs = d.query(f"{key}_v2", v2)
        return procs

    def process_utilization(self, index: int, since_us: int) -> Sequence[ProcessUtilization] | None:
        d = self._device(index)
        key = "process_utilization"
        if key in d.unsupported:
            return None
        samples = d.query(key, pynvml.nvmlDeviceGetProcessUtilization, since_us)
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


def nvml_device_get_memory_info_v2(handle: Any) -> Any:
    """`nvmlDeviceGetMemoryInfo` v2, which also reports the driver's reservation."""
    return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)


def _sample_value(sample: Any) -> float:
    return float(sample.sampleValue.uiVal)


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

    def __init__(self, event_set: Any, uuids: dict[int, str]) -> None:
        self._set = event_set
        self._uuids = uuids  # device handle address -> uuid

    def wait(self, timeout_ms: int) -> DeviceEvent | None:
        try:
            data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
        except pynvml.NVMLError as error:
            code = getattr(error, "value", None)
            if code == pynvml.NVML_ERROR_TIMEOUT:
                return None
            if code in _DEVICE_LOST:
                # A registered GPU fell off the bus: the sampler reports it down; keep
                # waiting for the other devices, without spinning on a repeated error.
                time.sleep(timeout_ms / 1000.0)
                return None
            raise NvmlUnavailable(error_name(error), f"nvmlEventSetWait_v2: {error}") from error
        event_type = int(data.eventType)
        kind = _EVENT_KINDS.get(event_type, "other")
        return DeviceEvent(
            uuid=self._uuids.get(_handle_key(data.device), ""),
            kind=kind,  # type: ignore[arg-type]
            xid=int(data.eventData) if kind == "xid" else None,
            event_type=event_type,
        )

    def close(self) -> None:
        _free(self._set)


def _handle_key(handle: Any) -> int:
    """A hashable identity for a device handle (a ctypes pointer)."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


def open_events(backend: PynvmlBackend) -> PynvmlEventSet | None:
    """Create an event set and register every device that supports Xid/ECC events."""
    try:
        event_set = pynvml.nvmlEventSetCreate()
    except pynvml.NVMLError as error:
        if getattr(error, "value", None) in _UNSUPPORTED:
            return None
        raise_for("nvmlEventSetCreate", error)
        raise NvmlUnavailable(error_name(error), f"nvmlEventSetCreate: {error}") from error
    try:
        uuids = _register_devices(backend, event_set)
    except BaseException:
        _free(event_set)
        raise
    if not uuids:
        _free(event_set)
        return None
    return PynvmlEventSet(event_set, uuids)


def _register_devices(backend: PynvmlBackend, event_set: Any) -> dict[int, str]:
    """Register each device for the wanted events it supports: handle address -> uuid."""
    uuids: dict[int, str] = {}
    for index in range(backend.device_count()):
        function = "nvmlDeviceGetHandleByIndex"
        try:
            device = backend._device(index)
            function = "nvmlDeviceGetSupportedEventTypes"
            supported = int(pynvml.nvmlDeviceGetSupportedEventTypes(device.handle))
            wanted = supported & _WANTED_EVENTS
            if not wanted:
                continue
            function = "nvmlDeviceGetUUID"
            uuid = _text(pynvml.nvmlDeviceGetUUID(device.handle))
            function = "nvmlDeviceRegisterEvents"
            pynvml.nvmlDeviceRegisterEvents(device.handle, wanted, event_set)
            uuids[_handle_key(device.handle)] = uuid
        except DeviceLost:
            continue
        except pynvml.NVMLError as error:
            if getattr(error, "value", None) in _UNSUPPORTED | _DEVICE_LOST:
                continue
            raise_for(function, error)
            backend.errors.add(function, error_name(error))
    return uuids


def _free(event_set: Any) -> None:
    try:
        pynvml.nvmlEventSetFree(event_set)
    except pynvml.NVMLError:
        pass
