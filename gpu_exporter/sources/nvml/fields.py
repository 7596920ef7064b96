"""Field values: everything NVML offers as a field, read in one `nvmlDeviceGetFieldValues`
call per device and interval.

Each request has a key (unique per device, used to remember unsupported fields), an
`NVML_FI_*` id, and a scope: the NVLink link for per-link fields (`scopeId`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from gpu_exporter.sources.nvml.calls import Device, NvmlCalls, Outcome, classify


@dataclass(frozen=True)
class FieldRequest:
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

NVLINK_LINK_COUNT = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT

# Per-link NVLink fields, scopeId = link: state and the data-link error counters ...
_NVLINK_FIELDS: dict[str, int] = {
    "state": pynvml.NVML_FI_DEV_NVLINK_GET_STATE,
    "replay": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
}
# ... and the data counters (KiB since driver load), read where GPM does not count bytes
_NVLINK_DATA_FIELDS: dict[str, int] = {
    "data_tx_kib": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    "data_rx_kib": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
}


def _crc_data_field(link: int) -> int | None:
    """NVML has data-CRC counters as one field id per link, for links 0 to 11 only."""
    value = getattr(pynvml, f"NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{link}", None)
    return value if isinstance(value, int) else None


def device_requests(collectors: Collection[str]) -> list[FieldRequest]:
    return [
        FieldRequest(key, field_id)
        for key, (field_id, collector) in _DEVICE_FIELDS.items()
        if collector in collectors
    ]


def nvlink_key(link: int, name: str) -> str:
    return f"nvlink/{link}/{name}"


def nvlink_requests(links: int, *, data: bool) -> list[FieldRequest]:
    """Per-link state and error fields; with `data`, the data counters too."""
    per_link = {**_NVLINK_FIELDS, **(_NVLINK_DATA_FIELDS if data else {})}
    out: list[FieldRequest] = []
    for link in range(links):
        out += [
            FieldRequest(nvlink_key(link, name), field_id, link)
            for name, field_id in per_link.items()
        ]
        crc_data = _crc_data_field(link)
        if crc_data is not None:
            out.append(FieldRequest(nvlink_key(link, "crc_data"), crc_data))
    return out


_VALUE_MEMBERS: dict[int, str] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def _number(field: Any) -> float:
    """The numeric value of a `c_nvmlFieldValue_t` according to its `valueType`."""
    member = _VALUE_MEMBERS.get(int(field.valueType), "ullVal")
    return float(getattr(field.value, member))


def read_fields(calls: NvmlCalls, d: Device, requests: Sequence[FieldRequest]) -> dict[str, float]:
    """One nvmlDeviceGetFieldValues call for every wanted, supported field: key -> value."""
    wanted = [r for r in requests if r.key not in d.unsupported_fields]
    if not wanted:
        return {}
    raw = calls.query(
        d, "field_values", pynvml.nvmlDeviceGetFieldValues, [(r.field_id, r.scope) for r in wanted]
    )
    if raw is None:
        return {}
    out: dict[str, float] = {}
    for request, field in zip(wanted, raw, strict=True):
        code = int(field.nvmlReturn)
        if code == pynvml.NVML_SUCCESS:
            out[request.key] = _number(field)
        elif classify(code) is Outcome.UNSUPPORTED:
            d.unsupported_fields.add(request.key)
        else:
            error = pynvml.NVMLError(code)
            message = f"field {request.key}: {error}"
            calls.failed("nvmlDeviceGetFieldValues", code, message, d, None, cause=error)
    return out
