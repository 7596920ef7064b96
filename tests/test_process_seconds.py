"""SM seconds per process from the driver's per-process samples (`process_seconds.py`)."""

from __future__ import annotations

import pytest

from gpu_exporter.model import ProcessUtilization
from gpu_exporter.sampling.process_seconds import ProcessSeconds

PERIOD = 200_000  # microseconds: the driver's sample period here


def entries(pid: int, first_us: int, ratios: list[float]) -> list[ProcessUtilization]:
    """One entry per period from `first_us`, a ratio of None leaving that period out."""
    return [
        ProcessUtilization(pid, first_us + i * PERIOD, ratio, 0.0)
        for i, ratio in enumerate(ratios)
        if ratio is not None
    ]


def test_the_first_read_sets_the_cursor_and_later_entries_add_share_times_period() -> None:
    counter = ProcessSeconds()
    assert counter.add(entries(7, 1_000_000, [0.9] * 10), {7: 100.0}) == {7: 0.0}
    seconds = counter.add(entries(7, 3_000_000, [0.5] * 5), {7: 100.0})
    # the first new entry follows the old ones by one period, as do the others
    assert seconds[7] == pytest.approx(5 * 0.5 * 0.2)
    assert counter.period_us == PERIOD


def test_a_gap_without_entries_is_idle_and_the_entry_after_it_covers_one_period() -> None:
    counter = ProcessSeconds()
    counter.add(entries(7, 0, [1.0, 1.0]), {7: None})
    # five periods without an entry (idle), then one entry of 1.0: one period, not six
    seconds = counter.add(entries(7, 7 * PERIOD, [1.0]), {7: None})
    assert seconds[7] == pytest.approx(0.2)


def test_a_process_that_appears_later_counts_from_its_first_entry() -> None:
    counter = ProcessSeconds()
    counter.add(entries(7, 0, [1.0, 1.0]), {7: 1.0})
    seconds = counter.add(
        entries(7, 2 * PERIOD, [1.0, 1.0]) + entries(8, 2 * PERIOD, [0.25, 0.25]),
        {7: 1.0, 8: 2.0},
    )
    assert seconds == {7: pytest.approx(0.4), 8: pytest.approx(2 * 0.25 * 0.2)}


def test_a_reused_pid_starts_again_at_zero_and_an_exited_process_is_forgotten() -> None:
    counter = ProcessSeconds()
    counter.add(entries(7, 0, [1.0]), {7: 1.0})
    assert counter.add(entries(7, PERIOD, [1.0, 1.0]), {7: 1.0})[7] == pytest.approx(0.4)
    # the same PID with another start time is another process
    assert counter.add(entries(7, 3 * PERIOD, [0.5]), {7: 9.0})[7] == pytest.approx(0.1)
    # gone from the list: forgotten, and its entries (a late read) are left out
    assert counter.add(entries(7, 4 * PERIOD, [1.0]), {}) == {}
    assert counter.add(entries(7, 5 * PERIOD, [1.0]), {7: 9.0})[7] == pytest.approx(0.2)


def test_after_a_rebase_totals_stay_and_the_next_read_only_sets_the_cursors() -> None:
    """NVML re-initialised: the driver's timestamps may restart lower, and the buffer is
    read whole again; nothing is counted twice, nothing is lost from the totals."""
    counter = ProcessSeconds()
    counter.add(entries(7, 10 * PERIOD, [1.0]), {7: 1.0})
    total = counter.add(entries(7, 11 * PERIOD, [1.0]), {7: 1.0})[7]
    counter.rebase()
    assert counter.add(entries(7, 0, [1.0, 1.0, 1.0]), {7: 1.0})[7] == total
    assert counter.add(entries(7, 3 * PERIOD, [0.5]), {7: 1.0})[7] == pytest.approx(total + 0.1)


def test_entries_already_counted_or_out_of_range_add_nothing_more() -> None:
    counter = ProcessSeconds()
    counter.add(entries(7, 0, [1.0]), {7: 1.0})
    once = counter.add(entries(7, PERIOD, [1.0, 1.0]), {7: 1.0})[7]
    # the same entries again (a cursor that did not move), and shares beyond 0..1
    assert counter.add(entries(7, PERIOD, [1.0, 1.0]), {7: 1.0})[7] == once
    more = counter.add(entries(7, 3 * PERIOD, [7.0, -1.0]), {7: 1.0})[7]
    assert more == pytest.approx(once + 0.2)
