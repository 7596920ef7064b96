"""The typed interface between the sampler and a source of GPU data.

`PynvmlBackend` (`sources.nvml`, the only module that imports pynvml) and
`SimulatedBackend` (`sources.simulated`) both implement `Backend`. Everything they return
is a frozen record of `gpu_exporter.model`; `None` always means "not supported by this
device or driver" and its series is left out.

Errors are classified once, in the backend, into the exceptions below:

- `NvmlUnavailable`: NVML as a whole is down (library missing, driver not loaded,
  uninitialised, version mismatch). The exporter serves `gpu_exporter_nvml_up 0` and
  re-initialises with backoff.
- `DeviceLost`: one device is gone (GPU_IS_LOST, UNKNOWN, TIMEOUT). It is reported
  `gpu_up 0`; the other devices keep reporting.
- Anything else is counted in `ErrorCounts` and the affected field is `None`.

Each backend reads a device through a `DeviceReader`, one method per collector; the
assembly of those readings into a `DeviceReading` is the same for every backend and
lives here, in `read_device`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from gpu_exporter.model import (
    CallTotals,
    ClocksReading,
    DeviceEvent,
    DeviceReading,
    DeviceStatic,
    DriverInfo,
    EccReading,
    GpmReading,
    GpuProcess,
    HealthReading,
    HostProcess,
    MemoryReading,
    MigReading,
    ModesReading,
    NvLinkReading,
    PcieReading,
    PcieThroughputReading,
    PowerReading,
    ProcessUtilization,
    TemperatureReading,
    UtilizationDomain,
    UtilizationReading,
    UtilizationSample,
)

SLOW_REFRESH_SECONDS = 60.0
"""How often slow values are re-read (limits, settings, quiet engines, MIG layout); they
are also re-read after NVML re-initialises."""

COUNTER_MAX_AGE_SECONDS = 30.0
"""The longest the driver's dear counters (energy, the ECC, PCIe and clocks-event counts)
go unread (`sources/nvml/counter_fields.py`): issue 42, each at least every 30 s."""


class NvmlUnavailable(Exception):
    """NVML as a whole cannot be used; `error` is a short machine-readable cause."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason


LOST = "gpu_is_lost"
"""DeviceLost.error of a GPU NVML says is lost (NVML_ERROR_GPU_IS_LOST): off the bus."""


class DeviceLost(Exception):
    """One device stopped answering (GPU_IS_LOST, UNKNOWN or TIMEOUT); `error` names the
    NVML error in snake case (LOST for GPU_IS_LOST)."""

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


class CallUsage:
    """Thread-safe tally of NVML calls and the seconds spent inside them, by function:
    what the driver costs the exporter (`gpu_exporter_nvml_call_seconds_total`).

    The seconds are wall time from the call's entry to its return, taken with the
    monotonic clock (a few tens of nanoseconds a read, where the thread's CPU clock is a
    system call): a driver that polls its firmware spends them on the calling thread's
    CPU, a wedged one waits them out. `nvmlEventSetWait_v2` waits for events by design:
    its seconds are waiting, not work. `since` is the monotonic time counting began."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, list[float]] = {}  # function -> [calls, seconds]
        self.since = monotonic()

    def add(self, function: str, seconds: float) -> None:
        with self._lock:
            totals = self._totals.get(function)
            if totals is None:
                self._totals[function] = [1, seconds]
            else:
                totals[0] += 1
                totals[1] += seconds

    def snapshot(self) -> Mapping[str, CallTotals]:
        with self._lock:
            return {f: CallTotals(int(t[0]), t[1]) for f, t in self._totals.items()}


class DeviceReader(Protocol):
    """Reads one device in one interval: one method per collector."""

    def utilization(self) -> UtilizationReading: ...

    def memory(self) -> MemoryReading: ...

    def temperature(self) -> TemperatureReading: ...

    def power(self) -> PowerReading: ...

    def clocks(self) -> ClocksReading: ...

    def pcie(self) -> PcieReading: ...

    def pcie_throughput(self) -> PcieThroughputReading: ...

    def ecc(self) -> EccReading: ...

    def modes(self) -> ModesReading: ...

    def gpm(self) -> GpmReading | None:
        """GPM metrics since the last call; None where GPM is unsupported or not ready."""

    def nvlink(self) -> NvLinkReading | None:
        """Every NVLink link; None on boards without NVLink."""

    def mig(self) -> MigReading | None:
        """MIG devices and GPU instances; None while MIG is off."""

    def health(self) -> HealthReading:
        """The driver's recovery action and the GPU's NVLink fabric registration."""


def read_device(reader: DeviceReader, collectors: Collection[str]) -> DeviceReading:
    """The readings of the enabled collectors, each from its own reader method."""
    return DeviceReading(
        utilization=reader.utilization() if "utilization" in collectors else None,
        memory=reader.memory() if "memory" in collectors else None,
        temperature=reader.temperature() if "temperature" in collectors else None,
        power=reader.power() if "power" in collectors else None,
        clocks=reader.clocks() if "clocks" in collectors else None,
        pcie=reader.pcie() if "pcie" in collectors else None,
        pcie_throughput=(reader.pcie_throughput() if "pcie-throughput" in collectors else None),
        ecc=reader.ecc() if "ecc" in collectors else None,
        modes=reader.modes() if "modes" in collectors else None,
        gpm=reader.gpm() if "gpm" in collectors else None,
        nvlink=reader.nvlink() if "nvlink" in collectors else None,
        mig=reader.mig() if "mig" in collectors else None,
        health=reader.health() if "health" in collectors else None,
    )


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
    usage: CallUsage  # NVML calls and their seconds, by function (none when simulated)

    def init(self) -> None:
        """Initialise the library; raises NvmlUnavailable."""

    def shutdown(self) -> None:
        """Release the library; never raises."""

    def driver_info(self) -> DriverInfo: ...

    def device_count(self) -> int: ...

    def device_static(self, index: int) -> DeviceStatic:
        """Identity and limits; raises DeviceLost or NvmlUnavailable."""

    def device_reading(self, index: int, collectors: frozenset[str]) -> DeviceReading:
        """The readings of the enabled collectors; raises DeviceLost or NvmlUnavailable."""

    def utilization_samples(
        self, index: int, domain: UtilizationDomain, since_us: int
    ) -> Sequence[UtilizationSample] | None:
        """Buffer entries newer than `since_us`, oldest first; None when unsupported."""

    def processes(self, index: int, *, in_use: bool = False) -> Sequence[GpuProcess] | None:
        """Compute and graphics processes on the device (under MIG, from each MIG device,
        with its GPU and compute instance); None when unsupported. `in_use`: the GPU is
        not idle (`sampling/buffer_reads.py`), so an empty compute list is no reason to
        leave the graphics list to its slow cadence."""

    def process_utilization(self, index: int, since_us: int) -> Sequence[ProcessUtilization] | None:
        """Per-process samples newer than `since_us`; None when unsupported."""

    def open_events(self) -> EventSet | None:
        """Register every device for Xid and ECC events.

        None when no device supports events (some virtual GPUs); raises NvmlUnavailable.
        """

    def host_process(self, pid: int) -> HostProcess | None:
        """The host side of `pid` when the backend itself knows it (simulated tenants);
        None: ask /proc."""
