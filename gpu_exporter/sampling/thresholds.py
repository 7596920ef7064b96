"""The numbers behind the live page's verdicts: the same as the shipped alert rules.

`deploy/prometheus/rules/*.yml` writes these thresholds into PromQL; this module is where
the exporter reads them. `tests/test_thresholds.py` parses the rule files and fails when
the two disagree, so a change to one must be made to the other.

The alerts judge long windows (15 to 30 minutes, then `for:`); the page judges the history
it holds over `VERDICT_WINDOW_SECONDS`, so that a researcher sees a verdict within minutes.
"""

from __future__ import annotations

NEAR_OOM_MEMORY_RATIO = 0.95
"""Used memory over total above this (0..1) is near full: the line of the memory patterns
(`sampling/memory_patterns.py`, which GPUMemoryNearFull reads) and of GPUMemoryFillingUp's
`unless`. Near full alone is no risk: a framework that reserved its pool up front sits
there (TensorFlow 99%, vLLM and JAX at their fraction)."""

MEMORY_DROP_RATIO = 0.05
"""A drop from near full by at least this share of the total (0..1) that rises back near
full, with the same processes on the GPU, is one near-full drop
(`gpu_memory_near_full_drops_total`): a caching allocator that failed an allocation,
freed its cache and retried."""

MEMORY_PRESSURE_DROPS = 2
"""Pattern `pressure`: at least this many near-full drops within
MEMORY_PATTERN_WINDOW_SECONDS ..."""

MEMORY_PATTERN_WINDOW_SECONDS = 600.0
"""... (10 minutes), or memory that grew into the ceiling within it; a new process on a
near-full GPU is `sharing` for as long."""

MEMORY_PEAK_WINDOW_SECONDS = 120.0
"""A GPU whose peak over this many seconds is near full is near the top (its drops
included); below it the pattern is `not_full`."""

MEMORY_GROWTH_RATIO = 0.10
"""Growth into the ceiling: memory reached near full after rising at least this share of
the total (0..1) within MEMORY_PATTERN_WINDOW_SECONDS, ..."""

MEMORY_JUMP_RATIO = 0.20
"""... its last step smaller than this share of the total (0..1) (a bigger step is a pool
reserved at once), ..."""

MEMORY_STARTUP_SECONDS = 120.0
"""... and no process on it younger than this (a job filling its pool as it starts)."""

MEMORY_SHARE_RATIO = 0.01
"""Pattern `sharing`: two or more live processes, each holding at least this share of the
total (0..1), on a near-full GPU or MIG instance."""

MEMORY_FLAT_RATIO = 0.01
"""Memory is flat while it stays within this share of the total (0..1) of where it
settled (`gpu_memory_flat_seconds`)."""

MEMORY_OOM_EXIT_RATIO = 0.25
"""A likely out-of-memory death: a process that held at least this share of the total
(0..1) ends while its GPU or MIG instance was near full, and its memory is freed (a dead
owner whose memory stays held is GPUMemoryLeaked's)."""

MEMORY_OOM_EXIT_HOLD_SECONDS = 600.0
"""`gpu_memory_likely_oom_exit_info` names such an exit for this many seconds (10
minutes): scrapes 15 s or 60 s apart all see it; GPUJobEndedWhileMemoryFull fires on it."""

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
