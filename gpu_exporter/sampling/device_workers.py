"""One reader thread per GPU, so a wedged driver call stalls only its own device.

A call into a hung driver cannot be interrupted. The sampler hands each device's read
to that device's worker and waits until a shared deadline; a read that misses it is
left running, never joined, and the device is skipped while its worker is still busy.
There is never more than one stuck thread per device, however long the hang lasts.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Job(Generic[T]):
    """A read handed to a worker; `done` is set when it returns or raises."""

    def __init__(self, fn: Callable[[], T], submitted_monotonic: float) -> None:
        self.fn = fn
        self.submitted_monotonic = submitted_monotonic
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None


class DeviceWorker(Generic[T]):
    """A daemon thread that runs one device's jobs, one at a time."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Job[T] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.current: Job[T] | None = None

    @property
    def stuck_since(self) -> float | None:
        """Monotonic time the unfinished job was submitted, or None when idle."""
        job = self.current
        if job is not None and not job.done.is_set():
            return job.submitted_monotonic
        return None

    def submit(self, fn: Callable[[], T]) -> Job[T]:
        if self.stuck_since is not None:
            raise RuntimeError(f"{self._name} is still busy")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        job: Job[T] = Job(fn, time.monotonic())
        self.current = job
        self._queue.put(job)
        return job

    def stop(self) -> None:
        """Ask the thread to end after its current job; never waits for it."""
        if self._thread is not None:
            self._queue.put(None)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                job.result = job.fn()
            except BaseException as error:  # handed to the sampler, which classifies it
                job.error = error
            finally:
                job.done.set()


def wait_all(jobs: list[Job[T]], deadline_monotonic: float) -> None:
    """Wait until every job is done or the deadline passes."""
    for job in jobs:
        remaining = deadline_monotonic - time.monotonic()
        if remaining <= 0:
            return
        job.done.wait(remaining)
