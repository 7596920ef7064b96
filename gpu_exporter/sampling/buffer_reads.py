"""When a GPU's utilization sample buffers are read: as often as their coverage needs.

`nvmlDeviceGetSamples` is one of the driver's dear calls (2.3 ms of the host's CPU on an
H200 with driver R580, `../shared/nvml-costs/h200-r580.txt`), and the exporter makes two
a GPU (the GPU and the memory-controller buffer). Yet each read returns every entry since
the last one, each with its own timestamp, so a buffer read once before it wraps gives
the busy counters (`busy.py`) exactly what reading it every interval gave. So:

- **In use** (NVML lists a process on the GPU, or it reads busy): read when the next
  interval would come later than `SAFETY` of the buffer's span, the span measured from
  its own timestamps (`BusyCounter.span_us`: about 100 entries of 1/6 s on an H100, 16 s).
  At a 1 s interval that is every 12 s, at the default 5 s every 10 s; entries are never
  lost, and `gpu_busy_uncovered_seconds_total` stays where it was.
- **Idle** (the last sample's process lists named no process, the GPU read idle, and its
  used memory was at its idle baseline): not read, once the entries written while it was
  in use are: the interval after a GPU turns idle (its job ended) its buffers are read
  one last time if the intervals before left them unread (`WAIT`), so a job's last
  seconds are counted like the rest of it. A GPU that holds no context runs no
  kernel; its buffer holds only zeros. The stretch counts as idle
  (`BusyCounter.hold_idle`). "Idle" never rests on the instantaneous reading alone: NVML
  does not always list the processes that keep a GPU busy (another container's, a vGPU
  guest's), and a job busy half of every second can read 0 at every sample. A context,
  listed or not, holds memory, so a GPU whose used memory is above its baseline
  (`MemoryBaseline`: `CONTEXT_BYTES` where the driver reports its reservation apart, as
  an idle H100 reports 0 MiB used; else the least seen plus `CONTEXT_BYTES`) is in use
  and its buffers are read before they wrap; so is one whose used memory is not known
  (the memory collector off, vGPU). The interval a process or a context appears, the
  buffer is read again, and its entries still reach back over the whole span, so a job
  is counted from its first entry. A job that starts and ends between two reads of the
  memory and the process lists (shorter than one interval) on an otherwise idle GPU is
  not counted.
- **Quiet** (Hopper and newer, each buffer on its own): in use, but GPM saw its engine
  do nothing the whole last interval and the reading agrees (`engine_quiet`): the graphics
  engine for the GPU's buffer, DRAM for the memory controller's. A kernel runs on the
  graphics engine, and memory is busy only while DRAM is read or written, so the
  buffer's entries for that interval are zeros: it is not read, as if idle, and the
  interval after GPM sees activity again it is read from its cursor, which the ring
  still holds. A context held but unused (a notebook between cells, an idle inference
  server: the "allocated but idle" GPU) reads neither; a compute-bound job that leaves
  DRAM alone reads only the GPU's.
- **Watched**: while someone has the live page (or `/api/overview`) open, read every
  interval, so the busy chart shows every interval as it comes (`WATCHED_SECONDS`).
  Unwatched, the page's history holds each read's busy share until the next read.
- **Unknown**: a buffer not yet read, or not supported (NVML remembers that and makes no
  call), or a span not yet measured: read every interval, as before.

Between reads the utilization gauges come from `nvmlDeviceGetUtilizationRates` (a few
microseconds), and the busy counters hold their last totals: a counter steps forward at
each read, by the driver's own entries, never by an estimate.

The per-process entries (`nvmlDeviceGetProcessUtilization`, 2.1 ms on that H200 whether a
process is there or not) credit listed processes only: the sampler asks for them in an
interval whose lists name a process, idle or in use; in use with nothing listed, the
backend reads the graphics list instead (`processes(in_use=True)`).
"""

from __future__ import annotations

import enum

from gpu_exporter.sampling.busy import BusyCounter

CONTEXT_BYTES = 64 * 2**20
"""Used memory this far above the GPU's idle baseline means a context holds it (a CUDA
context takes hundreds of MiB; the driver's own use wavers by a few)."""

SAFETY = 0.75
"""A buffer is read before the next interval would leave less than a quarter of its span
between reads (a late sample, a driver that stretches its period)."""


class BufferRead(enum.Enum):
    """What this interval does with a GPU's sample buffers."""

    READ = "read"  # ask the driver for the entries since the last read
    IDLE = "idle"  # skipped: no process listed, reads idle, memory at its baseline
    WAIT = "wait"  # skipped: the entries keep until a later interval


class MemoryBaseline:
    """A GPU's used memory with no context on it.

    Where the driver reports its reservation apart (`nvmlDeviceGetMemoryInfo_v2`, R510
    and later), `used` leaves it out and a GPU without a context uses almost nothing
    (nvidia-smi's "0MiB" or a few MiB): the baseline is `CONTEXT_BYTES`, whatever was
    seen before, so a context that already held memory when the exporter started is
    seen too. Where only v1 exists (the reservation counted in `used`), it is the least
    used memory seen since the driver loaded: a context present from the exporter's
    start and never let go is taken for part of it there."""

    def __init__(self) -> None:
        self.floor_bytes: int | None = None  # v1: the least used memory seen

    def at_baseline(self, used_bytes: int | None, reserved_bytes: int | None = None) -> bool:
        """Whether `used_bytes` (this sample's used memory; None: unknown) is at the
        baseline: no context holds memory. `reserved_bytes`: the driver's reservation
        where it reports it apart (v2), None where `used` counts it (v1). Unknown memory
        is never at the baseline."""
        if used_bytes is None:
            return False
        if reserved_bytes is not None:
            return used_bytes <= CONTEXT_BYTES
        if self.floor_bytes is None or used_bytes < self.floor_bytes:
            self.floor_bytes = used_bytes
        return used_bytes <= self.floor_bytes + CONTEXT_BYTES

    def rebase(self) -> None:
        """Forget the baseline (after a driver reload)."""
        self.floor_bytes = None


def engine_quiet(activity_ratio: float | None, reading_ratio: float | None) -> bool:
    """Whether the engine behind a buffer did nothing all interval: GPM's activity of it
    between the interval's two GPM samples (`activity_ratio`: the graphics engine for
    the GPU's buffer, DRAM bandwidth for the memory controller's) is exactly 0, and the
    interval's reading of the buffer's own measure (`reading_ratio`) is 0 too. GPM
    counts every cycle between its samples, so unlike a reading it cannot miss work
    between two intervals; the reading must agree, so GPM that does not count (another
    tool holding the counters, a driver that answers zeros) never stops a read of a busy
    GPU. None (no GPM, or not this interval) is not quiet."""
    return activity_ratio == 0.0 and reading_ratio == 0.0


def buffer_read(
    counter: BusyCounter,
    *,
    idle: bool,
    now_monotonic: float,
    interval_seconds: float,
    watched: bool = False,
    previous: BufferRead = BufferRead.READ,
) -> BufferRead:
    """This interval's read of the buffer behind `counter` (the GPU's or the memory
    controller's, each decided on its own); `idle`: the GPU idle or the buffer's engine
    quiet; `watched`: someone has the live page open;
    `previous`: the last interval's decision."""
    last, span_us = counter.read_monotonic, counter.span_us
    if last is None or span_us is None or (watched and not idle):
        return BufferRead.READ
    if idle:
        # entries left for later while the GPU was in use are read before it rests
        return BufferRead.READ if previous is BufferRead.WAIT else BufferRead.IDLE
    if now_monotonic - last + interval_seconds >= SAFETY * span_us / 1e6:
        return BufferRead.READ
    return BufferRead.WAIT
