"""The kernel-log reader's counts: Xids by PCI bus id and SXids by NVSwitch, bounded.

The labels come from the log, so the tables are capped (the kernel only writes what the
driver logs, but a file, or a driver gone wrong, can name anything):

- at most `MAX_KEYS` (64) PCI bus ids, and as many NVSwitches: a host has 16 GPUs or
  fewer and a few NVSwitches; more are a log gone wrong, not more hardware;
- at most `MAX_CODES_PER_KEY` (256) codes on one bus id or NVSwitch: Xid codes are
  below 200 today;
- at most `MAX_PAIRS` (1,024) (bus id, code) pairs, and as many (NVSwitch, code) pairs:
  each is one series, so the exposition stays under a couple of MiB whatever the log.

A record whose bus id, NVSwitch or code would pass a cap is not counted, and counted in
`capped` (`gpu_exporter_xid_kernel_log_capped_records_total`); one already in the table
always counts. Counts are updated in place (`XidTally`), and the frozen copy the sampler
reads is rebuilt only for what changed since the last one.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_exporter.model import XidState
from gpu_exporter.sources.kernel_log_records import DriverError
from gpu_exporter.sources.xid import XidTally

MAX_KEYS = 64
MAX_CODES_PER_KEY = 256
MAX_PAIRS = 1024


class KernelLogCounts:
    """Xid and SXid counts from the kernel log; not thread-safe (the reader locks)."""

    def __init__(self) -> None:
        self._xids: dict[str, XidTally] = {}
        self._xid_pairs = 0
        self._sxids: dict[int, dict[int, int]] = {}
        self._sxid_pairs = 0
        self.capped = 0  # records not counted: a cap would have been passed
        self._frozen_xids: dict[str, XidState] = {}
        self._frozen_sxids: dict[int, Mapping[int, int]] = {}
        self._changed_xids: set[str] = set()
        self._changed_sxids: set[int] = set()

    def add(self, error: DriverError, timestamp_seconds: float) -> bool:
        """Count `error` at `timestamp_seconds` (Unix time); False when a cap left it out."""
        if error.kind == "xid":
            return self._add_xid(error.pci_bus_id, error.code, timestamp_seconds)
        if error.nvswitch is not None:
            return self._add_sxid(error.nvswitch, error.code)
        return False

    def _add_xid(self, bus_id: str, code: int, when: float) -> bool:
        tally = self._xids.get(bus_id)
        if tally is None or code not in tally.counts:
            held = len(tally.counts) if tally is not None else 0
            if not self._room(tally is None, len(self._xids), held, self._xid_pairs):
                return False
            if tally is None:
                tally = self._xids[bus_id] = XidTally()
            self._xid_pairs += 1
        tally.add(code, when)
        self._changed_xids.add(bus_id)
        return True

    def _add_sxid(self, nvswitch: int, code: int) -> bool:
        codes = self._sxids.get(nvswitch)
        if codes is None or code not in codes:
            held = len(codes) if codes is not None else 0
            if not self._room(codes is None, len(self._sxids), held, self._sxid_pairs):
                return False
            if codes is None:
                codes = self._sxids[nvswitch] = {}
            self._sxid_pairs += 1
        codes[code] = codes.get(code, 0) + 1
        self._changed_sxids.add(nvswitch)
        return True

    def _room(self, new_key: bool, keys: int, held: int, pairs: int) -> bool:
        """Room for one more pair, where the key holds `held` codes (and for one more key
        among `keys` when `new_key`); counts the record as capped when not."""
        if (new_key and keys >= MAX_KEYS) or held >= MAX_CODES_PER_KEY or pairs >= MAX_PAIRS:
            self.capped += 1
            return False
        return True

    def xids(self) -> dict[str, XidState]:
        """Xids by PCI bus id (NVML's form), frozen: a copy the caller may keep."""
        for bus_id in self._changed_xids:
            self._frozen_xids[bus_id] = self._xids[bus_id].frozen()
        self._changed_xids.clear()
        return dict(self._frozen_xids)

    def sxids(self) -> dict[int, Mapping[int, int]]:
        """SXid counts by NVSwitch and code, frozen."""
        for nvswitch in self._changed_sxids:
            self._frozen_sxids[nvswitch] = dict(self._sxids[nvswitch])
        self._changed_sxids.clear()
        return dict(self._frozen_sxids)
