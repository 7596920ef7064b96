"""How often each series' value is read from its source: the "read" column of
docs/reference.md.

The exporter samples every `--collect.interval`, but not every value is read from the
driver (or /proc) at every sample: a value that cannot change is read once, a setting on
the slow cadence, a dear counter as its cost allows (issue 42: the driver's calls have a
price). A series whose value was not read in a sample serves the value last read, the
source's own at that moment; one that failed to read is left out. This table says which
is which, in words, from the constants that decide it; a metric not named here is read at
every sample (`EVERY_INTERVAL`).
"""

from __future__ import annotations

from gpu_exporter.sampling.buffer_reads import SAFETY
from gpu_exporter.sampling.counter_reads import MAX_AGE_SECONDS as COUNTER_MAX_AGE
from gpu_exporter.sources.backend import SLOW_REFRESH_SECONDS
from gpu_exporter.sources.nvml.counter_fields import MAX_AGE_SECONDS

EVERY_INTERVAL = "every interval"
_SLOW = f"every {SLOW_REFRESH_SECONDS:g} s"
_COUNTERS = (
    f"as their measured cost allows, at least every {MAX_AGE_SECONDS:g} s (every 30 s on an "
    "H200, every interval where the driver answers them in microseconds)"
)
_BUFFER = (
    f"the driver's sample buffer, read before it wraps ({SAFETY:g} of its measured span, "
    "~12 s on an H100) while the GPU holds a process, every interval while the live page "
    "is open, not while it holds none (idle)"
)
_PROC_COUNTERS = (
    f"when a scrape is expected and for the live page, at least every {COUNTER_MAX_AGE:g} s"
)
_IDENTITY = "once per NVML initialisation"
_LIMITS = f"with the limits, {_SLOW}"

READ: dict[str, str] = {
    "gpu_info": _IDENTITY,
    "gpu_busy_seconds_total": _BUFFER,
    "gpu_busy_uncovered_seconds_total": _BUFFER,
    "gpu_memory_controller_busy_seconds_total": _BUFFER,
    "gpu_memory_controller_busy_uncovered_seconds_total": _BUFFER,
    "gpu_encoder_utilization_ratio": f"every interval while busy, {_SLOW} while 0",
    "gpu_decoder_utilization_ratio": f"every interval while busy, {_SLOW} while 0",
    "gpu_temperature_threshold_celsius": _LIMITS,
    "gpu_temperature_tlimit_threshold_celsius": _LIMITS,
    "gpu_temperature_tlimit_margin_celsius": (
        f"every interval the GPU temperature moves, else {_SLOW}"
    ),
    "gpu_power_limit_watts": _SLOW,
    "gpu_energy_joules_total": _COUNTERS,
    "gpu_clock_max_hertz": _LIMITS,
    "gpu_clock_event_seconds_total": _COUNTERS,
    "gpu_pcie_link_generation": f"every interval below its maximum, {_SLOW} at it",
    "gpu_pcie_link_width": f"every interval below its maximum, {_SLOW} at it",
    "gpu_pcie_link_max_generation": _LIMITS,
    "gpu_pcie_link_max_width": _LIMITS,
    "gpu_pcie_replay_errors_total": _COUNTERS,
    "gpu_pcie_errors_total": _COUNTERS,
    "gpu_nvlink_errors_total": (
        f"every interval from the link's fields; the data-CRC counter {_SLOW}"
    ),
    "gpu_ecc_errors_total": _COUNTERS,
    "gpu_retired_pages": _COUNTERS,
    "gpu_retired_pages_pending": _COUNTERS,
    "gpu_remapped_rows": _COUNTERS,
    "gpu_remapped_rows_pending": _COUNTERS,
    "gpu_remapped_rows_failed": _COUNTERS,
    "gpu_fabric_state": f"{_SLOW}, and at once after a failed read",
    "gpu_fabric_info": f"{_SLOW}, and at once after a failed read",
    "gpu_fabric_healthy": f"{_SLOW}, and at once after a failed read",
    "gpu_fabric_health_condition": f"{_SLOW}, and at once after a failed read",
    "gpu_persistence_mode": _SLOW,
    "gpu_mig_mode": _SLOW,
    "gpu_mig_info": f"{_SLOW}, and at the interval a change is seen",
    "gpu_xid_errors_total": "as the driver's events or kernel-log records come",
    "gpu_last_xid_timestamp_seconds": "as the driver's events or kernel-log records come",
    "gpu_xid_error_timestamp_seconds": "as the driver's events or kernel-log records come",
    "gpu_xid_errors_unknown_gpu_total": "as kernel-log records come",
    "gpu_nvswitch_sxid_errors_total": "as kernel-log records come",
    **{
        f"gpu_exporter_xid_kernel_log_{name}": "as kernel-log records come"
        for name in (
            "lost_records_total",
            "malformed_records_total",
            "userspace_records_total",
            "seq_resets_total",
            "capped_records_total",
        )
    },
    "gpu_process_cpu_seconds_total": _PROC_COUNTERS,
    "gpu_host_cpu_busy_seconds_total": _PROC_COUNTERS,
    "gpu_host_cpu_iowait_seconds_total": _PROC_COUNTERS,
    "gpu_exporter_build_info": "at start",
}
"""Metric name -> how often its value is read, where that is not every interval."""


def read_cadence(name: str) -> str:
    """How often the series of metric `name` are read from their source."""
    return READ.get(name, EVERY_INTERVAL)
