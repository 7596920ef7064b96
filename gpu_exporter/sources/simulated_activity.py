"""What the simulated GPUs do, as functions of time with exact means over any interval.

GPM reports the mean of each metric between two samples; the simulated host computes
that mean exactly (closed-form integrals of its square and sine waves), so counters
integrated from it have a known rate: the tests check `rate()` against these means.

Profiles (see `simulated.py`): `input-starved` works in bursts that follow its
utilization flicker; `idle-allocated` does nothing; `near-oom` keeps the GPU busy with
tiny kernels while most SMs idle (launch-bound: busy but SMs idle); `busy-hot` is
MIG-partitioned, its 3g.40gb instance serving inference flat out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_exporter.model import GpmReading
from gpu_exporter.records import Record

INPUT_STARVED_PERIOD = 0.4  # seconds: 2.5 busy bursts a second
INPUT_STARVED_DUTY = 0.5


def square(t: float, period: float, duty: float = 0.5) -> bool:
    return (t % period) < period * duty


def wave(t: float, period: float, phase: float = 0.0) -> float:
    """A smooth wave between 0 and 1."""
    return 0.5 + 0.5 * math.sin(2 * math.pi * (t / period) + phase)


def square_mean(t0: float, t1: float, period: float, duty: float = 0.5) -> float:
    """The share of [t0, t1] during which `square` is on."""

    def on_time(t: float) -> float:
        whole, rest = divmod(t, period)
        return whole * period * duty + min(rest, period * duty)

    return (on_time(t1) - on_time(t0)) / (t1 - t0)


def wave_mean(t0: float, t1: float, period: float, phase: float = 0.0) -> float:
    """The mean of `wave` over [t0, t1]."""
    k = 2 * math.pi / period
    integral = 0.5 * (t1 - t0) - 0.5 / k * (math.cos(k * t1 + phase) - math.cos(k * t0 + phase))
    return integral / (t1 - t0)


def wave_time_above(t0: float, t1: float, period: float, level: float) -> float:
    """Seconds of [t0, t1] during which `wave(t, period)` is at `level` (0..1) or above."""
    a = math.asin(max(-1.0, min(1.0, 2 * level - 1)))  # sin(angle) >= sin(a) above it
    scale = period / (2 * math.pi)

    def above_until(t: float) -> float:
        whole, rest = divmod(t, period)
        x = rest / scale  # the angle reached in the current period
        part = max(0.0, min(x, math.pi - a) - max(0.0, a))
        if a < 0:  # the stretch above that wraps round the end of the period
            part += max(0.0, x - (2 * math.pi + a))
        return (whole * (math.pi - 2 * a) + part) * scale

    return above_until(t1) - above_until(t0)


@dataclass(frozen=True, repr=False)
class Activity(Record):
    """Levels of each GPM metric while a profile works (ratios, bytes per second)."""

    graphics_engine: float
    sm: float
    sm_occupancy: float
    dram: float
    pipes: Mapping[str, float]
    pcie: Mapping[str, float] = field(default_factory=dict)
    nvlink: Mapping[str, float] = field(default_factory=dict)

    def scaled(self, share: float, elapsed: float, *, bus: bool = True) -> GpmReading:
        """The GPM reading of working `share` of an interval of `elapsed` seconds."""
        return GpmReading(
            elapsed_seconds=elapsed,
            graphics_engine_ratio=self.graphics_engine * share,
            sm_ratio=self.sm * share,
            sm_occupancy_ratio=self.sm_occupancy * share,
            dram_ratio=self.dram * share,
            pipe_ratios={p: v * share for p, v in self.pipes.items()},
            pcie_bytes_per_second={d: v * share for d, v in self.pcie.items()} if bus else {},
            nvlink_bytes_per_second=({d: v * share for d, v in self.nvlink.items()} if bus else {}),
        )


IDLE = Activity(
    0.0,
    0.0,
    0.0,
    0.0,
    {p: 0.0 for p in ("tensor", "fp64", "fp32", "fp16", "integer")},
    {"tx": 0.0, "rx": 0.0},
    {"tx": 0.0, "rx": 0.0},
)

# While its bursts run: 80% of the SMs busy, mostly tensor cores, input arriving by PCIe
INPUT_STARVED = Activity(
    graphics_engine=0.95,
    sm=0.80,
    sm_occupancy=0.35,
    dram=0.30,
    pipes={"tensor": 0.45, "fp64": 0.0, "fp32": 0.10, "fp16": 0.20, "integer": 0.05},
    pcie={"tx": 2.1e9, "rx": 6.4e9},
    nvlink={"tx": 0.0, "rx": 0.0},
)

# Launch-bound fine-tuning: a kernel is always running (busy > 0.8), few SMs have work
NEAR_OOM = Activity(
    graphics_engine=1.0,  # times the utilization wave below
    sm=0.15,
    sm_occupancy=0.06,
    dram=0.25,
    pipes={"tensor": 0.05, "fp64": 0.0, "fp32": 0.04, "fp16": 0.03, "integer": 0.02},
    pcie={"tx": 0.4e9, "rx": 1.0e9},
    nvlink={"tx": 45e9, "rx": 45e9},  # gradient all-reduce with its NVLink peers
)

# The busy MIG instance (3g.40gb of 7 slices) of the busy-hot GPU, serving inference
INFERENCE = Activity(
    graphics_engine=0.97,
    sm=0.85,
    sm_occupancy=0.50,
    dram=0.55,
    pipes={"tensor": 0.70, "fp64": 0.0, "fp32": 0.15, "fp16": 0.30, "integer": 0.10},
    pcie={"tx": 0.8e9, "rx": 2.0e9},
    nvlink={"tx": 0.0, "rx": 0.0},
)
INFERENCE_SHARE_OF_GPU = 3 / 7  # its slices of the whole GPU


def near_oom_busy(t: float) -> float:
    """The near-OOM GPU's utilization: 82 to 92%."""
    return 0.82 + 0.10 * wave(t, 60.0)


def near_oom_busy_mean(t0: float, t1: float) -> float:
    return 0.82 + 0.10 * wave_mean(t0, t1, 60.0)
