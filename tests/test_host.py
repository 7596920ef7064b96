"""Host context: busy and iowait counters, CPU count, memory and load, from a fake /proc
and from this machine's, compared with psutil's reading of the same files."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from gpu_exporter.sources.host import HostReader

TICKS = 100
CPU_LINE = "cpu  10000 500 3000 90000 1200 100 200 50 4000 300\n"  # ticks, as proc(5) orders them
MEMINFO = (
    "MemTotal:       67108864 kB\n"
    "MemFree:         1048576 kB\n"
    "MemAvailable:   41943040 kB\n"
    "Buffers:          123456 kB\n"
)


def fake_proc(tmp_path: Path, stat: str | None = None, meminfo: str | None = MEMINFO) -> str:
    root = tmp_path / "proc"
    root.mkdir()
    if stat is None:
        stat = CPU_LINE + "cpu0 5000 250 1500 45000 600 50 100 25 2000 150\nbtime 1700000000\n"
    (root / "stat").write_text(stat)
    if meminfo is not None:
        (root / "meminfo").write_text(meminfo)
    return str(root)


def reader(root: str, **kwargs: object) -> HostReader:
    defaults: dict[str, object] = {
        "cpu_count": lambda: 8,
        "loadavg": lambda: (3.5, 2.0, 1.0),
        "clock_ticks": TICKS,
    }
    defaults.update(kwargs)
    return HostReader(root, **defaults)  # type: ignore[arg-type]


def test_host_sample_from_proc(tmp_path: Path) -> None:
    sample = reader(fake_proc(tmp_path))()
    assert sample is not None
    # busy: user, nice, system, irq, softirq, steal; guest time is already inside user
    assert sample.cpu_busy_seconds == pytest.approx((10000 + 500 + 3000 + 100 + 200 + 50) / TICKS)
    assert sample.cpu_iowait_seconds == 12.0
    assert sample.cpus == 8
    assert (sample.memory_total_bytes, sample.memory_available_bytes) == (64 * 2**30, 40 * 2**30)
    assert sample.load1 == 3.5


def test_kernels_without_iowait_leave_that_counter_out(tmp_path: Path) -> None:
    sample = reader(fake_proc(tmp_path, stat="cpu 1000 0 500 10000\n"))()
    assert sample is not None
    assert sample.cpu_iowait_seconds is None and sample.cpu_busy_seconds == 15.0


@pytest.mark.parametrize(
    ("stat", "meminfo"),
    [
        (None, None),  # no /proc/meminfo
        ("", MEMINFO),  # an empty /proc/stat
        ("intr 1 2 3\n", MEMINFO),  # no cpu line
        ("cpu 1 2 x 4 5\n", MEMINFO),  # not a number
        (None, "MemTotal: 67108864 kB\nMemFree: 1 kB\n"),  # a kernel before MemAvailable
    ],
    ids=["no-meminfo", "empty-stat", "no-cpu-line", "bad-number", "no-memavailable"],
)
def test_an_unreadable_file_leaves_the_host_series_out_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, stat: str | None, meminfo: str | None
) -> None:
    host = reader(fake_proc(tmp_path, stat=stat, meminfo=meminfo), monotonic=lambda: 0.0)
    assert host() is None and host() is None
    assert len([r for r in caplog.records if "host" in r.getMessage()]) == 1


def test_no_proc_at_all_leaves_the_host_series_out(tmp_path: Path) -> None:
    assert reader(str(tmp_path / "nothing"))() is None


def test_unknown_cpu_count_is_not_made_up(tmp_path: Path) -> None:
    assert reader(fake_proc(tmp_path), cpu_count=lambda: None)() is None


def test_kept_files_are_read_afresh_and_reopened_after_an_error(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    host = reader(root, monotonic=lambda: 0.0)
    assert (first := host()) is not None
    (Path(root) / "stat").write_text("cpu  20000 500 3000 90000 1200 100 200 50 4000 300\n")
    assert (second := host()) is not None  # the same open file, its new contents
    assert second.cpu_busy_seconds - first.cpu_busy_seconds == 100.0
    (Path(root) / "meminfo").unlink()
    assert host() is not None  # still open: an unlinked file is still readable
    host._meminfo.close()  # e.g. after a read error: opened again, by name
    assert host() is None
    (Path(root) / "meminfo").write_text(MEMINFO)
    assert host() is not None


def test_a_cpu_line_cut_short_is_not_read(tmp_path: Path) -> None:
    assert reader(fake_proc(tmp_path, stat="cpu  " + "1 " * 600))() is None


@pytest.mark.parametrize("reads", [1, 3])
def test_real_host_reads_what_psutil_reads(reads: int) -> None:
    host = HostReader()
    for _ in range(reads - 1):  # later reads come from the kept files
        host()
    before = psutil.cpu_times()
    sample = host()
    after = psutil.cpu_times()
    assert sample is not None
    assert sample.cpus == psutil.cpu_count()
    busy = [
        sum(getattr(t, f) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
        for t in (before, after)
    ]
    assert busy[0] <= sample.cpu_busy_seconds <= busy[1]
    assert before.iowait <= (sample.cpu_iowait_seconds or 0) <= after.iowait
    assert sample.memory_total_bytes == psutil.virtual_memory().total
    assert 0 < sample.memory_available_bytes <= sample.memory_total_bytes
    assert sample.load1 >= 0
