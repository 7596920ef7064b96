"""The metric catalogue: every metric the exporter can emit, in one place.

Names, types, label sets and help texts live here and nowhere else. The collector
builds its families from these specs, the README's metrics reference is generated
from them (`python -m gpu_exporter.docs`), and the dashboard and alert-rule tests check
that every metric they reference is listed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter"]

SAMPLED = " Sampled every --collect.interval."

DEVICE_LABELS: tuple[str, ...] = ("gpu", "uuid")
PROCESS_LABELS: tuple[str, ...] = (
    "gpu",
    "uuid",
    "pid",
    "process",
    "user",
    "context",
    "container_id",
    "pod_uid",
    "systemd_unit",
    "slurm_job_id",
)


@dataclass(frozen=True)
class Collector:
    """A named group of metrics that `--[no-]collector.NAME` switches on or off."""

    name: str
    default_enabled: bool
    description: str


COLLECTORS: tuple[Collector, ...] = (
    Collector("utilization", True, "GPU, memory-controller, encoder and decoder utilization"),
    Collector("memory", True, "framebuffer memory"),
    Collector("temperature", True, "temperatures, thresholds and fan speed"),
    Collector("power", True, "power draw, limit and energy"),
    Collector("clocks", True, "clocks, P-state and clocks-event (throttle) reasons"),
    Collector("pcie", True, "PCIe link generation, width and replay errors"),
    Collector(
        "pcie-throughput",
        False,
        "PCIe throughput (costs about 20 ms per direction per GPU in the driver)",
    ),
    Collector("ecc", True, "ECC errors, retired pages and remapped rows"),
    Collector("modes", True, "persistence, MIG and ECC modes"),
    Collector("process", True, "per-process GPU memory, utilization and CPU"),
    Collector("host", True, "host CPU, memory and load (off where node_exporter runs)"),
    Collector("xid", True, "Xid error events from NVML's event API"),
)
COLLECTOR_NAMES: frozenset[str] = frozenset(c.name for c in COLLECTORS)


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: its exposition name, type, labels and help text."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...]
    collector: str | None  # None: always emitted (identity and exporter self-metrics)

    @property
    def family_name(self) -> str:
        """The name prometheus_client's families take (counters without `_total`)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        return self.name


def _d(name: str, type_: MetricType, help_: str, collector: str | None, *extra: str) -> MetricSpec:
    return MetricSpec(name, type_, help_ + SAMPLED, DEVICE_LABELS + extra, collector)


def _p(name: str, type_: MetricType, help_: str) -> MetricSpec:
    return MetricSpec(name, type_, help_ + SAMPLED, PROCESS_LABELS, "process")


def _x(name: str, type_: MetricType, help_: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, type_, help_, labels, None)


def _h(name: str, type_: MetricType, help_: str) -> MetricSpec:
    return MetricSpec(name, type_, help_ + SAMPLED, (), "host")


INFO_LABELS: tuple[str, ...] = DEVICE_LABELS + (
    "name",
    "pci_bus_id",
    "serial",
    "vbios_version",
    "driver_version",
    "cuda_driver_version",
    "compute_capability",
)

METRICS: tuple[MetricSpec, ...] = (
    # Identity and liveness.
    MetricSpec(
        "gpu_info",
        "gauge",
        "GPU identity; always 1. Join with * on(uuid) group_left(name) gpu_info.",
        INFO_LABELS,
        None,
    ),
    _d("gpu_up", "gauge", "1 while the GPU answers NVML, 0 when it is lost or timed out.", None),
    # Utilization.
    _d(
        "gpu_utilization_ratio",
        "gauge",
        "Driver's latest GPU utilization: share of the last sample period a kernel ran (0..1).",
        "utilization",
    ),
    _d(
        "gpu_busy_seconds_total",
        "counter",
        "Seconds a kernel was running, integrated from the driver's utilization sample "
        "buffer; rate() is the true average utilization over any window.",
        "utilization",
    ),
    _d(
        "gpu_memory_controller_utilization_ratio",
        "gauge",
        "Driver's latest memory-controller utilization: share of time memory was read or "
        "written (0..1).",
        "utilization",
    ),
    _d(
        "gpu_memory_controller_busy_seconds_total",
        "counter",
        "Seconds the memory controller was busy, integrated from the driver's sample buffer.",
        "utilization",
    ),
    _d(
        "gpu_encoder_utilization_ratio", "gauge", "Video encoder utilization (0..1).", "utilization"
    ),
    _d(
        "gpu_decoder_utilization_ratio", "gauge", "Video decoder utilization (0..1).", "utilization"
    ),
    # Memory.
    _d("gpu_memory_total_bytes", "gauge", "Total framebuffer memory in bytes.", "memory"),
    _d("gpu_memory_used_bytes", "gauge", "Used framebuffer memory in bytes.", "memory"),
    _d("gpu_memory_free_bytes", "gauge", "Free framebuffer memory in bytes.", "memory"),
    _d(
        "gpu_memory_reserved_bytes",
        "gauge",
        "Framebuffer memory reserved by the driver and firmware, in bytes.",
        "memory",
    ),
    _d(
        "gpu_memory_unattributed_bytes",
        "gauge",
        "Used memory that no listed process accounts for (reservation excluded), in bytes: "
        "memory pinned by dead or invisible processes.",
        "process",
    ),
    # Temperature and cooling.
    _d(
        "gpu_temperature_celsius",
        "gauge",
        "GPU core temperature in degrees Celsius.",
        "temperature",
    ),
    _d(
        "gpu_memory_temperature_celsius",
        "gauge",
        "GPU memory (HBM) temperature in degrees Celsius.",
        "temperature",
    ),
    _d(
        "gpu_temperature_threshold_celsius",
        "gauge",
        "Temperature at which the GPU slows down or shuts down, in degrees Celsius.",
        "temperature",
        "threshold",
    ),
    _d(
        "gpu_fan_speed_ratio", "gauge", "Fan speed as a share of its maximum (0..1).", "temperature"
    ),
    # Power.
    _d("gpu_power_watts", "gauge", "Power draw in watts.", "power"),
    _d("gpu_power_limit_watts", "gauge", "Enforced power limit in watts.", "power"),
    _d(
        "gpu_energy_joules_total",
        "counter",
        "Energy consumed since the driver was loaded, in joules.",
        "power",
    ),
    # Clocks.
    _d("gpu_clock_hertz", "gauge", "Current clock frequency in hertz.", "clocks", "clock"),
    _d("gpu_clock_max_hertz", "gauge", "Maximum clock frequency in hertz.", "clocks", "clock"),
    _d(
        "gpu_performance_state",
        "gauge",
        "Performance state (P-state) number, 0 is fastest.",
        "clocks",
    ),
    _d(
        "gpu_throttle_active",
        "gauge",
        "1 while the clocks-event (throttle) reason holds the clocks down, else 0.",
        "clocks",
        "reason",
    ),
    # PCIe.
    _d("gpu_pcie_link_generation", "gauge", "Current PCIe link generation.", "pcie"),
    _d("gpu_pcie_link_max_generation", "gauge", "Maximum PCIe link generation.", "pcie"),
    _d("gpu_pcie_link_width", "gauge", "Current PCIe link width in lanes.", "pcie"),
    _d("gpu_pcie_link_max_width", "gauge", "Maximum PCIe link width in lanes.", "pcie"),
    _d("gpu_pcie_replay_errors_total", "counter", "PCIe replay errors since driver load.", "pcie"),
    _d(
        "gpu_pcie_throughput_bytes_per_second",
        "gauge",
        "PCIe throughput over the driver's 20 ms window, in bytes per second.",
        "pcie-throughput",
        "direction",
    ),
    # ECC and memory health.
    _d(
        "gpu_ecc_errors_total",
        "counter",
        "ECC errors since driver load (volatile counters).",
        "ecc",
        "error_type",
    ),
    _d("gpu_retired_pages", "gauge", "Framebuffer pages retired, by cause.", "ecc", "cause"),
    _d(
        "gpu_retired_pages_pending",
        "gauge",
        "1 while a page retirement waits for the next driver reload, else 0.",
        "ecc",
    ),
    _d("gpu_remapped_rows", "gauge", "Memory rows remapped, by error type.", "ecc", "error_type"),
    _d(
        "gpu_remapped_rows_pending",
        "gauge",
        "1 while a row remapping waits for a GPU reset, else 0.",
        "ecc",
    ),
    _d(
        "gpu_remapped_rows_failed",
        "gauge",
        "1 when a row remapping has failed (the GPU needs service), else 0.",
        "ecc",
    ),
    # Modes.
    _d("gpu_persistence_mode", "gauge", "1 when persistence mode is on.", "modes"),
    _d("gpu_mig_mode", "gauge", "1 when MIG mode is on.", "modes"),
    _d("gpu_ecc_mode", "gauge", "1 when ECC is on.", "modes"),
    # Xid events.
    MetricSpec(
        "gpu_xid_errors_total",
        "counter",
        "Xid errors reported by NVML's event API since the exporter started.",
        DEVICE_LABELS + ("xid",),
        "xid",
    ),
    MetricSpec(
        "gpu_last_xid_timestamp_seconds",
        "gauge",
        "Unix time of the last Xid error on this GPU.",
        DEVICE_LABELS,
        "xid",
    ),
    # Processes.
    _d("gpu_processes", "gauge", "Number of processes holding a context on this GPU.", "process"),
    _p("gpu_process_memory_used_bytes", "gauge", "GPU memory used by the process, in bytes."),
    _p(
        "gpu_process_utilization_ratio",
        "gauge",
        "Share of the GPU's SM time the process used over the driver's latest sample period "
        "(0..1); 0 when it ran no kernel.",
    ),
    _p(
        "gpu_process_memory_controller_utilization_ratio",
        "gauge",
        "Share of the memory controller's time the process used over the driver's latest "
        "sample period (0..1).",
    ),
    _p(
        "gpu_process_cpu_seconds_total",
        "counter",
        "CPU seconds (user + system) of the process and all its descendants, exited ones it "
        "waited for included, so DataLoader workers count.",
    ),
    _p("gpu_process_workers", "gauge", "Number of live descendant processes (e.g. DataLoader)."),
    _p(
        "gpu_process_resident_memory_bytes",
        "gauge",
        "Resident host memory of the process itself (not its descendants), in bytes.",
    ),
    _p("gpu_process_start_time_seconds", "gauge", "Start time of the process, Unix seconds."),
    # Host context.
    _h(
        "gpu_host_cpu_busy_seconds_total",
        "counter",
        "Host CPU seconds not idle and not waiting on I/O, summed over all CPUs.",
    ),
    _h(
        "gpu_host_cpu_iowait_seconds_total",
        "counter",
        "Host CPU seconds idle while waiting on I/O, summed over all CPUs.",
    ),
    _h("gpu_host_cpus", "gauge", "Number of logical CPUs on the host."),
    _h("gpu_host_memory_total_bytes", "gauge", "Host memory in bytes."),
    _h(
        "gpu_host_memory_available_bytes",
        "gauge",
        "Host memory available to new processes without swapping, in bytes.",
    ),
    _h("gpu_host_load1", "gauge", "Host 1-minute load average."),
    # The exporter itself.
    _x(
        "gpu_exporter_build_info",
        "gauge",
        "Build information; always 1. backend is nvml or simulated.",
        "version",
        "backend",
    ),
    _x("gpu_exporter_nvml_up", "gauge", "1 while NVML is initialised and answering, else 0."),
    _x("gpu_exporter_gpus", "gauge", "Number of GPUs NVML reports."),
    _x(
        "gpu_exporter_last_sample_timestamp_seconds",
        "gauge",
        "Unix time the last sample finished.",
    ),
    _x("gpu_exporter_sample_duration_seconds", "gauge", "Seconds the last sample took."),
    _x(
        "gpu_exporter_samples_total",
        "counter",
        "Samples taken since the exporter started.",
    ),
    _x(
        "gpu_exporter_nvml_errors_total",
        "counter",
        "NVML calls that failed with an unexpected error, by function and error.",
        "function",
        "error",
    ),
    _x(
        "gpu_exporter_nvml_init_errors_total",
        "counter",
        "Failed NVML initialisations, by error.",
        "error",
    ),
)

METRICS_BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}
