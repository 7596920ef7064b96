"""The sampler: reads every GPU each interval and publishes one immutable Snapshot.

It owns NVML's lifecycle (initialise, re-initialise with capped backoff when the driver
goes away), the busy-time counters, and the per-device deadline. Scrapes never reach
here: they only read the latest Snapshot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpu_exporter.backends.base import (
    Backend,
    DeviceLost,
    DeviceReading,
    DeviceStatic,
    DriverInfo,
    GpuProcess,
    NvmlUnavailable,
    ProcessUtilization,
    UtilizationSample,
)
from gpu_exporter.busy import BusyCounter
from gpu_exporter.device_workers import DeviceWorker, Job, wait_all
from gpu_exporter.snapshot import DeviceSample, HostSample, ProcessSample, Snapshot, XidState

log = logging.getLogger(__name__)

BACKOFF_INITIAL_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0


@dataclass(frozen=True)
class DeviceRaw:
    """What one device's worker read in one interval."""

    static: DeviceStatic
    reading: DeviceReading
    gpu_samples: Sequence[UtilizationSample] | None
    memory_controller_samples: Sequence[UtilizationSample] | None
    processes: Sequence[GpuProcess] | None
    process_utilization: Sequence[ProcessUtilization] | None


@dataclass(frozen=True)
class Attribution:
    """What process attribution adds to one device."""

    processes: tuple[ProcessSample, ...]  # capped, with the `other` roll-up
    unattributed_memory_bytes: int | None
    process_count: int  # distinct PIDs holding a context, before the cap


ProcessAttributor = Callable[[Mapping[int, DeviceRaw]], Mapping[int, Attribution]]
HostReader = Callable[[], HostSample | None]
XidSource = Callable[[], Mapping[str, XidState]]


@dataclass
class _Cursors:
    gpu: BusyCounter
    memory_controller: BusyCounter
    process_utilization_us: int = 0


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
        attribute_processes: ProcessAttributor | None = None,
        read_host: HostReader | None = None,
        xid_state: XidSource | None = None,
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
        self._xid_state = xid_state
        self._clock = clock
        self._monotonic = monotonic

        self._nvml_up = False
        self._nvml_down_reason: str | None = "not initialised yet"
        self._retry_at = 0.0
        self._backoff = BACKOFF_INITIAL_SECONDS
        self._init_errors: dict[str, int] = {}
        self._driver: DriverInfo | None = None
        self._static: dict[int, DeviceStatic] = {}
        self._cursors: dict[str, _Cursors] = {}
        self._workers: dict[int, DeviceWorker[DeviceRaw]] = {}
        self._down: dict[int, str] = {}
        self._samples_total = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.latest: Snapshot | None = None
        self.on_nvml_init: list[Callable[[], None]] = []  # e.g. re-arm the Xid listener

    # Thread lifecycle --------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = 1.0) -> None:
        """Stop sampling; waits at most `timeout_seconds`, never for a stuck driver call."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)
        for worker in self._workers.values():
            worker.stop()
        if not self.any_device_stuck():
            self.backend.shutdown()

    def any_device_stuck(self) -> bool:
        return any(w.stuck_since is not None for w in self._workers.values())

    def _run(self) -> None:
        next_due = self._monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # a bug must not end sampling; the next interval retries
                log.exception("sample failed")
            next_due += self.interval_seconds
            now = self._monotonic()
            if next_due < now:  # fell behind (a slow sample): skip, do not burst
                next_due = now + self.interval_seconds
            self._stop.wait(next_due - now)

    # One sample --------------------------------------------------------------------

    def sample_once(self) -> Snapshot:
        """Take one sample, publish it and return it."""
        started_wall = self._clock()
        started = self._monotonic()
        devices: tuple[DeviceSample, ...] = ()
        if self._ensure_nvml():
            try:
                devices = self._sample_devices()
            except NvmlUnavailable as error:
                self._nvml_lost(error)
                devices = ()
        host = self._read_host() if self._read_host is not None else None
        finished = self._monotonic()
        self._samples_total += 1
        snapshot = Snapshot(
            timestamp_seconds=started_wall + (finished - started),
            duration_seconds=finished - started,
            samples_total=self._samples_total,
            backend=self.backend.kind,
            nvml_up=self._nvml_up,
            nvml_down_reason=self._nvml_down_reason,
            driver=self._driver if self._nvml_up else None,
            devices=devices,
            host=host,
            xid=self._xid_state() if self._xid_state is not None else {},
            nvml_errors=self.backend.errors.snapshot(),
            nvml_init_errors=dict(self._init_errors),
            collectors=self.collectors,
        )
        self.latest = snapshot
        self._on_snapshot(snapshot)
        return snapshot

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
            "NVML initialised",
            extra={"driver_version": driver.driver_version, "backend": self.backend.kind},
        )
        self._nvml_up = True
        self._nvml_down_reason = None
        self._backoff = BACKOFF_INITIAL_SECONDS
        self._driver = driver
        self._static.clear()  # indices may now name other GPUs
        for cursors in self._cursors.values():  # driver timestamps restart; totals do not
            cursors.gpu.rebase()
            cursors.memory_controller.rebase()
            cursors.process_utilization_us = 0
        for hook in self.on_nvml_init:
            hook()
        return True

    def _init_failed(self, error: NvmlUnavailable, now: float) -> None:
        self._init_errors[error.error] = self._init_errors.get(error.error, 0) + 1
        first = self._nvml_down_reason != error.reason
        self._nvml_down_reason = error.reason
        self._retry_at = now + self._backoff
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

    def _sample_devices(self) -> tuple[DeviceSample, ...]:
        count = self.backend.device_count()
        now = time.monotonic()  # deadlines are real time, whatever clock the tests inject
        deadline = now + self.timeout_seconds
        jobs: dict[int, Job[DeviceRaw]] = {}
        results: dict[int, DeviceSample | DeviceRaw] = {}
        for index in range(count):
            worker = self._workers.get(index)
            if worker is None:
                worker = self._workers[index] = DeviceWorker(f"gpu{index}-reader")
            stuck = worker.stuck_since
            if stuck is not None:
                results[index] = self._down_sample(
                    index, f"NVML call stuck for {now - stuck:.0f}s (timeout)"
                )
                continue
            jobs[index] = worker.submit(self._reader(index))
        wait_all(list(jobs.values()), deadline)
        for index, job in jobs.items():
            if not job.done.is_set():
                results[index] = self._down_sample(
                    index, f"NVML call did not return within {self.timeout_seconds:g}s"
                )
            elif isinstance(job.error, NvmlUnavailable):
                raise job.error
            elif isinstance(job.error, DeviceLost):
                results[index] = self._down_sample(index, job.error.reason)
            elif job.error is not None:
                log.error("reading GPU %d failed", index, exc_info=job.error)
                results[index] = self._down_sample(index, f"read failed: {job.error!r}")
            elif job.result is not None:
                results[index] = job.result
        return self._assemble(results)

    def _reader(self, index: int) -> Callable[[], DeviceRaw]:
        """The function a worker runs for one device: every driver read of the interval."""
        backend = self.backend
        collectors = self.collectors
        static = self._static.get(index)
        cursors = self._cursors.get(static.uuid) if static is not None else None
        gpu_since = cursors.gpu.cursor_us if cursors else 0
        mc_since = cursors.memory_controller.cursor_us if cursors else 0
        proc_since = cursors.process_utilization_us if cursors else 0

        def read() -> DeviceRaw:
            device = static if static is not None else backend.device_static(index)
            reading = backend.device_reading(index, collectors)
            gpu_samples = mc_samples = None
            if "utilization" in collectors:
                gpu_samples = backend.utilization_samples(index, "gpu", gpu_since)
                mc_samples = backend.utilization_samples(index, "memory_controller", mc_since)
            processes = utilization = None
            if "process" in collectors:
                processes = backend.processes(index)
                utilization = backend.process_utilization(index, proc_since)
            return DeviceRaw(device, reading, gpu_samples, mc_samples, processes, utilization)

        return read

    def _down_sample(self, index: int, reason: str) -> DeviceSample:
        if self._down.get(index) is None:
            log.error("GPU down", extra={"gpu": index, "reason": reason})
        self._down[index] = reason
        return DeviceSample(
            index=index, static=self._static.get(index), up=False, down_reason=reason
        )

    def _assemble(
        self, results: Mapping[int, DeviceSample | DeviceRaw]
    ) -> tuple[DeviceSample, ...]:
        now = self._monotonic()
        raws = {i: r for i, r in results.items() if isinstance(r, DeviceRaw)}
        attribution: Mapping[int, Attribution] = {}
        if self._attribute_processes is not None and "process" in self.collectors:
            attribution = self._attribute_processes(raws)
        out: list[DeviceSample] = []
        for index in sorted(results):
            result = results[index]
            if isinstance(result, DeviceSample):
                out.append(result)
                continue
            if self._down.pop(index, None) is not None:
                log.warning("GPU back", extra={"gpu": index})
            self._static[index] = result.static
            cursors = self._cursors.setdefault(
                result.static.uuid, _Cursors(BusyCounter(), BusyCounter())
            )
            busy = mc_busy = None
            if "utilization" in self.collectors:
                busy = _integrate(
                    cursors.gpu, result.gpu_samples, result.reading.utilization_ratio, now
                )
                mc_busy = _integrate(
                    cursors.memory_controller,
                    result.memory_controller_samples,
                    result.reading.memory_controller_utilization_ratio,
                    now,
                )
            if result.process_utilization:
                cursors.process_utilization_us = max(
                    cursors.process_utilization_us,
                    max(u.timestamp_us for u in result.process_utilization),
                )
            extra = attribution.get(index)
            out.append(
                DeviceSample(
                    index=index,
                    static=result.static,
                    up=True,
                    reading=result.reading,
                    busy_seconds=busy,
                    memory_controller_busy_seconds=mc_busy,
                    processes=extra.processes if extra is not None else None,
                    process_count=extra.process_count if extra is not None else None,
                    unattributed_memory_bytes=(
                        extra.unattributed_memory_bytes if extra is not None else None
                    ),
                )
            )
        return tuple(out)


def _integrate(
    counter: BusyCounter,
    samples: Sequence[UtilizationSample] | None,
    latest_ratio: float | None,
    now_monotonic: float,
) -> float | None:
    """Advance one busy counter; None when neither the buffer nor a reading exists."""
    if samples is not None:
        counter.add_samples(samples, now_monotonic)
        return counter.seconds
    if latest_ratio is None:
        return None
    counter.add_reading(latest_ratio, now_monotonic)
    return counter.seconds
