"""Kernel-log records and the NVIDIA driver's Xid and SXid lines in them: pure parsers.

A `/dev/kmsg` record (Documentation/ABI/testing/dev-kmsg) is one line
`PRIORITY,SEQ,USEC,FLAGS[,MORE];MESSAGE`, where PRIORITY is the syslog facility times 8
plus the level, SEQ numbers every record since boot from 0 (64-bit) and USEC is the
kernel's printk clock (microseconds since boot, suspend not counted), followed by
continuation lines that start with a space (the record's key=value dictionary), which
are ignored here. The kernel's own records, the driver's among them, are facility 0;
a record written to /dev/kmsg from userspace gets facility 1 (user) or more
(`devkmsg_write`, "to reliably distinguish kernel-generated messages from
userspace-injected ones"), so only facility 0 can be the driver's.

The driver's lines (real samples: NVIDIA's Xid catalogue, leptonai/gpud's tests):

- `NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.`
  (newer drivers may add the function, `PCI:0000:3b:00.0`; very old ones leave out `PCI:`);
- `nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up`.

Every parser here is bounded: a record is cut to `MAX_RECORD_BYTES` before it is looked
at, every later step is a `find` or `partition` over a slice of bounded length, digits
are ASCII only, and no regular expression is used, so the work per record does not grow
with its length (tests/test_kernel_log.py counts the steps of a 100,000-byte record).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from gpu_exporter.records import Record

# The kernel's own bound on one record as /dev/kmsg prints it (CONSOLE_EXT_LOG_MAX,
# include/linux/printk.h): a longer line (a file fed to the reader) is cut here.
MAX_RECORD_BYTES = 8192
_MAX_NUMBER_DIGITS = 20  # SEQ and USEC are 64-bit
MAX_SEQ = 2**64 - 1  # the kernel's u64: a larger SEQ or USEC is no kernel's record
_MAX_CODE_DIGITS = 6  # Xids are below 200 today, SXids five digits
_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")
_XID = "NVRM: Xid ("
_SXID_DEVICE = "nvidia-nvswitch"
_SXID = ": SXid ("
_LOOK_FOR_XID_WITHIN = 64  # the marker starts the message; allow a short prefix


@dataclass(frozen=True, repr=False)
class KernelRecord(Record):
    """One record of the kernel log: its header's numbers and its first line."""

    seq: int  # the record's number since boot, from 0
    usec: int  # microseconds since boot on the kernel's printk clock
    message: str
    facility: int = 0  # syslog facility (PRIORITY >> 3): 0 is the kernel's, 1+ userspace's

    @property
    def from_kernel(self) -> bool:
        """Logged by the kernel (a driver among it), not written by a program."""
        return self.facility == 0


@dataclass(frozen=True, repr=False)
class DriverError(Record):
    """An Xid (a GPU's) or an SXid (an NVSwitch's) the driver logged."""

    kind: Literal["xid", "sxid"]
    code: int
    pci_bus_id: str  # normalised as NVML writes it: "00000000:3B:00.0"
    nvswitch: int | None = None  # N of `nvidia-nvswitchN` for an SXid


@dataclass(frozen=True, repr=False)
class Unparsed(Record):
    """A line that names an Xid or SXid but could not be read (counted, not guessed)."""

    reason: str


def parse_record(raw: bytes) -> KernelRecord | None:
    """The record in `raw` (one /dev/kmsg read, or one line of a file); None when its
    header is malformed, SEQ or USEC above 2^64 - 1 included. A CR ending the line (a
    file written with CRLF) is not part of the message."""
    line = raw[:MAX_RECORD_BYTES].partition(b"\n")[0].removesuffix(b"\r")
    header, semicolon, message = line.partition(b";")
    if not semicolon or len(header) > 4 * _MAX_NUMBER_DIGITS + 64:
        return None
    fields = header.split(b",", 4)
    if len(fields) < 4:
        return None
    priority, seq, usec = fields[0], fields[1], fields[2]
    if not (_number(priority) and _number(seq) and _number(usec)):
        return None
    number, microseconds = int(seq), int(usec)
    if number > MAX_SEQ or microseconds > MAX_SEQ:
        return None
    message_text = message.decode("utf-8", "replace")
    return KernelRecord(number, microseconds, message_text, facility=int(priority) >> 3)


def _number(text: bytes) -> bool:
    """ASCII digits only (bytes.isdigit is ASCII-only), 1 to 20 of them."""
    return 0 < len(text) <= _MAX_NUMBER_DIGITS and text.isdigit()


def parse_driver_error(message: str) -> DriverError | Unparsed | None:
    """The Xid or SXid a kernel message reports; None for any other message."""
    message = message[:MAX_RECORD_BYTES]
    at = message.find(_XID, 0, _LOOK_FOR_XID_WITHIN + len(_XID))
    if at >= 0:
        return _after_address("xid", message[at + len(_XID) :], None)
    if message.startswith(_SXID_DEVICE):
        device, colon, _ = message[len(_SXID_DEVICE) : len(_SXID_DEVICE) + 8].partition(":")
        if not colon or not _decimal(device, 4):
            return None
        rest = message[len(_SXID_DEVICE) + len(device) :]
        if not rest.startswith(_SXID):
            return None
        return _after_address("sxid", rest[len(_SXID) :], int(device))
    return None


def _after_address(
    kind: Literal["xid", "sxid"], rest: str, nvswitch: int | None
) -> DriverError | Unparsed:
    """Parse `PCI:0000:3b:00): 79, ...` (what follows `Xid (`)."""
    inside, closing, tail = rest[:40].partition(")")
    if not closing:
        return Unparsed(f"{kind}: no ')' after the PCI address")
    address = normalise_bus_id(inside.removeprefix("PCI:"))
    if address is None:
        return Unparsed(f"{kind}: not a PCI address: {inside[:24]!r}")
    if not tail.startswith(": "):
        return Unparsed(f"{kind}: no ': ' after the PCI address")
    code = tail[2 : 2 + _MAX_CODE_DIGITS + 1]
    end = 0
    while end < len(code) and code[end] in _DIGITS:
        end += 1
    if not 0 < end <= _MAX_CODE_DIGITS or (end < len(code) and code[end] not in ", "):
        return Unparsed(f"{kind}: no code after the PCI address")
    return DriverError(kind, int(code[:end]), address, nvswitch)


@lru_cache(maxsize=256)  # a host's few bus ids come again and again (an Xid storm)
def normalise_bus_id(text: str) -> str | None:
    """A PCI address as NVML writes it (`00000000:3B:00.0`), from the kernel's
    (`0000:3b:00`, `0000:3b:00.0`) or NVML's own form; None when it is not one.
    The function is always written 0: the driver names the GPU (function 0)."""
    if len(text) > 20:
        return None
    parts = text.split(":")
    if len(parts) != 3:
        return None
    domain, bus, device_function = parts
    device, dot, function = device_function.partition(".")
    if dot and not (len(function) == 1 and function in "01234567"):
        return None
    if not (_hex(domain, 8) and _hex(bus, 2) and _hex(device, 2)):
        return None
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.0"


def _hex(text: str, width: int) -> bool:
    return 0 < len(text) <= width and all(c in _HEX for c in text)


def _decimal(text: str, width: int) -> bool:
    return 0 < len(text) <= width and all(c in _DIGITS for c in text)
