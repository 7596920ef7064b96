"""The immutable result of one sample: everything a scrape needs, and nothing else.

The sampler builds one `Snapshot` per interval; the collector turns it into metric
families without touching NVML. Values are in base SI units; `None` means not supported
or unknown, and its series is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_exporter.backends.base import DeviceReading, DeviceStatic, DriverInfo


@dataclass(frozen=True)
class ProcessSample:
    """One process on one GPU, or the `other` roll-up of those beyond the cap."""

    pid: str  # decimal PID, or "" for the `other` roll-up
    process: str  # command name (comm), "other" for the roll-up, "" if unknown
    user: str  # user name, or numeric uid when it has no name; "" if unknown
    context: str  # "compute" or "graphics"
    container_id: str = ""
    pod_uid: str = ""
    systemd_unit: str = ""
    slurm_job_id: str = ""
    cmdline: str | None = None  # only with --collector.process.cmdline
    memory_used_bytes: int | None = None
    sm_ratio: float | None = None  # 0..1
    memory_controller_ratio: float | None = None  # 0..1
    cpu_seconds: float | None = None  # process and all descendants
    workers: int | None = None  # number of descendant processes
    resident_memory_bytes: int | None = None
    start_time_seconds: float | None = None  # Unix time


@dataclass(frozen=True)
class XidState:
    """Xid errors seen on one GPU since the exporter started."""

    counts: Mapping[int, int] = field(default_factory=dict)  # xid code -> count
    last_timestamp_seconds: float | None = None  # Unix time


@dataclass(frozen=True)
class DeviceSample:
    """One GPU in one sample. `reading` is None while the GPU is down."""

    index: int
    static: DeviceStatic | None  # None when the GPU was lost before it was identified
    up: bool
    down_reason: str | None = None
    reading: DeviceReading | None = None
    busy_seconds: float | None = None  # gpu_busy_seconds_total
    memory_controller_busy_seconds: float | None = None
    processes: tuple[ProcessSample, ...] | None = None  # None: not collected
    process_count: int | None = None  # distinct PIDs on the GPU, before the cap
    unattributed_memory_bytes: int | None = None

    @property
    def uuid(self) -> str:
        return self.static.uuid if self.static is not None else ""


@dataclass(frozen=True)
class HostSample:
    """Host context next to the GPUs (collector `host`)."""

    cpu_busy_seconds: float  # all CPUs, non-idle time
    cpu_iowait_seconds: float | None  # None where the kernel does not report it
    cpus: int
    memory_total_bytes: int
    memory_available_bytes: int
    load1: float


@dataclass(frozen=True)
class Snapshot:
    """The exporter's whole view of the host at `timestamp_seconds`."""

    timestamp_seconds: float  # Unix time the sample finished
    duration_seconds: float  # wall time the sample took
    samples_total: int
    backend: str  # "nvml" or "simulated"
    nvml_up: bool
    nvml_down_reason: str | None = None
    driver: DriverInfo | None = None
    devices: tuple[DeviceSample, ...] = ()
    host: HostSample | None = None
    xid: Mapping[str, XidState] = field(default_factory=dict)  # by uuid
    nvml_errors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    nvml_init_errors: Mapping[str, int] = field(default_factory=dict)
    collectors: frozenset[str] = frozenset()

    @property
    def gpus(self) -> int:
        return len(self.devices)
