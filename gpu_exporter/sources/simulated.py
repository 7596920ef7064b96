"""`SimulatedBackend`: a made-up GPU host behind the same interface as NVML.

Serves `--simulate N` for demos, dashboards and tests. Its values move with the clock
and follow four profiles, repeated over the GPUs:

0. `input-starved`: a training job whose utilization flips between 0 and 95% five
   times a second (its input pipeline cannot keep up); `rate(gpu_busy_seconds_total)`
   shows the true ~47% while the instantaneous gauge jumps.
1. `idle-allocated`: memory held, no kernels (money burned), and no process: a crashed
   job's memory is still pinned (`gpu_memory_unattributed_bytes`).
2. `near-oom`: memory 97% used, shared by a fine-tuning job and a ParaView session (the
   memory pattern `sharing`: GPUMemoryNearFull pages); the launch-bound job keeps a kernel running
   (82-92% busy) while most SMs idle (GPM SM activity ~13%), and all-reduces over NVLink.
3. `busy-hot`: MIG-partitioned into a 3g.40gb, a 2g.20gb and a 1g.10gb instance, the
   first serving inference flat out; hot, at its power limit, thermally throttled at
   times. As on a real MIG GPU, the parent reports no utilization.

Every GPU is an H100 with GPM and 18 NVLink links, registered in a healthy NVLink fabric
(an HGX board) and needing no recovery action, or with `--simulate.hardware gb200-nvl72`
a GB200 of an NVL72 compute tray, whose links answer NVLink5's counters
(`simulated_hardware.py`); the busy-hot GPU's clocks-event counters
grow exactly while it is capped or thermally slowed; their /dev/nvidiaN minor numbers count
down from the last NVML index (`simulated_layout.minor_number`). GPM activity follows each profile
(`simulated_activity.py`): the input-starved GPU's SM activity follows its bursts.
Each profile has plausible tenant processes (`simulated_tenants.py`): the training job
on the input-starved GPU has 4 busy DataLoader workers.

Faults are injected through `Faults` (`sources.scenario`), set directly by in-process
tests or read from a scenario file (`--simulate.scenario FILE`, re-read when it changes)
by tests that drive the real program. A file that no longer loads keeps the previous
scenario in force and is reported once in the log.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import fields, replace
from typing import Any

from gpu_exporter.model import (
    CLOCK_EVENT_REASONS,
    FABRIC_CONDITIONS,
    NVLINK5_ERRORS,
    NVLINK_LEGACY_ERRORS,
    NVLINK_RECOVERY_RESULTS,
    PCIE_ERRORS,
    PROCESS_CONTEXTS,
    THROTTLE_REASONS,
    CgroupLabels,
    ClocksReading,
    DeviceEvent,
    DeviceReading,
    DeviceStatic,
    DriverInfo,
    EccReading,
    FabricReading,
    GpmReading,
    GpuProcess,
    HealthReading,
    HostProcess,
    MemoryReading,
    MigDevice,
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
from gpu_exporter.sources import simulated_activity as activity
from gpu_exporter.sources import simulated_hardware as hardware
from gpu_exporter.sources.backend import (
    LOST,
    CallUsage,
    DeviceLost,
    ErrorCounts,
    NvmlUnavailable,
    read_device,
)
from gpu_exporter.sources.scenario import (
    PROCESS_LIST,
    SAMPLES,
    Faults,
    Scenario,
    ScenarioError,
    SimulatedProcess,
    load_scenario,
)
from gpu_exporter.sources.simulated_layout import (
    MIG_INSTANCES,
    MIG_PROFILE,
    SimulatedInstance,
    mig_instances,
    minor_number,
    profile,
)
from gpu_exporter.sources.simulated_memory import share
from gpu_exporter.sources.simulated_tenants import (
    PROFILE_PROCESSES,
    builtin_pid,
    labels,
    split_pid,
)

log = logging.getLogger(__name__)

GIB = 1024**3
MEMORY_TOTAL_BYTES = 81559 * 1024**2  # H100 80GB HBM3 as nvidia-smi reports it
MEMORY_RESERVED_BYTES = 529 * 1024**2
SAMPLE_PERIOD_US = 166_667  # the driver fills its utilization buffer about 6 times a second
BUFFER_SAMPLES = 100  # entries the driver keeps per buffer
POWER_LIMIT_WATTS = 700.0
# When the simulated driver was loaded and the built-in tenants' clocks started (Unix time,
# 2023-11-14): fixed, not the exporter's start, so that a restarted exporter finds every
# counter where the last one left it (energy, NVLink bytes, the tenants' CPU time), as on a
# real host. A clock before it (never in practice) uses its own first reading instead.
DRIVER_LOADED_AT = 1_700_000_000.0
NVLINK_LINKS = 18  # H100 SXM
# T.Limit as an H100 on R590 reports it (tests/fixtures/nvidia-smi): the thresholds relative
# to T.Limit, and the T.Limit itself, so that the margin reaches the slowdown threshold
# (-2) at the absolute slowdown temperature (90 C)
TLIMIT_THRESHOLDS_CELSIUS = {
    "shutdown": -8.0,
    "slowdown": -2.0,
    "max_operating": 0.0,
    "memory_max_operating": 0.0,
}
TLIMIT_CELSIUS = 88.0


class SimulatedBackend:
    """A host of `gpus` simulated H100s. Thread-safe; `clock` returns Unix seconds."""

    kind = "simulated"

    def __init__(
        self,
        gpus: int,
        *,
        clock: Callable[[], float] = time.time,
        scenario_path: str | None = None,
        faults: Faults | None = None,
        host_id: str = "",
        hardware: str = "hgx-h100",
    ) -> None:
        """`hardware`: a `simulated_hardware.HARDWARE` name."""
        self.errors = ErrorCounts()
        self.hardware = hardware
        self.usage = CallUsage()  # a simulated host makes no NVML call: stays empty
        self._gpus = gpus
        self._host_id = host_id  # makes UUIDs and serials unique per simulated host
        self._clock = clock
        self._scenario_path = scenario_path
        self._reset_at: dict[int, float] = {}  # index -> clock of its last GPU reset
        # (index, link) -> clock the scenario made it start degrading
        self._degrading_since: dict[tuple[int, int], float] = {}
        self._scenario_since = clock()  # when the scenario in force was loaded
        self._scenario = self._apply_resets(Scenario(faults=faults or Faults()))
        self._scenario_mtime: int | None = None
        self._lock = threading.Lock()
        self._initialised = False
        self._reloaded = False
        self._events_delivered = 0
        # "driver load" time: energy, NVLink bytes and sample timestamps count from it
        self._epoch = min(DRIVER_LOADED_AT, clock())
        self._tenants_epoch = self._epoch  # the built-in tenants started their age before it
        self._reading_time: dict[int, float] = {}  # index -> clock of its last reading
        self._gpm_sampled_at: dict[tuple[int, int | None], float] = {}  # stream -> clock

    # Fault control -----------------------------------------------------------------

    @property
    def faults(self) -> Faults:
        return self._current().faults

    @faults.setter
    def faults(self, faults: Faults) -> None:
        with self._lock:
            self._scenario = self._apply_resets(replace(self._scenario, faults=faults))

    def _apply_resets(self, scenario: Scenario) -> Scenario:
        """Reset the GPUs the scenario lists, now: as `nvidia-smi -r` does, the driver's
        counters of each (energy, NVLink data) restart from 0; NVML is not re-initialised."""
        for index in scenario.faults.reset:
            self._reset_at[index] = self._clock()
        degrading = set(scenario.faults.nvlink_degrading.items())
        for key in [k for k in self._degrading_since if k not in degrading]:
            del self._degrading_since[key]  # healed
        for key in degrading:
            self._degrading_since.setdefault(key, self._clock())
        self._scenario_since = self._clock()  # its processes' memory traces start here
        return scenario

    def _current(self) -> Scenario:
        """The scenario, re-read from its file when the file changed.

        A file that does not load (half-written, or wrong) keeps the previous scenario in
        force; the error is logged once per change of the file.
        """
        path = self._scenario_path
        if path is not None:
            try:
                mtime: int | None = os.stat(path).st_mtime_ns
            except OSError:
                mtime = None
            if mtime is not None and mtime != self._scenario_mtime:
                self._scenario_mtime = mtime
                try:
                    scenario = load_scenario(path, self._gpus)
                except ScenarioError as error:
                    log.error(
                        "scenario file not reloaded; the previous scenario stays in force",
                        extra={"error": str(error)},
                    )
                else:
                    with self._lock:
                        self._scenario = self._apply_resets(scenario)
        with self._lock:
            return self._scenario

    def _check(self, index: int) -> Faults:
        """Apply lost/hang faults for one device; returns the faults in force."""
        faults = self._current().faults
        if not self._initialised:
            raise NvmlUnavailable("uninitialized", "NVML is not initialised")
        if faults.init_error:
            raise NvmlUnavailable(faults.init_error, f"simulated NVML failure: {faults.init_error}")
        while index in faults.hang:  # a wedged driver call: blocks until the fault goes
            time.sleep(0.05)
            faults = self._current().faults
        if index in faults.lost:
            raise DeviceLost(LOST, f"GPU {index}: GPU is lost (simulated)")
        if index >= self._visible(faults):
            raise DeviceLost("invalid_argument", f"GPU {index} is not present")
        return faults

    def _visible(self, faults: Faults) -> int:
        return self._gpus if faults.gpus is None else faults.gpus

    # Library lifecycle -------------------------------------------------------------

    @property
    def initialised(self) -> bool:
        return self._initialised

    def init(self) -> None:
        faults = self._current().faults
        if faults.init_error:
            raise NvmlUnavailable(faults.init_error, f"simulated NVML failure: {faults.init_error}")
        if self._reloaded:
            self._epoch = self._clock()  # a reloaded driver restarts its counters
            self._reset_at.clear()
            self._reloaded = False
        self._initialised = True

    def shutdown(self) -> None:
        self._initialised = False
        self._reloaded = True
        with self._lock:
            self._gpm_sampled_at.clear()  # GPM samples are freed with the library

    def driver_info(self) -> DriverInfo:
        if self.hardware == hardware.GB200:
            driver, cuda = hardware.GB200_DRIVER
            return DriverInfo(driver_version=driver, cuda_driver_version=cuda)
        return DriverInfo(driver_version="550.54.15", cuda_driver_version="12.4")

    def daemons_running(self, daemons: Sequence[str]) -> dict[str, bool]:
        """The simulated host's fabric daemons (`sources.fabric_daemons`): each runs
        unless the scenario's `fabric_daemons_down` names it."""
        down = self._current().faults.fabric_daemons_down
        return {daemon: daemon not in down for daemon in daemons}

    def device_count(self) -> int:
        faults = self._current().faults
        while faults.library_hang:
            time.sleep(0.05)
            faults = self._current().faults
        if not self._initialised or faults.init_error:
            raise NvmlUnavailable(faults.init_error or "uninitialized", "NVML is not initialised")
        return self._visible(faults)

    # Devices -----------------------------------------------------------------------

    @staticmethod
    def profile(index: int) -> str:
        return profile(index)

    def _uuid(self, index: int) -> str:
        """Stable per (host, index), like a real board's UUID; the GPUs of the fault
        `same_uuid` all report the lowest one's (as boards with a cloned VBIOS do)."""
        same = self._current().faults.same_uuid
        if index in same:
            index = min(same)
        if not self._host_id:
            return f"GPU-5e1a7f00-{index:04x}-4c3b-9d2e-{0xA1B2C3D40000 + index:012x}"
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'{self._host_id}/{index}')}"

    def device_static(self, index: int) -> DeviceStatic:
        self._check(index)
        static = self._h100_static(index)
        if self.hardware != hardware.GB200:
            return static
        return replace(
            static,
            name=hardware.GB200_NAME,
            compute_capability=hardware.GB200_COMPUTE_CAPABILITY,
            nvlink_links=hardware.NVLINK_LINKS,
            platform=hardware.platform(index, self._host_id),
        )

    def _h100_static(self, index: int) -> DeviceStatic:
        return DeviceStatic(
            index=index,
            uuid=self._uuid(index),
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
            serial=f"{1654922000101 + index}",
            vbios_version="96.00.99.00.01",
            compute_capability="9.0",
            max_clocks_hertz={"graphics": 1980e6, "sm": 1980e6, "memory": 2619e6, "video": 1545e6},
            slowdown_temperature_celsius=90.0,
            shutdown_temperature_celsius=92.0,
            pcie_max_generation=5,
            pcie_max_width=16,
            nvlink_links=NVLINK_LINKS,
            minor_number=minor_number(index, self._gpus),
            tlimit_thresholds_celsius=TLIMIT_THRESHOLDS_CELSIUS,
        )

    def utilization_at(self, index: int, t: float) -> tuple[float, float]:
        """(gpu, memory-controller) utilization ratios at Unix time t, in whole percent
        as the driver reports them."""
        gpu, memory_controller = self._utilization_at(index, t)
        return round(gpu * 100) / 100, round(memory_controller * 100) / 100

    def _utilization_at(self, index: int, t: float) -> tuple[float, float]:
        profile = self.profile(index)
        if profile == "input-starved":
            busy = activity.square(t, 0.4)  # 2.5 busy bursts a second
            return (0.95, 0.40) if busy else (0.0, 0.0)
        if profile == "idle-allocated":
            return 0.0, 0.0
        if profile == "near-oom":
            return activity.near_oom_busy(t), 0.45 + 0.1 * activity.wave(t, 45.0)
        return 0.97 + 0.03 * activity.wave(t, 20.0), 0.60 + 0.1 * activity.wave(t, 30.0)

    def is_mig(self, index: int) -> bool:
        return bool(mig_instances(index))

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        """The MIG devices of a MIG-partitioned GPU; empty for the others."""
        if not self.is_mig(index):
            return ()
        parent = self._uuid(index)
        return tuple(
            MigDevice(
                uuid=f"MIG-{uuid.uuid5(uuid.NAMESPACE_OID, f'{parent}/{i.gpu_instance}')}",
                gpu_instance=i.gpu_instance,
                compute_instance=0,
                profile=i.profile,
                placement=i.placement,
            )
            for i in MIG_INSTANCES
        )

    def gpm_reading(
        self, index: int, t: float, gpu_instance: int | None = None
    ) -> GpmReading | None:
        """GPM metrics since this stream's last sample (None for its first), exact means."""
        key = (index, gpu_instance)
        with self._lock:
            t0 = self._gpm_sampled_at.get(key)
            self._gpm_sampled_at[key] = t
        if t0 is None or t <= t0:
            return None
        elapsed = t - t0
        profile = self.profile(index)
        if gpu_instance is not None:
            busy = any(i.busy for i in MIG_INSTANCES if i.gpu_instance == gpu_instance)
            return (activity.INFERENCE if busy else activity.IDLE).scaled(1.0, elapsed, bus=False)
        if profile == "input-starved":
            share = activity.square_mean(
                t0, t, activity.INPUT_STARVED_PERIOD, activity.INPUT_STARVED_DUTY
            )
            return activity.INPUT_STARVED.scaled(share, elapsed)
        if profile == "near-oom":
            return activity.NEAR_OOM.scaled(activity.near_oom_busy_mean(t0, t), elapsed)
        if profile == MIG_PROFILE:
            return activity.INFERENCE.scaled(activity.INFERENCE_SHARE_OF_GPU, elapsed)
        return activity.IDLE.scaled(1.0, elapsed)

    def nvlink_data_bytes(self, index: int, t: float) -> dict[str, float]:
        """The driver's NVLink data counters, summed over the links (bytes since load)."""
        rates = activity.NEAR_OOM.nvlink if self.profile(index) == "near-oom" else {}
        since = self._counters_since(index)
        return {d: rates.get(d, 0.0) * max(0.0, t - since) for d in ("tx", "rx")}

    def degrading_link(self, index: int, t: float) -> tuple[int, float] | None:
        """(link, seconds it has degraded) of GPU `index`'s degrading link, or None."""
        for (gpu, link), since in self._degrading_since.items():
            if gpu == index:
                return link, max(0.0, t - since)
        return None

    def counters_since(self, index: int) -> float:
        return self._counters_since(index)

    def _counters_since(self, index: int) -> float:
        """When the driver's counters of the GPU started: driver load or its last reset."""
        return self._reset_at.get(index, self._epoch)

    def device_reading(self, index: int, collectors: frozenset[str]) -> DeviceReading:
        faults = self._check(index)
        t = self._clock()
        self._reading_time[index] = t  # the built-in processes share this reading's memory
        reader = _SimulatedReader(self, index, t, collectors, faults)
        reading = read_device(reader, collectors)
        return _without(reading, faults.unsupported)

    def clock_event_seconds(self, index: int, t: float) -> dict[str, float]:
        """Seconds each reason held the clocks down since driver load or the GPU's last
        reset: the busy-hot GPU's power cap and thermal slowdown, exactly while its
        `clocks()` reports them active; 0 for the rest."""
        since = self._counters_since(index)
        out = dict.fromkeys(CLOCK_EVENT_REASONS, 0.0)
        if self.profile(index) == "busy-hot" and t > since:
            # power 690 + 10 * wave(t, 10) >= 695; temperature 84 + 4 * wave(t, 40) >= 87
            out["sw_power_cap"] = activity.wave_time_above(since, t, 10.0, 0.5)
            out["sw_thermal_slowdown"] = activity.wave_time_above(since, t, 40.0, 0.75)
        return out

    def fabric(self, fault: str | None) -> FabricReading:
        """An HGX host's NVLink fabric: every GPU registered in one clique and healthy, or
        what the scenario's fault (`FABRIC_FAULTS`) makes of it."""
        if fault in ("not_registered", "in_progress"):
            return FabricReading(state="not_started" if fault == "not_registered" else fault)
        if fault == "probe_failed":
            return FabricReading(state="completed", status="insufficient_resources")
        conditions = dict.fromkeys(FABRIC_CONDITIONS, False)
        summary = "healthy"
        if fault == "unhealthy":
            conditions["route_unhealthy"] = True
            summary = "unhealthy"
        elif fault == "limited_capacity":
            conditions["degraded_bandwidth"] = True
            summary = "limited_capacity"
        return FabricReading(
            state="completed",
            status="success",
            clique_id=1,
            cluster_uuid=self._cluster_uuid(),
            conditions=conditions,
            summary=summary,
        )

    def _cluster_uuid(self) -> str:
        if not self._host_id:
            return "5e1a7f00-fab1-4c3b-9d2e-a1b2c3d40000"
        return str(uuid.uuid5(uuid.NAMESPACE_OID, f"{self._host_id}/fabric"))

    def _listed(self, t: float) -> list[SimulatedProcess]:
        """The scenario's processes listed at Unix time t (their start and end); [] for
        the built-in ones."""
        since = self._scenario_since
        return [p for p in self._current().processes or () if p.listed(t - since)]

    def _process_memory(self, p: SimulatedProcess, t: float, total: int) -> int | None:
        """A scenario process's used memory at Unix time t: its trace's share of `total`,
        or its fixed memory_bytes."""
        if p.memory_trace is None or p.memory_ratio is None:
            return p.memory_bytes
        seconds = t - self._scenario_since - p.start_seconds
        return int(share(p.memory_trace, seconds, p.memory_ratio) * total)

    def _traced(self, index: int, gpu_instance: int | None) -> bool:
        return any(
            p.memory_trace is not None and p.gpu == index and p.gpu_instance == gpu_instance
            for p in self._current().processes or ()
        )

    def memory_used_bytes(self, index: int, t: float) -> int:
        if not self.is_mig(index) and self._traced(index, None):  # what its processes hold
            held = sum(
                self._process_memory(p, t, MEMORY_TOTAL_BYTES) or 0
                for p in self._listed(t)
                if p.gpu == index
            )
            return min(held, MEMORY_TOTAL_BYTES - MEMORY_RESERVED_BYTES)
        used = {
            "input-starved": 0.55 + 0.05 * activity.wave(t, 120.0),
            "idle-allocated": 0.375,
            "near-oom": 0.965 + 0.01 * activity.wave(t, 90.0),
            "busy-hot": 0.0,
        }[self.profile(index)]
        if self.is_mig(index):
            return sum(self.instance_memory_used_bytes(index, i) for i in MIG_INSTANCES)
        return int(MEMORY_TOTAL_BYTES * used)

    def instance_memory_used_bytes(self, index: int, instance: SimulatedInstance) -> int:
        """A MIG instance's used memory: its own, and that of the scenario's processes on
        it (at most its total); with a traced process there, only what its processes hold."""
        t = self._reading_time.get(index, self._clock())
        total = instance.memory_total_bytes
        placed = sum(
            self._process_memory(p, t, total) or 0
            for p in self._listed(t)
            if p.gpu == index and p.gpu_instance == instance.gpu_instance
        )
        own = 0 if self._traced(index, instance.gpu_instance) else instance.memory_used_bytes
        return min(total, own + placed)

    def energy_joules(self, index: int, t: float) -> float:
        """Joules since 'driver load' (DRIVER_LOADED_AT) or the GPU's last reset: the integral
        of the profile's mean power."""
        mean_power = {
            "input-starved": 110.0 + 420.0 * 0.475,
            "idle-allocated": 72.0,
            "near-oom": 460.0,
            "busy-hot": 695.0,
        }[self.profile(index)]
        return mean_power * max(0.0, t - self._counters_since(index))

    def _timestamp_us(self, t: float) -> int:
        return int((t - self._epoch) * 1e6) + 1_000_000_000

    def utilization_samples(
        self, index: int, domain: UtilizationDomain, since_us: int
    ) -> Sequence[UtilizationSample] | None:
        faults = self._check(index)
        if SAMPLES in faults.unsupported or self.is_mig(index):
            return None  # the MIG parent answers NOT_SUPPORTED, as a real one does
        pick = 0 if domain == "gpu" else 1
        return [
            UtilizationSample(ts, self.utilization_at(index, mid)[pick])
            for ts, mid in self._periods(since_us)
        ]

    def _periods(self, since_us: int) -> list[tuple[int, float]]:
        """The driver's sample periods newer than `since_us` still in its buffer, oldest
        first: (the timestamp that ends each, in microseconds; its midpoint, Unix time)."""
        now_us = self._timestamp_us(self._clock())
        last = now_us - now_us % SAMPLE_PERIOD_US
        first = max(since_us + 1, last - (BUFFER_SAMPLES - 1) * SAMPLE_PERIOD_US)
        first += (-first) % SAMPLE_PERIOD_US
        return [
            (ts, self._epoch + (ts - SAMPLE_PERIOD_US / 2 - 1_000_000_000) / 1e6)
            for ts in range(first, last + 1, SAMPLE_PERIOD_US)
        ]

    def processes(self, index: int, *, in_use: bool = False) -> Sequence[GpuProcess] | None:
        faults = self._check(index)
        if PROCESS_LIST in faults.unsupported:
            return None
        if self._current().processes is None:
            return self._tenants(index)
        t = self._reading_time.get(index, self._clock())
        return [  # "compute+graphics": in both lists, with all its memory in each
            GpuProcess(
                pid=p.pid,
                context=context,
                used_memory_bytes=self._process_memory(p, t, self._total(index, p.gpu_instance)),
                gpu_instance=p.gpu_instance,
                compute_instance=0 if p.gpu_instance is not None else None,
            )
            for p in self._listed(t)
            if p.gpu == index
            for context in PROCESS_CONTEXTS
            if context in p.context.split("+")
        ]

    def _total(self, index: int, gpu_instance: int | None) -> int:
        """The memory total of a GPU, or of its MIG instance."""
        for i in mig_instances(index) if gpu_instance is not None else ():
            if i.gpu_instance == gpu_instance:
                return i.memory_total_bytes
        return MEMORY_TOTAL_BYTES

    def _tenants(self, index: int) -> list[GpuProcess]:
        """The built-in processes; on the MIG GPU, on its busy instance."""
        if self.is_mig(index):
            busy = next(i for i in MIG_INSTANCES if i.busy)
            return [
                GpuProcess(
                    pid=builtin_pid(index, p),
                    context="compute",
                    used_memory_bytes=int(busy.memory_used_bytes * p.memory_share),
                    gpu_instance=busy.gpu_instance,
                    compute_instance=0,
                )
                for p in PROFILE_PROCESSES[self.profile(index)]
            ]
        t = self._reading_time.get(index, self._clock())
        used = self.memory_used_bytes(index, t)
        out: list[GpuProcess] = []
        before = 0.0  # the shares of the processes before: theirs add up to `used` exactly
        for p in PROFILE_PROCESSES[self.profile(index)]:
            memory = int(used * (before + p.memory_share)) - int(used * before)
            before += p.memory_share
            # a process in both lists has all its memory in each, as NVML lists it
            out += [GpuProcess(builtin_pid(index, p), c, memory) for c in p.contexts]
        return out

    def process_utilization(self, index: int, since_us: int) -> Sequence[ProcessUtilization] | None:
        faults = self._check(index)
        if PROCESS_LIST in faults.unsupported or self.is_mig(index):
            return None  # per-process utilization is not supported under MIG
        # one entry per sample period since `since_us` and process that ran in it, as the
        # driver answers (each period's shares; the process's SM seconds integrate them)
        periods = self._periods(since_us)
        scenario = self._current().processes
        if scenario is None:
            out: list[ProcessUtilization] = []
            for ts, mid in periods:
                sm, mc = self.utilization_at(index, mid)
                out += [
                    ProcessUtilization(builtin_pid(index, p), ts, sm * p.sm_share, mc * p.sm_share)
                    for p in PROFILE_PROCESSES[self.profile(index)]
                    if sm * p.sm_share > 0
                ]
            return out
        return [
            ProcessUtilization(
                pid=p.pid,
                timestamp_us=ts,
                sm_ratio=p.sm_ratio,
                memory_controller_ratio=p.memory_controller_ratio or 0.0,
            )
            for ts, _mid in periods
            for p in self._listed(self._clock())
            if p.gpu == index and p.sm_ratio is not None
        ]

    def host_process(self, pid: int) -> HostProcess | None:
        """The host side of a built-in process (they have no /proc entry), or of a scenario
        process that gives one (its user, container and pod); None otherwise: /proc's."""
        scenario = self._current().processes
        if scenario is not None:
            for s in scenario:
                if s.pid == pid and s.has_host_side:
                    return HostProcess(  # no command name: the file gives none ("" unknown)
                        user=s.user or "",
                        labels=CgroupLabels(
                            container_id=s.container_id or "", pod_uid=s.pod_uid or ""
                        ),
                    )
            return None
        where = split_pid(pid)
        if where is None:
            return None
        gpu, offset = where
        if gpu >= self._gpus:
            return None
        for p in PROFILE_PROCESSES[self.profile(gpu)]:
            if p.offset == offset and p.dead:
                return HostProcess(dead=p.dead)  # nothing of it is left on the host
            if p.offset == offset:
                started = self._tenants_epoch - p.age_seconds
                return HostProcess(
                    process=p.process,
                    user=p.user,
                    cmdline=p.cmdline,
                    labels=labels(gpu, p),
                    cpu_seconds=round(p.cpu_cores * max(0.0, self._clock() - started), 2),
                    workers=p.workers,
                    resident_memory_bytes=p.resident_memory_bytes,
                    start_time_seconds=started,
                )
        return None

    # Events ------------------------------------------------------------------------

    def open_events(self) -> SimulatedEventSet | None:
        faults = self._current().faults
        if not self._initialised or faults.init_error:
            raise NvmlUnavailable(faults.init_error or "uninitialized", "NVML is not initialised")
        if faults.events_unsupported:
            return None
        return SimulatedEventSet(self)

    def next_event(self) -> DeviceEvent | None:
        """The scenario's next undelivered event, if any."""
        scenario = self._current()
        with self._lock:
            if self._events_delivered > len(scenario.events):  # the file was rewritten
                self._events_delivered = 0
            if self._events_delivered == len(scenario.events):
                return None
            event = scenario.events[self._events_delivered]
            self._events_delivered += 1
        # the driver names the event's device by the handle registered before it was
        # lost, so an Xid 79 for a GPU that fell off the bus still arrives
        device_uuid = self._uuid(event.gpu)
        kind = event.kind if event.kind in ("xid", "ecc_single_bit", "ecc_double_bit") else "other"
        return DeviceEvent(uuid=device_uuid, kind=kind, xid=event.xid, event_type=8)  # type: ignore[arg-type]


class SimulatedEventSet:
    """Delivers the scenario's events; waits like nvmlEventSetWait."""

    def __init__(self, backend: SimulatedBackend) -> None:
        self._backend = backend
        self._closed = False

    def wait(self, timeout_ms: int) -> DeviceEvent | None:
        deadline = time.monotonic() + timeout_ms / 1000
        while not self._closed:
            faults = self._backend.faults
            if faults.init_error or not self._backend.initialised:
                raise NvmlUnavailable(faults.init_error or "uninitialized", "NVML went away")
            event = self._backend.next_event()
            if event is not None:
                return event
            if time.monotonic() >= deadline:
                return None
            # a real event set blocks in the driver; poll the scenario gently
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        return None

    def close(self) -> None:
        self._closed = True


class _SimulatedReader:
    """The readings of one simulated GPU at Unix time `t`, one method per collector."""

    def __init__(
        self,
        backend: SimulatedBackend,
        index: int,
        t: float,
        collectors: Collection[str],
        faults: Faults,
    ) -> None:
        self._backend = backend
        self._faults = faults
        self._index = index
        self._t = t
        self._collectors = collectors
        self._profile = backend.profile(index)
        self._gpu_util, self._mem_util = backend.utilization_at(index, t)

    def _temperature(self) -> float:
        t = self._t
        return {
            "input-starved": 52.0 + 6 * self._gpu_util,
            "idle-allocated": 33.0,
            "near-oom": 64.0 + 3 * activity.wave(t, 60.0),
            "busy-hot": 84.0 + 4 * activity.wave(t, 40.0),
        }[self._profile]

    def _power(self) -> float:
        t = self._t
        return {
            "input-starved": 110.0 + 420.0 * self._gpu_util,
            "idle-allocated": 72.0,
            "near-oom": 430.0 + 60 * activity.wave(t, 60.0),
            "busy-hot": 690.0 + 10 * activity.wave(t, 10.0),
        }[self._profile]

    def utilization(self) -> UtilizationReading:
        if self._backend.is_mig(self._index):
            return UtilizationReading()  # NOT_SUPPORTED on a MIG parent
        return UtilizationReading(
            gpu_ratio=self._gpu_util,
            memory_controller_ratio=self._mem_util,
            encoder_ratio=0.0,
            decoder_ratio=0.0,
        )

    def memory(self) -> MemoryReading:
        used = self._backend.memory_used_bytes(self._index, self._t)
        return MemoryReading(
            total_bytes=MEMORY_TOTAL_BYTES,
            used_bytes=used,
            free_bytes=MEMORY_TOTAL_BYTES - MEMORY_RESERVED_BYTES - used,
            reserved_bytes=MEMORY_RESERVED_BYTES,
        )

    def temperature(self) -> TemperatureReading:
        temp = self._temperature()
        return TemperatureReading(
            gpu_celsius=round(temp),
            memory_celsius=round(temp + 4),
            tlimit_margin_celsius=round(TLIMIT_CELSIUS - temp),
        )

    def power(self) -> PowerReading:
        return PowerReading(
            watts=round(self._power(), 3),
            limit_watts=POWER_LIMIT_WATTS,
            energy_joules=round(self._backend.energy_joules(self._index, self._t), 3),
        )

    def clocks(self) -> ClocksReading:
        busy = self._gpu_util
        hot = self._profile == "busy-hot" and self._temperature() >= 87.0
        throttle = {reason: False for reason in THROTTLE_REASONS}
        throttle["gpu_idle"] = busy == 0.0
        throttle["sw_power_cap"] = self._profile == "busy-hot" and self._power() >= 695.0
        throttle["sw_thermal_slowdown"] = hot
        sm_clock = 345e6 if busy == 0.0 else (1755e6 if hot else 1980e6)
        return ClocksReading(
            hertz={
                "graphics": sm_clock,
                "sm": sm_clock,
                "memory": 2619e6,
                "video": 1245e6 if busy else 765e6,
            },
            performance_state=0 if busy else 8,
            throttle_reasons=throttle,
            event_seconds=self._backend.clock_event_seconds(self._index, self._t),
        )

    def pcie(self) -> PcieReading:
        return PcieReading(
            generation=5 if self._gpu_util else 1,
            width=16,
            replay_errors=0,
            errors=dict.fromkeys(PCIE_ERRORS, 0),
        )

    def pcie_throughput(self) -> PcieThroughputReading:
        return PcieThroughputReading(
            tx_bytes_per_second=2.1e9 * self._gpu_util,
            rx_bytes_per_second=6.4e9 * self._gpu_util,
        )

    def ecc(self) -> EccReading:
        return EccReading(
            corrected_errors=0,
            uncorrected_errors=0,
            retired_pages_single_bit=0,
            retired_pages_double_bit=0,
            retired_pages_pending=False,
            remapped_rows_correctable=0,
            remapped_rows_uncorrectable=0,
            remapped_rows_pending=False,
            remapped_rows_failed=False,
        )

    def modes(self) -> ModesReading:
        return ModesReading(persistence=True, mig=self._backend.is_mig(self._index), ecc=True)

    def gpm(self) -> GpmReading | None:
        return self._backend.gpm_reading(self._index, self._t)

    def health(self) -> HealthReading:
        """No action needed and a healthy fabric, unless the scenario says otherwise."""
        faults = self._faults
        return HealthReading(
            recovery_action=faults.recovery_action.get(self._index, 0),
            fabric=self._backend.fabric(faults.fabric.get(self._index)),
        )

    def nvlink(self) -> NvLinkReading | None:
        if self._backend.hardware == hardware.GB200:
            return self._nvlink5()
        # every link has the four error types (crc_data from nvmlDeviceGetNvLinkErrorCounter)
        links = {
            link: NvLinkState(up=True, errors=dict.fromkeys(NVLINK_LEGACY_ERRORS, 0))
            for link in range(NVLINK_LINKS)
        }
        # with GPM (every simulated H100) the bytes come from it, as on a real one
        data = (
            {}
            if "gpm" in self._collectors
            else self._backend.nvlink_data_bytes(self._index, self._t)
        )
        totals = dict.fromkeys(NVLINK_LEGACY_ERRORS, 0)  # every link answers every type
        return NvLinkReading(links=links, data_bytes=data, error_totals=totals)

    def _nvlink5(self) -> NvLinkReading:
        """A GB200's links: NVLink5's counters, none of the legacy ones."""
        backend, index, t = self._backend, self._index, self._t
        links = hardware.nvlink5_links(t - backend.counters_since(index))
        degrading = backend.degrading_link(index, t)
        if degrading is not None:
            link, seconds = degrading
            links[link] = hardware.degrade(links[link], seconds)
        data = {} if "gpm" in self._collectors else backend.nvlink_data_bytes(index, t)
        return NvLinkReading(
            links=links,
            data_bytes=data,
            error_totals={
                error: sum(s.errors[error] for s in links.values()) for error in NVLINK5_ERRORS
            },
            recovery_totals={
                result: sum(s.recovery_events[result] for s in links.values())
                for result in NVLINK_RECOVERY_RESULTS
            },
        )

    def mig(self) -> MigReading | None:
        devices = self._backend.mig_devices(self._index)
        if not devices:
            return None
        gpm = "gpm" in self._collectors
        return MigReading(
            devices=devices,
            instances={
                i.gpu_instance: MigInstanceReading(
                    memory_total_bytes=i.memory_total_bytes,
                    memory_used_bytes=self._backend.instance_memory_used_bytes(self._index, i),
                    gpm=(
                        self._backend.gpm_reading(self._index, self._t, i.gpu_instance)
                        if gpm
                        else None
                    ),
                )
                for i in MIG_INSTANCES
            },
        )


def _without(reading: DeviceReading, unsupported: Collection[str]) -> DeviceReading:
    """`reading` with the `READING.FIELD`s in `unsupported` left out (None, or empty)."""
    if not unsupported:
        return reading
    changes: dict[str, Any] = {}
    for member in fields(reading):
        part = getattr(reading, member.name)
        if part is None:
            continue
        cleared: dict[str, Any] = {
            f.name: ({} if isinstance(getattr(part, f.name), dict) else None)
            for f in fields(part)
            if f"{member.name}.{f.name}" in unsupported
        }
        if cleared:
            changes[member.name] = replace(part, **cleared)
    return replace(reading, **changes) if changes else reading
