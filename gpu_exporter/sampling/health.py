"""Readiness and liveness: the two health decisions, made here and nowhere else.

- **Readiness** (`/healthz`, Kubernetes readiness, Docker's view of "serving data"):
  a sample finished within `STALE_INTERVALS` intervals, NVML answers, and at least one
  GPU could be read. A node whose driver is not loaded yet is not ready, but alive.
- **Liveness** (`/livez`, the systemd watchdog, Kubernetes liveness, Docker's
  HEALTHCHECK): the sampler thread is running and its loop went round within
  `STALE_INTERVALS` intervals plus one read deadline (`--collect.timeout`), whatever the
  driver says. A hung GPU does not stop the loop (its reads run on their own thread);
  NVML itself stuck does, and a restart is the cure for that.

Both use the interval in force (a SIGHUP may change it) and the same constant.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gpu_exporter.model import Snapshot
from gpu_exporter.records import Record

STALE_INTERVALS = 3


@dataclass(frozen=True, repr=False)
class Verdict(Record):
    """A health answer and its one-line reason."""

    ok: bool
    reason: str


class SamplerView(Protocol):
    """What health needs to know of the sampler."""

    @property
    def interval_seconds(self) -> float: ...

    @property
    def timeout_seconds(self) -> float: ...

    @property
    def latest(self) -> Snapshot | None: ...

    def heartbeat(self) -> float | None:
        """Monotonic time the sampling loop last went round; None before it started."""

    def failure(self) -> str | None:
        """Why the sampling thread is not running, or None while it runs."""


def readiness(
    snapshot: Snapshot | None,
    failure: str | None,
    interval_seconds: float,
    now: float,
    now_monotonic: float | None = None,
) -> Verdict:
    """Fresh data from at least one GPU? `now` is Unix time; with `now_monotonic` (the
    sampler's monotonic clock) the sample's age is measured on it, which a step of the
    wall clock does not move (a step forward once made a fresh sample stale until the
    next, a step back a stalled sampler fresh for the step's length)."""
    if failure is not None:
        return Verdict(False, f"sampler not running: {failure}")
    if snapshot is None:
        return Verdict(False, "no sample has finished yet")
    if now_monotonic is not None and snapshot.monotonic_seconds is not None:
        age = now_monotonic - snapshot.monotonic_seconds
    else:
        age = now - snapshot.timestamp_seconds
    if age > STALE_INTERVALS * interval_seconds:
        return Verdict(
            False, f"last sample finished {age:.1f}s ago (interval {interval_seconds:g}s)"
        )
    if not snapshot.nvml_up:
        return Verdict(False, f"NVML unavailable: {snapshot.nvml_down_reason}")
    if snapshot.devices and not any(d.up for d in snapshot.devices):
        reasons = "; ".join(f"GPU {d.index}: {d.down_reason}" for d in snapshot.devices)
        return Verdict(False, f"no GPU can be sampled ({reasons})")
    up = sum(1 for d in snapshot.devices if d.up)
    return Verdict(True, f"ok: {up}/{snapshot.gpus} GPUs up, last sample {age:.1f}s ago")


def liveness(
    heartbeat: float | None,
    failure: str | None,
    interval_seconds: float,
    timeout_seconds: float,
    now_monotonic: float,
) -> Verdict:
    """Is the sampling loop going round? Times are monotonic seconds."""
    if failure is not None:
        return Verdict(False, f"sampler not running: {failure}")
    if heartbeat is None:
        return Verdict(True, "alive: starting")
    age = now_monotonic - heartbeat
    if age > STALE_INTERVALS * interval_seconds + timeout_seconds:
        return Verdict(False, f"sampler loop stuck: last went round {age:.1f}s ago")
    return Verdict(True, f"alive: sampler loop went round {age:.1f}s ago")


class Health:
    """Readiness and liveness of one running sampler."""

    def __init__(
        self,
        sampler: SamplerView,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sampler = sampler
        self._clock = clock
        self._monotonic = monotonic

    def ready(self) -> Verdict:
        s = self._sampler
        return readiness(
            s.latest, s.failure(), s.interval_seconds, self._clock(), self._monotonic()
        )

    def live(self) -> Verdict:
        s = self._sampler
        return liveness(
            s.heartbeat(), s.failure(), s.interval_seconds, s.timeout_seconds, self._monotonic()
        )
