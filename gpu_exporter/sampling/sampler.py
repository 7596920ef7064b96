"""The sampler: reads every GPU each interval and publishes one immutable Snapshot.

It owns NVML's lifecycle (initialise, re-initialise with capped backoff when the driver
goes away), the busy-time counters, and the per-device deadline. Scrapes never reach
here: they only read the latest Snapshot.

One sample runs these stages, each timed and reported in the Snapshot's `stages`
(`gpu_exporter_stage_duration_seconds`, `gpu_exporter_stage_success`):

- `devices`: every GPU read under one deadline, one after another on a reader thread,
  handed on to another when one hangs (`device_workers`);
- `processes`: process attribution (collector `process`); the process trees' /proc
  counters only when `counters_due` says the sample will be seen (`counter_reads`);
- `host`: host CPU and memory (collector `host`), read likewise;
- `xid`: the kernel-log reader's and the Xid listener's counts, one per GPU
  (`xid_merge`; collector `xid`); success while either reads;
- (collector `kubernetes`, after `processes`, not timed as a stage of its own) the last
  kubelet reading, refreshed on its own thread, names the processes and gives each GPU's
  allocation;
- (after those, not timed as a stage of its own) each GPU's and MIG instance's memory
  pattern, judged from this interval's readings and processes (`memory_patterns`);
- `render`: the previous snapshot's publication (the live page's history; its
  exposition, written then only when a scrape is expected before the next sample, else
  by the first scrape that asks), since a snapshot cannot hold the cost of publishing
  itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

from gpu_exporter.model import (
    ActivityTotals,
    Attribution,
    DeviceRaw,
    DeviceSample,
    DeviceStatic,
    DriverInfo,
    FabricDaemonState,
    HolderScanState,
    HostSample,
    KernelLogState,
    KubernetesState,
    Snapshot,
    StageResult,
    UtilizationSample,
    XidState,
    device_with,
)
from gpu_exporter.records import Record
from gpu_exporter.sampling.activity import ActivityCounter
from gpu_exporter.sampling.buffer_reads import (
    BufferRead,
    MemoryBaseline,
    buffer_read,
    engine_quiet,
)
from gpu_exporter.sampling.busy import BusyCounter
from gpu_exporter.sampling.clock_steps import STEP_SECONDS, WallClockSteps, not_after
from gpu_exporter.sampling.device_workers import HANDOFF_SECONDS, NotStarted, ReaderPool
from gpu_exporter.sampling.memory_patterns import MemoryPatterns
from gpu_exporter.sampling.process_seconds import ProcessSeconds
from gpu_exporter.sampling.xid_merge import merge_xids
from gpu_exporter.sources.backend import (
    LOST,
    SLOW_REFRESH_SECONDS,
    Backend,
    DeviceLost,
    NvmlUnavailable,
)

log = logging.getLogger(__name__)

BACKOFF_INITIAL_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0


class AttributeProcesses(Protocol):
    """Process attribution (`attribution.processes.ProcessAttributor`)."""

    @property
    def sees_host_pid_namespace(self) -> bool:
        """False where /proc is another PID namespace's: only PIDs and memory are known."""

    @property
    def holder_scan(self) -> HolderScanState | None:
        """The last scan for the holders of the device files; None before the first."""

    def __call__(
        self, raws: Mapping[int, DeviceRaw], *, fresh: bool = True
    ) -> Mapping[int, Attribution]:
        """Each GPU's process series, from what the device readers read; with `fresh`
        False the host values of processes already known are the last ones read."""


AttributeKubernetes = Callable[
    [tuple[DeviceSample, ...]], tuple[tuple[DeviceSample, ...], KubernetesState]
]
"""Kubernetes names, allocation and stowaways on the devices (`attribution.kubernetes`)."""

ReadHost = Callable[[], HostSample | None]
"""Host context; None when it could not be read."""

FabricDaemons = Callable[[tuple[DeviceSample, ...]], FabricDaemonState]
"""Which fabric daemons the devices need and which run (`sources.fabric_daemons`)."""

CountersDue = Callable[[str, float], bool]
"""Whether this sample reads the /proc counters of a collector (`process`, `host`), given
the interval (`counter_reads.CounterReads.due`)."""


class XidView(Protocol):
    """What the sampler reads of the Xid listener."""

    @property
    def listening(self) -> bool:
        """True while events are being waited on."""

    def state(self) -> Mapping[str, XidState]:
        """Counts per GPU UUID."""


class KernelLogView(Protocol):
    """What the sampler reads of the kernel-log reader (`sources/kernel_log.py`)."""

    def state(self) -> KernelLogState:
        """Counts per PCI bus id, and whether it is read."""


@dataclass(repr=False)
class _DeviceSlot(Record):
    """What the sampler keeps for one NVML index between samples."""

    static: DeviceStatic | None = None  # forgotten when NVML re-initialises
    static_at: float = 0.0  # monotonic time of the last static read: limits are re-read
    down_reason: str | None = None  # set while the device is reported down


@dataclass(repr=False)
class _Counters(Record):
    """What the sampler keeps for one GPU (by index and UUID) for its whole life: the
    counters."""

    gpu: BusyCounter = field(default_factory=BusyCounter)
    memory_controller: BusyCounter = field(default_factory=BusyCounter)
    process_utilization_us: int = 0  # newest per-process sample already seen
    process_seconds: ProcessSeconds = field(default_factory=ProcessSeconds)
    idle: bool = False  # the last sample: no process listed, read idle, memory at baseline
    # the last sample: GPM saw the engine behind the buffer idle all interval, and the
    # reading agreed (`buffer_reads.engine_quiet`)
    gpu_quiet: bool = False
    memory_controller_quiet: bool = False
    memory: MemoryBaseline = field(default_factory=MemoryBaseline)  # its idle used memory
    buffer_read: BufferRead = BufferRead.READ  # what this sample does with the GPU's buffer
    memory_controller_read: BufferRead = BufferRead.READ  # and the memory controller's
    activity: ActivityCounter = field(default_factory=ActivityCounter)  # GPM, NVLink bytes
    # by GPU instance: (GI id, UUID of its first MIG device), as ids are reused
    mig_activity: dict[tuple[int, str], ActivityCounter] = field(default_factory=dict)


class Sampler:
    """Samples `backend` every `interval_seconds` on its own thread."""

    def __init__(
        self,
        backend: Backend,
        *,
        interval_seconds: float,
        timeout_seconds: float,
        collectors: frozenset[str],
        on_snapshot: Callable[[Snapshot], None] = lambda snapshot: None,
        attribute_processes: AttributeProcesses | None = None,
        read_host: ReadHost | None = None,
        xid: XidView | None = None,
        kernel_log: KernelLogView | None = None,
        attribute_kubernetes: AttributeKubernetes | None = None,
        counters_due: CountersDue | None = None,
        fabric_daemons: FabricDaemons | None = None,
        retries: bool = True,
        watched: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.interval_seconds = interval_seconds
        self.timeout_seconds = timeout_seconds
        self.collectors = collectors
        self._on_snapshot = on_snapshot
        self._attribute_processes = attribute_processes
        self._read_host = read_host
        self._xid = xid
        self._kernel_log = kernel_log
        self._attribute_kubernetes = attribute_kubernetes
        self._counters_due = counters_due  # None: every sample reads them
        self._fabric_daemons = fabric_daemons
        # someone watches the live page: the sample buffers are read every interval
        self._watched = watched or (lambda: False)
        self._host: tuple[HostSample | None, StageResult] | None = None  # the last host read
        self._retries = retries  # False for --once: nothing will retry, so do not say it will
        self._clock = clock
        self._monotonic = monotonic
        self._steps = WallClockSteps()  # the driver stamps its samples on the wall clock
        self._stepped_back_from: float | None = None  # wall time before the last step back

        self._nvml_up = False
        self._nvml_down_reason: str | None = "not initialised yet"
        self._retry_at = 0.0
        self._backoff = BACKOFF_INITIAL_SECONDS
        self._init_errors: dict[str, int] = {}
        self._driver: DriverInfo | None = None
        self._slots: dict[int, _DeviceSlot] = {}  # by NVML index
        self._readers: ReaderPool[DeviceRaw] = ReaderPool()
        # by (index, UUID), as the series they feed (labels gpu and uuid): two boards that
        # report one UUID (a cloned VBIOS) are two GPUs, never one counter fed twice
        self._counters: dict[tuple[int, str], _Counters] = {}
        self._render: StageResult | None = None  # the last publication
        self._memory_patterns = MemoryPatterns()  # per GPU, MIG instance and process
        self._samples_total = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat: float | None = None
        self._failure: str | None = None
        self.latest: Snapshot | None = None
        self.on_nvml_init: list[Callable[[], None]] = []  # e.g. re-arm the Xid listener

    # Thread lifecycle --------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = 1.0, *, shutdown_nvml: bool = True) -> None:
        """Stop sampling; waits at most `timeout_seconds`, never for a stuck driver call.

        NVML is shut down unless a call may still be inside it (a stuck device read, or
        the caller says another thread may be: `shutdown_nvml=False`).
        """
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout_seconds)
        self._readers.stop()
        busy = thread is not None and thread.is_alive()
        if shutdown_nvml and not busy and not self.any_device_stuck():
            self.backend.shutdown()

    @property
    def nvml_up(self) -> bool:
        return self._nvml_up

    def wake(self) -> None:
        """Start the next sample now (a new interval applies at once)."""
        self._wake.set()

    def any_device_stuck(self) -> bool:
        return self._readers.any_stuck()

    def heartbeat(self) -> float | None:
        """Monotonic time the sampling loop last went round (for liveness)."""
        return self._heartbeat

    def failure(self) -> str | None:
        """Why the sampling thread ended when it was meant to run; None while it runs."""
        if self._failure is not None:
            return self._failure
        thread = self._thread
        if thread is not None and not thread.is_alive() and not self._stop.is_set():
            return "the sampler thread ended"
        return None

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # never silent: liveness and readiness turn red
            self._failure = f"the sampler thread died: {error!r}"
            log.critical("sampler thread died", exc_info=True)

    def _loop(self) -> None:
        next_due = self._monotonic()
        while not self._stop.is_set():
            self._heartbeat = self._monotonic()
            try:
                self.sample_once()
            except Exception:  # a bug must not end sampling; the next interval retries
                log.exception("sample failed")
            self._heartbeat = now = self._monotonic()
            next_due += self.interval_seconds
            if next_due < now:  # fell behind (a slow sample): skip, do not burst
                next_due = now + self.interval_seconds
            if self._wake.wait(next_due - now):
                self._wake.clear()
                next_due = self._monotonic()

    # One sample --------------------------------------------------------------------

    def sample_once(self) -> Snapshot:
        """Take one sample, publish it and return it."""
        collectors = self.collectors  # one set for the whole sample, whatever SIGHUP does
        started_wall = self._clock()
        started = self._monotonic()
        stepped = self._steps.step(started_wall, started)
        if stepped:
            log.warning("the wall clock stepped", extra={"seconds": round(stepped, 3)})
            if stepped < 0:  # the driver's entries written before it lie ahead until then
                self._stepped_back_from = max(
                    self._stepped_back_from or 0.0, started_wall - stepped
                )
            for counters in self._counters.values():
                counters.gpu.wall_stepped(stepped)
                counters.memory_controller.wall_stepped(stepped)
                counters.process_seconds.wall_stepped(stepped)
        stages: dict[str, StageResult] = {}

        devices: tuple[DeviceSample, ...] = ()
        raws: dict[int, DeviceRaw] = {}
        t0 = self._monotonic()
        devices_ok = False
        if self._ensure_nvml():
            try:
                raws, down, lost = self._read_devices(collectors)
                raws = self._without_entries_ahead(raws, started_wall)
                devices_ok = not down
            except NvmlUnavailable as error:
                self._nvml_lost(error)
                raws, down, lost = {}, {}, set()
            devices = self._assemble(raws, down, collectors, lost)
        stages["devices"] = StageResult(self._monotonic() - t0, devices_ok)

        attribution: Mapping[int, Attribution] = {}
        host_pid_namespace: bool | None = None
        holder_scan: HolderScanState | None = None
        if "process" in collectors and self._attribute_processes is not None:
            host_pid_namespace = self._attribute_processes.sees_host_pid_namespace
            holder_scan = self._attribute_processes.holder_scan
            t0 = self._monotonic()
            ok = True
            try:
                if self._due("process"):
                    attribution = self._attribute_processes(raws)
                else:
                    attribution = self._attribute_processes(raws, fresh=False)
            except Exception:
                ok = False
                log.exception("process attribution failed")
            stages["processes"] = StageResult(self._monotonic() - t0, ok)
            devices = tuple(
                self._with_sm_seconds(_with_attribution(d, attribution), raws.get(d.index))
                for d in devices
            )

        kubernetes: KubernetesState | None = None
        if "kubernetes" in collectors and self._attribute_kubernetes is not None:
            try:
                devices, kubernetes = self._attribute_kubernetes(devices)
            except Exception:
                log.exception("kubernetes attribution failed")
                kubernetes = KubernetesState(up=False, reason="attribution failed (a bug)")

        try:
            devices = self._memory_patterns.observe(
                devices, now=self._monotonic(), wall=started_wall
            )
        except Exception:  # a bug there must not cost the sample: its series are left out
            log.exception("judging the memory patterns failed")

        host: HostSample | None = None
        if "host" in collectors and self._read_host is not None:
            if self._host is None or self._due("host"):
                t0 = self._monotonic()
                read = self._read_host()
                self._host = read, StageResult(self._monotonic() - t0, read is not None)
            host, stages["host"] = self._host
        else:
            self._host = None

        xid: Mapping[str, XidState] = {}
        xid_unattributed: Mapping[str, XidState] = {}
        kernel_log: KernelLogState | None = None
        if "xid" in collectors and (self._xid is not None or self._kernel_log is not None):
            t0 = self._monotonic()
            events = self._xid.state() if self._xid is not None else {}
            kernel_log = self._kernel_log.state() if self._kernel_log is not None else None
            xid, xid_unattributed = merge_xids(events, kernel_log, devices)
            reading = (self._xid is not None and self._xid.listening) or (
                kernel_log is not None and kernel_log.up
            )
            stages["xid"] = StageResult(self._monotonic() - t0, reading)

        fabric_daemons: FabricDaemonState | None = None
        if "health" in collectors and self._fabric_daemons is not None and self._nvml_up:
            try:
                fabric_daemons = self._fabric_daemons(devices)
            except Exception:
                log.exception("looking for the fabric daemons failed")

        if self._render is not None:
            stages["render"] = self._render

        finished = self._monotonic()
        self._samples_total += 1
        snapshot = Snapshot(
            timestamp_seconds=started_wall + (finished - started),
            monotonic_seconds=finished,
            duration_seconds=finished - started,
            samples_total=self._samples_total,
            backend=self.backend.kind,
            nvml_up=self._nvml_up,
            nvml_down_reason=self._nvml_down_reason,
            driver=self._driver if self._nvml_up else None,
            devices=devices,
            host=host,
            xid=xid,
            xid_unattributed=xid_unattributed,
            kernel_log=kernel_log,
            nvml_errors=self.backend.errors.snapshot(),
            nvml_calls=self.backend.usage.snapshot(),
            nvml_calls_seconds=time.monotonic() - self.backend.usage.since,
            nvml_init_errors=dict(self._init_errors),
            collectors=collectors,
            stages=stages,
            host_pid_namespace=host_pid_namespace,
            holder_scan=holder_scan,
            kubernetes=kubernetes,
            fabric_daemons=fabric_daemons,
        )
        self._publish(snapshot)
        # after it is served: readiness (`health.readiness`) reads this, and a scrape sent
        # once /healthz says ready must find a body, not 503
        self.latest = snapshot
        return snapshot

    def _due(self, collector: str) -> bool:
        """Whether this sample reads the /proc counters of `collector`."""
        due = self._counters_due
        return due is None or due(collector, self.interval_seconds)

    def _publish(self, snapshot: Snapshot) -> None:
        """Hand the snapshot on (render it); the outcome is the next sample's `render`."""
        t0 = self._monotonic()
        try:
            self._on_snapshot(snapshot)
        except Exception:
            self._render = StageResult(self._monotonic() - t0, False)
            log.exception("publishing the sample failed; the previous one is still served")
            return
        self._render = StageResult(self._monotonic() - t0, True)

    def _ensure_nvml(self) -> bool:
        """Initialise NVML if it is down and its backoff has passed."""
        if self._nvml_up:
            return True
        now = self._monotonic()
        if now < self._retry_at:
            return False
        try:
            self.backend.init()
            driver = self.backend.driver_info()
        except NvmlUnavailable as error:
            self._init_failed(error, now)
            return False
        log.info(
            "NVML initialised" if self.backend.kind == "nvml" else "simulated NVML initialised",
            extra={"driver_version": driver.driver_version, "backend": self.backend.kind},
        )
        self._nvml_up = True
        self._nvml_down_reason = None
        self._backoff = BACKOFF_INITIAL_SECONDS
        self._driver = driver
        for slot in self._slots.values():
            slot.static = None  # indices may now name other GPUs
        for counters in self._counters.values():  # driver timestamps restart; totals do not
            counters.gpu.rebase()
            counters.memory_controller.rebase()
            counters.process_utilization_us = 0
            counters.process_seconds.rebase()
            counters.memory.rebase()
        for hook in self.on_nvml_init:
            hook()
        return True

    def _init_failed(self, error: NvmlUnavailable, now: float) -> None:
        self._init_errors[error.error] = self._init_errors.get(error.error, 0) + 1
        first = self._nvml_down_reason != error.reason
        self._nvml_down_reason = error.reason
        self._retry_at = now + self._backoff
        if not self._retries:
            log.warning("NVML unavailable", extra={"reason": error.reason})
        else:
            (log.warning if first else log.debug)(
                "NVML unavailable, retrying with backoff",
                extra={"reason": error.reason, "retry_in_seconds": self._backoff},
            )
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_SECONDS)

    def _nvml_lost(self, error: NvmlUnavailable) -> None:
        log.error("NVML stopped answering", extra={"reason": error.reason})
        self._nvml_up = False
        self._nvml_down_reason = error.reason
        self._backoff = BACKOFF_INITIAL_SECONDS
        self._retry_at = self._monotonic() + self._backoff
        if not self.any_device_stuck():
            self.backend.shutdown()

    def _slot(self, index: int) -> _DeviceSlot:
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = _DeviceSlot()
        return slot

    def _read_devices(
        self, collectors: frozenset[str]
    ) -> tuple[dict[int, DeviceRaw], dict[int, str], set[int]]:
        """Every device read by the readers under one deadline: (raws, down reasons)."""
        count = self.backend.device_count()
        now = time.monotonic()  # deadlines are real time, whatever clock the tests inject
        deadline = now + self.timeout_seconds
        reads: dict[int, Callable[[], DeviceRaw]] = {}
        raws: dict[int, DeviceRaw] = {}
        down: dict[int, str] = {}
        lost: set[int] = set()  # of `down`, those NVML says are lost
        for index in range(count):
            slot = self._slot(index)
            stuck = self._readers.stuck_since(index)
            if stuck is not None:
                down[index] = f"NVML call stuck for {now - stuck:.0f}s (timeout)"
                continue
            reads[index] = self._reader(index, slot, collectors)
        # a hang is handed on well within the deadline, so the other GPUs still make it
        self._readers.handoff_seconds = min(HANDOFF_SECONDS, self.timeout_seconds / 4)
        jobs = self._readers.read(reads, deadline)
        for index, job in jobs.items():
            if not job.done:
                down[index] = f"NVML call did not return within {self.timeout_seconds:g}s"
            elif isinstance(job.error, NotStarted):
                down[index] = f"not read within {self.timeout_seconds:g}s (other GPUs' reads hung)"
            elif isinstance(job.error, NvmlUnavailable):
                raise job.error
            elif isinstance(job.error, DeviceLost):
                down[index] = job.error.reason
                if job.error.error == LOST:
                    lost.add(index)
            elif job.error is not None:
                log.error("reading GPU %d failed", index, exc_info=job.error)
                down[index] = f"read failed: {job.error!r}"
            elif job.result is not None:
                raws[index] = job.result
        return raws, down, lost

    def _without_entries_ahead(
        self, raws: dict[int, DeviceRaw], now_wall: float
    ) -> dict[int, DeviceRaw]:
        """After a step back of the wall clock, until it is back where it was, the driver
        still holds entries stamped before the step, ahead of now: they were counted
        before it, and would put the cursors back where nothing newer comes. Left out."""
        if self._stepped_back_from is None:
            return raws
        if now_wall > self._stepped_back_from:
            self._stepped_back_from = None
            return raws
        limit = round((now_wall + STEP_SECONDS) * 1e6)
        return {
            index: replace(
                raw,
                gpu_samples=not_after(raw.gpu_samples, limit),
                memory_controller_samples=not_after(raw.memory_controller_samples, limit),
                process_utilization=not_after(raw.process_utilization, limit),
            )
            for index, raw in raws.items()
        }

    def _reader(
        self, index: int, slot: _DeviceSlot, collectors: frozenset[str]
    ) -> Callable[[], DeviceRaw]:
        """The function a reader runs for one device: every driver read of the interval."""
        backend = self.backend
        static = slot.static
        counters = self._counters.get((index, static.uuid)) if static is not None else None
        if static is not None and self._monotonic() - slot.static_at >= SLOW_REFRESH_SECONDS:
            static = None  # limits (max clocks, thresholds, PCIe max) are re-read
        gpu_since = counters.gpu.cursor_us if counters else 0
        mc_since = counters.memory_controller.cursor_us if counters else 0
        proc_since = counters.process_utilization_us if counters else 0
        if counters is not None and counters.process_seconds.step_us:
            proc_since = 0  # a step back of the wall clock: the whole buffer, once
        gpu_read = mc_read = BufferRead.READ
        in_use = True  # not idle (`buffer_reads.py`), whatever GPM says of its engines
        if counters is not None:
            gpu_read, mc_read = self._buffer_reads(counters)
            in_use = gpu_read is not BufferRead.IDLE or not counters.idle

        def read() -> DeviceRaw:
            device = static if static is not None else backend.device_static(index)
            gpu_samples = mc_samples = None
            # first: the reading may take its ratios from them; as often as they need
            if "utilization" in collectors:
                if gpu_read is BufferRead.READ:
                    gpu_samples = backend.utilization_samples(index, "gpu", gpu_since)
                if mc_read is BufferRead.READ:
                    mc_samples = backend.utilization_samples(index, "memory_controller", mc_since)
            reading = backend.device_reading(index, collectors)
            processes = utilization = None
            if "process" in collectors:
                processes = backend.processes(index, in_use=in_use)
                if processes:  # per-process entries credit listed processes only
                    utilization = backend.process_utilization(index, proc_since)
                elif processes is not None:
                    utilization = []  # nothing listed: no entry would credit a process
            return DeviceRaw(device, reading, gpu_samples, mc_samples, processes, utilization)

        return read

    def _buffer_reads(self, counters: _Counters) -> tuple[BufferRead, BufferRead]:
        """This interval's reads of the GPU's and the memory controller's sample buffers
        (`buffer_reads.py`), each kept as the previous decision for the next."""
        watched, now = self._watched(), self._monotonic()
        decisions = []
        for counter, quiet, previous in (
            (counters.gpu, counters.gpu_quiet, counters.buffer_read),
            (
                counters.memory_controller,
                counters.memory_controller_quiet,
                counters.memory_controller_read,
            ),
        ):
            decisions.append(
                buffer_read(
                    counter,
                    idle=counters.idle or quiet,
                    watched=watched,
                    now_monotonic=now,
                    interval_seconds=self.interval_seconds,
                    previous=previous,
                )
            )
        counters.buffer_read, counters.memory_controller_read = decisions
        return counters.buffer_read, counters.memory_controller_read

    def _assemble(
        self,
        raws: Mapping[int, DeviceRaw],
        down: Mapping[int, str],
        collectors: frozenset[str],
        lost: Collection[int] = (),
    ) -> tuple[DeviceSample, ...]:
        now = self._monotonic()
        out: list[DeviceSample] = []
        for index in sorted({*raws, *down}):
            slot = self._slot(index)
            reason = down.get(index)
            if reason is not None:
                if slot.down_reason is None:
                    log.error("GPU down", extra={"gpu": index, "reason": reason})
                slot.down_reason = reason
                out.append(
                    DeviceSample(
                        index, slot.static, up=False, down_reason=reason, lost=index in lost
                    )
                )
                continue
            raw = raws[index]
            if slot.down_reason is not None:
                log.warning("GPU back", extra={"gpu": index})
                slot.down_reason = None
            if raw.static is not slot.static:
                slot.static, slot.static_at = raw.static, now
            key = (index, raw.static.uuid)
            counters = self._counters.get(key)
            if counters is None:  # not made to be thrown away at every sample
                counters = self._counters[key] = _Counters()
            busy = mc_busy = _Busy(None, None)
            utilization = raw.reading.utilization
            if "utilization" in collectors:
                busy = _integrate(
                    counters.gpu,
                    raw.gpu_samples,
                    utilization.gpu_ratio if utilization else None,
                    now,
                    counters.buffer_read,
                )
                mc_busy = _integrate(
                    counters.memory_controller,
                    raw.memory_controller_samples,
                    utilization.memory_controller_ratio if utilization else None,
                    now,
                    counters.memory_controller_read,
                )
            memory = raw.reading.memory
            at_baseline = memory is not None and counters.memory.at_baseline(
                memory.used_bytes, memory.reserved_bytes
            )
            counters.idle = (  # see buffer_reads.py: never the instantaneous reading alone
                raw.processes is not None
                and not raw.processes
                and utilization is not None
                and utilization.gpu_ratio == 0
                and at_baseline
            )
            gpm = raw.reading.gpm
            counters.gpu_quiet = engine_quiet(
                gpm.graphics_engine_ratio if gpm else None,
                utilization.gpu_ratio if utilization else None,
            )
            counters.memory_controller_quiet = engine_quiet(
                gpm.dram_ratio if gpm else None,
                utilization.memory_controller_ratio if utilization else None,
            )
            if raw.process_utilization:
                newest = max(u.timestamp_us for u in raw.process_utilization)
                if counters.process_seconds.stepped_back(raw.process_utilization):
                    newest = raw.process_utilization[-1].timestamp_us  # the last written
                    counters.process_utilization_us = newest  # the driver stepped back too
                counters.process_utilization_us = max(counters.process_utilization_us, newest)
            activity, mig_activity = _integrate_activity(counters, raw, collectors)
            out.append(
                DeviceSample(
                    index=index,
                    static=raw.static,
                    up=True,
                    reading=raw.reading,
                    busy_seconds=busy.seconds,
                    memory_controller_busy_seconds=mc_busy.seconds,
                    busy_uncovered_seconds=busy.uncovered_seconds,
                    busy_read=counters.buffer_read is not BufferRead.WAIT,
                    memory_controller_busy_uncovered_seconds=mc_busy.uncovered_seconds,
                    activity=activity,
                    mig_activity=mig_activity,
                )
            )
        return tuple(out)

    def _with_sm_seconds(self, device: DeviceSample, raw: DeviceRaw | None) -> DeviceSample:
        """The device's process series with their SM seconds integrated from this
        interval's per-process samples (`process_seconds.py`); unchanged where the driver
        gives no per-process samples (MIG, unsupported)."""
        extra = device.attribution
        if extra is None or raw is None or raw.process_utilization is None:
            return device
        counters = self._counters.get((device.index, raw.static.uuid))
        if counters is None:
            return device
        starts = {int(p.pid): p.start_time_seconds for p in extra.processes if p.pid}
        seconds = counters.process_seconds.add(raw.process_utilization, starts)
        if not extra.processes:  # nothing to give seconds to (an idle GPU): no copies
            return device
        processes = tuple(
            replace(p, sm_seconds=seconds[int(p.pid)]) if p.pid else p for p in extra.processes
        )
        return replace(device, attribution=replace(extra, processes=processes))


def _with_attribution(device: DeviceSample, attribution: Mapping[int, Attribution]) -> DeviceSample:
    extra = attribution.get(device.index)
    return device if extra is None else device_with(device, attribution=extra)


def _integrate_activity(
    counters: _Counters, raw: DeviceRaw, collectors: frozenset[str]
) -> tuple[ActivityTotals | None, dict[int, ActivityTotals]]:
    """Advance the GPM counters of the device and its MIG GPU instances."""
    reading = raw.reading
    counters.activity.add(reading.gpm, reading.nvlink)
    if "gpm" not in collectors:
        return counters.activity.totals(), {}
    mig_totals: dict[int, ActivityTotals] = {}
    uuids: dict[int, str] = {}
    for device in reading.mig.devices if reading.mig else ():
        uuids.setdefault(device.gpu_instance, device.uuid)
    live: dict[tuple[int, str], ActivityCounter] = {}  # an instance gone is dropped
    for gpu_instance, instance in (reading.mig.instances if reading.mig else {}).items():
        key = (gpu_instance, uuids.get(gpu_instance, ""))
        counter = live[key] = counters.mig_activity.get(key) or ActivityCounter()
        counter.add(instance.gpm)
        totals = counter.totals()
        if totals is not None:
            mig_totals[gpu_instance] = totals
    counters.mig_activity = live
    return counters.activity.totals(), mig_totals


class _Busy(NamedTuple):
    """One busy counter's totals in a sample; None where not known."""

    seconds: float | None
    uncovered_seconds: float | None  # only from the driver's buffer


def _integrate(
    counter: BusyCounter,
    samples: Sequence[UtilizationSample] | None,
    latest_ratio: float | None,
    now_monotonic: float,
    buffers: BufferRead = BufferRead.READ,
) -> _Busy:
    """Advance one busy counter; None when neither the buffer nor a reading exists. A
    buffer left unread this interval (`buffer_reads.py`) keeps its totals: its entries
    are counted when it is read."""
    if buffers is not BufferRead.READ and counter.read_monotonic is not None:
        if buffers is BufferRead.IDLE:
            counter.hold_idle(now_monotonic)
        return _Busy(counter.seconds, counter.uncovered_seconds)
    if samples is not None:
        counter.add_samples(samples, now_monotonic)
        return _Busy(counter.seconds, counter.uncovered_seconds)
    if latest_ratio is None:
        return _Busy(None, None)
    counter.add_reading(latest_ratio, now_monotonic)
    return _Busy(counter.seconds, None)
