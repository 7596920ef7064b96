"""Memory traces of real frameworks, which a scenario process of the simulated host plays.

Each trace gives a process's used memory, as a share (0..1) of its GPU's (or MIG
instance's) total, `seconds` after it started, for a `level` (the share it settles at):

- `tensorflow`: maps nearly all memory at start (its default, without
  `TF_FORCE_GPU_ALLOW_GROWTH`): at `level` within 2 s, then flat;
- `jax`: preallocates its fraction (`XLA_PYTHON_CLIENT_MEM_FRACTION`) at the first
  operation, 1 s in, then flat; the CUDA context (CUDA_CONTEXT) comes on top;
- `vllm`: loads the weights (a third of `level`, over 20 s), then reserves its KV cache
  up to `gpu_memory_utilization` (`level`) at 25 s, then flat; the CUDA context and the
  CUDA graphs' memory (CUDA_CONTEXT) come on top;
- `pytorch-pressure`: a caching allocator at the edge: it climbs to the top in 10 s, then
  every 20 to 40 s an allocation fails, the cache is freed (a drop of 5 to 10% of the
  total, for 30% of the cycle) and it climbs back to a top of 96 to 99%; `level` unused;
- `pytorch-growing`: a cache that grows without bound: from 55% at start to `level` over
  20 minutes in small steps, then held at `level`;
- `flat`: `level` from the start.

The traces are deterministic (no randomness): a test can replay one at any step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

GOLDEN = (math.sqrt(5) - 1) / 2  # spreads the cycles' lengths and depths without a generator

CUDA_CONTEXT = 0.006
"""The CUDA context outside a framework's pool, as a share of an 80 GB GPU (about 500 MiB)."""

GROWTH_SECONDS = 1200.0
"""pytorch-growing reaches its level after this many seconds."""


def _tensorflow(seconds: float, level: float) -> float:
    return level * min(1.0, max(0.0, seconds) / 2.0)


def _vllm(seconds: float, level: float) -> float:
    if seconds < 25.0:
        return level / 3 * min(1.0, max(0.0, seconds) / 20.0)
    return level + CUDA_CONTEXT


def _jax(seconds: float, level: float) -> float:
    return level + CUDA_CONTEXT if seconds >= 1.0 else 0.0


def _frac(x: float) -> float:
    return x - math.floor(x)


def pressure_cycle(k: int) -> tuple[float, float, float]:
    """The k-th cycle of pytorch-pressure: (its length in seconds, 20-40; its top, 0.96-0.99;
    its drop, 0.05-0.10 of the total)."""
    return (
        20.0 + 20.0 * _frac(k * GOLDEN),
        0.96 + 0.03 * _frac(k * GOLDEN * 2 + 0.3),
        0.05 + 0.05 * _frac(k * GOLDEN * 3 + 0.6),
    )


RAMP_SECONDS = 10.0
MAX_CYCLES = 100_000  # a week of cycles: the walk below is bounded


def _pytorch_pressure(seconds: float, level: float) -> float:
    if seconds < RAMP_SECONDS:
        return max(0.0, 0.97 * seconds / RAMP_SECONDS)
    t = seconds - RAMP_SECONDS
    for k in range(MAX_CYCLES):
        length, top, drop = pressure_cycle(k)
        if t < length:
            break
        t -= length
    else:
        return top
    phase = t / length
    if phase < 0.5:
        return top
    if phase < 0.8:
        return top - drop
    return top - drop * (1.0 - (phase - 0.8) / 0.2)


def _pytorch_growing(seconds: float, level: float) -> float:
    if seconds < 0:
        return 0.0
    start = min(0.55, level)
    return start + (level - start) * min(1.0, seconds / GROWTH_SECONDS)


def _flat(seconds: float, level: float) -> float:
    return level if seconds >= 0 else 0.0


TRACES: dict[str, Callable[[float, float], float]] = {
    "tensorflow": _tensorflow,
    "jax": _jax,
    "vllm": _vllm,
    "pytorch-pressure": _pytorch_pressure,
    "pytorch-growing": _pytorch_growing,
    "flat": _flat,
}
"""Trace name -> f(seconds since start, level) -> share of the total, 0..1."""


def share(trace: str, seconds: float, level: float) -> float:
    """The share of the total (0..1) the trace holds `seconds` after its start."""
    return min(1.0, max(0.0, TRACES[trace](seconds, level)))
