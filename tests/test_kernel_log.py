"""The kernel-log reader: the driver's Xid and SXid lines, bounded parsing, a ring that
wraps, and a log of 100,000 records."""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from gpu_exporter.config import kernel_log_path, load_settings
from gpu_exporter.sources import kernel_log_records
from gpu_exporter.sources.kernel_log import KernelLogReader
from gpu_exporter.sources.kernel_log_files import open_kernel_log
from gpu_exporter.sources.kernel_log_records import (
    MAX_RECORD_BYTES,
    DriverError,
    Unparsed,
    parse_driver_error,
    parse_record,
)

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

    def wait(self, seconds: float) -> None:
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
