"""The kernel-log reader: the driver's Xid and SXid lines, bounded parsing, a ring that
wraps, and a log of 100,000 records."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from gpu_exporter.config import kernel_log_path, load_settings
from gpu_exporter.model import DeviceEvent
from gpu_exporter.sources import kernel_log, kernel_log_files, kernel_log_records
from gpu_exporter.sources.kernel_log import NOT_A_LOG_AFTER, WAITING, KernelLogReader
from gpu_exporter.sources.kernel_log_counts import (
    MAX_CODES_PER_KEY,
    MAX_KEYS,
    MAX_PAIRS,
    KernelLogCounts,
)
from gpu_exporter.sources.kernel_log_files import PARTIAL_RECORD, open_kernel_log
from gpu_exporter.sources.kernel_log_records import (
    MAX_RECORD_BYTES,
    DriverError,
    Unparsed,
    parse_driver_error,
    parse_record,
)
from gpu_exporter.sources.log_limit import PER_WINDOW, LogLimit
from gpu_exporter.sources.xid import XidListener

GPU0 = "00000000:3B:00.0"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # real lines (NVIDIA's Xid catalogue, leptonai/gpud's samples)
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
            "off the bus.",
            DriverError("xid", 79, GPU0),
        ),
        (
            "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008",
            DriverError("xid", 109, "00000000:CB:00.0"),
        ),
        ("NVRM: Xid (PCI:0000:3b:00.0): 48, pid=1, DBE", DriverError("xid", 48, GPU0)),
        ("NVRM: Xid (0000:3b:00): 13, 0003 00000000", DriverError("xid", 13, GPU0)),
        ("NVRM: Xid (PCI:0000:3b:00): 79", DriverError("xid", 79, GPU0)),
        (
            "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up",
            DriverError("sxid", 20034, "00000000:06:00.0", nvswitch=1),
        ),
        # other messages
        ("NVRM: GPU at PCI:0000:91:00: GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b", None),
        ("nvidia-nvswitch0: probe done", None),
        ("usb 1-1: new high-speed USB device", None),
        # Xid lines that cannot be read: counted as malformed, never guessed
        ("NVRM: Xid (PCI:0000:3b:00: 79, x", Unparsed("xid: no ')' after the PCI address")),
        ("NVRM: Xid (PCI:zz:3b:00): 79, x", Unparsed("xid: not a PCI address: 'PCI:zz:3b:00'")),
        ("NVRM: Xid (PCI:0000:3b:00): ७९, x", Unparsed("xid: no code after the PCI address")),
        ("NVRM: Xid (PCI:0000:3b:00): 1234567, x", Unparsed("xid: no code after the PCI address")),
    ],
)
def test_driver_lines_are_read_as_the_driver_writes_them(
    message: str, expected: DriverError | Unparsed | None
) -> None:
    assert parse_driver_error(message) == expected


def test_record_headers_need_ascii_numbers() -> None:
    record = parse_record(b"4,12,3456,-,caller=T7;NVRM: Xid (PCI:0000:3b:00): 79\n SUBSYSTEM=pci\n")
    assert record is not None and (record.seq, record.usec) == (12, 3456)
    assert record.message == "NVRM: Xid (PCI:0000:3b:00): 79"
    for bad in (b"garbage", b"4,12;m", b"4,-1,5,-;m", "4,١٢,5,-;m".encode(), b"4,1,5,-"):
        assert parse_record(bad) is None, bad


def _steps(function: Callable[[], object]) -> int:
    """Lines of the parser module run by `function`."""
    count = 0
    module = kernel_log_records.__file__

    def trace(frame: FrameType, event: str, _arg: Any) -> Any:
        nonlocal count
        if frame.f_code.co_filename != module:
            return None
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        function()
    finally:
        sys.settrace(None)
    return count


def test_a_100000_byte_record_is_parsed_in_as_many_steps_as_a_short_one(tmp_path: Path) -> None:
    """No step walks the record: it is cut at MAX_RECORD_BYTES and read by find and
    partition, so a hostile line costs what a short one does."""
    head = b"4,1,2,-;NVRM: Xid (PCI:0000:3b:00): 79, "
    short, long = head + b"x" * 10, head + b"x" * (100_000 - len(head))

    def parse(raw: bytes) -> Callable[[], object]:
        return lambda: parse_driver_error(parse_record(raw).message)  # type: ignore[union-attr]

    assert parse(long)() == DriverError("xid", 79, GPU0)
    assert _steps(parse(long)) == _steps(parse(short))
    # a file line that long is cut to one record, and the next line is read whole
    path = tmp_path / "kmsg"
    path.write_bytes(long + b"\n4,2,3,-;next\n")
    log = open_kernel_log(str(path))
    try:
        assert log.read_record() == long[:MAX_RECORD_BYTES]
        assert log.read_record() == b"4,2,3,-;next"
        assert log.read_record() is None
    finally:
        log.close()


class _WrappingLog:
    """A /dev/kmsg whose ring wraps between reads: EPIPE, then records 10 on (3 to 9 were
    overwritten), then EINVAL for a record too long (the kernel skips it: 12)."""

    def __init__(self) -> None:
        self._reads: Iterator[bytes | OSError] = iter(
            [
                b"6,2,100,-;early",
                OSError(errno.EPIPE, "Broken pipe"),
                b"4,10,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, fallen off the bus",
                b"4,11,300,-;nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal",
                OSError(errno.EINVAL, "Invalid argument"),
                b"4,13,400,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE",
            ]
        )
        self.closed = threading.Event()

    def read_record(self, *, at_end: bool = False) -> bytes | None:
        item = next(self._reads, None)
        if isinstance(item, OSError):
            raise item
        return item

    def wait(self, seconds: float | None, wake_fd: int | None = None) -> None:
        time.sleep(0.01)

    def close(self) -> None:
        self.closed.set()


def test_a_ring_that_wraps_counts_the_overwritten_records_and_goes_on() -> None:
    fake = _WrappingLog()
    reader = KernelLogReader("/dev/kmsg", opener=lambda path: fake, clock=lambda: 5000.0)
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while (
            reader.state().xids.get(GPU0, None) is None
            or 48 not in reader.state().xids[GPU0].counts
        ):
            assert time.monotonic() < deadline, reader.state()
            time.sleep(0.01)
        state = reader.state()
        assert state.up and state.reason is None
        assert state.xids[GPU0].counts == {79: 1, 48: 1}
        assert state.sxids == {2: {20034: 1}}
        assert state.lost_records == 2 + 7 + 1  # before record 2, 3 to 9, and 12
        assert state.malformed_records == 0
    finally:
        assert reader.stop()
    assert not fake.closed.is_set()  # kept open: started again, it goes on from there


def test_a_log_of_100000_records_is_read_whole(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """The backlog of a busy host: every Xid counted, each dated boot time + USEC."""
    lines = []
    for seq in range(100_000):
        if seq % 1000 == 7:
            lines.append(f"4,{seq},{seq * 1000},-;NVRM: Xid (PCI:0000:3b:00): 13, pid={seq}, x")
        else:
            lines.append(f"6,{seq},{seq * 1000},-;eth0: link up, 100Gbps, full duplex, lpa 0x0")
            lines.append(" SUBSYSTEM=net")
    path = tmp_path / "kmsg"
    path.write_text("\n".join(lines) + "\n")
    reader = KernelLogReader(str(path), clock=lambda: 10_000.0, monotonic=lambda: 1000.0)
    started = time.process_time()
    reader.catch_up()
    cpu = time.process_time() - started
    state = reader.state()
    assert state.xids[GPU0].counts == {13: 100}
    assert state.xids[GPU0].last_timestamp_seconds == 9000.0 + 99_007 * 1000 / 1e6
    assert (state.lost_records, state.malformed_records) == (0, 0)
    record_property("cpu_us_per_record", cpu / 100_000 * 1e6)


def test_a_fifo_is_followed_across_writers(tmp_path: Path) -> None:
    """A FIFO opens with no writer yet, gives the records written to it, and waits at
    its end (no record, no error) for the next writer."""
    path = tmp_path / "kmsg.fifo"
    os.mkfifo(path)
    log = open_kernel_log(str(path))
    try:
        assert log.read_record() is None
        for seq in (1, 2):
            writer = os.open(path, os.O_WRONLY)
            os.write(writer, f"4,{seq},5,-;NVRM: Xid (PCI:0000:3b:00): 79\n".encode())
            os.close(writer)
            assert parse_record(log.read_record() or b"") is not None
            assert log.read_record() is None
    finally:
        log.close()


def test_the_kernel_log_setting_comes_from_flags_or_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text("collector:\n  xid:\n    kernel-log: ''\n")
    assert kernel_log_path(load_settings([])) == "/dev/kmsg"
    assert kernel_log_path(load_settings(["--config.file", str(config)])) is None
    assert kernel_log_path(load_settings(["--simulate", "2"])) is None  # not the real host's
    given = ["--simulate", "2", "--collector.xid.kernel-log", "/tmp/k"]
    assert kernel_log_path(load_settings(given)) == "/tmp/k"


def _xid(seq: int, usec: int = 5, bus: str = "0000:3b:00", code: int = 79, prio: int = 4) -> str:
    return f"{prio},{seq},{usec},-;NVRM: Xid (PCI:{bus}): {code}, pid=1, x\n"


def test_record_headers_carry_the_facility_and_refuse_numbers_above_64_bits() -> None:
    kernel = parse_record(_xid(1, prio=4).encode())
    assert kernel is not None and kernel.from_kernel
    for prio in (12, 30):  # user.warning, daemon.info: what logger or a unit writes
        written = parse_record(_xid(1, prio=prio).encode())
        assert written is not None and not written.from_kernel
    assert parse_record(f"4,{2**64 - 1},1,-;m".encode()) is not None
    assert parse_record(f"4,{'9' * 20},1,-;m".encode()) is None  # above 2^64 - 1
    assert parse_record(f"4,1,{2**64},-;m".encode()) is None
    crlf = parse_record(b"4,1,2,-;NVRM: Xid (PCI:0000:3b:00): 79\r\n")
    assert crlf is not None and parse_driver_error(crlf.message) == DriverError("xid", 79, GPU0)


def _read(tmp_path: Path, text: str, **kwargs: Any) -> KernelLogReader:
    path = tmp_path / "kmsg"
    path.write_text(text)
    reader = KernelLogReader(str(path), clock=lambda: 10_000.0, monotonic=lambda: 1000.0, **kwargs)
    reader.catch_up()
    return reader


def test_a_programs_record_that_reads_as_an_xid_is_not_counted_but_shown(tmp_path: Path) -> None:
    spoof = "myjob[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    state = _read(
        tmp_path,
        f"12,0,5,-;{spoof}\n30,1,5,-;{spoof}\n" + _xid(2, code=13) + "12,3,5,-;hello\n",
    ).state()
    assert state.xids[GPU0].counts == {13: 1}
    assert state.userspace_records == 2
    assert (state.lost_records, state.malformed_records) == (0, 0)


def test_seq_going_back_or_leaping_starts_again_from_that_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two boots in one file, a leap no ring can make, SEQ 2^64 - 1 and 20 nines: every
    Xid after them is counted, none is called lost, and each restart is said once."""
    two_boots = _xid(0) + _xid(1) + _xid(0, code=13) + _xid(1, code=13)
    leap = _xid(2, code=48) + _xid(10**15, code=48) + _xid(10**15 + 1, code=48)
    huge = f"4,{'9' * 20},1,-;m\n" + _xid(10**15 + 2, code=31)
    top = f"4,{2**64 - 1},1,-;m\n" + _xid(5, code=31)
    state = _read(tmp_path, two_boots + leap + huge + top).state()
    assert state.xids[GPU0].counts == {79: 2, 13: 2, 48: 3, 31: 2}
    assert state.lost_records == 0
    assert state.malformed_records == 1  # the 20 nines; its own SEQ is not called lost
    assert state.seq_resets == 4  # 1 -> 0, 2 -> 10^15, 10^15 + 2 -> 2^64 - 1 -> 5
    said = [r for r in caplog.records if "SEQ went back or leapt" in r.getMessage()]
    assert len(said) == 4


def test_a_malformed_header_is_counted_malformed_not_lost(tmp_path: Path) -> None:
    state = _read(tmp_path, _xid(0) + "4,x,1,-;m\n" + _xid(2) + _xid(5)).state()
    assert (state.malformed_records, state.lost_records) == (1, 2)  # 3 and 4 are lost


def test_labels_from_the_log_are_capped_and_counted_in_place() -> None:
    counts = KernelLogCounts()
    for bus in range(MAX_KEYS + 6):
        counts.add(DriverError("xid", 79, f"00000000:{bus:02X}:00.0"), 1.0)
    assert len(counts.xids()) == MAX_KEYS and counts.capped == 6
    first = "00000000:00:00.0"
    for code in range(MAX_CODES_PER_KEY + 10):
        counts.add(DriverError("xid", code, first), float(code))
    assert len(counts.xids()[first].counts) == MAX_CODES_PER_KEY
    assert counts.capped == 6 + 10
    frozen = counts.xids()
    counts.add(DriverError("xid", 79, first), 5000.0)  # already there: always counts
    assert counts.xids()[first].counts[79] == 3 and frozen[first].counts[79] == 2
    for n in range(MAX_PAIRS):  # the table's total: (bus id, code) series
        counts.add(DriverError("xid", n % MAX_CODES_PER_KEY, f"00000000:{n // 200:02X}:00.0"), 1.0)
    assert sum(len(x.counts) for x in counts.xids().values()) == MAX_PAIRS
    for switch in range(MAX_KEYS + 1):
        counts.add(DriverError("sxid", 20034, "00000000:05:00.0", nvswitch=switch), 1.0)
    assert len(counts.sxids()) == MAX_KEYS


def test_only_dev_kmsg_among_character_devices(tmp_path: Path) -> None:
    for device in ("/dev/null", "/dev/zero", "/dev/urandom"):
        with pytest.raises(OSError, match=r"not /dev/kmsg \(1:11\)") as refused:
            open_kernel_log(device)
        assert refused.value.errno == errno.EINVAL
    try:
        kmsg = open_kernel_log("/dev/kmsg")  # read-only, never written
    except OSError:
        pytest.skip("/dev/kmsg may not be read here")
    try:
        assert parse_record(kmsg.read_record() or b"") is not None
    finally:
        kmsg.close()


def test_a_log_with_no_record_is_not_up_and_a_syslog_file_is_given_up(tmp_path: Path) -> None:
    empty = _read(tmp_path, "")
    assert not empty.up and empty.state().reason == WAITING
    syslog = "Nov 28 10:00:00 host kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x\n" * 20
    state = _read(tmp_path, syslog).state()
    assert not state.up and state.xids == {}
    assert state.reason is not None and "is not a kernel log" in state.reason
    assert state.malformed_records == NOT_A_LOG_AFTER  # stopped there


def test_the_last_line_without_a_newline_is_a_record_at_a_definite_end(tmp_path: Path) -> None:
    state = _read(tmp_path, _xid(0) + _xid(1, code=13).rstrip("\n")).state()
    assert state.xids[GPU0].counts == {79: 1, 13: 1}


def test_a_fifo_writer_dying_mid_record_is_not_glued_to_the_next(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.fifo"
    os.mkfifo(path)
    log = open_kernel_log(str(path))
    try:
        writer = os.open(path, os.O_WRONLY)
        os.write(writer, b"4,1,5,-;NVRM: Xid (PCI:0000:18:00): 3")  # dies here
        os.close(writer)
        assert log.read_record() == PARTIAL_RECORD  # the end: no writer is left
        writer = os.open(path, os.O_WRONLY)
        os.write(writer, _xid(2, bus="0000:28:00").encode())
        os.close(writer)
        assert log.read_record() == _xid(2, bus="0000:28:00").rstrip("\n").encode()
        assert log.read_record() is None
    finally:
        log.close()


def test_a_followed_file_is_read_across_rotation_and_truncation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernel_log_files, "SETTLE_SECONDS", 0.0)
    path = tmp_path / "kmsg"
    path.write_text(_xid(0))
    log = open_kernel_log(str(path))
    try:
        assert log.read_record() == _xid(0).rstrip("\n").encode()
        assert log.read_record() is None
        # copytruncate: copied away, truncated in place, written on
        path.write_text(_xid(1, code=13, bus="0:3b:00"))
        assert log.read_record() == _xid(1, code=13, bus="0:3b:00").rstrip("\n").encode()
        # renamed away (the old file still gets a last line), a new one created
        with path.open("a") as old:
            path.rename(tmp_path / "kmsg.1")
            path.write_text(_xid(3, code=31))
            old.write(_xid(2, code=48).rstrip("\n"))  # its last line, never ended
        assert log.read_record() == _xid(2, code=48).rstrip("\n").encode()
        assert log.read_record() == _xid(3, code=31).rstrip("\n").encode()
        # a last line without its newline, unchanged across polls (SETTLE_SECONDS 0)
        with path.open("a") as new:
            new.write(_xid(4, code=94).rstrip("\n"))
        assert log.read_record() is None  # first seen: may still be being written
        assert log.read_record() == _xid(4, code=94).rstrip("\n").encode()
    finally:
        log.close()


def test_a_followed_file_truncated_and_written_again_at_once_is_read_from_its_start(
    tmp_path: Path,
) -> None:
    """Issue 48: copytruncate, then the next records before the next poll, as long as
    what was read or longer: the old offset falls inside the new content, so reading on
    from it took the middle of a record and skipped the ones before."""
    path = tmp_path / "kmsg"
    old = _xid(0) + _xid(1, code=13)
    path.write_text(old)
    log = open_kernel_log(str(path))
    try:
        assert log.read_record() == _xid(0).rstrip("\n").encode()
        assert log.read_record() == _xid(1, code=13).rstrip("\n").encode()
        assert log.read_record() is None  # at the end: the next poll looks again
        new = [_xid(seq, code=code) for seq, code in ((2, 48), (3, 94), (4, 31))]
        path.write_text("".join(new))  # truncated in place and written again, longer
        assert len("".join(new)) >= len(old)
        assert [log.read_record() for _ in new] == [r.rstrip("\n").encode() for r in new]
        assert log.read_record() is None  # each once
        with path.open("a") as more:  # appended to afterwards: read on, as ever
            more.write(_xid(5, code=79))
        assert log.read_record() == _xid(5, code=79).rstrip("\n").encode()
        assert log.read_record() is None
    finally:
        log.close()


def test_copytruncate_rewritten_at_once_counts_every_xid_once(tmp_path: Path) -> None:
    """Through the reader's thread: the Xids before and after a copytruncate whose new
    content is longer than the old, each counted once."""
    path = tmp_path / "kmsg"
    path.write_text(_xid(0) + _xid(1))
    reader = KernelLogReader(str(path))
    reader.start()
    deadline = time.monotonic() + 30
    try:
        while reader.state().xids.get(GPU0, None) is None or not reader.state().backlog_read:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert reader.state().xids[GPU0].counts == {79: 2}
        shutil.copy(path, tmp_path / "kmsg.1")  # logrotate's copytruncate, then at once:
        with path.open("r+") as log:
            log.truncate(0)
            log.write("".join(_xid(seq, code=13) for seq in range(2, 6)))  # 4 records
        while reader.state().xids[GPU0].counts.get(13) != 4:
            assert time.monotonic() < deadline, reader.state()
            time.sleep(0.01)
        time.sleep(0.5)  # five polls more: nothing counted again
        state = reader.state()
        assert state.xids[GPU0].counts == {79: 2, 13: 4}
        assert (state.lost_records, state.malformed_records, state.seq_resets) == (0, 0, 0)
    finally:
        reader.stop()


def test_the_first_count_served_is_the_whole_backlog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three Xid 13s spread through a backlog read in many passes: the counts are absent
    until it has all been read, then 3, never 1 or 2 on the way."""
    monkeypatch.setattr(kernel_log, "PASS_BYTES", 2048)
    filler = [f"6,{seq},{seq},-;eth0: link up, 100Gbps, full duplex" for seq in range(3000)]
    for at in (10, 1500, 2990):
        filler[at] = _xid(at, code=13).rstrip("\n")
    path = tmp_path / "kmsg"
    path.write_text("\n".join(filler) + "\n")
    reader = KernelLogReader(str(path))
    seen: set[int | None] = set()
    reader.start()
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            state = reader.state()
            xids = state.xids.get(GPU0)
            seen.add(xids.counts.get(13) if xids is not None else None)
            if state.backlog_read:
                break
        assert reader.state().xids[GPU0].counts == {13: 3}
    finally:
        reader.stop()
    assert seen <= {None, 3} and 3 in seen


def test_xids_read_while_following_are_dated_by_their_record(tmp_path: Path) -> None:
    """Boot at 9,000 s (now 10,000, CLOCK_MONOTONIC 1,000): a record of USEC 990 s,
    read while following, is dated 9,990, not when it is read."""
    path = tmp_path / "kmsg"
    path.write_text(_xid(0))
    reader = KernelLogReader(str(path), clock=lambda: 10_000.0, monotonic=lambda: 1000.0)
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while not reader.state().backlog_read:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with path.open("a") as log:
            log.write(_xid(1, usec=990_000_000, code=48))
        while 48 not in reader.state().xids[GPU0].counts:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert reader.state().xids[GPU0].last_timestamps[48] == 9990.0
    finally:
        reader.stop()


def test_per_xid_log_lines_are_limited_and_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.limit")
    limit = LogLimit(logger, "not logged one by one", per_window=10, window_seconds=10.0)
    allowed = sum(limit.allow(float(n) / 1000) for n in range(5000))  # 5,000 in 5 s
    assert allowed == 10 and limit.withheld == 4990
    limit.flush(9.0)
    assert not caplog.records  # the window is not over
    limit.flush(10.5)
    (summary,) = caplog.records
    assert summary.getMessage() == "not logged one by one" and summary.not_logged == 4990
    assert limit.allow(11.0)


def test_nvml_events_in_a_storm_are_each_counted_not_each_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where NVML's events count (no kernel log), a storm of them logs as few lines."""
    listener = XidListener(backend=None)  # type: ignore[arg-type]  # record() needs none
    for _ in range(500):
        listener.record(DeviceEvent(uuid="GPU-a", kind="xid", xid=13, event_type=8))
    assert listener.state()["GPU-a"].counts == {13: 500}
    assert [r.getMessage() for r in caplog.records].count("Xid error") == PER_WINDOW


class _CountedKmsg:
    """/dev/kmsg's reading (`DeviceLog`) over a pipe the test writes records into, its
    waits counted."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.log = kernel_log_files.DeviceLog(self.read_fd)
        self.waits = 0

    def read_record(self, *, at_end: bool = False) -> bytes | None:
        return self.log.read_record(at_end=at_end)

    def wait(self, seconds: float | None, wake_fd: int | None = None) -> None:
        self.waits += 1
        self.log.wait(seconds, wake_fd)

    def close(self) -> None:
        self.log.close()
        os.close(self.write_fd)


def test_an_idle_reader_never_wakes_and_stops_at_once() -> None:
    """Following /dev/kmsg, the reader blocks until a record comes: no wake-up while none
    does (each cost 0.15-0.25 ms of CPU on a virtual machine, twice a second), yet it
    still stops at once, and a record that comes is counted at once."""
    kmsg = _CountedKmsg()
    reader = KernelLogReader("/dev/kmsg", opener=lambda path: kmsg, clock=lambda: 5000.0)
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while not reader.state().backlog_read:  # an empty ring: read to its end
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(1.6)
        assert kmsg.waits == 1  # one wait, still blocked: it used to wake every 0.5 s
        os.write(kmsg.write_fd, b"4,10,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, off the bus")
        while (counted := reader.state().xids.get(GPU0)) is None or 79 not in counted.counts:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        assert reader.stop(timeout_seconds=2.0)
        assert time.monotonic() - started < 0.5
    finally:
        reader.stop()
        kmsg.close()
