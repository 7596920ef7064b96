"""The device readers: one thread for all GPUs, a hang handed on, never run late."""

from __future__ import annotations

import threading
import time

from gpu_exporter.sampling.device_workers import NotStarted, ReaderPool


def test_every_gpu_is_read_on_one_thread_when_none_hangs() -> None:
    pool: ReaderPool[str] = ReaderPool()
    try:
        for _ in range(3):
            jobs = pool.read(
                {i: lambda: threading.current_thread().name for i in range(8)},
                time.monotonic() + 5.0,
            )
            assert {job.result for job in jobs.values()} == {"gpu-reader-1"}
    finally:
        pool.stop()


def test_two_hung_gpus_do_not_stall_the_others() -> None:
    release = threading.Event()
    pool: ReaderPool[int] = ReaderPool(handoff_seconds=0.05)

    def hang() -> int:
        release.wait()
        return -1

    reads = {0: hang, 1: hang, 2: lambda: 2, 3: lambda: 3}
    try:
        jobs = pool.read(reads, time.monotonic() + 2.0)
        assert jobs[2].result == 2 and jobs[3].result == 3
        assert not jobs[0].done and not jobs[1].done
        assert pool.stuck_since(0) is not None and pool.stuck_since(1) is not None
        assert pool.stuck_since(2) is None and pool.any_stuck()
        # the next sample skips the stuck GPUs and reads the others without a new thread
        jobs = pool.read({2: lambda: threading.active_count(), 3: lambda: 3}, time.monotonic() + 2)
        before = jobs[2].result
        jobs = pool.read({2: lambda: threading.active_count()}, time.monotonic() + 2)
        assert jobs[2].result == before
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while pool.any_stuck() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pool.any_stuck()  # the calls returned: both GPUs are read again
    pool.stop()


def test_reads_not_started_by_the_deadline_are_dropped_not_run_late() -> None:
    release = threading.Event()
    ran: list[int] = []
    pool: ReaderPool[int] = ReaderPool(handoff_seconds=10.0)  # no handoff in time
    try:
        jobs = pool.read(
            {0: lambda: int(release.wait()), 1: lambda: ran.append(1) or 1},
            time.monotonic() + 0.2,
        )
        assert not jobs[0].done
        assert isinstance(jobs[1].error, NotStarted)
    finally:
        release.set()
    time.sleep(0.1)
    assert ran == []  # GPU 1's read of a past sample never ran after its deadline
    pool.stop()


def test_a_batch_is_finished_only_once_each_read_says_it_is_done() -> None:
    """The sampler wakes when the batch is finished and reads every job's `done`: a job
    marked done after that would be taken, for an instant, for a read that did not
    return (its GPU down for an interval). Only the last read's `ran` says to finish."""
    from gpu_exporter.sampling.device_workers import Job, _Batch

    jobs = [Job(lambda: 1), Job(lambda: 2)]
    batch: _Batch[int] = _Batch(jobs)
    last: list[bool] = []
    while (job := batch.take()) is not None:
        job.result = job.fn()
        assert not batch.wait(0)  # not finished while a read is left
        last.append(batch.ran(job))
    assert last == [False, True]
    assert [job.done for job in jobs] == [True, True] and not batch.wait(0)
    batch.finish()
    assert batch.wait(0.5)


def test_the_sampler_is_woken_after_the_reader_is_idle_again() -> None:
    """The reader finishes a batch as the last thing before it waits for the next one:
    the sampler it wakes finds the reader back in the pool (and the interpreter free),
    so the next sample's batch goes to the same thread, and a batch timed out on is
    finished later without error."""
    pool: ReaderPool[int] = ReaderPool()
    order: list[str] = []
    try:
        jobs = pool.read({0: lambda: 0}, time.monotonic() + 5.0)
        assert jobs[0].result == 0
        release = threading.Event()
        jobs = pool.read({0: lambda: int(release.wait(5))}, time.monotonic() + 0.2)
        assert not jobs[0].done  # the deadline passed first
        release.set()
        deadline = time.monotonic() + 5
        while pool.stuck_since(0) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.stuck_since(0) is None
        jobs = pool.read(
            {0: lambda: order.append(threading.current_thread().name) or 1}, time.monotonic() + 5.0
        )
        assert jobs[0].result == 1 and order == ["gpu-reader-1"]
    finally:
        pool.stop()


def test_readers_made_for_a_slow_minute_end_once_idle_but_the_last() -> None:
    """Every read slow (a loaded host): readers are made for the hand-offs; once reads are
    quick again, those given nothing for `idle_seconds` end, and one stays."""
    pool: ReaderPool[int] = ReaderPool(handoff_seconds=0.02, idle_seconds=0.3)

    def readers() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("gpu-reader-")}

    def slow() -> int:
        time.sleep(0.1)
        return 1

    try:
        pool.read({i: slow for i in range(4)}, time.monotonic() + 5.0)
        made = readers()
        assert len(made) >= 2  # handed on while every running read was slow
        deadline = time.monotonic() + 10.0
        while len(readers()) > 1 and time.monotonic() < deadline:
            # quick reads every 0.1 s: one reader is enough, the others stay idle
            jobs = pool.read({i: lambda: 2 for i in range(4)}, time.monotonic() + 5.0)
            assert all(job.result == 2 for job in jobs.values())
            time.sleep(0.1)
        left = readers()
        assert len(left) == 1 and left <= made  # the one in use stays; no new one was made
        time.sleep(0.6)  # nothing to read for longer than idle_seconds: the last stays
        jobs = pool.read({0: lambda: 3}, time.monotonic() + 5.0)
        assert jobs[0].result == 3 and readers() == left
    finally:
        pool.stop()
