"""The counter fields' cadence: energy, the error counts and the clocks-event durations
are read as often as their cost allows, and at least every MAX_AGE_SECONDS.

On a real driver these fields are the dear ones (an H200 on R580, per call: energy 3 ms,
each PCIe error counter 175 us, the clocks-event counters 0.7 ms; `../shared/nvml-costs/`),
and an exporter that read them every interval paid the driver ten times what it paid
itself. They are cumulative counters: a value read later loses nothing (Prometheus takes
rates of them over minutes), so between reads the exporter serves the value it last
read, the driver's own at that moment: never interpolated, never run backwards.

When they are read is decided from what they cost, as measured on this host: the
interval's one `nvmlDeviceGetFieldValues` call is timed with and without them, and the
difference (the least of the last few of each, which a preempted thread cannot inflate)
is their cost. They are read every `cost / BUDGET_SECONDS_PER_SECOND` seconds, at least
every interval and at most MAX_AGE_SECONDS apart: on the H200 every 30 s (0.19 ms of
the host's CPU a second per GPU), on a driver that answers them in microseconds every
interval. Asking for them costs no call of its own: when due they ride in the interval's
call, so the calls per interval do not change.

A counter that fails (its entry answers an error, NVML_ERROR_UNKNOWN on some boards and
hypervisors) is retried alone: the others keep their cadence, and it rides in the
interval's call by itself, at the next interval after its first failure, then after
twice as long at each failure in a row (2, 4, 8, ... intervals), at most
RETRY_MAX_SECONDS apart. Until it answers it is absent; the first answer puts it back on
the others' cadence.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable

from gpu_exporter.sources.backend import COUNTER_MAX_AGE_SECONDS

MAX_AGE_SECONDS = COUNTER_MAX_AGE_SECONDS
"""A counter is never served older than this (issue 42: each at least every 30 s)."""

BUDGET_SECONDS_PER_SECOND = 1e-4
"""The driver time the counters may take per GPU: 0.1 ms of the host's CPU a second."""

RETRY_MAX_SECONDS = 600.0
"""A counter that keeps failing is asked at least this often (10 minutes), alone."""

KEPT = 5
"""Timings kept of each kind (with and without the counters): their least is the cost."""


class CounterCadence:
    """One device's counter fields: when they are next read, and the values last read."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}  # key -> the value last read
        self.read_at: float | None = None  # monotonic time of the last read
        self._with: deque[float] = deque(maxlen=KEPT)  # call seconds with the counters
        self._without: deque[float] = deque(maxlen=KEPT)  # and without
        self._failures: dict[str, int] = {}  # key -> failures in a row
        self._retry_at: dict[str, float] = {}  # key -> monotonic time of its next try
        self._keys: frozenset[str] = frozenset()  # the counters last asked about
        self._ordered: list[str] = []  # and in their order (a copy: `_keys` is made of it)

    @property
    def cost_seconds(self) -> float | None:
        """What asking for the counters adds to the interval's call (seconds); None
        before they were read once."""
        if not self._with:
            return None
        base = min(self._without) if self._without else 0.0
        return max(0.0, min(self._with) - base)

    @property
    def period_seconds(self) -> float:
        """Seconds between reads that the cost allows, at most MAX_AGE_SECONDS."""
        cost = self.cost_seconds
        if cost is None:
            return 0.0
        return min(MAX_AGE_SECONDS, cost / BUDGET_SECONDS_PER_SECOND)

    def due(self, now: float, step_seconds: float) -> bool:
        """Whether this interval's call asks for the counters; `step_seconds` is the
        time since the device's last reading (the interval), so that the read after
        this one would not come later than MAX_AGE_SECONDS."""
        if self.read_at is None:
            return True
        elapsed = now - self.read_at
        return (
            elapsed + step_seconds > MAX_AGE_SECONDS
            or elapsed >= self.period_seconds - step_seconds / 2
        )

    def note(self, call_seconds: float, *, with_counters: bool) -> None:
        """How long this interval's call took, and whether it asked for the counters."""
        (self._with if with_counters else self._without).append(call_seconds)

    def asked(
        self, now: float, step_seconds: float, keys: Iterable[str], *, group: bool | None = None
    ) -> list[str]:
        """The counters this interval's call asks for: all of them but the failing ones
        when the cadence is `due` (`group`, where the caller asked `due` already), and
        each failing one whose own retry is due."""
        if group is None:
            group = self.due(now, step_seconds)
        ordered = list(keys)
        if ordered != self._ordered:  # the collectors changed (or the first interval)
            self._ordered = ordered.copy()
            self._keys = _key_set(tuple(ordered))
        if not self._retry_at:
            # the common case, no counter failing: all of them when due, else none
            return ordered if group else []
        out: list[str] = []
        for key in ordered:
            retry = self._retry_at.get(key)
            if retry is None:
                if group:
                    out.append(key)
            elif now >= retry - step_seconds / 2:
                out.append(key)
        return out

    def read(
        self,
        now: float,
        answers: dict[str, float],
        keys: Iterable[str],
        unsupported: set[str],
        *,
        step_seconds: float = 0.0,
        group: bool = True,
    ) -> None:
        """Keep the counters' values (`keys`, those asked) from this interval's `answers`.

        A counter that failed (neither answered nor `unsupported`) is absent and retried
        alone, after `step_seconds` (the interval), then twice as long at each failure in
        a row, at most RETRY_MAX_SECONDS; the others keep their cadence. `group`: the
        call asked for the counters whose cadence was due (else only retries). A call
        that failed as a whole is not read here: the backend `forget`s every counter,
        served by none until the next interval asks for all of them again."""
        if group:
            self.read_at = now
        as_before = self._answered_as_before(answers, keys, unsupported)
        if as_before is not None:
            self.values = as_before
            return
        # a counter no longer wanted (a collector turned off) is not served
        self.values = {k: v for k, v in self.values.items() if k in self._keys or k in answers}
        for key in keys:
            if key in answers:
                self.values[key] = answers[key]
                self._failures.pop(key, None)
                self._retry_at.pop(key, None)
                continue
            self.values.pop(key, None)
            if key in unsupported:
                self._failures.pop(key, None)
                self._retry_at.pop(key, None)
                continue
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            wait = step_seconds * 2.0 ** min(failures - 1, 30)  # first: the next interval
            self._retry_at[key] = now + min(RETRY_MAX_SECONDS, wait)

    def _answered_as_before(
        self, answers: dict[str, float], keys: Iterable[str], unsupported: set[str]
    ) -> dict[str, float] | None:
        """What `read` makes of the common case in one comprehension, else None: no
        counter failing, all of them asked (the keys `asked` gave), and the same ones
        answered as at the last read, the rest unsupported. Then nothing is dropped,
        added, failed or retried: each value served is replaced by its answer, in place
        (the same order as the loop's)."""
        if self._failures or keys != self._ordered:
            return None
        values = self.values
        if len(values) != len(self._keys):
            # some counters are not served: each must be unsupported, and unanswered
            missing = self._keys - values.keys()
            if not (
                len(missing) + len(values) == len(self._keys)
                and missing <= unsupported
                and answers.keys().isdisjoint(missing)
            ):
                return None
        elif values.keys() != self._keys:
            return None
        try:
            return {key: answers[key] for key in values}
        except KeyError:  # a counter that answered at the last read failed
            return None

    def failing(self) -> dict[str, int]:
        """Each failing counter and how many times in a row it failed."""
        return dict(self._failures)

    def forget(self) -> None:
        """Drop the values and read at the next interval (a lost device, a MIG change)."""
        self.values = {}
        self.read_at = None
        self._failures.clear()
        self._retry_at.clear()


@functools.lru_cache(maxsize=8)
def _key_set(keys: tuple[str, ...]) -> frozenset[str]:
    """`keys` as a set, one for every device asking for the same counters: a GPU with 18
    NVLink links asks for about 300 (NVLink5's per-link ones among them), whose set
    takes 32 KiB."""
    return frozenset(keys)
