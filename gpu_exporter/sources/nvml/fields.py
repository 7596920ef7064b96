"""Field values: everything NVML offers as a field, read in one `nvmlDeviceGetFieldValues`
call per device and interval.

Each request has a key (unique per device, used to remember unsupported fields), an
`NVML_FI_*` id, and a scope: the NVLink link for per-link fields (`scopeId`).

Which ids a field has can depend on the driver's branch: R575 numbered three clocks-event
counters 251-253 and R580 269-271, each range meaning something else on the other branch
(`clock_event_fields`), so the interval's requests are made for the driver's branch
(`device_requests`). A field whose id never meant anything else (the recovery action) is
asked of every branch, and NOT_SUPPORTED decides.

The counters (`COUNTER_FIELDS`: energy, the PCIe and ECC error counts, the clocks-event
durations) are dear on a real driver and are asked for only when their cadence says so
(`counter_fields.py`), in the same call as the interval's fields.

A device's batch (about 100 fields on an H100 with 18 NVLink links) is a C array kept
between intervals (`FieldBatch`), its field ids written once; each interval is one call
through pynvml's function-pointer lookup into it and a `struct` pass over the entries
whose answers changed since the last call (`FieldBatch.read`: compared as bytes, the
driver's per-entry timestamps left out), which on a healthy GPU are energy and power
(and every entry where one's code or type changed: rare, a field turning unsupported or
failing). A batch asking for a field found unsupported is dropped: the next call asks
for the supported ones in another, and the old array is not kept beside it.
pynvml's wrapper builds a new array of its `_PrintableStructure` each time and every
field access goes through Python, which cost more than the rest of a device's reading.

Before every call the array is restored from a pristine copy (ids and scopes kept, the
rest cleared): the driver *adds* into an existing `value` for aggregate ECC totals
(NVIDIA/go-nvml#46), so a reused array would report a total that grows every interval.

What the call's own return code means (nvml.h, nvmlDeviceGetFieldValues): "NVML_SUCCESS
if any values in values were populated. Note that you must check the nvmlReturn field of
each value for each individual status". So an entry is read only when the call answered
SUCCESS, and then by its own nvmlReturn; an entry the driver left untouched still holds
NOT_POPULATED (never SUCCESS with a 0). A failed call populated nothing: no entry is read,
and the call's code is classified as any call's (`NvmlCalls.call`).
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, NamedTuple

import pynvml

from gpu_exporter.model import PCIE_ERRORS
from gpu_exporter.sources.nvml import nvml_h
from gpu_exporter.sources.nvml.buffers import unpack
from gpu_exporter.sources.nvml.calls import Device, NvmlCalls, Outcome, classify


class FieldRequest(NamedTuple):
    key: str  # e.g. "ecc_corrected_errors", "nvlink/3/state"
    field_id: int  # NVML_FI_*
    scope: int = 0  # scopeId: the NVLink link for per-link fields


# name -> (field id, collector that wants it)
_DEVICE_FIELDS: dict[str, tuple[int, str]] = {
    "ecc_mode": (pynvml.NVML_FI_DEV_ECC_CURRENT, "modes"),
    "ecc_corrected_errors": (pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, "ecc"),
    "ecc_uncorrected_errors": (pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, "ecc"),
    "retired_pages_single_bit": (pynvml.NVML_FI_DEV_RETIRED_SBE, "ecc"),
    "retired_pages_double_bit": (pynvml.NVML_FI_DEV_RETIRED_DBE, "ecc"),
    "retired_pages_pending": (pynvml.NVML_FI_DEV_RETIRED_PENDING, "ecc"),
    "remapped_rows_correctable": (pynvml.NVML_FI_DEV_REMAPPED_COR, "ecc"),
    "remapped_rows_uncorrectable": (pynvml.NVML_FI_DEV_REMAPPED_UNC, "ecc"),
    "remapped_rows_pending": (pynvml.NVML_FI_DEV_REMAPPED_PENDING, "ecc"),
    "remapped_rows_failed": (pynvml.NVML_FI_DEV_REMAPPED_FAILURE, "ecc"),
    "memory_temperature_celsius": (pynvml.NVML_FI_DEV_MEMORY_TEMP, "temperature"),
    "energy_millijoules": (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, "power"),
    "pcie_replay_errors": (pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, "pcie"),
    # what nvmlDeviceGetPowerUsage reports: the 1 s average where the GPU has one
    # (Ampere except GA100, and newer), else the instantaneous draw; milliwatts
    "power_average_milliwatts": (pynvml.NVML_FI_DEV_POWER_AVERAGE, "power"),
    "power_instant_milliwatts": (pynvml.NVML_FI_DEV_POWER_INSTANT, "power"),
}

# PCIe link error counters, in PCIE_ERRORS' order (nvml.h: NVML_FI_DEV_PCIE_COUNT_*)
_PCIE_ERROR_FIELDS: tuple[int, ...] = (
    pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS,  # 173
    pynvml.NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED,  # 174
    pynvml.NVML_FI_DEV_PCIE_COUNT_NAKS_SENT,  # 177
    pynvml.NVML_FI_DEV_PCIE_COUNT_RECEIVER_ERROR,  # 175
    pynvml.NVML_FI_DEV_PCIE_COUNT_BAD_TLP,  # 176
    pynvml.NVML_FI_DEV_PCIE_COUNT_BAD_DLLP,  # 178
    pynvml.NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR,  # 179
    pynvml.NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR,  # 180
    pynvml.NVML_FI_DEV_PCIE_COUNT_UNSUPPORTED_REQ,  # 181
    pynvml.NVML_FI_DEV_PCIE_COUNT_LCRC_ERROR,  # 182
)


_PCIE_ERROR_PREFIX = "pcie_errors/"


def pcie_error_key(error_type: str) -> str:
    """The key of a PCIe error counter's field (`PCIE_ERRORS` name)."""
    return _PCIE_ERROR_PREFIX + error_type


_DEVICE_FIELDS.update(
    {
        pcie_error_key(name): (field_id, "pcie")
        for name, field_id in zip(PCIE_ERRORS, _PCIE_ERROR_FIELDS, strict=True)
    }
)

RECOVERY_ACTION = "recovery_action"
"""Field 230, asked of every branch: nvml.h gave the id to nothing else, a real R565's
nvidia-smi prints "GPU Recovery Action : None", and a driver without it answers
NOT_SUPPORTED, remembered as for any field."""

COUNTER_FIELDS: frozenset[str] = frozenset(
    {
        "energy_millijoules",
        "ecc_corrected_errors",
        "ecc_uncorrected_errors",
        "retired_pages_single_bit",
        "retired_pages_double_bit",
        "retired_pages_pending",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "remapped_rows_pending",
        "remapped_rows_failed",
        "pcie_replay_errors",
    }
)
"""The keys of `_DEVICE_FIELDS` read on the counters' cadence (`counter_fields.py`), with
the PCIe error counters and the clocks-event counters: the driver's dear fields (energy
3 ms, each PCIe error counter 175 us, the clocks-event counters 0.7 ms on an H200) and the
error counts beside them. The rest (power, memory temperature, ECC mode, the recovery
action at 9 us) are read every interval."""


def clock_event_key(reason: str) -> str:
    """The key of a clocks-event reason's duration counter (ns), a CLOCK_EVENT_REASONS name."""
    return f"clock_event/{reason}"


def clock_event_fields(branch: int) -> dict[str, int]:
    """CLOCK_EVENT_REASONS name -> field id on a driver of `branch`: none before R575 (no
    header before it says these ids count nanoseconds), the R575 ids on R575, nvml.h 13's
    from R580 on. R575 gave 251-253 to three of them and 269-271 to power-smoothing
    settings; R580 swapped them back, so an id asked of the wrong branch would read a
    setting as a duration."""
    if branch < 575:
        return {}
    if branch < 580:
        thermal = (
            nvml_h.R575_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
            nvml_h.R575_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
            nvml_h.R575_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
        )
    else:
        thermal = (
            nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
            nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
            nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
        )
    return {
        "sw_power_cap": nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
        "sync_boost": nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
        "sw_thermal_slowdown": thermal[0],
        "hw_thermal_slowdown": thermal[1],
        "hw_power_brake_slowdown": thermal[2],
    }


NVLINK_LINK_COUNT = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT

# T.Limit thresholds (TLIMIT_THRESHOLDS name -> field), read with the device's limits:
# nvml.h 13 says they are "supported on Ada and later architectures and supersedes
# nvmlDeviceGetTemperatureThreshold". Degrees relative to T.Limit, signed (a
# NVML_VALUE_TYPE_SIGNED_INT: -2 for an H100's slowdown).
TLIMIT_FIELDS: dict[str, int] = {
    "shutdown": pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT,
    "slowdown": pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT,
    "max_operating": pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT,
    "memory_max_operating": pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT,
}


def tlimit_key(threshold: str) -> str:
    """The key of a T.Limit threshold's field."""
    return f"tlimit/{threshold}"


STATIC_REQUESTS: tuple[FieldRequest, ...] = (
    FieldRequest("nvlink_links", NVLINK_LINK_COUNT),
    *(FieldRequest(tlimit_key(name), field_id) for name, field_id in TLIMIT_FIELDS.items()),
)
"""The fields read with the device's limits, on the slow cadence: one call."""

# Per-link NVLink fields, scopeId = link: state and the data-link error counters. The
# data-CRC counter has no scoped field: its legacy per-lane ids (39-44, 102-107) answer a
# false 0 on Hopper and stop at link 11, so it is read with nvmlDeviceGetNvLinkErrorCounter
# (`NVLINK_ERROR_COUNTERS`), as are these where the driver does not support them
# (Blackwell and later, nvml.h).
_NVLINK_FIELDS: dict[str, int] = {
    "state": pynvml.NVML_FI_DEV_NVLINK_GET_STATE,
    "replay": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
}
# error type -> nvmlNvLinkErrorCounter_t
NVLINK_ERROR_COUNTERS: dict[str, int] = {
    "replay": pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    "crc_data": pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
}
# The data counters (KiB since driver load), read where GPM does not count the bytes:
# at scopeId UINT_MAX, "aggregate value summed up across all links" (nvml.h), else per link.
_NVLINK_DATA_FIELDS: dict[str, int] = {
    "data_tx_kib": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    "data_rx_kib": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
}
ALL_LINKS = 0xFFFFFFFF  # scopeId UINT_MAX


def device_requests(collectors: Collection[str], branch: int | None) -> tuple[FieldRequest, ...]:
    """The interval's device fields for the enabled `collectors` on a driver of `branch`
    (its major version; None: unknown, so no field whose id depends on it)."""
    return _device_requests(frozenset(collectors), branch or 0)


@functools.lru_cache(maxsize=16)
def _device_requests(collectors: frozenset[str], branch: int) -> tuple[FieldRequest, ...]:
    out = [
        FieldRequest(key, field_id)
        for key, (field_id, collector) in _DEVICE_FIELDS.items()
        if collector in collectors and not _is_counter(key)
    ]
    if "health" in collectors:
        out.append(FieldRequest(RECOVERY_ACTION, nvml_h.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION))
    return tuple(out)


def counter_requests(collectors: Collection[str], branch: int | None) -> tuple[FieldRequest, ...]:
    """The counter fields (`COUNTER_FIELDS`, the PCIe error and clocks-event counters)
    for the enabled `collectors` on a driver of `branch`, read on their own cadence."""
    return _counter_requests(frozenset(collectors), branch or 0)


@functools.lru_cache(maxsize=16)
def _counter_requests(collectors: frozenset[str], branch: int) -> tuple[FieldRequest, ...]:
    out = [
        FieldRequest(key, field_id)
        for key, (field_id, collector) in _DEVICE_FIELDS.items()
        if collector in collectors and _is_counter(key)
    ]
    if "clocks" in collectors:
        out += [
            FieldRequest(clock_event_key(reason), field_id)
            for reason, field_id in clock_event_fields(branch).items()
        ]
    return tuple(out)


def _is_counter(key: str) -> bool:
    return key in COUNTER_FIELDS or key.startswith(_PCIE_ERROR_PREFIX)


def nvlink_key(link: int | str, name: str) -> str:
    """The key of a per-link field; link "all" is the aggregate (scopeId UINT_MAX)."""
    return f"nvlink/{link}/{name}"


@functools.lru_cache(maxsize=64)
def nvlink_link_keys(link: int, names: tuple[str, ...]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The keys of one link's fields, made once: its state's, and (name, key) of each
    error counter in `names`. A device's NVLink reading looks up about 90 of them every
    interval, and formatting them afresh was a tenth of the reader's own CPU."""
    return nvlink_key(link, "state"), tuple((name, nvlink_key(link, name)) for name in names)


@functools.lru_cache(maxsize=16)
def nvlink_all_link_keys(links: int, names: tuple[str, ...]) -> tuple[str, ...]:
    """The keys of every link's state and error fields in `names`, links in order."""
    out: list[str] = []
    for link in range(links):
        state, errors = nvlink_link_keys(link, names)
        out += [state, *(key for _, key in errors)]
    return tuple(out)


def nvlink_data_key(direction: str, link: int | str = "all") -> str:
    """The key of a data counter (KiB) in `direction`, "tx" or "rx"."""
    return nvlink_key(link, f"data_{direction}_kib")


@functools.lru_cache(maxsize=16)
def nvlink_requests(links: int, *, data: bool, per_link_data: bool) -> tuple[FieldRequest, ...]:
    """Per-link state and error fields; with `data`, the data counters summed over the
    links, and with `per_link_data` (a driver without the aggregate) those of each link."""
    per_link = {**_NVLINK_FIELDS, **(_NVLINK_DATA_FIELDS if per_link_data else {})}
    out: list[FieldRequest] = []
    if data:
        out += [
            FieldRequest(nvlink_key("all", name), field_id, ALL_LINKS)
            for name, field_id in _NVLINK_DATA_FIELDS.items()
        ]
    for link in range(links):
        out += [
            FieldRequest(nvlink_key(link, name), field_id, link)
            for name, field_id in per_link.items()
        ]
    return tuple(out)


class FieldValue(ctypes.Structure):
    """`nvmlFieldValue_t`, laid out as pynvml's `c_nvmlFieldValue_t` (a test compares
    them), without its per-attribute Python hooks."""

    _fields_ = [
        ("fieldId", ctypes.c_uint32),
        ("scopeId", ctypes.c_uint32),
        ("timestamp", ctypes.c_int64),
        ("latencyUsec", ctypes.c_int64),
        ("valueType", pynvml._nvmlValueType_t),
        ("nvmlReturn", pynvml._nvmlReturn_t),
        ("value", pynvml.c_nvmlValue_t),
    ]


# (valueType, nvmlReturn, the value's 8 bytes) of each entry, read straight off the array
_ENTRY = struct.Struct(
    f"={FieldValue.valueType.offset}xII8s{ctypes.sizeof(FieldValue) - FieldValue.value.offset - 8}x"
)
_VALUE_FORMATS: dict[int, str] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "=d",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "=I4x",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "=Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "=I4x",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "=Q",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "=q",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "=i4x",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "=H6x",
}
# an unknown valueType is read as unsigned long long, as before
_DECODERS: dict[int, Callable[[bytes], tuple[Any, ...]]] = {
    value_type: struct.Struct(fmt).unpack for value_type, fmt in _VALUE_FORMATS.items()
}
_DEFAULT_DECODER = _DECODERS[pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG]


# what an entry says until the driver writes it: an entry the driver leaves untouched is
# a failed one (counted, left out), never a SUCCESS with a 0
NOT_POPULATED = pynvml.NVML_ERROR_UNKNOWN


_WORD = 8  # bytes: the array is compared as 64-bit words
# (valueType, nvmlReturn) and the value are the 4th and 5th words of each 40-byte entry;
# the driver's timestamp and latency (2nd, 3rd), which change every call, are skipped
_ENTRY_WORDS = ctypes.sizeof(FieldValue) // _WORD
_ANSWER_WORDS = (FieldValue.valueType.offset // _WORD, FieldValue.value.offset // _WORD)


class FieldBatch:
    """One device's wanted fields as a C array, and a pristine copy of it: the ids and
    scopes, every other member cleared (`NOT_POPULATED` in nvmlReturn)."""

    def __init__(self, requests: tuple[FieldRequest, ...]) -> None:
        self.requests = requests
        self.array = (FieldValue * len(requests))()
        for entry, request in zip(self.array, requests, strict=True):
            entry.fieldId = request.field_id
            entry.scopeId = request.scope
            entry.nvmlReturn = NOT_POPULATED
        self._pristine = bytes(self.array)
        self._words = memoryview(self.array).cast("B").cast("Q")
        # the whole array's answers at the last read (each entry's valueType and
        # nvmlReturn, and its value, as bytes) and what they said (`_read_values`)
        self._kinds = b""
        self._answered = b""
        self._values: dict[str, float] = {}
        self._failures: tuple[tuple[FieldRequest, int], ...] = ()
        # keys are unique per device; a batch repeating one is decoded whole at every
        # read (the later entry's value served)
        self._unique = len({request.key for request in requests}) == len(requests)

    def fetch(self, handle: Any) -> bool:
        """Clear the array, then one `nvmlDeviceGetFieldValues` into it: True, or raises
        `pynvml.NVMLError` (a missing symbol is NVML_ERROR_FUNCTION_NOT_FOUND)."""
        ctypes.memmove(self.array, self._pristine, len(self._pristine))
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
        ret = fn(handle, ctypes.c_int32(len(self.requests)), ctypes.byref(self.array))
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        return True

    def answers(
        self, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[FieldRequest, int, float]]:
        """(request, nvmlReturn, value) of each request from `start` to `stop`, in order,
        read off the array in one pass; the value means something only where nvmlReturn
        is NVML_SUCCESS."""
        stop = len(self.requests) if stop is None else stop
        decoders = _DECODERS
        success = pynvml.NVML_SUCCESS
        entries = unpack(self.array, _ENTRY, stop - start, start * ctypes.sizeof(FieldValue))
        for request, (value_type, code, value) in zip(
            self.requests[start:stop], entries, strict=True
        ):
            if code == success:
                yield request, code, float(decoders.get(value_type, _DEFAULT_DECODER)(value)[0])
            else:
                yield request, code, 0.0

    def read(self) -> tuple[dict[str, float], list[tuple[FieldRequest, int]]]:
        """After a `fetch`: key -> value of each entry answered SUCCESS, and (request,
        nvmlReturn) of each other entry. Where every entry's valueType and nvmlReturn
        are the last read's, only the entries whose values changed (as bytes) are
        decoded: the same bytes say the same thing. Else every entry is."""
        words, first, last = self._words, *_ANSWER_WORDS
        kinds = words[first::_ENTRY_WORDS].tobytes()
        answers = words[last::_ENTRY_WORDS].tobytes()
        if kinds == self._kinds and self._unique:
            # the common case: every entry answered as at the last read (the same code,
            # the same type), so the same keys: only values changed
            return self._read_values(answers)
        values: dict[str, float] = {}
        failures: list[tuple[FieldRequest, int]] = []
        success = pynvml.NVML_SUCCESS
        for request, code, value in self.answers():
            if code == success:
                values[request.key] = value
            else:
                failures.append((request, code))
        self._kinds, self._answered = kinds, answers
        self._values, self._failures = dict(values), tuple(failures)
        return values, failures

    def _read_values(
        self, answers: bytes
    ) -> tuple[dict[str, float], list[tuple[FieldRequest, int]]]:
        """`read` where each entry's valueType and nvmlReturn are the last read's: the
        values then, and each entry whose value's bytes changed decoded again (on a GPU
        at work, energy and power: two or three of the batch's entries)."""
        values = self._values  # kept: the caller gets a copy
        if answers != self._answered:
            success = pynvml.NVML_SUCCESS
            # the bits that differ, entry i's value at bits 64 i to 64 i + 63
            changed = int.from_bytes(answers, "little") ^ int.from_bytes(self._answered, "little")
            while changed:
                entry = ((changed & -changed).bit_length() - 1) // 64  # the first that did
                for request, code, value in self.answers(entry, entry + 1):
                    if code == success:
                        values[request.key] = value
                changed &= -1 << 64 * (entry + 1)  # the entries after it
            self._answered = answers
        return dict(values), list(self._failures)


_BATCHES_PER_DEVICE = 4  # the interval's batch, the device-static one, a few in between


class _LastCall(NamedTuple):
    """A device's last `read_fields`: its requests and the batch of those supported then.
    Dropped whenever the unsupported fields change (a field found unsupported here,
    `Device.forget`), so it is current while it is kept."""

    requests: tuple[FieldRequest, ...]
    batch: FieldBatch


def _batch(d: Device, requests: tuple[FieldRequest, ...]) -> FieldBatch:
    """The device's batch for `requests`, made once (requests are cached tuples, so the
    lookup is mostly identity checks)."""
    batches: dict[tuple[FieldRequest, ...], FieldBatch] = d.field_batches
    batch = batches.get(requests)
    if batch is None:
        if len(batches) >= _BATCHES_PER_DEVICE:
            batches.clear()
        batch = batches[requests] = FieldBatch(requests)
    return batch


def _drop_batches_asking(d: Device, keys: Collection[str]) -> None:
    """Forget the device's batches (and its last call) that ask for any of `keys`, just
    found unsupported: no later call asks for them until `Device.forget`, and an array of
    a few hundred NVLink fields (40 bytes each, twice, with what it last said) would
    otherwise stay beside the one asked instead."""
    d.last_field_call = None
    batches: dict[tuple[FieldRequest, ...], FieldBatch] = d.field_batches
    for requests in [r for r in batches if any(request.key in keys for request in r)]:
        del batches[requests]


def read_fields(
    calls: NvmlCalls, d: Device, requests: Sequence[FieldRequest]
) -> dict[str, float] | None:
    """One nvmlDeviceGetFieldValues call for every wanted, supported field: key -> value;
    None where the call failed as a whole (nvml.h: it populated none of them)."""
    unsupported = d.unsupported_fields
    last: _LastCall | None = d.last_field_call
    if last is not None and last.requests == requests:
        # the common case: the same requests as the last call, and no field unsupported
        # since (that drops it): the same supported ones, in the same batch
        batch = last.batch
    else:
        wanted = tuple(r for r in requests if r.key not in unsupported)
        if not wanted:
            return {}
        batch = _batch(d, wanted)
        d.last_field_call = _LastCall(tuple(requests), batch)
    fetched = calls.call(
        "nvmlDeviceGetFieldValues", batch.fetch, d.handle, device=d, key="field_values"
    )
    if not fetched:
        return None
    values, failures = batch.read()
    found: list[str] = []
    for request, code in failures:
        if classify(code) is Outcome.UNSUPPORTED:
            found.append(request.key)
        else:
            message = f"field {request.key}: {pynvml.NVMLError(code)}"
            calls.entry_failed("nvmlDeviceGetFieldValues", code, message, d)
    if found:
        unsupported.update(found)
        _drop_batches_asking(d, unsupported)
    return values
