"""The typed interface between the sampler and a source of GPU data.

`PynvmlBackend` (the only module that imports pynvml) and `SimulatedBackend` both
implement `Backend`. Everything they return is plain, frozen data in base SI units;
`None` always means "not supported by this device or driver" and its series is left out.

Errors are classified once, in the backend, into the exceptions below:

- `NvmlUnavailable`: NVML as a whole is down (library missing, driver not loaded,
  uninitialised, version mismatch). The exporter serves `gpu_exporter_nvml_up 0` and
  re-initialises with backoff.
- `DeviceLost`: one device is gone (GPU_IS_LOST, UNKNOWN, TIMEOUT). It is reported
  `gpu_up 0`; the other devices keep reporting.
- Anything else is counted in `ErrorCounts` and the affected field is `None`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

ClockName = Literal["graphics", "sm", "memory", "video"]
CLOCK_NAMES: tuple[ClockName, ...] = ("graphics", "sm", "memory", "video")

THROTTLE_REASONS: tuple[str, ...] = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)
"""Clocks-event reasons in the bit order of NVML's `nvmlClocksEventReason*` mask."""


class NvmlUnavailable(Exception):
    """NVML as a whole cannot be used; `error` is a short machine-readable cause."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason


class DeviceLost(Exception):
    """One device stopped answering (GPU_IS_LOST, UNKNOWN or TIMEOUT)."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason


class ErrorCounts:
    """Thread-safe tally of unexpected NVML errors by (function, error)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, function: str, error: str) -> None:
        with self._lock:
            key = (function, error)
            self._counts[key] = self._counts.get(key, 0) + 1

    def snapshot(self) -> Mapping[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


@dataclass(frozen=True)
class DriverInfo:
    """Host-wide driver facts (`nvidia-smi` header)."""

    driver_version: str | None
    cuda_driver_version: str | None  # e.g. "12.4"


@dataclass(frozen=True)
class DeviceStatic:
    """Facts read once per device when it is first seen."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str | None
    serial: str | None
    vbios_version: str | None
    compute_capability: str | None  # "9.0"
    max_clocks_hertz: Mapping[str, float]  # clock name -> Hz; unsupported clocks absent
    slowdown_temperature_celsius: float | None
    shutdown_temperature_celsius: float | None
    pcie_max_generation: int | None
    pcie_max_width: int | None


@dataclass(frozen=True)
class UtilizationSample:
    """One entry of the driver's utilization ring buffer."""

    timestamp_us: int  # driver timestamp, microseconds
    ratio: float  # 0..1 busy over the period that ends at timestamp_us


@dataclass(frozen=True)
class DeviceReading:
    """Values read every interval. `None`: unsupported or not collected."""

    utilization_ratio: float | None = None
    memory_controller_utilization_ratio: float | None = None
    encoder_utilization_ratio: float | None = None
    decoder_utilization_ratio: float | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    fan_speed_ratio: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    clocks_hertz: Mapping[str, float] = field(default_factory=dict)
    performance_state: int | None = None
    throttle_reasons: Mapping[str, bool] | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    pcie_replay_errors: int | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    ecc_corrected_errors: int | None = None
    ecc_uncorrected_errors: int | None = None
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    ecc_mode: bool | None = None


ProcessContext = Literal["compute", "graphics"]


@dataclass(frozen=True)
class GpuProcess:
    """A process holding a context on one GPU (`nvidia-smi` process table)."""

    pid: int
    context: ProcessContext
    used_memory_bytes: int | None  # None when the driver cannot tell (e.g. under MIG/vGPU)


@dataclass(frozen=True)
class ProcessUtilization:
    """Per-process utilization over the driver's last sample period."""

    pid: int
    timestamp_us: int
    sm_ratio: float
    memory_controller_ratio: float


UtilizationDomain = Literal["gpu", "memory_controller"]


@dataclass(frozen=True)
class DeviceEvent:
    """One event from NVML's event API (`nvmlEventSetWait`)."""

    uuid: str
    kind: Literal["xid", "ecc_single_bit", "ecc_double_bit", "other"]
    xid: int | None  # the Xid code for kind "xid"
    event_type: int  # NVML's nvmlEventType* bit


class EventSet(Protocol):
    """Devices registered for critical events; used by one listener thread."""

    def wait(self, timeout_ms: int) -> DeviceEvent | None:
        """The next event, or None after `timeout_ms`; raises NvmlUnavailable."""

    def close(self) -> None:
        """Free the set; never raises."""


class Backend(Protocol):
    """A source of GPU data: the real NVML library or a simulated host."""

    kind: str  # "nvml" or "simulated"
    errors: ErrorCounts

    def init(self) -> None:
        """Initialise the library; raises NvmlUnavailable."""

    def shutdown(self) -> None:
        """Release the library; never raises."""

    def driver_info(self) -> DriverInfo: ...

    def device_count(self) -> int: ...

    def device_static(self, index: int) -> DeviceStatic:
        """Identity and limits; raises DeviceLost or NvmlUnavailable."""

    def device_reading(self, index: int, collectors: frozenset[str]) -> DeviceReading:
        """The values of the enabled collectors; raises DeviceLost or NvmlUnavailable."""

    def utilization_samples(
        self, index: int, domain: UtilizationDomain, since_us: int
    ) -> Sequence[UtilizationSample] | None:
        """Buffer entries newer than `since_us`, oldest first; None when unsupported."""

    def processes(self, index: int) -> Sequence[GpuProcess] | None:
        """Compute and graphics processes on the device; None when unsupported."""

    def process_utilization(self, index: int, since_us: int) -> Sequence[ProcessUtilization] | None:
        """Per-process samples newer than `since_us`; None when unsupported."""

    def open_events(self) -> EventSet | None:
        """Register every device for Xid and ECC events.

        None when no device supports events (some virtual GPUs); raises NvmlUnavailable.
        """
