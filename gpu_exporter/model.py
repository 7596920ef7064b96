"""The data model: every frozen record one stage of the exporter hands to the next.

    sources (NVML, simulated host, /proc, Xid events)
      -> DeviceStatic, DeviceReading, UtilizationSample, GpuProcess, HostProcess, ...
    attribution -> Attribution (ProcessSample per GPU process)
    sampling    -> Snapshot (DeviceSample per GPU, HostSample, XidState, StageResult)
    metrics     -> the exposition, from the Snapshot alone

Every module of the package imports down toward this one; this one imports nothing of
the package. Values are in base SI units (bytes, seconds, watts, joules, hertz, degrees
Celsius, ratios in 0..1). `None` always means "not supported by this device or driver, or
unknown": its series is left out, never written as 0 or NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from gpu_exporter.records import Record, quick_init

# Names shared by readings and metrics ------------------------------------------------

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

CLOCK_EVENT_REASONS: tuple[str, ...] = (
    "sw_power_cap",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
"""The clocks-event reasons whose time the driver counts (R575 and later), named as in
THROTTLE_REASONS, as `gpu_clock_event_seconds_total{reason}` names them."""

PCIE_ERRORS: tuple[str, ...] = (
    "correctable",
    "nak_received",
    "nak_sent",
    "receiver_error",
    "bad_tlp",
    "bad_dllp",
    "non_fatal",
    "fatal",
    "unsupported_request",
    "lcrc",
)
"""PCIe link error counters, as `gpu_pcie_errors_total{error_type}` names them."""

RECOVERY_ACTIONS: Mapping[int, str] = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}
"""nvml.h's `nvmlDeviceGpuRecoveryAction_t` (NVML_GPU_RECOVERY_ACTION_*, nvml.h 13): what the
driver says the GPU needs, by code."""


def recovery_action_name(code: int) -> str:
    """The name of a recovery action code, or the number itself for one nvml.h does not name."""
    return RECOVERY_ACTIONS.get(code, str(code))


FABRIC_STATES: tuple[str, ...] = ("not_started", "in_progress", "completed")
"""The probe states of a GPU's registration in the NVLink fabric (NVML_GPU_FABRIC_STATE_*)."""

FABRIC_CONDITIONS: tuple[str, ...] = (
    "degraded_bandwidth",
    "route_recovery",
    "route_unhealthy",
    "access_timeout_recovery",
    "incorrect_configuration",
)
"""The conditions of the fabric health mask, as `gpu_fabric_health_condition{condition}`
names them."""

FABRIC_SUMMARIES: tuple[str, ...] = ("healthy", "unhealthy", "limited_capacity")
"""The fabric health summary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*)."""

STAGES: tuple[str, ...] = ("devices", "processes", "host", "xid", "render")
"""The stages of one sample, as `gpu_exporter_stage_*{stage}` names them."""

PIPES: tuple[str, ...] = ("tensor", "fp64", "fp32", "fp16", "integer")
"""SM pipes whose activity GPM measures, as `gpu_pipe_active_seconds_total{pipe}` names them."""

NVLINK_LEGACY_ERRORS: tuple[str, ...] = ("replay", "recovery", "crc_flit", "crc_data")
"""The data-link error counters of NVLink before NVLink5 (nvml.h 13: "unsupported for
Blackwell+")."""

NVLINK5_ERRORS: tuple[str, ...] = (
    "malformed_packet",
    "buffer_overrun",
    "rx",
    "rx_remote",
    "rx_general",
    "local_link_integrity",
    "tx_discard",
    "effective",
    "symbol",
)
"""NVLink5's error counters (Blackwell and later, nvml.h 13's NVML_FI_DEV_NVLINK_COUNT_*)."""

NVLINK_ERRORS: tuple[str, ...] = NVLINK_LEGACY_ERRORS + NVLINK5_ERRORS
"""NVLink error counters per link, as `gpu_nvlink_errors_total{error_type}` names them."""

NVLINK_RECOVERY_RESULTS: tuple[str, ...] = ("successful", "failed", "all")
"""NVLink5's link-recovery event counters, as `gpu_nvlink_link_recovery_events_total{result}`
names them; "all" is the driver's own counter of every event, whatever its result."""

NVLINK_BER_TYPES: tuple[str, ...] = ("effective", "symbol")
"""NVLink5's bit error rates, as `gpu_nvlink_ber{ber_type}` names them."""

DIRECTIONS: tuple[str, ...] = ("tx", "rx")
"""Traffic directions: tx leaves the GPU, rx arrives at it."""

TLIMIT_THRESHOLDS: tuple[str, ...] = (
    "shutdown",
    "slowdown",
    "max_operating",
    "memory_max_operating",
)
"""T.Limit thresholds (Ada and later), as `gpu_temperature_tlimit_threshold_celsius{threshold}`
names them: nvidia-smi's "GPU Shutdown", "GPU Slowdown", "GPU Max Operating" and "Memory
Max Operating T.Limit Temp"."""


# Identity ----------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class DriverInfo(Record):
    """Host-wide driver facts (the `nvidia-smi` header)."""

    driver_version: str | None  # e.g. "550.54.15"
    cuda_driver_version: str | None  # e.g. "12.4"


@dataclass(frozen=True, repr=False)
class DeviceStatic(Record):
    """Facts read once per device when it is first seen (`nvidia-smi -q` header part)."""

    index: int  # NVML index
    uuid: str
    name: str  # product name, e.g. "NVIDIA H100 80GB HBM3"
    pci_bus_id: str | None  # "00000000:18:00.0"
    serial: str | None  # None for boards that report none ("0")
    vbios_version: str | None
    compute_capability: str | None  # "9.0"
    max_clocks_hertz: Mapping[str, float]  # clock name -> Hz; unsupported clocks absent
    slowdown_temperature_celsius: float | None
    shutdown_temperature_celsius: float | None
    pcie_max_generation: int | None
    pcie_max_width: int | None  # lanes
    nvlink_links: int | None = None  # NVLink links of the board; None without NVLink
    minor_number: int | None = None  # N of /dev/nvidiaN
    # Ada and later: TLIMIT_THRESHOLDS name -> degrees Celsius relative to T.Limit, on the
    # scale of TemperatureReading.tlimit_margin_celsius (H100: slowdown -2, shutdown -8);
    # thresholds the driver does not give absent
    tlimit_thresholds_celsius: Mapping[str, float] = field(default_factory=dict)
    # where the GPU sits in its rack (Blackwell and later); None: NOT_SUPPORTED
    platform: PlatformInfo | None = None


@dataclass(frozen=True, repr=False)
class PlatformInfo(Record):
    """Where a GPU sits in its rack: `nvmlDeviceGetPlatformInfo` (R570 and later, v2
    structure; "for Blackwell or newer"), as `nvidia-smi -q` shows it under "Platform
    Info". Read with the limits, every SLOW_REFRESH_SECONDS."""

    chassis_serial: str  # the chassis (rack) serial number, e.g. "1821424001234"
    slot: int  # slot number in the chassis (switch trays counted)
    tray: int  # tray index among the compute trays (switch trays not counted)
    host_id: int  # index of the node within the slot
    peer_type: int  # the platform's NVLink peer type (switch present or not), as a code
    module_id: int  # the GPU's id within the node


# Readings: one record per collector, read every interval ------------------------------


@quick_init
@dataclass(frozen=True, repr=False)
class UtilizationReading(Record):
    """`nvidia-smi -q -d UTILIZATION`: the driver's latest sample period, ratios 0..1."""

    gpu_ratio: float | None = None  # share of time a kernel ran
    memory_controller_ratio: float | None = None  # share of time memory was read or written
    encoder_ratio: float | None = None
    decoder_ratio: float | None = None


@quick_init
@dataclass(frozen=True, repr=False)
class MemoryReading(Record):
    """`nvidia-smi -q -d MEMORY`, FB memory, in bytes."""

    total_bytes: int | None = None
    used_bytes: int | None = None  # the driver's reservation excluded where v2 exists
    free_bytes: int | None = None
    reserved_bytes: int | None = None  # None where only the v1 call exists


@quick_init
@dataclass(frozen=True, repr=False)
class TemperatureReading(Record):
    """`nvidia-smi -q -d TEMPERATURE` and the fan, in degrees Celsius and ratios."""

    gpu_celsius: float | None = None
    memory_celsius: float | None = None  # HBM; None on boards without the sensor
    fan_speed_ratio: float | None = None  # 0..1; None on fanless boards
    # degrees the GPU is below its T.Limit, negative past it (nvidia-smi "GPU T.Limit
    # Temp"); None before Ada and where the driver does not give it
    tlimit_margin_celsius: float | None = None


@quick_init
@dataclass(frozen=True, repr=False)
class PowerReading(Record):
    """`nvidia-smi -q -d POWER`, in watts and joules."""

    watts: float | None = None  # current draw
    limit_watts: float | None = None  # enforced limit
    energy_joules: float | None = None  # since the driver was loaded


@quick_init
@dataclass(frozen=True, repr=False)
class ClocksReading(Record):
    """`nvidia-smi -q -d CLOCK,PERFORMANCE`."""

    hertz: Mapping[str, float] = field(default_factory=dict)  # clock name -> Hz
    performance_state: int | None = None  # P-state number, 0 is fastest
    throttle_reasons: Mapping[str, bool] | None = None  # THROTTLE_REASONS -> active
    # CLOCK_EVENT_REASONS -> seconds the reason held the clocks down since driver load or
    # the last GPU reset (nvidia-smi's "Clocks Event Reasons Counters"); a reason the
    # driver does not count (before R575, or this GPU) is absent, never 0
    event_seconds: Mapping[str, float] = field(default_factory=dict)


@quick_init
@dataclass(frozen=True, repr=False)
class PcieReading(Record):
    """The current PCIe link (`nvidia-smi -q`, GPU Link Info)."""

    generation: int | None = None
    width: int | None = None  # lanes
    replay_errors: int | None = None  # since driver load
    # PCIE_ERRORS -> errors since driver load or the last GPU reset; a type the driver
    # does not count is absent, never 0
    errors: Mapping[str, int] = field(default_factory=dict)


@quick_init
@dataclass(frozen=True, repr=False)
class PcieThroughputReading(Record):
    """PCIe throughput over the driver's 20 ms window, in bytes per second."""

    tx_bytes_per_second: float | None = None
    rx_bytes_per_second: float | None = None


@quick_init
@dataclass(frozen=True, repr=False)
class EccReading(Record):
    """`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`; error counts are volatile."""

    corrected_errors: int | None = None
    uncorrected_errors: int | None = None
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None


@quick_init
@dataclass(frozen=True, repr=False)
class ModesReading(Record):
    """Persistence, MIG and ECC modes (current, not pending)."""

    persistence: bool | None = None
    mig: bool | None = None
    ecc: bool | None = None


@quick_init
@dataclass(frozen=True, repr=False)
class GpmReading(Record):
    """GPM metrics (Hopper and newer) between two GPM samples, `elapsed_seconds` apart.

    Ratios are shares 0..1 averaged over that time (GPM reports percent). A metric whose
    own return code failed is None (or absent from `pipe_ratios`): the others stay.
    """

    elapsed_seconds: float
    graphics_engine_ratio: float | None = None  # a graphics/compute context was active
    sm_ratio: float | None = None  # SMs with at least one warp assigned
    sm_occupancy_ratio: float | None = None  # resident warps over the theoretical maximum
    dram_ratio: float | None = None  # share of peak DRAM bandwidth used
    pipe_ratios: Mapping[str, float] = field(default_factory=dict)  # PIPES -> busy share
    pcie_bytes_per_second: Mapping[str, float] = field(default_factory=dict)  # DIRECTIONS
    nvlink_bytes_per_second: Mapping[str, float] = field(default_factory=dict)  # all links


@quick_init
@dataclass(frozen=True, repr=False)
class NvLinkState(Record):
    """One NVLink link: `nvidia-smi nvlink -s` and `-e`."""

    up: bool | None  # None when the state could not be read
    errors: Mapping[str, int] = field(default_factory=dict)  # NVLINK_ERRORS -> count
    # NVLink5: NVLINK_RECOVERY_RESULTS -> link-recovery events since driver load or reset
    recovery_events: Mapping[str, int] = field(default_factory=dict)
    # NVLink5: NVLINK_BER_TYPES -> bit error rate (errors per bit, 0..1) as the driver
    # last measured it
    ber: Mapping[str, float] = field(default_factory=dict)


@quick_init
@dataclass(frozen=True, repr=False)
class NvLinkReading(Record):
    """Every NVLink link of a device, and the driver's data counters summed over them."""

    links: Mapping[int, NvLinkState] = field(default_factory=dict)  # link number -> state
    data_bytes: Mapping[str, float] = field(default_factory=dict)  # DIRECTIONS, since load
    # NVLINK_ERRORS -> errors summed over the links; a type is absent while a link that
    # counted it before does not answer (`sources.nvml.nvlink_totals`)
    error_totals: Mapping[str, int] = field(default_factory=dict)
    # NVLINK_RECOVERY_RESULTS -> link-recovery events summed over the links, left out as
    # error_totals are
    recovery_totals: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, repr=False)
class MigPlacement(Record):
    """Where a GPU instance sits on its GPU (`nvmlGpuInstanceGetInfo`, `nvidia-smi mig
    -lgi`): NVIDIA's DRA driver names MIG devices by it."""

    profile_id: int  # the GPU instance profile's id (`nvidia-smi mig -lgip`), e.g. 19: 1g.10gb
    start: int  # the first memory slice it occupies
    size: int  # how many memory slices


@quick_init
@dataclass(frozen=True, repr=False)
class MigDevice(Record):
    """One MIG device (a compute instance of a GPU instance), as `nvidia-smi -L` lists it."""

    uuid: str  # "MIG-..."
    gpu_instance: int
    compute_instance: int
    profile: str  # e.g. "3g.40gb"; "" when the driver does not say
    placement: MigPlacement | None = None  # its GPU instance's; None where NVML does not say


@quick_init
@dataclass(frozen=True, repr=False)
class MigInstanceReading(Record):
    """One GPU instance: its memory (shared by its compute instances) and activity."""

    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    gpm: GpmReading | None = None


@quick_init
@dataclass(frozen=True, repr=False)
class MigReading(Record):
    """The MIG devices of a GPU with MIG enabled, and its GPU instances' readings."""

    devices: tuple[MigDevice, ...] = ()
    instances: Mapping[int, MigInstanceReading] = field(default_factory=dict)  # by GI id


@quick_init
@dataclass(frozen=True, repr=False)
class FabricReading(Record):
    """The GPU's registration in the NVLink fabric of an NVSwitch system (HGX, GB200 NVL72),
    as `nvidia-smi -q` shows it under "Fabric". Read at enumeration and every
    SLOW_REFRESH_SECONDS, not every interval."""

    state: str  # FABRIC_STATES, or the number of a state nvml.h does not name
    # a completed probe's result: "success", or the NVML error it ended with in snake_case
    # ("insufficient_resources"); None while the probe is not completed
    status: str | None = None
    clique_id: int | None = None  # the fabric clique; None until the probe completed
    cluster_uuid: str | None = None  # "xxxxxxxx-xxxx-...", lower case; None until completed
    # FABRIC_CONDITIONS -> whether the condition holds now; a condition the driver does not
    # report (the v1 structure has no health mask; NOT_SUPPORTED in the mask) is absent
    conditions: Mapping[str, bool] = field(default_factory=dict)
    # the fault incorrect_configuration names, while it holds: "insufficient_nvlinks",
    # "no_partition", ... (or the number of one nvml.h does not name); None when none
    configuration_fault: str | None = None
    # FABRIC_SUMMARIES; None where the driver gives no summary (before the v3 structure,
    # or NOT_SUPPORTED)
    summary: str | None = None

    @property
    def registered(self) -> bool:
        """The probe completed with success: the GPU is in the fabric."""
        return self.state == "completed" and self.status == "success"

    @property
    def healthy(self) -> bool | None:
        """True for the summary "healthy", False for "unhealthy" or "limited_capacity";
        None without a summary."""
        return None if self.summary is None else self.summary == "healthy"


@quick_init
@dataclass(frozen=True, repr=False)
class HealthReading(Record):
    """The driver's own verdicts on a GPU: what it needs, and its place in the fabric."""

    # nvmlDeviceGpuRecoveryAction_t code (RECOVERY_ACTIONS; 0 is "none"), from the field
    # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; None where the driver does not give it (before
    # R570, or NOT_SUPPORTED)
    recovery_action: int | None = None
    fabric: FabricReading | None = None  # None: no NVLink fabric (NOT_SUPPORTED)


@quick_init
@dataclass(frozen=True, repr=False)
class DeviceReading(Record):
    """The readings of one device in one interval: None for a collector that is off."""

    utilization: UtilizationReading | None = None
    memory: MemoryReading | None = None
    temperature: TemperatureReading | None = None
    power: PowerReading | None = None
    clocks: ClocksReading | None = None
    pcie: PcieReading | None = None
    pcie_throughput: PcieThroughputReading | None = None
    ecc: EccReading | None = None
    modes: ModesReading | None = None
    gpm: GpmReading | None = None  # also None where GPM is unsupported or not ready yet
    nvlink: NvLinkReading | None = None  # also None on boards without NVLink
    mig: MigReading | None = None  # also None while MIG is off
    health: HealthReading | None = None


UtilizationDomain = Literal["gpu", "memory_controller"]


class UtilizationSample(NamedTuple):
    """One entry of the driver's utilization ring buffer (`nvmlDeviceGetSamples`); a
    NamedTuple, made in C: a busy GPU's buffer read makes about a hundred of them."""

    timestamp_us: int  # driver timestamp, microseconds
    ratio: float  # 0..1 busy over the period that ends at timestamp_us


ProcessContext = Literal["compute", "graphics"]
PROCESS_CONTEXTS: tuple[ProcessContext, ...] = ("compute", "graphics")
"""The NVML process lists, in the order a process's `context` label names them: a process
in both is "compute+graphics" (nvidia-smi's type C+G)."""


@quick_init
@dataclass(frozen=True, repr=False)
class GpuProcess(Record):
    """A process holding a context on one GPU (`nvidia-smi` process table)."""

    pid: int  # in the host's PID namespace
    context: ProcessContext
    used_memory_bytes: int | None  # None when the driver cannot tell (e.g. vGPU)
    gpu_instance: int | None = None  # MIG: the GPU and compute instance it runs on
    compute_instance: int | None = None


@quick_init
@dataclass(frozen=True, repr=False)
class ProcessUtilization(Record):
    """Per-process utilization over the driver's last sample period."""

    pid: int
    timestamp_us: int
    sm_ratio: float  # 0..1
    memory_controller_ratio: float  # 0..1


@dataclass(frozen=True, repr=False)
class DeviceEvent(Record):
    """One event from NVML's event API (`nvmlEventSetWait`)."""

    uuid: str
    kind: Literal["xid", "ecc_single_bit", "ecc_double_bit", "other"]
    xid: int | None  # the Xid code for kind "xid"
    event_type: int  # NVML's nvmlEventType* bit


@quick_init
@dataclass(frozen=True, repr=False)
class DeviceRaw(Record):
    """Everything one device's worker read from the driver in one interval."""

    static: DeviceStatic
    reading: DeviceReading
    gpu_samples: Sequence[UtilizationSample] | None  # None: buffer unsupported or off
    memory_controller_samples: Sequence[UtilizationSample] | None
    processes: Sequence[GpuProcess] | None  # None: process list unsupported or off
    process_utilization: Sequence[ProcessUtilization] | None


# The host side of processes ----------------------------------------------------------


@dataclass(frozen=True, repr=False)
class CgroupLabels(Record):
    """Attribution labels of one process, from its cgroup; "" where it does not say."""

    container_id: str = ""  # 64 hex digits, as `docker ps --no-trunc` shows it
    pod_uid: str = ""  # metadata.uid of the Kubernetes pod, with dashes
    systemd_unit: str = ""  # e.g. "train.service", "session-4.scope"
    slurm_job_id: str = ""  # e.g. "48213"


@quick_init
@dataclass(frozen=True, repr=False)
class HostProcess(Record):
    """What the host knows of one PID, in base units; "" or None where unknown."""

    process: str = ""  # command name: comm, completed from the cmdline when cut
    user: str = ""  # user name, or the numeric uid when it has none
    cmdline: str | None = None  # only read with --collector.process.cmdline
    labels: CgroupLabels = field(default_factory=CgroupLabels)
    executable: str = ""  # file name of /proc/PID/exe, outside containers; "" unknown
    cpu_seconds: float | None = None  # process and all descendants, user + system
    workers: int | None = None  # number of descendant processes
    resident_memory_bytes: int | None = None
    start_time_seconds: float | None = None  # Unix time
    # "zombie" (its stat state is Z or X) or "gone" (no /proc entry, or its PID now names
    # a process started after NVML first listed it) for a dead owner NVML still lists;
    # "" when it lives or /proc cannot tell (another PID namespace)
    dead: str = ""


@dataclass(frozen=True, repr=False)
class DeadOwner(Record):
    """A PID NVML lists on a GPU whose process is dead: the driver keeps listing the owner
    of a context while a process it forked holds the device files (nvidia-smi prints its
    name as `[No data]`). Not a live process: its memory is unattributed."""

    pid: int
    state: str  # "zombie" or "gone" (`HostProcess.dead`)
    memory_used_bytes: int | None  # as NVML lists it; None: unknown (vGPU)


@dataclass(frozen=True, repr=False)
class DeviceHolder(Record):
    """A process that holds a GPU's device file `/dev/nvidiaN` open, as `fuser -v` finds
    it: a link in /proc/PID/fd whose target is that file."""

    pid: int
    process: str  # command name (comm); "" if it exited before it was read
    user: str  # user name, or numeric uid; "" if unknown
    labels: CgroupLabels = field(default_factory=CgroupLabels)
    namespace: str = ""  # Kubernetes, from the kubelet's log layout (collector kubernetes)
    pod: str = ""
    container: str = ""


@dataclass(frozen=True, repr=False)
class HolderScanState(Record):
    """The last scan for the holders of the GPUs' device files (`attribution.holders`)."""

    finished_seconds: float  # Unix time it ended
    duration_seconds: float
    denied_processes: int  # processes whose descriptors it could not read (permission)
    complete: bool  # False: it stopped at its time budget, some processes unread

    @property
    def incomplete_reasons(self) -> tuple[str, ...]:
        """Why a holder it did not find may still exist: "budget" (it stopped before
        reading every process), "denied" (some processes' descriptors were refused)."""
        return tuple(
            reason
            for reason, applies in (
                ("budget", not self.complete),
                ("denied", self.denied_processes > 0),
            )
            if applies
        )


@quick_init
@dataclass(frozen=True, repr=False)
class ProcessSample(Record):
    """One process on one GPU, or the `other` roll-up of those beyond the cap."""

    pid: str  # decimal PID, or "" for the `other` roll-up
    process: str  # command name (comm), "other" for the roll-up, "" if unknown
    user: str  # user name, or numeric uid when it has no name; "" if unknown
    context: str  # "compute", "graphics" or "compute+graphics" (nvidia-smi's C, G, C+G)
    gpu_instance: str = ""  # MIG GPU instance id, "" when not on MIG
    compute_instance: str = ""
    container_id: str = ""
    pod_uid: str = ""
    systemd_unit: str = ""
    slurm_job_id: str = ""
    namespace: str = ""  # Kubernetes, from the kubelet's log layout (collector kubernetes)
    pod: str = ""
    container: str = ""
    cmdline: str | None = None  # only with --collector.process.cmdline
    executable: str = ""  # file name of /proc/PID/exe, outside containers; "" unknown
    memory_used_bytes: int | None = None
    sm_ratio: float | None = None  # 0..1
    memory_controller_ratio: float | None = None  # 0..1
    # SM seconds integrated from the driver's per-process samples since the exporter
    # first saw the process (sampling/process_seconds.py); None: not integrated
    sm_seconds: float | None = None
    cpu_seconds: float | None = None  # process and all descendants
    workers: int | None = None  # number of descendant processes
    resident_memory_bytes: int | None = None
    start_time_seconds: float | None = None  # Unix time


@quick_init
@dataclass(frozen=True, repr=False)
class Attribution(Record):
    """What process attribution adds to one device."""

    processes: tuple[ProcessSample, ...]  # capped, with the `other` roll-up
    unattributed_memory_bytes: int | None  # used memory no listed process accounts for
    process_count: int  # distinct PIDs holding a context, before the cap
    # processes per (gpu_instance, container_id, pod_uid) of containers, before the cap
    containers: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    # processes per (gpu_instance, process name, executable's file name or "") of the
    # host's: in no container and no pod by their cgroup, and seen in the host's /proc (a
    # PID it cannot see is left out)
    host_processes: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    # PIDs NVML lists whose process is dead (zombie or gone): not in `processes`, not in
    # `process_count`, their memory in `unattributed_memory_bytes`
    dead_owners: tuple[DeadOwner, ...] = ()
    # processes holding /dev/nvidiaN, from the last holder scan, while more than the leak
    # threshold of memory has no live listed process: the oldest MAX_HOLDERS
    # (attribution.holders); None: not scanned for this GPU
    holders: tuple[DeviceHolder, ...] | None = None
    # that scan read every process (none denied, within its budget): no holder found
    # means none holds the device file
    holders_complete: bool = False
    holders_incomplete: tuple[str, ...] = ()  # why not: HolderScanState.incomplete_reasons
    denied_processes: int = 0  # that scan's HolderScanState.denied_processes
    holder_count: int = 0  # every holder that scan found, named or not
    # processes whose descriptors that scan could not read, in a dead owner's process
    # group or session (a crashed job's forked workers keep them): probably holders,
    # never named as such; the oldest MAX_HOLDERS, and the count of all
    holder_candidates: tuple[DeviceHolder, ...] = ()
    holder_candidate_count: int = 0


# Kubernetes --------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class DraDevice(Record):
    """A device a DRA claim gave a container: one `ClaimResource` of the pod-resources
    List answer (`dynamic_resources`), with its claim."""

    claim: str  # the ResourceClaim's name
    claim_namespace: str  # the claim's namespace (a pod's claims are in its own)
    driver: str  # e.g. "gpu.nvidia.com", "compute-domain.nvidia.com"
    pool: str  # the driver's pool; NVIDIA's GPU driver names it after the node
    device: str  # the driver's name for it, e.g. "gpu-0", "gpu-1-mig-19-4-1"


@dataclass(frozen=True, repr=False)
class ContainerDevices(Record):
    """Devices of one resource the kubelet allocated to one container (pod-resources List):
    a device plugin's, or one device of a DRA claim (`dra` set, `resource` its driver's
    name, `device_ids` its device name alone)."""

    namespace: str
    pod: str
    container: str
    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "gpu.nvidia.com"
    device_ids: tuple[str, ...]  # as the device plugin names them: UUID, index, "UUID::N"
    dra: DraDevice | None = None  # None: a device plugin's


@dataclass(frozen=True, repr=False)
class AllocatableDevices(Record):
    """The devices of one resource a device plugin advertises to the kubelet, healthy ones
    only (pod-resources GetAllocatableResources): allocated or not. A time-sliced GPU is
    its replicas, "GPU-<uuid>::<n>" for n of 0 to replicas - 1."""

    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/gpu.shared"
    device_ids: tuple[str, ...]


@dataclass(frozen=True, repr=False)
class ContainerName(Record):
    """Who a container is, from the kubelet's log layout; "" where it does not say."""

    namespace: str
    pod: str
    container: str = ""


@dataclass(frozen=True, repr=False)
class KubeletReading(Record):
    """The kubelet's view of the node at one refresh. `error` says why it is missing."""

    allocations: tuple[ContainerDevices, ...] = ()  # devices of every container, any vendor
    pods: int = 0  # pods the kubelet listed
    error: str | None = None  # None: the List call answered
    containers: Mapping[str, ContainerName] = field(default_factory=dict)  # by container ID
    pod_names: Mapping[str, ContainerName] = field(default_factory=dict)  # by pod UID
    # every device the device plugins advertise (GetAllocatableResources); None: unknown,
    # `allocatable_error` says why where the kubelet was asked
    allocatable: tuple[AllocatableDevices, ...] | None = None
    allocatable_error: str | None = None
    # with `error`: the allocation is the last one read, this many seconds ago, kept
    # through the failure (sources/kubelet/watch.py, --kubernetes.allocation-hold)
    held_seconds: float | None = None


@dataclass(frozen=True, repr=False)
class GpuAllocation(Record):
    """One GPU or MIG device allocated to one container."""

    gpu: int  # NVML index
    uuid: str  # the GPU's UUID (a MIG device's parent)
    gpu_instance: str  # MIG GPU instance id, "" for the whole GPU
    namespace: str
    pod: str
    container: str
    dra: DraDevice | None = None  # the DRA claim's device; None: a device plugin's


@dataclass(frozen=True, repr=False)
class UnallocatedUse(Record):
    """Processes of a container on a GPU (or MIG instance) not allocated to it."""

    gpu: int
    uuid: str
    gpu_instance: str
    namespace: str
    pod: str
    container: str
    processes: int


@dataclass(frozen=True, repr=False)
class KubernetesState(Record):
    """What the Kubernetes collector adds to a sample."""

    up: bool  # the kubelet answered and its GPU device IDs matched this node's GPUs
    reason: str | None  # why not, or a warning while up (a pod using a GPU it never asked for)
    allocations: tuple[GpuAllocation, ...] = ()
    unallocated: tuple[UnallocatedUse, ...] = ()
    # the share of its physical GPU each allocation holds (attribution/weights.py); an
    # allocation whose share is unknown is absent
    weights: Mapping[GpuAllocation, float] = field(default_factory=dict)
    # whether the replicas the device plugins advertise are known (GetAllocatableResources
    # answered); None: the kubelet has not been read
    allocatable_known: bool | None = None


# One sample --------------------------------------------------------------------------


@quick_init
@dataclass(frozen=True, repr=False)
class XidState(Record):
    """Xid errors seen on one GPU: since boot from the kernel log, else since the
    exporter started from NVML's events (`sources/kernel_log.py` says which counts)."""

    counts: Mapping[int, int] = field(default_factory=dict)  # xid code -> count
    last_timestamp_seconds: float | None = None  # Unix time
    last_xid: int | None = None  # the code of the last one
    # xid code -> Unix time of the last one of that code
    last_timestamps: Mapping[int, float] = field(default_factory=dict)


@quick_init
@dataclass(frozen=True, repr=False)
class KernelLogState(Record):
    """What the kernel-log reader (`--collector.xid.kernel-log`) has read since it started."""

    path: str
    # being read and it gave a record; False: not yet (no record yet) or it could not be
    # (`reason`), NVML events count instead
    up: bool
    reason: str | None = None  # why it is not read; None while up
    xids: Mapping[str, XidState] = field(default_factory=dict)  # by PCI bus id, NVML's form
    sxids: Mapping[int, Mapping[int, int]] = field(default_factory=dict)  # nvswitch -> code -> n
    lost_records: int = 0  # overwritten in the ring before they were read (SEQ gaps)
    malformed_records: int = 0  # a header, or an Xid or SXid line, that could not be read
    userspace_records: int = 0  # Xid-looking records a program wrote (facility 1+): not counted
    seq_resets: int = 0  # SEQ went back or leapt: numbering started again at that record
    capped_records: int = 0  # Xids and SXids left out: their label would pass a cap
    # the records logged before the exporter started are read: until then `xids` and
    # `sxids` are empty, so the first count served is the whole count since boot
    backlog_read: bool = True


@quick_init
@dataclass(frozen=True, repr=False)
class StageResult(Record):
    """How one stage of a sample went (node_exporter's scrape_collector_* in spirit)."""

    duration_seconds: float  # wall time the stage took
    success: bool  # False: the stage failed, or could not read what it is for


@quick_init
@dataclass(frozen=True, repr=False)
class ActivityTotals(Record):
    """GPM activity integrated over time, so rate() is the mean over any window.

    Seconds are ratio x elapsed summed over every interval; bytes are rate x elapsed.
    A metric is None (or absent) until it has been read once.
    """

    graphics_engine_seconds: float | None = None
    sm_seconds: float | None = None
    sm_occupancy_seconds: float | None = None
    dram_seconds: float | None = None
    pipe_seconds: Mapping[str, float] = field(default_factory=dict)  # PIPES
    pcie_bytes: Mapping[str, float] = field(default_factory=dict)  # DIRECTIONS
    nvlink_bytes: Mapping[str, float] = field(default_factory=dict)  # DIRECTIONS


MEMORY_PATTERNS: tuple[str, ...] = ("not_full", "reserved", "pressure", "sharing", "unowned")
"""What a GPU's (or MIG instance's) memory is doing, as `gpu_memory_pattern{pattern}` names
it (`sampling/memory_patterns.py`): below near full; near full and held flat (a pool
reserved up front); near full and moving (drops and re-rises, or grown into the ceiling);
near full and shared by two or more live processes (or a new one arrived); near full with
no live process (a dead owner's: GPUMemoryLeaked's case)."""


@quick_init
@dataclass(frozen=True, repr=False)
class MemoryHolder(Record):
    """A live process as the memory patterns name it (for verdicts and the exit series)."""

    pid: str
    process: str = ""  # command name; "" unknown
    user: str = ""
    container_id: str = ""
    pod_uid: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""
    memory_bytes: int = 0  # its used memory in the interval it was last seen
    flat_seconds: float = 0.0  # how long its memory has stayed flat
    at_start: bool = False  # reached its level within seconds of being first seen


@dataclass(frozen=True, repr=False)
class MemoryExit(Record):
    """A likely out-of-memory death: a process holding a large share ended while its GPU
    (or MIG instance) was near full, and its memory was freed."""

    holder: MemoryHolder  # as last seen
    ended_seconds: float  # Unix time of the interval it was first missing
    used_ratio: float  # the GPU's (instance's) used memory over total when last seen, 0..1


@quick_init
@dataclass(frozen=True, repr=False)
class MemoryPattern(Record):
    """One GPU's (or MIG instance's) memory pattern in one sample
    (`sampling/memory_patterns.py`)."""

    pattern: str  # MEMORY_PATTERNS
    near_full_drops: int  # drops from near full that rose back, since first seen (counter)
    flat_seconds: float  # how long used memory has stayed flat
    likely_oom_exits: int  # MemoryExit count since first seen (counter)
    recent_exits: tuple[MemoryExit, ...] = ()  # the last MEMORY_OOM_EXIT_HOLD_SECONDS'
    recent_drops: int = 0  # near-full drops within the pattern window
    grew: bool = False  # grew into the ceiling within the pattern window
    arrived: bool = False  # a process arrived on it while near full, within the window
    used_ratio: float | None = None  # used over total this interval, 0..1
    total_bytes: int | None = None  # the GPU's (instance's) memory total
    holders: tuple[MemoryHolder, ...] = ()  # the live processes, largest first (near the top)


@quick_init
@dataclass(frozen=True, repr=False)
class DeviceSample(Record):
    """One GPU in one sample. `reading` is None while the GPU is down."""

    index: int
    static: DeviceStatic | None  # None when the GPU was lost before it was identified
    up: bool
    down_reason: str | None = None
    lost: bool = False  # down because NVML answered GPU_IS_LOST (fallen off the bus)
    reading: DeviceReading | None = None
    busy_seconds: float | None = None  # gpu_busy_seconds_total
    # whether this sample brought the busy counters up to date (`sampling/buffer_reads.py`:
    # the buffers are read only as often as their coverage needs); False: they hold
    busy_read: bool = True
    memory_controller_busy_seconds: float | None = None
    busy_uncovered_seconds: float | None = None  # None: not read from the sample buffer
    memory_controller_busy_uncovered_seconds: float | None = None
    attribution: Attribution | None = None  # None: process collector off or unsupported
    activity: ActivityTotals | None = None  # GPM totals of the whole GPU
    mig_activity: Mapping[int, ActivityTotals] = field(default_factory=dict)  # by GI id
    memory_pattern: MemoryPattern | None = None  # None: memory not read
    mig_memory_patterns: Mapping[int, MemoryPattern] = field(default_factory=dict)  # by GI id

    @property
    def uuid(self) -> str:
        return self.static.uuid if self.static is not None else ""


def device_with(device: DeviceSample, **changes: object) -> DeviceSample:
    """`dataclasses.replace` of a DeviceSample without its per-field work (each sample
    copies every GPU's record to add its attribution and memory pattern; replace's field
    loop and frozen `__init__` were most of that on an idle host): a copy with `changes`.
    DeviceSample has no `__post_init__` and no slots of its own (`Record`'s are none), so
    its fields are its `__dict__`."""
    copied = object.__new__(DeviceSample)
    copied.__dict__.update(device.__dict__, **changes)
    return copied


@quick_init
@dataclass(frozen=True, repr=False)
class HostSample(Record):
    """Host context next to the GPUs (collector `host`)."""

    cpu_busy_seconds: float  # all CPUs, non-idle time
    cpu_iowait_seconds: float | None  # None where the kernel does not report it
    cpus: int
    memory_total_bytes: int
    memory_available_bytes: int
    load1: float


FABRIC_DAEMONS: tuple[str, ...] = ("nv-fabricmanager", "nvidia-imex")
"""The daemons an NVLink fabric may need on the node, by their program names: NVIDIA
Fabric Manager (NVSwitch systems: HGX and DGX boards) and the IMEX daemon (multi-node
NVLink: GB200 and GB300 NVL racks)."""


@quick_init
@dataclass(frozen=True, repr=False)
class FabricDaemonState(Record):
    """The fabric's daemons on this node (collector `health`)."""

    # FABRIC_DAEMONS -> whether this node's GPUs need it (from their fabric and class)
    required: Mapping[str, bool] = field(default_factory=dict)
    # FABRIC_DAEMONS -> whether a process of that program runs; absent where it could
    # not be seen (/proc is not the host's PID namespace), or was not looked for (no
    # GPU needs it)
    running: Mapping[str, bool] = field(default_factory=dict)


class CallTotals(NamedTuple):
    """One NVML function's calls so far and the wall seconds spent inside them."""

    calls: int
    seconds: float


@quick_init
@dataclass(frozen=True, repr=False)
class Snapshot(Record):
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
    # kernel-log Xids of a PCI bus id no GPU in `devices` has (lost before enumeration, or
    # NVML down), by that bus id
    xid_unattributed: Mapping[str, XidState] = field(default_factory=dict)
    kernel_log: KernelLogState | None = None  # None: no kernel log read (flag empty, xid off)
    nvml_errors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    nvml_init_errors: Mapping[str, int] = field(default_factory=dict)
    # NVML calls and the seconds inside them, by function, since `nvml_calls_seconds` ago
    nvml_calls: Mapping[str, CallTotals] = field(default_factory=dict)
    nvml_calls_seconds: float | None = None  # how long they have been counted
    collectors: frozenset[str] = frozenset()
    stages: Mapping[str, StageResult] = field(default_factory=dict)  # by STAGES name
    # /proc shows the host's PID namespace (None: process attribution off)
    host_pid_namespace: bool | None = None
    holder_scan: HolderScanState | None = None  # None: no holder scan has run
    kubernetes: KubernetesState | None = None  # None: collector kubernetes off
    fabric_daemons: FabricDaemonState | None = None  # None: collector health off, NVML down
    # the sampler's monotonic clock when the sample finished: ages and rates on a clock a
    # step of the wall clock does not move (None: not known, use timestamp_seconds)
    monotonic_seconds: float | None = None

    @property
    def gpus(self) -> int:
        return len(self.devices)
