"""`PynvmlBackend`: the real NVIDIA driver, through `pynvml` (nvidia-ml-py).

Every call goes through `NvmlCalls` (`calls.py`), the one place NVML's return codes are
classified. Per device the backend keeps a `_DeviceState`: its handle, the calls it
answered as unsupported, its GPM streams, its MIG devices, its single-call buffers
(`buffers.py`) and its slow values.

What is read when (every NVML call is an ioctl into the driver, so the count matters):

- once per initialisation: the identity (UUID, name, PCI bus id, serial, VBIOS, compute
  capability, minor number);
- every SLOW_REFRESH_SECONDS (and after re-initialisation, when the state is rebuilt):
  the limits of `device_static` (max clocks, temperature thresholds, max PCIe link, and
  in one field-value call the NVLink link count and the T.Limit thresholds), the enforced
  power limit, persistence and MIG mode, and the values
  `_SLOW_WHILE` names while they are quiet: encoder and decoder utilization while 0, the
  current PCIe link while at its maximum, the graphics process list while empty (read at
  once when process utilization shows a PID no list has), and the NVLink error counters
  that only nvmlDeviceGetNvLinkErrorCounter has (one call per link and counter), the
  T.Limit margin while the GPU temperature stands still (re-read in the interval it moves),
  and the NVLink fabric (`fabric.py`: one call, also read at the first interval);
- as their measured cost allows, at least every 30 s (`counter_fields.py`): the counter
  fields (energy, ECC, row-remap and PCIe error counts, clocks-event durations), in the
  interval's field call when due;
- as their coverage needs (`sampling/buffer_reads.py`, decided by the sampler): the
  utilization sample buffers, with `nvmlDeviceGetUtilizationRates` for the gauges in the
  intervals between;
- every interval: the rest, fields in one `nvmlDeviceGetFieldValues` batch, the process
  lists and process utilization with one call each.

Every call is timed (`NvmlCalls.timed`, `CallUsage`): what the driver costs the exporter.

A slow value that fails is dropped, not kept: it is absent until a read answers again.

A NOT_SUPPORTED answer is remembered (not asked every interval), but forgotten every
SLOW_REFRESH_SECONDS, when MIG mode changes and when the device is lost: real drivers
answer NOT_SUPPORTED by mode (a MIG parent has no utilization). A GPU with MIG on reads
per MIG device its process list (`mig_lists.py`) or, where that list cannot show it is
the same instance, its UUID, and the free capacity while it has room for another GPU
instance (`mig.unchanged`), so a repartition is seen within one interval, an instance
made again with the same profile included; a GPU without MIG makes none of these calls.
Its MIG devices, with each GPU instance's placement (`placement.py`), are enumerated
then and every SLOW_REFRESH_SECONDS.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from gpu_exporter.model import (
    CLOCK_EVENT_REASONS,
    CLOCK_NAMES,
    DIRECTIONS,
    NVLINK_ERRORS,
    PCIE_ERRORS,
    THROTTLE_REASONS,
    TLIMIT_THRESHOLDS,
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
    MigInstanceReading,
    MigReading,
    ModesReading,
    NvLinkReading,
    NvLinkState,
    PcieReading,
    PcieThroughputReading,
    PowerReading,
    ProcessUtilization,
    TemperatureReading,
    UtilizationDomain,
    UtilizationReading,
    UtilizationSample,
)
from gpu_exporter.records import Record
from gpu_exporter.sources.backend import (
    SLOW_REFRESH_SECONDS,
    CallUsage,
    DeviceLost,
    ErrorCounts,
    NvmlUnavailable,
    read_device,
)
from gpu_exporter.sources.nvml import buffers, fabric, fields, gpm, mig, nvlink5, platform, structs
from gpu_exporter.sources.nvml.calls import (
    NO_QUIET,
    NOT_FOUND,
    Device,
    NvmlCalls,
    Serialiser,
    code_name,
    text,
)
from gpu_exporter.sources.nvml.counter_fields import CounterCadence
from gpu_exporter.sources.nvml.mig_lists import MigProcessLists, ReadList
from gpu_exporter.sources.nvml.nvlink_totals import LinkErrorTotals, recovery_totals

T = TypeVar("T")
KIB = 1024
FIELD_VALUES_WAIT_SECONDS = 1.0
"""How long a device waits for another's nvmlDeviceGetFieldValues call to return before
taking that call for hung and going on (`calls.Serialiser`)."""

_CLOCK_IDS: dict[str, int] = {
    "graphics": pynvml.NVML_CLOCK_GRAPHICS,
    "sm": pynvml.NVML_CLOCK_SM,
    "memory": pynvml.NVML_CLOCK_MEM,
    "video": pynvml.NVML_CLOCK_VIDEO,
}

_CLOCK_KEYS = {clock: f"clock_{clock}" for clock in CLOCK_NAMES}  # remembered as unsupported
# (name, field key) of the counters read into every reading, the keys made once
_CLOCK_EVENT_FIELDS = tuple((r, fields.clock_event_key(r)) for r in CLOCK_EVENT_REASONS)
_PCIE_ERROR_FIELDS = tuple((e, fields.pcie_error_key(e)) for e in PCIE_ERRORS)
_SAMPLING_TYPES: dict[str, int] = {
    "gpu": pynvml.NVML_GPU_UTILIZATION_SAMPLES,
    "memory_controller": pynvml.NVML_MEMORY_UTILIZATION_SAMPLES,
}
_TIMESTAMP = operator.itemgetter(0)  # of a UtilizationSample: its timestamp_us


@dataclass(repr=False)
class _DeviceState(Record):
    """What the backend keeps for one NVML index until NVML is re-initialised."""

    device: Device
    identity: dict[str, Any] | None = None  # key -> answer, read once
    pcie_max: tuple[int | None, int | None] = (None, None)  # (generation, width)
    nvlink_links: int = 0  # from the static read
    nvlink_totals: LinkErrorTotals = field(default_factory=LinkErrorTotals)  # error sums
    nvlink_recoveries: LinkErrorTotals = field(default_factory=recovery_totals)  # NVLink5
    # the last NVLink reading's inputs (per-link field values, error counters) and what
    # they made (link states, error totals): the same inputs make the same again
    nvlink_last: tuple[Any, ...] | None = None
    # key -> (due again at, value): the slow cadence decided once, when the value is kept
    slow: dict[str, tuple[float, Any]] = field(default_factory=dict)
    buffers: dict[str, buffers.Buffer] = field(default_factory=dict)  # key -> C array
    newest_samples: dict[str, float] = field(default_factory=dict)  # domain -> ratio, this interval
    listed_pids: set[int] = field(default_factory=set)  # in the last process lists
    gpm_supported: bool | None = None  # asked once
    gpm_streams: dict[str, gpm.GpmStream] = field(default_factory=dict)  # key -> stream
    mig_slots: tuple[mig.MigSlot, ...] = ()
    mig_read_at: float | None = None  # monotonic time of the last enumeration
    mig_layout: mig.Layout | None = None  # what `mig.layout` answered at it
    mig_lists: MigProcessLists = field(default_factory=MigProcessLists)
    interval: int = 0  # device readings so far
    mig_checked: int = -1  # the interval whose layout was last checked
    probed_at: float | None = None  # when the NOT_SUPPORTED answers were last forgotten
    answered: set[str] = field(default_factory=set)  # sample buffers that answered
    counters: CounterCadence = field(default_factory=CounterCadence)  # counter fields
    reading_at: float | None = None  # monotonic time of the last device reading

    def close(self) -> None:
        for stream in self.gpm_streams.values():
            stream.close()
        self.gpm_streams.clear()

    def forget_unsupported(self) -> None:
        """Ask again everything the device (or its MIG devices, or GPM) answered as
        unsupported."""
        self.device.forget()
        for slot in self.mig_slots:
            slot.device.forget()
        for stream in self.gpm_streams.values():
            stream.forget()
        self.gpm_supported = None


_GRAPHICS_KEY = "graphics_processes"  # the graphics list's entry in a device's slow values


def _graphics_due(state: _DeviceState) -> None:
    """The graphics list is read at the next ask, whatever its slow cadence."""
    state.slow.pop(_GRAPHICS_KEY, None)


def _always(_value: Any) -> bool:
    """A setting: re-read on the slow cadence whatever it says."""
    return True


class PynvmlBackend:
    """The real NVIDIA driver, through `pynvml`. Safe to call from several threads:
    each device is read by one thread at a time."""

    kind = "nvml"

    def __init__(
        self,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        field_values_wait_seconds: float | None = FIELD_VALUES_WAIT_SECONDS,
    ) -> None:
        """`field_values_wait_seconds`: None lets devices call nvmlDeviceGetFieldValues
        at the same time (see FIELD_VALUES_WAIT_SECONDS)."""
        self.errors = ErrorCounts()
        serialised = {}
        if field_values_wait_seconds is not None:
            function = "nvmlDeviceGetFieldValues"
            serialised[function] = Serialiser(
                field_values_wait_seconds, lambda: self.errors.add(function, "lock_wait_timeout")
            )
        self.usage = CallUsage()
        self.calls = NvmlCalls(self.errors, serialised, self.usage)
        self._monotonic = monotonic  # GPM elapsed time and MIG refreshes
        self._lock = threading.Lock()
        self._devices: dict[int, _DeviceState] = {}
        self._event_indexes: dict[int, int] = {}  # registered device handle -> its index
        self._initialised = False
        self._branch: int | None = None  # the driver's major version, once asked

    # Library lifecycle -------------------------------------------------------------

    def init(self) -> None:
        """Initialise the library; every failure here means NVML is unavailable."""
        try:
            self.calls.timed("nvmlInit", pynvml.nvmlInit)
        except pynvml.NVMLError as error:
            code = getattr(error, "value", None)
            reason = str(error)
            if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                reason = "libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)"
            raise NvmlUnavailable(code_name(code), reason) from error
        with self._lock:
            self._devices.clear()
            self._initialised = True
            self._branch = None  # the library may be another driver's now

    def shutdown(self) -> None:
        """Free what was allocated (GPM samples), then shut NVML down; never raises."""
        with self._lock:
            if not self._initialised:
                return
            self._initialised = False
            states, self._devices = list(self._devices.values()), {}
        for state in states:
            state.close()
        try:
            self.calls.call("nvmlShutdown", pynvml.nvmlShutdown)
        except (NvmlUnavailable, DeviceLost):
            pass

    def driver_info(self) -> DriverInfo:
        c = self.calls
        driver = c.call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
        cuda = c.call("nvmlSystemGetCudaDriverVersion_v2", pynvml.nvmlSystemGetCudaDriverVersion_v2)
        cuda_text = None
        if isinstance(cuda, int) and cuda > 0:
            cuda_text = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        version = text(driver) if driver is not None else None
        self._branch = _branch(version)
        return DriverInfo(driver_version=version, cuda_driver_version=cuda_text)

    def driver_branch(self) -> int | None:
        """The driver's major version (590 for 590.48.01), which decides the ids of some
        fields (`fields.clock_event_fields`): from `driver_info`, else asked once per
        initialisation; None when the driver does not say."""
        if self._branch is None:
            driver = self.calls.call(
                "nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion
            )
            self._branch = _branch(text(driver) if driver is not None else None)
        return self._branch

    def device_count(self) -> int:
        count = self.calls.call(
            "nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount, on_error=NvmlUnavailable
        )
        if count is None:
            raise NvmlUnavailable("not_supported", "nvmlDeviceGetCount: not supported")
        return int(count)

    def _state(self, index: int) -> _DeviceState:
        with self._lock:
            state = self._devices.get(index)
        if state is not None:
            return state
        handle = self.calls.call(
            "nvmlDeviceGetHandleByIndex",
            pynvml.nvmlDeviceGetHandleByIndex,
            index,
            on_error=DeviceLost,
        )
        if handle is None:
            raise DeviceLost("not_supported", f"nvmlDeviceGetHandleByIndex({index}): no handle")
        state = _DeviceState(Device(handle))
        with self._lock:
            self._devices[index] = state
        return state

    # Static facts ------------------------------------------------------------------

    def _identity(self, index: int, state: _DeviceState) -> dict[str, Any]:
        """What cannot change while the driver is loaded, asked once per initialisation."""
        if state.identity is not None:
            return state.identity
        d = state.device
        q = self.calls.query
        uuid = q(d, "uuid", pynvml.nvmlDeviceGetUUID)
        if uuid is None:
            raise DeviceLost("no_uuid", f"GPU {index} did not report a UUID")
        state.identity = {
            "uuid": uuid,
            "name": q(d, "name", pynvml.nvmlDeviceGetName),
            "pci": q(d, "pci", pynvml.nvmlDeviceGetPciInfo),
            "serial": q(d, "serial", pynvml.nvmlDeviceGetSerial),
            "vbios": q(d, "vbios", pynvml.nvmlDeviceGetVbiosVersion),
            "cc": q(d, "cuda_compute_capability", pynvml.nvmlDeviceGetCudaComputeCapability),
            "minor": q(d, "minor_number", pynvml.nvmlDeviceGetMinorNumber),
        }
        return state.identity

    def device_static(self, index: int) -> DeviceStatic:
        """The identity (asked once per initialisation) and the limits (asked on every
        call: the sampler calls this every SLOW_REFRESH_SECONDS)."""
        state = self._state(index)
        d = state.device
        q = self.calls.query
        ident = self._identity(index, state)
        uuid, name, pci = ident["uuid"], ident["name"], ident["pci"]
        serial, vbios, cc, minor = ident["serial"], ident["vbios"], ident["cc"], ident["minor"]
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
        state.pcie_max = (
            int(max_gen) if max_gen is not None else None,
            int(max_width) if max_width is not None else None,
        )
        answers = fields.read_fields(self.calls, d, fields.STATIC_REQUESTS) or {}
        links = answers.get("nvlink_links")
        state.nvlink_links = int(links) if links else 0
        tlimit = {
            name: value
            for name in TLIMIT_THRESHOLDS
            if (value := answers.get(fields.tlimit_key(name))) is not None
        }
        serial_text = text(serial) if serial is not None else None
        return DeviceStatic(
            index=index,
            uuid=text(uuid),
            name=text(name) if name is not None else "",
            pci_bus_id=text(pci.busId) if pci is not None else None,
            serial=serial_text if serial_text not in ("", "0") else None,
            vbios_version=text(vbios) if vbios is not None else None,
            compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
            max_clocks_hertz=max_clocks,
            slowdown_temperature_celsius=float(slowdown) if slowdown is not None else None,
            shutdown_temperature_celsius=float(shutdown) if shutdown is not None else None,
            pcie_max_generation=int(max_gen) if max_gen is not None else None,
            pcie_max_width=int(max_width) if max_width is not None else None,
            nvlink_links=state.nvlink_links or None,
            minor_number=int(minor) if minor is not None else None,
            tlimit_thresholds_celsius=tlimit,
            platform=platform.read_platform(self.calls, d),
        )

    # Dynamic values ----------------------------------------------------------------

    def device_reading(self, index: int, collectors: frozenset[str]) -> DeviceReading:
        state = self._state(index)
        state.interval += 1
        now = self._monotonic()
        if state.probed_at is None:
            state.probed_at = now
        elif now - state.probed_at >= SLOW_REFRESH_SECONDS:
            state.forget_unsupported()  # support changes with mode: ask again
            state.probed_at = now
        try:
            reader = _NvmlReader(self, state, collectors)
            return read_device(reader, collectors)
        except DeviceLost:
            state.slow.clear()  # a device that comes back is asked afresh
            state.counters.forget()
            state.forget_unsupported()
            raise
        finally:
            state.newest_samples.clear()

    def now(self) -> float:
        """The backend's monotonic clock (slow cadences, GPM, MIG refreshes)."""
        return self._monotonic()

    def buffer(self, state: _DeviceState, key: str, make: Callable[[], buffers.Buffer]) -> Any:
        """The device's C array for `key`, made on first use."""
        buffer = state.buffers.get(key)
        if buffer is None:
            buffer = state.buffers[key] = make()
        return buffer

    def mig_slots(self, state: _DeviceState, lists: bool) -> tuple[mig.MigSlot, ...]:
        """The device's MIG devices: enumerated every mig.REFRESH_SECONDS, and at once
        when the check a GPU with MIG on makes every interval (`mig.unchanged`) sees a
        change. With `lists` (the process collector is on) the check reads the MIG
        devices' process lists for the interval first (`mig_lists.py`)."""
        now = self._monotonic()
        due = state.mig_read_at is None or now - state.mig_read_at >= mig.REFRESH_SECONDS
        known = state.mig_layout
        if not due and known and _mig_enabled(known) and state.mig_checked != state.interval:
            state.mig_checked = state.interval
            slots, read = state.mig_slots, self._mig_list_reader(state)
            same = state.mig_lists.take(state.interval, slots, read) if lists else frozenset()
            due = not mig.unchanged(self.calls, state.device, known, slots, same)
        if due:
            self._enumerate_mig(state, now)
        return state.mig_slots

    def _enumerate_mig(self, state: _DeviceState, now: float) -> None:
        """Enumerate the MIG devices; forget what MIG mode decided (unsupported answers,
        slow values) when it changed, and free the GPM streams of instances now gone."""
        before = state.mig_layout
        state.mig_layout = layout = mig.layout(self.calls, state.device)
        state.mig_checked = state.interval
        enabled = _mig_enabled(layout)
        state.mig_slots = mig.enumerate_mig(self.calls, state.device) if enabled else ()
        state.mig_read_at = now
        if before is not None and layout is not None and before[0] != layout[0]:
            state.forget_unsupported()
            state.slow.clear()
            state.counters.forget()
        live = {_mig_stream_key(slot) for slot in state.mig_slots}
        for key in [k for k in state.gpm_streams if k.startswith(_MIG_STREAM) and k not in live]:
            state.gpm_streams.pop(key).close()
        # and the process-list arrays of MIG devices now gone (one per UUID ever seen)
        uuids = {slot.info.uuid for slot in state.mig_slots}
        for key in [k for k in state.buffers if k.startswith(_MIG_BUFFER)]:
            if key[len(_MIG_BUFFER) :].split("/", 1)[0] not in uuids:
                del state.buffers[key]

    def gpm_supported(self, state: _DeviceState) -> bool:
        """Does the device support GPM? Asked once a slow period (`forget_unsupported`)."""
        if state.gpm_supported is None:
            state.gpm_supported = gpm.supported(self.calls, state.device)
        return state.gpm_supported

    def gpm_stream(
        self, state: _DeviceState, slot: mig.MigSlot | None = None
    ) -> gpm.GpmStream | None:
        """The GPM stream of the device, or of the GPU instance of a MIG device (known by
        its UUID: instance ids are reused after a repartition); None without GPM."""
        if not self.gpm_supported(state):
            return None
        key = "gpm" if slot is None else _mig_stream_key(slot)
        stream = state.gpm_streams.get(key)
        if stream is None:
            handle = state.device.handle
            take: Callable[[Any], Any]
            if slot is None:

                def take(sample: Any) -> Any:
                    return pynvml.nvmlGpmSampleGet(handle, sample)

                metrics = gpm.DEVICE_METRICS
            else:
                gpu_instance = slot.info.gpu_instance

                def take(sample: Any) -> Any:
                    return pynvml.nvmlGpmMigSampleGet(handle, gpu_instance, sample)

                metrics = gpm.INSTANCE_METRICS
            stream = gpm.GpmStream(
                self.calls, state.device, key, take, metrics, monotonic=self._monotonic
            )
            state.gpm_streams[key] = stream
        return stream

    def utilization_samples(
        self, index: int, domain: UtilizationDomain, since_us: int
    ) -> Sequence[UtilizationSample] | None:
        """One `nvmlDeviceGetSamples` call into the device's buffer for `domain`. The
        newest entry is also this interval's utilization ratio (see `_NvmlReader`)."""
        state = self._state(index)
        state.newest_samples.pop(domain, None)
        d = state.device
        key = f"samples_{domain}"
        result = self.calls.call(
            "nvmlDeviceGetSamples",
            buffers.samples,
            d.handle,
            self.buffer(state, key, buffers.sample_buffer),
            _SAMPLING_TYPES[domain],
            since_us,
            device=d,
            key=key,
            quiet=NOT_FOUND,
        )
        if result is None:
            if key in d.unsupported and key in state.answered:
                state.answered.discard(key)
                state.mig_read_at = None  # it answered before: MIG may have come on
            return None if key in d.unsupported else []
        state.answered.add(key)
        # a busy GPU's read holds about a hundred entries: one comprehension, a C sort
        out = [
            UtilizationSample(stamp, percent / 100.0 if percent < 100 else 1.0)
            for stamp, percent in result
            if stamp > since_us
        ]
        out.sort(key=_TIMESTAMP)
        if out:
            state.newest_samples[domain] = out[-1].ratio
        return out

    def processes(self, index: int, *, in_use: bool = False) -> Sequence[GpuProcess] | None:
        state = self._state(index)
        slots = self.mig_slots(state, lists=True)
        if slots:  # under MIG the parent's list has no memory: ask each MIG device
            read = self._mig_list_reader(state)
            return state.mig_lists.processes(state.interval, self.now(), slots, read)
        d = state.device
        compute = self._process_list(state, d, "compute_processes", _COMPUTE_PROCESSES)
        if in_use and not compute:
            # something holds the GPU and no compute process is listed: a graphics one,
            # if any, is found now (a few microseconds), not from per-process samples
            _graphics_due(state)
        graphics = self._graphics_processes(state)
        if compute is None and graphics is None:
            state.listed_pids = set()
            return None
        out: list[GpuProcess] = []
        for context, procs in (("compute", compute or []), ("graphics", graphics or [])):
            out += [
                GpuProcess(
                    pid=p.pid,
                    context="compute" if context == "compute" else "graphics",
                    used_memory_bytes=p.used_memory_bytes,
                )
                for p in procs
            ]
        state.listed_pids = {p.pid for p in out}
        return out

    def _graphics_processes(self, state: _DeviceState) -> list[buffers.ProcessEntry] | None:
        """The graphics list: every interval while it lists a process; while empty, every
        SLOW_REFRESH_SECONDS, or at once when process utilization saw an unlisted PID or
        the GPU is in use with no compute process listed."""
        key = _GRAPHICS_KEY
        return self.slow(
            state,
            key,
            lambda: self._process_list(state, state.device, key, _GRAPHICS_PROCESSES),
            quiet_if=lambda procs: not procs,
        )

    def slow(
        self,
        state: _DeviceState,
        key: str,
        read: Callable[[], T | None],
        quiet_if: Callable[[T], bool] = _always,
    ) -> T | None:
        """`read()` on the slow cadence: re-read every SLOW_REFRESH_SECONDS while
        `quiet_if(value)` holds (by default always: a setting), and every interval while it
        does not. A failed read drops the value: it is absent, never a stale copy."""
        now = self.now()
        cached = state.slow.get(key)
        if cached is not None and now < cached[0]:
            return cached[1]  # type: ignore[no-any-return]
        value = read()
        if value is not None and quiet_if(value):
            state.slow[key] = (now + SLOW_REFRESH_SECONDS, value)
        else:
            state.slow.pop(key, None)
        return value

    def _mig_list_reader(self, state: _DeviceState) -> ReadList:
        """Reads a MIG device's compute list; a destroyed one's handle answers None."""
        return lambda slot: self._process_list(
            state, slot.device, "compute_processes", _COMPUTE_PROCESSES, slot.info.uuid
        )

    def _process_list(
        self,
        state: _DeviceState,
        d: Device,
        key: str,
        symbols: tuple[str, str],
        mig_uuid: str | None = None,
    ) -> list[buffers.ProcessEntry] | None:
        """The `_v3` process list (R510+), else `_v2` (R470 and older LTS branches), in
        one call into a buffer of `state` (`d` is the device, or its MIG device `mig_uuid`)."""
        buffer = self.buffer(
            state, f"{_MIG_BUFFER}{mig_uuid}/{key}" if mig_uuid else key, buffers.process_buffer
        )
        for version, symbol in zip(("", "_v2"), symbols, strict=True):
            procs = self.calls.call(
                symbol,
                buffers.process_list,
                d.handle,
                buffer,
                symbol,
                device=d,
                key=key + version,
                quiet=mig.GONE if mig_uuid else NO_QUIET,
            )
            if procs is not None or key + version not in d.unsupported:
                return procs
        return None

    def process_utilization(self, index: int, since_us: int) -> Sequence[ProcessUtilization] | None:
        """One `nvmlDeviceGetProcessUtilization` call into the device's buffer. A PID that
        no process list named makes the graphics list due at the next read."""
        state = self._state(index)
        d = state.device
        key = "process_utilization"
        samples = self.calls.call(
            "nvmlDeviceGetProcessUtilization",
            buffers.process_utilization,
            d.handle,
            self.buffer(state, key, buffers.process_sample_buffer),
            since_us,
            device=d,
            key=key,
            quiet=NOT_FOUND,
        )
        if samples is None:
            return None if key in d.unsupported else []
        out = [
            ProcessUtilization(
                pid=s.pid,
                timestamp_us=s.timestamp_us,
                sm_ratio=min(1.0, s.sm_percent / 100.0),
                memory_controller_ratio=min(1.0, s.memory_percent / 100.0),
            )
            for s in samples
            if s.timestamp_us > since_us
        ]
        if any(u.pid not in state.listed_pids for u in out):
            _graphics_due(state)
        return out

    def host_process(self, pid: int) -> HostProcess | None:
        """The real driver knows nothing of the host side: /proc is asked."""
        return None

    # Events ------------------------------------------------------------------------

    def open_events(self) -> PynvmlEventSet | None:
        """Create an event set and register every device that supports Xid/ECC events
        (and MIG configuration changes, which the backend acts on itself)."""
        event_set = self.calls.call(
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
        c = self.calls
        for index in range(self.device_count()):
            try:
                handle = self._state(index).device.handle
                supported = c.call(
                    "nvmlDeviceGetSupportedEventTypes",
                    pynvml.nvmlDeviceGetSupportedEventTypes,
                    handle,
                )
                wanted = int(supported or 0) & _WANTED_EVENTS
                if not wanted:
                    continue
                uuid = c.call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle)
                if uuid is None:
                    continue
                registered = c.call(
                    "nvmlDeviceRegisterEvents", _register_events, handle, wanted, event_set
                )
                if registered:
                    uuids[_handle_key(handle)] = text(uuid)
                    self._event_indexes[_handle_key(handle)] = index
            except DeviceLost:
                continue  # the sampler reports it down; register the others
        return uuids

    def wait_event(
        self, event_set: Any, uuids: dict[int, str], timeout_ms: int
    ) -> DeviceEvent | None:
        """The next event on `event_set`, or None after `timeout_ms`."""
        try:
            data = self.calls.call(
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
        if event_type == pynvml.nvmlEventMigConfigChange:
            self._mig_config_changed(data.device)
            return None  # the backend's own business: no event for the listener
        kind = _EVENT_KINDS.get(event_type, "other")
        return DeviceEvent(
            uuid=uuids.get(_handle_key(data.device), ""),
            kind=kind,  # type: ignore[arg-type]
            xid=int(data.eventData) if kind == "xid" else None,
            event_type=event_type,
        )

    def _mig_config_changed(self, handle: Any) -> None:
        """nvmlEventMigConfigChange on `handle`'s GPU: enumerate its MIG devices at its next
        reading. An addition only (issue 38): no MIG GPU has shown that the driver raises
        it for every change, so the check each interval (`mig.unchanged`) stays; this
        spares an unprivileged exporter the wait for the next refresh to see an instance
        made in free space. Set from the listener's thread, read by the device's reader:
        one attribute store."""
        index = self._event_indexes.get(_handle_key(handle))
        with self._lock:
            state = self._devices.get(index) if index is not None else None
        if state is not None:
            state.mig_read_at = None

    def free_event_set(self, event_set: Any) -> None:
        try:
            self.calls.call("nvmlEventSetFree", pynvml.nvmlEventSetFree, event_set)
        except (NvmlUnavailable, DeviceLost):
            pass  # the library is gone, and the set with it


class _NvmlReader:
    """One device's readings in one interval; the field values are fetched once."""

    def __init__(
        self, backend: PynvmlBackend, state: _DeviceState, collectors: Collection[str]
    ) -> None:
        self._backend = backend
        self._state = state
        self._d = state.device
        self._collectors = collectors
        self._now = backend.now()  # the device read's clock: the fields' and slow cadences'
        branch = backend.driver_branch()
        requests = fields.device_requests(collectors, branch)
        # NVLink bytes from GPM where it counts them, else from the driver's data counters
        self._gpm_nvlink: frozenset[str] = frozenset()
        if "nvlink" in collectors and state.nvlink_links:
            if "gpm" in collectors and (stream := backend.gpm_stream(state)) is not None:
                self._gpm_nvlink = stream.nvlink_directions()
            data = self._gpm_nvlink != _DIRECTIONS
            per_link = data and fields.nvlink_data_key("tx") in self._d.unsupported_fields
            requests += fields.nvlink_requests(
                state.nvlink_links, data=data, per_link_data=per_link
            )
        counters = fields.counter_requests(collectors, branch)
        if "nvlink" in collectors and state.nvlink_links:  # NVLink5's, on the same cadence
            counters += nvlink5.requests(state.nvlink_links)
        self._fields = self._read_fields(requests, counters)

    def _read_fields(
        self, requests: tuple[fields.FieldRequest, ...], counters: tuple[fields.FieldRequest, ...]
    ) -> dict[str, float]:
        """The interval's one nvmlDeviceGetFieldValues call: `requests`, and `counters`
        when their cadence says so (`counter_fields.py`); between their reads, the
        counters' values last read (none after a call that failed as a whole). The call
        is timed for the cadence."""
        state, now = self._state, self._now
        cadence = state.counters
        step = now - state.reading_at if state.reading_at is not None else 0.0
        state.reading_at = now
        group = bool(counters) and cadence.due(now, step)
        keys = cadence.asked(now, step, _keys(counters), group=group)
        if len(keys) == len(counters):  # the common case: all of them, in their order
            wanted = counters
        else:
            asked = set(keys)
            wanted = tuple(request for request in counters if request.key in asked)
        started = time.perf_counter()
        answers = fields.read_fields(self._backend.calls, self._d, requests + wanted)
        if answers is None:
            # the call populated nothing: no counter is served from an earlier read
            # either, and they are all asked again at the next interval
            cadence.forget()
            return {}
        if group or not wanted:  # a failing counter's retry alone is no measure of cost
            cadence.note(time.perf_counter() - started, with_counters=bool(wanted))
        if group or wanted:
            cadence.read(
                now, answers, keys, self._d.unsupported_fields, step_seconds=step, group=group
            )
        return {**answers, **cadence.values}

    def _q(self, key: str, fn: Callable[..., T], *args: Any) -> T | None:
        return self._backend.calls.query(self._d, key, fn, *args)

    def _c(self, function: str, key: str, fn: Callable[..., T], *args: Any) -> T | None:
        """`fn(handle, *args)`, a `structs` read of the C `function` (the name it is
        counted under), remembered as unsupported under `key`."""
        return self._backend.calls.call(
            function, fn, self._d.handle, *args, device=self._d, key=key
        )

    def _slow(
        self, key: str, fn: Callable[..., T], *args: Any, quiet_if: Callable[[T], bool] = _always
    ) -> T | None:
        """`fn(*args)` on the backend's slow cadence (`PynvmlBackend.slow`)."""
        cached = self._state.slow.get(key)
        if cached is not None and self._now < cached[0]:  # not due: no closure made
            return cached[1]  # type: ignore[no-any-return]
        return self._backend.slow(self._state, key, lambda: self._q(key, fn, *args), quiet_if)

    def _int_field(self, key: str) -> int | None:
        value = self._fields.get(key)
        return int(value) if value is not None else None

    def _flag_field(self, key: str) -> bool | None:
        value = self._fields.get(key)
        return value != 0 if value is not None else None

    def utilization(self) -> UtilizationReading:
        """GPU and memory-controller utilization: the newest entries of the sample
        buffers read this interval, else `nvmlDeviceGetUtilizationRates`. Encoder and
        decoder: every interval while busy, every SLOW_REFRESH_SECONDS while 0."""
        newest = self._state.newest_samples
        gpu, mc = newest.get("gpu"), newest.get("memory_controller")
        if gpu is None or mc is None:
            rates = self._c(
                "nvmlDeviceGetUtilizationRates", "utilization", structs.utilization_rates
            )
            gpu = rates.gpu / 100.0 if rates is not None else None
            mc = rates.memory / 100.0 if rates is not None else None
        enc = self._slow("encoder", pynvml.nvmlDeviceGetEncoderUtilization, quiet_if=_idle)
        dec = self._slow("decoder", pynvml.nvmlDeviceGetDecoderUtilization, quiet_if=_idle)
        return UtilizationReading(
            gpu_ratio=gpu,
            memory_controller_ratio=mc,
            encoder_ratio=enc[0] / 100.0 if enc is not None else None,
            decoder_ratio=dec[0] / 100.0 if dec is not None else None,
        )

    def memory(self) -> MemoryReading:
        return _memory(self._backend.calls, self._d)

    def temperature(self) -> TemperatureReading:
        temp = None
        if _TEMPERATURE_V:  # the call nvml.h 13 names instead (R570 and newer)
            temp = self._c(
                "nvmlDeviceGetTemperatureV",
                "temperature_v",
                structs.temperature_v,
                pynvml.NVML_TEMPERATURE_GPU,
            )
        if temp is None and (not _TEMPERATURE_V or "temperature_v" in self._d.unsupported):
            temp = self._q(
                "temperature", pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU
            )
        fan = self._q("fan", pynvml.nvmlDeviceGetFanSpeed)
        return TemperatureReading(
            gpu_celsius=float(temp) if temp is not None else None,
            memory_celsius=self._fields.get("memory_temperature_celsius"),
            fan_speed_ratio=fan / 100.0 if fan is not None else None,
            tlimit_margin_celsius=self._tlimit_margin(temp),
        )

    def _tlimit_margin(self, temp: Any) -> float | None:
        """nvmlDeviceGetMarginTemperature (nvidia-smi's "GPU T.Limit Temp"), in degrees
        below T.Limit: read again in the interval the GPU temperature `temp` moves, else
        every SLOW_REFRESH_SECONDS. The margin falls as the temperature rises (temperature
        plus margin stays within a few degrees in the H100, H200 and L40S captures), and
        the budget of 16 calls per GPU and interval has no room for one more call; so a
        margin is at most a slow period old while the temperature stands still."""
        if _MARGIN_TEMPERATURE is None:
            return None
        key = "tlimit_margin"
        cached = self._state.slow.get(key)
        if cached is not None and cached[1][0] != temp:
            del self._state.slow[key]

        def read() -> tuple[Any, float] | None:
            margin = self._q(key, _MARGIN_TEMPERATURE)
            return (temp, float(margin)) if margin is not None else None

        answer = self._backend.slow(self._state, key, read)
        return answer[1] if answer is not None else None

    def power(self) -> PowerReading:
        power = self._fields.get("power_average_milliwatts")
        if power is None:
            power = self._fields.get("power_instant_milliwatts")
        if power is None:  # drivers before the power fields
            power = self._q("power", pynvml.nvmlDeviceGetPowerUsage)
        limit = self._slow("power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit)
        energy = self._fields.get("energy_millijoules")
        return PowerReading(
            watts=power / 1000.0 if power is not None else None,
            limit_watts=limit / 1000.0 if limit is not None else None,
            energy_joules=energy / 1000.0 if energy is not None else None,
        )

    def clocks(self) -> ClocksReading:
        hertz: dict[str, float] = {}
        for clock, key in _CLOCK_KEYS.items():
            mhz = self._c("nvmlDeviceGetClockInfo", key, structs.clock_info, _CLOCK_IDS[clock])
            if mhz is not None:
                hertz[clock] = mhz * 1e6
        pstate = self._c("nvmlDeviceGetPerformanceState", "pstate", structs.performance_state)
        mask = self._c(
            "nvmlDeviceGetCurrentClocksEventReasons",
            "clocks_event_reasons",
            structs.clocks_event_reasons,
        )
        if mask is None and "clocks_event_reasons" in self._d.unsupported:
            # before R535 the same bits come from the call under its older name
            mask = self._q(
                "clocks_throttle_reasons", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
            )
        return ClocksReading(
            hertz=hertz,
            performance_state=(
                int(pstate)
                if pstate is not None and int(pstate) != pynvml.NVML_PSTATE_UNKNOWN
                else None
            ),
            throttle_reasons=_throttle_reasons(int(mask)) if mask is not None else None,
            event_seconds={
                reason: ns / 1e9
                for reason, key in _CLOCK_EVENT_FIELDS
                if (ns := self._fields.get(key)) is not None
            },
        )

    def pcie(self) -> PcieReading:
        max_gen, max_width = self._state.pcie_max
        gen = self._slow(
            "pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration, quiet_if=_at(max_gen)
        )
        width = self._slow(
            "pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth, quiet_if=_at(max_width)
        )
        return PcieReading(
            generation=int(gen) if gen is not None else None,
            width=int(width) if width is not None else None,
            replay_errors=self._int_field("pcie_replay_errors"),
            errors={
                error: int(count)
                for error, key in _PCIE_ERROR_FIELDS
                if (count := self._fields.get(key)) is not None
            },
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
        persistence = self._slow("persistence", pynvml.nvmlDeviceGetPersistenceMode)
        mig_mode = self._slow("mig", pynvml.nvmlDeviceGetMigMode)
        return ModesReading(
            persistence=(
                persistence == pynvml.NVML_FEATURE_ENABLED if persistence is not None else None
            ),
            mig=mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE if mig_mode is not None else None,
            ecc=self._flag_field("ecc_mode"),
        )

    def gpm(self) -> GpmReading | None:
        stream = self._backend.gpm_stream(self._state)
        return stream.read() if stream is not None else None

    def health(self) -> HealthReading:
        """The recovery action, from this interval's field values; the fabric, read on
        the slow cadence (`fabric.read_fabric`): at enumeration, every
        SLOW_REFRESH_SECONDS, and at once after a read that failed."""
        backend = self._backend
        return HealthReading(
            recovery_action=self._int_field(fields.RECOVERY_ACTION),
            fabric=backend.slow(
                self._state, "fabric", lambda: fabric.read_fabric(backend.calls, self._d)
            ),
        )

    def nvlink(self) -> NvLinkReading | None:
        """Each link's state and error counters (the legacy ones or NVLink5's, whichever
        the driver answers: `nvlink5.py`), NVLink5's recovery events and BER, their sums
        per type (`nvlink_totals`), and the bytes moved (where GPM does not count them):
        the driver's data counters summed over the links, else NVLink5's byte counters."""
        links = self._state.nvlink_links
        if not links:
            return None
        counters = self._link_error_counters(links)
        values = self._fields
        answers = tuple(map(values.get, fields.nvlink_all_link_keys(links, NVLINK_ERRORS)))
        answers += tuple(map(values.get, nvlink5.state_keys(links)))
        last = self._state.nvlink_last
        if last is not None and last[0] == answers and last[1] == counters:
            states, totals, recoveries = last[2:]  # links unchanged: the same states, sums
        else:
            states = self._nvlink_states(links, values, counters)
            totals = self._state.nvlink_totals(states)
            recoveries = self._state.nvlink_recoveries(states)
            self._state.nvlink_last = (answers, counters, states, totals, recoveries)
        data_bytes: dict[str, float] = {}
        for direction in sorted(_DIRECTIONS - self._gpm_nvlink):
            kib = self._nvlink_data_kib(direction, states)
            if kib is None:  # NVLink5's byte counters, where the data counters are absent
                active = [link for link, s in states.items() if s.up]
                data = nvlink5.data_bytes(direction, active, values)
                if data is not None:
                    data_bytes[direction] = data
            else:
                data_bytes[direction] = kib * KIB
        return NvLinkReading(
            links=states, data_bytes=data_bytes, error_totals=totals, recovery_totals=recoveries
        )

    @staticmethod
    def _nvlink_states(
        links: int, values: dict[str, float], counters: dict[tuple[int, str], int]
    ) -> dict[int, NvLinkState]:
        """Each link's state and error counts, from its fields and the error counters."""
        states: dict[int, NvLinkState] = {}
        for link in range(links):
            state_key, error_keys = fields.nvlink_link_keys(link, NVLINK_ERRORS)
            state = values.get(state_key)
            errors = {
                name: int(value)
                for name, key in error_keys
                if (value := values.get(key)) is not None
                or (value := counters.get((link, name))) is not None
            }
            states[link] = NvLinkState(
                up=state == pynvml.NVML_FEATURE_ENABLED if state is not None else None,
                errors=errors,
                recovery_events=nvlink5.recovery_events(link, values),
                ber=nvlink5.link_ber(link, values),
            )
        return states

    def _nvlink_data_kib(self, direction: str, states: dict[int, NvLinkState]) -> float | None:
        """KiB moved in `direction` since driver load: the aggregate field, else the sum
        over the active links. An inactive port answers NOT_SUPPORTED and is skipped; an
        active one that does not answer leaves the total out (it would understate)."""
        total = self._fields.get(fields.nvlink_data_key(direction))
        if total is not None:
            return total
        active = [link for link, s in states.items() if s.up]
        per_link = [self._fields.get(fields.nvlink_data_key(direction, link)) for link in active]
        if not active or any(kib is None for kib in per_link):
            return None
        return sum(kib for kib in per_link if kib is not None)

    def _link_error_counters(self, links: int) -> dict[tuple[int, str], int]:
        """(link, error type) -> count, from nvmlDeviceGetNvLinkErrorCounter: the data-CRC
        counter (no scoped field has it) and any error type whose field the driver does
        not support for that link. One call per link and counter, so read on the slow
        cadence (a counter up to SLOW_REFRESH_SECONDS old, never a made-up 0); a counter
        the driver does not support is not asked again. A link that answers NVLink5's
        recovery counter is not asked: nvml.h 13 names those as what replaces the legacy
        counters on Blackwell ("unsupported for Blackwell+"), and asking each of 18 links
        for 4 counters it does not have cost a GB200 72 calls a minute."""
        unsupported = self._d.unsupported_fields
        values = self._fields

        def read() -> dict[tuple[int, str], int]:
            out: dict[tuple[int, str], int] = {}
            for link in range(links):
                if nvlink5.recovery_key(link, "all") in values:
                    continue  # an NVLink5 link
                for name, counter in fields.NVLINK_ERROR_COUNTERS.items():
                    if name != "crc_data" and fields.nvlink_key(link, name) not in unsupported:
                        continue  # its field answers
                    value = self._q(
                        f"nvlink_error/{link}/{name}",
                        pynvml.nvmlDeviceGetNvLinkErrorCounter,
                        link,
                        counter,
                    )
                    if value is not None:
                        out[(link, name)] = int(value)
            return out

        return self._backend.slow(self._state, "nvlink_error_counters", read) or {}

    def mig(self) -> MigReading | None:
        slots = self._backend.mig_slots(self._state, "process" in self._collectors)
        if not slots:
            return None
        instances: dict[int, MigInstanceReading] = {}
        for slot in slots:
            gi = slot.info.gpu_instance
            if gi in instances:
                continue  # compute instances of one GPU instance share its memory
            memory = _memory(self._backend.calls, slot.device)  # v2: `used` without reserved
            self._state.mig_lists.used_memory(self._state.interval, gi, memory.used_bytes)
            if memory.total_bytes is None and "memory" not in slot.device.unsupported:
                self._state.mig_read_at = None  # it stopped answering: enumerate again
            activity = None
            if "gpm" in self._collectors:
                stream = self._backend.gpm_stream(self._state, slot)
                activity = stream.read() if stream is not None else None
            instances[gi] = MigInstanceReading(
                memory_total_bytes=memory.total_bytes,
                memory_used_bytes=memory.used_bytes,
                gpm=activity,
            )
        return MigReading(devices=tuple(s.info for s in slots), instances=instances)


_DIRECTIONS = frozenset(DIRECTIONS)

_COMPUTE_PROCESSES = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)
_GRAPHICS_PROCESSES = (
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
)


def _idle(utilization: Any) -> bool:
    """An encoder or decoder answer `(percent, period)` that says the engine is idle."""
    return int(utilization[0]) == 0


def _at(maximum: int | None) -> Callable[[Any], bool]:
    """Is a current PCIe link value at its maximum (so a slow re-read will do)?"""
    return lambda value: maximum is not None and int(value) >= maximum


def _branch(driver_version: str | None) -> int | None:
    """The major version of a driver version string ("590.48.01" -> 590), or None."""
    major = (driver_version or "").split(".", 1)[0]
    return int(major) if major.isascii() and major.isdigit() and len(major) <= 6 else None


def _throttle_reasons(mask: int) -> dict[str, bool]:
    return {reason: bool(mask & (1 << bit)) for bit, reason in enumerate(THROTTLE_REASONS)}


_MIG_STREAM = "gpm/mig/"
_MIG_BUFFER = "mig/"  # buffers of a MIG device: "mig/<MIG UUID>/<list>"
# nvml.h 13: nvmlDeviceGetTemperature is deprecated for nvmlDeviceGetTemperatureV, which
# nvidia-ml-py wraps from 12.570.86 (the declared floor, 12.560.30, does not): asked (through
# `structs.temperature_v`) with the bindings that know it, as the drivers they came with do
_TEMPERATURE_V = hasattr(pynvml, "nvmlDeviceGetTemperatureV")
# nvml.h 13: "the thermal margin temperature (distance to nearest slowdown threshold)";
# nvidia-ml-py 13.615.71 wraps it, the declared floor (12.560.30) does not
_MARGIN_TEMPERATURE: Callable[..., Any] | None = getattr(
    pynvml, "nvmlDeviceGetMarginTemperature", None
)


@functools.lru_cache(maxsize=16)
def _keys(requests: tuple[fields.FieldRequest, ...]) -> tuple[str, ...]:
    """The keys of `requests` (the counters' tuple, the same few every interval)."""
    return tuple(request.key for request in requests)


def _mig_enabled(layout: mig.Layout | None) -> bool:
    return layout is not None and layout[0] == pynvml.NVML_DEVICE_MIG_ENABLE


def _mig_stream_key(slot: mig.MigSlot) -> str:
    """A GPU instance's GPM stream, by the UUID of its first MIG device: GPU instance ids
    are reused after a repartition, UUIDs are not."""
    return _MIG_STREAM + slot.info.uuid


def _memory(calls: NvmlCalls, d: Device) -> MemoryReading:
    """`nvmlDeviceGetMemoryInfo` v2 (its `used` leaves the driver's reservation out), else
    v1 (whose `used` includes it) on drivers without v2."""
    info = calls.call(
        "nvmlDeviceGetMemoryInfo_v2", structs.memory_info_v2, d.handle, device=d, key="memory_v2"
    )
    reserved = info.reserved if info is not None else None
    if info is None:
        info = calls.query(d, "memory", pynvml.nvmlDeviceGetMemoryInfo)
    if info is None:
        return MemoryReading()
    return MemoryReading(
        total_bytes=int(info.total),
        used_bytes=int(info.used),
        free_bytes=int(info.free),
        reserved_bytes=reserved,
    )


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
    | pynvml.nvmlEventMigConfigChange  # nvml.h:3440; handled by the backend itself
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
