"""The numbers behind the live page's verdicts: the same as the shipped alert rules.

`deploy/prometheus/rules/*.yml` writes these thresholds into PromQL; this module is where
the exporter reads them. `tests/test_thresholds.py` parses the rule files and fails when
the two disagree, so a change to one must be made to the other.

The alerts judge long windows (15 to 30 minutes, then `for:`); the page judges the history
it holds over `VERDICT_WINDOW_SECONDS`, so that a researcher sees a verdict within minutes.
"""

from __future__ import annotations

NEAR_OOM_MEMORY_RATIO = 0.95
"""GPUMemoryNearFull: used memory over total above this (0..1) is near out of memory."""

IDLE_BUSY_RATIO = 0.05
"""GPUIdleWhileAllocated (recording rule `..._idle_while_allocated`): busy and mean
utilization both below this (0..1) while a process holds the GPU is idle."""

INPUT_BOUND_BUSY_RATIO = 0.5
"""GPUInputBound: the GPU busy less than this share of the time (0..1) ..."""

INPUT_BOUND_CORES_PER_WORKER = 0.9
"""... while the process tree burns at least this many CPU cores per worker (per one
core when it has no workers): the input pipeline cannot keep up."""

LEAKED_MEMORY_BYTES = 1024 * 1024 * 1024
"""GPUMemoryLeaked: more than this many bytes used while no live process is on the GPU (a
dead owner NVML still lists is none); the exporter looks for the holders of the GPU's
device file while more than this has no live listed process."""

BUSY_BUT_SMS_IDLE_BUSY_RATIO = 0.8
"""GPUBusyButSMsIdle: a kernel runs more than this share of the time (0..1) ..."""

BUSY_BUT_SMS_IDLE_SM_RATIO = 0.2
"""... while GPM's SM activity stays below this (0..1): the job is launch-bound."""

VERDICT_WINDOW_SECONDS = 300.0
"""The live page judges averages over this much history, in seconds (5 minutes)."""

THERMAL_THROTTLE_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown")
"""GPUThermalThrottling: the clocks-event reasons that mean the GPU is held down by heat."""

THERMAL_THROTTLE_RATIO = 0.25
"""GPUThermalThrottling: throttled by heat more than this share of the time (0..1)."""

POWER_BRAKE_REASON = "hw_power_brake_slowdown"
"""GPUPowerBrake: the reason whose being active (1) means the power brake is engaged."""

POWER_CAPPED_RATIO = THERMAL_THROTTLE_RATIO
"""The page only (no alert: a GPU at its power limit is doing its job): held at the power
limit (`sw_power_cap`) more than this share of the time (0..1), as for heat."""

POWER_BURSTS_RATIO = 0.75
"""The page only: a power-capped GPU whose mean draw over the window is below this share
of its limit (0..1) is capped in bursts (a starved loop's short kernels reach the limit,
the average does not): the verdict says so rather than leave 305 of 700 W unexplained."""

SLOWDOWN_MARGIN_CELSIUS = 5.0
"""The page only (no alert rule): a temperature within this many degrees Celsius of the
GPU's slowdown threshold is near thermal slowdown."""
