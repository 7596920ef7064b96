"""Device reads on one thread, handed on when a read hangs, so a wedged driver call stalls
only its own device.

Each sample the sampler gives `ReaderPool.read` one read per GPU. They run one after
another on one reader thread: one thread wakes per interval, not one per GPU (on the
benchmark's 8 GPUs that woke eight threads contending for the interpreter lock, a
quarter of the idle exporter's CPU; benchmarks/README.md). A call into a hung driver
cannot be interrupted, so a watchdog (the sampler's thread, waiting in `read`) hands the
reads not yet started to another reader as soon as every running read has taken
`handoff_seconds`: the other GPUs are still read within the shared deadline. A read that
misses the deadline is left running, never joined, and its device is skipped while that
read is unfinished: there is never more than one stuck thread per device, however long
the hang lasts. Reads still unstarted at the deadline are dropped, never run late.

The readers made for a hand-off are kept idle for the next, but one that has had nothing
to read for `IDLE_SECONDS` ends (never the last one idle): a slow minute (a driver
hiccup, a loaded host) does not leave a thread per GPU, each with its stack and its GPM
request, for the months the daemon runs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

HANDOFF_SECONDS = 0.1  # a read running this long gets the reads after it handed on
IDLE_SECONDS = 300.0  # a reader given nothing this long ends, unless it is the last idle


class NotStarted(Exception):
    """A read dropped at the deadline before any reader started it."""


class Job(Generic[T]):
    """One device's read; `done` is True once it returned, raised or was dropped (a plain
    attribute, set once by one thread: nobody waits on a job, only on its batch, so no
    Event is made and set for each GPU each interval)."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.started_monotonic: float | None = None  # set when a reader takes it
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None


class _Batch(Generic[T]):
    """One sample's reads, taken in order by the readers working on it."""

    def __init__(self, jobs: list[Job[T]]) -> None:
        self._lock = threading.Lock()
        self._waiting = deque(jobs)
        self._running: list[Job[T]] = []
        self._left = len(jobs)
        # held until every read is done: the sampler waits on it in C, with no Condition
        # (an Event's wait runs a dozen lines of Python between the hand-off and the
        # sleep, and its set as many while the woken sampler waits for the interpreter)
        self._done = threading.Lock()
        if jobs:
            self._done.acquire()

    def take(self) -> Job[T] | None:
        """The next read to run, or None when none is left."""
        with self._lock:
            if not self._waiting:
                return None
            job = self._waiting.popleft()
            job.started_monotonic = time.monotonic()
            self._running.append(job)
            return job

    def ran(self, job: Job[T]) -> bool:
        """Note `job` done; True when it was the batch's last (then the caller calls
        `finish`, once)."""
        job.done = True  # before `finish`: the sampler it wakes reads every job's `done`
        with self._lock:
            self._running.remove(job)
            self._left -= 1
            return self._left == 0

    def finish(self) -> None:
        """Wake the sampler: every read is done."""
        self._done.release()

    def wait(self, timeout_seconds: float) -> bool:
        """True once every read is done, waiting at most `timeout_seconds`."""
        if timeout_seconds <= 0:
            return self._done.acquire(blocking=False)
        return self._done.acquire(timeout=timeout_seconds)

    def stalled(self, now: float, handoff_seconds: float) -> bool:
        """True when reads wait and every running one has run `handoff_seconds`."""
        with self._lock:
            return bool(self._waiting and self._running) and all(
                now - (job.started_monotonic or now) >= handoff_seconds for job in self._running
            )

    def close(self) -> None:
        """Drop the reads no reader has started (the deadline passed)."""
        with self._lock:
            dropped, self._waiting = list(self._waiting), deque()
            self._left -= len(dropped)
        for job in dropped:
            job.error = NotStarted()
            job.done = True


class _Reader(Generic[T]):
    """A daemon thread that runs the reads of the batches it is given."""

    def __init__(self, pool: ReaderPool[T], name: str) -> None:
        self._pool = pool
        self._batches: queue.SimpleQueue[_Batch[T] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def give(self, batch: _Batch[T] | None) -> None:
        self._batches.put(batch)

    def _run(self) -> None:
        while True:
            try:
                batch = self._batches.get(timeout=self._pool.idle_seconds)
            except queue.Empty:
                if self._pool.retire(self):
                    return
                continue  # taken for a batch meanwhile, or the last one idle
            if batch is None:
                return
            last = False
            while (job := batch.take()) is not None:
                try:
                    job.result = job.fn()
                except BaseException as error:  # handed to the sampler, which classifies it
                    job.error = error
                finally:
                    last = batch.ran(job)
            kept = self._pool.idle_again(self)
            if last:  # the last thing before this thread waits: the sampler it wakes
                batch.finish()  # finds the interpreter free
            if not kept:
                return


class ReaderPool(Generic[T]):
    """Reader threads, made when needed and kept idle between samples."""

    def __init__(
        self,
        name: str = "gpu-reader",
        handoff_seconds: float = HANDOFF_SECONDS,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self._name = name
        self.handoff_seconds = handoff_seconds
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._idle: list[_Reader[T]] = []
        self._made = 0
        self._stopped = False
        self._unfinished: dict[Hashable, Job[T]] = {}  # reads that missed a deadline

    def stuck_since(self, key: Hashable) -> float | None:
        """Monotonic time the unfinished read of `key` started, or None when none is."""
        job = self._unfinished.get(key)
        if job is None:
            return None
        if job.done:
            self._unfinished.pop(key, None)  # stop() may ask from another thread
            return None
        return job.started_monotonic

    def any_stuck(self) -> bool:
        return any(self.stuck_since(key) is not None for key in list(self._unfinished))

    def read(
        self, reads: Mapping[K, Callable[[], T]], deadline_monotonic: float
    ) -> dict[K, Job[T]]:
        """Run `reads` until they are done or the deadline passes; each one's Job. A Job
        not done is still running (stuck); one with `NotStarted` was dropped."""
        jobs = {key: Job(fn) for key, fn in reads.items()}
        batch = _Batch(list(jobs.values()))
        reader = self._reader() if jobs else None
        now = time.monotonic()
        wait = min(deadline_monotonic - now, self.handoff_seconds / 2)
        if reader is not None:  # handed on last: the reader it wakes finds the
            reader.give(batch)  # interpreter free, the sampler asleep
        while not batch.wait(wait):
            now = time.monotonic()
            if now >= deadline_monotonic:
                break
            if batch.stalled(now, self.handoff_seconds):
                self._reader().give(batch)
            wait = min(deadline_monotonic - now, self.handoff_seconds / 2)
        batch.close()
        for key, job in jobs.items():
            if not job.done:
                self._unfinished[key] = job
        return jobs

    def _reader(self) -> _Reader[T]:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self._made += 1
            name = f"{self._name}-{self._made}"
        return _Reader(self, name)

    def idle_again(self, reader: _Reader[T]) -> bool:
        """A reader's batch is done: keep it for the next one; False once stopped."""
        with self._lock:
            if self._stopped:
                return False
            self._idle.append(reader)
            return True

    def retire(self, reader: _Reader[T]) -> bool:
        """Whether an idle reader given nothing for `idle_seconds` ends now: yes while
        another reader is idle too; no when it is the last, or it was taken meanwhile
        (its batch is on its way)."""
        with self._lock:
            if reader in self._idle and len(self._idle) > 1:
                self._idle.remove(reader)
                return True
            return False

    def stop(self) -> None:
        """End the idle readers, and the others when their call returns; never waits."""
        with self._lock:
            self._stopped = True
            idle, self._idle = self._idle, []
        for reader in idle:
            reader.give(None)
