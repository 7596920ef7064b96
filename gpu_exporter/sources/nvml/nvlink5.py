"""NVLink5's counters: what a Blackwell (B200, GB200, GB300) link answers instead of the
legacy data-link error fields.

nvml.h 13 says of the legacy per-link error fields NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
_RECOVERY and _CRC (161-163): "This is unsupported for Blackwell+. Please use
NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*". Both sets are asked for on every GPU with
NVLink, per link (scopeId = the link), and NOT_SUPPORTED decides which a GPU has: an
H100 answers the legacy ones and not these, a GB200 these and not the legacy ones. A
field that answers NOT_SUPPORTED is remembered as such (`fields.read_fields`) and asked
again every SLOW_REFRESH_SECONDS, as any field is.

The counters, from nvml.h 13 (`gpu_nvlink_errors_total{error_type}` names in brackets):

- 206 [malformed_packet] "Number of packets Rx on a link where packets are malformed"
- 207 [buffer_overrun] "Number of packets that were discarded on Rx due to buffer overrun"
- 208 [rx] "Total number of packets with errors Rx on a link"
- 209 [rx_remote] "Total number of packets Rx - stomp/EBP marker"
- 210 [rx_general] "Total number of packets Rx with header mismatch"
- 211 [local_link_integrity] "Total number of times that the count of local errors
  exceeded a threshold"
- 212 [tx_discard] "Total number of tx error packets that were discarded"
- 219 [effective] "Sum of the number of errors in each Nvlink packet"
- 221 [symbol] "Number of errors in rx symbols"

and `gpu_nvlink_link_recovery_events_total{result}`: 213 [successful] "Number of times
link went from Up to recovery, succeeded and link came back up", 214 [failed] "... failed
and link was declared down", 215 [all] "... irrespective of the result" (the driver's own
counter: not the sum of the other two, so never summed with them).

`gpu_nvlink_ber{ber_type}`: 220 [effective] "Effective BER for effective errors" and 222
[symbol] "BER for symbol errors", each a 12-bit code: "Bit [0:7]: BER Exponent value,
Bit [8:11]: BER MANTISSA value" (NVML_NVLINK_ERROR_COUNTER_BER_GET), read here as
mantissa x 10^-exponent errors per bit (`ber`).

Bytes: 202 "Total Tx bytes on the link in NVLink5" and 204 (Rx), in bytes, summed over
the active links for `gpu_nvlink_bytes_total` where neither GPM nor the legacy data
counters (138/139, KiB) count them.

The deprecated ids (205 VL15_DROPPED, 216-218 RAW_BER: "Deprecated, do not use") and the
FEC history bins (235-250) are not read.

They are counters with a price in the driver (one field per link and counter: 288 on a
GPU with 18 links): they ride in the interval's field call on the counters' cadence
(`counter_fields.py`), as the energy and ECC counters do, until a real Blackwell GPU has
measured what they cost (`benchmarks/real_gpu.py` times them).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping

from gpu_exporter.model import NVLINK5_ERRORS, NVLINK_BER_TYPES, NVLINK_RECOVERY_RESULTS
from gpu_exporter.sources.nvml import nvml_h
from gpu_exporter.sources.nvml.fields import FieldRequest, nvlink_key

ERROR_FIELDS: dict[str, int] = {
    "malformed_packet": nvml_h.NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS,
    "buffer_overrun": nvml_h.NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS,
    "rx": nvml_h.NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS,
    "rx_remote": nvml_h.NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS,
    "rx_general": nvml_h.NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS,
    "local_link_integrity": nvml_h.NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS,
    "tx_discard": nvml_h.NVML_FI_DEV_NVLINK_COUNT_XMIT_DISCARDS,
    "effective": nvml_h.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS,
    "symbol": nvml_h.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS,
}
"""NVLINK5_ERRORS name -> its field (per link)."""

RECOVERY_FIELDS: dict[str, int] = {
    "successful": nvml_h.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS,
    "failed": nvml_h.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS,
    "all": nvml_h.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS,
}
"""NVLINK_RECOVERY_RESULTS name -> its field (per link)."""

BER_FIELDS: dict[str, int] = {
    "effective": nvml_h.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER,
    "symbol": nvml_h.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER,
}
"""NVLINK_BER_TYPES name -> its field (per link)."""

BYTE_FIELDS: dict[str, int] = {
    "tx": nvml_h.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES,
    "rx": nvml_h.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES,
}
"""Direction -> its byte counter (per link, bytes)."""

assert tuple(ERROR_FIELDS) == NVLINK5_ERRORS
assert tuple(RECOVERY_FIELDS) == NVLINK_RECOVERY_RESULTS
assert tuple(BER_FIELDS) == NVLINK_BER_TYPES


def recovery_key(link: int, result: str) -> str:
    """The key of a link's recovery-event counter (a NVLINK_RECOVERY_RESULTS name)."""
    return nvlink_key(link, f"recovery_events_{result}")


def ber_key(link: int, ber_type: str) -> str:
    """The key of a link's BER field (a NVLINK_BER_TYPES name)."""
    return nvlink_key(link, f"ber_{ber_type}")


def bytes_key(link: int, direction: str) -> str:
    """The key of a link's NVLink5 byte counter in `direction` ("tx" or "rx")."""
    return nvlink_key(link, f"bytes_{direction}")


@functools.lru_cache(maxsize=16)
def requests(links: int) -> tuple[FieldRequest, ...]:
    """Every NVLink5 counter of each of `links` links, scoped to the link. The error
    counters' keys are those the legacy ones use (`fields.nvlink_key(link, name)`), so a
    link's errors are read alike whichever set its driver answers."""
    out: list[FieldRequest] = []
    for link in range(links):
        out += [
            FieldRequest(nvlink_key(link, name), field_id, link)
            for name, field_id in ERROR_FIELDS.items()
        ]
        out += [
            FieldRequest(recovery_key(link, name), field_id, link)
            for name, field_id in RECOVERY_FIELDS.items()
        ]
        out += [
            FieldRequest(ber_key(link, name), field_id, link)
            for name, field_id in BER_FIELDS.items()
        ]
        out += [
            FieldRequest(bytes_key(link, name), field_id, link)
            for name, field_id in BYTE_FIELDS.items()
        ]
    return tuple(out)


def ber(code: float) -> float:
    """A BER field's value as errors per bit: its mantissa (bits 8-11) times ten to the
    minus its exponent (bits 0-7), as nvml.h lays them out."""
    value = int(code)
    mantissa = (
        value >> nvml_h.NVML_NVLINK_BER_MANTISSA_SHIFT
    ) & nvml_h.NVML_NVLINK_BER_MANTISSA_WIDTH
    exponent = (value >> nvml_h.NVML_NVLINK_BER_EXP_SHIFT) & nvml_h.NVML_NVLINK_BER_EXP_WIDTH
    return mantissa * 10.0**-exponent


def recovery_events(link: int, values: Mapping[str, float]) -> dict[str, int]:
    """NVLINK_RECOVERY_RESULTS -> a link's recovery events, for those it answered."""
    return {
        result: int(value)
        for result in NVLINK_RECOVERY_RESULTS
        if (value := values.get(recovery_key(link, result))) is not None
    }


def link_ber(link: int, values: Mapping[str, float]) -> dict[str, float]:
    """NVLINK_BER_TYPES -> a link's bit error rate, for those it answered."""
    return {
        ber_type: ber(value)
        for ber_type in NVLINK_BER_TYPES
        if (value := values.get(ber_key(link, ber_type))) is not None
    }


def data_bytes(
    direction: str, active: Collection[int], values: Mapping[str, float]
) -> float | None:
    """Bytes moved in `direction` over the `active` links, from their NVLink5 byte
    counters; None when an active link does not answer (the sum would understate) or no
    link is active."""
    per_link = [values.get(bytes_key(link, direction)) for link in active]
    if not per_link or any(b is None for b in per_link):
        return None
    return float(sum(b for b in per_link if b is not None))


@functools.lru_cache(maxsize=16)
def state_keys(links: int) -> tuple[str, ...]:
    """The keys of every link's recovery-event and BER fields, links in order: with the
    error fields' keys, what decides whether a device's NVLink reading changed."""
    out: list[str] = []
    for link in range(links):
        out += [recovery_key(link, result) for result in NVLINK_RECOVERY_RESULTS]
        out += [ber_key(link, ber_type) for ber_type in NVLINK_BER_TYPES]
    return tuple(out)
