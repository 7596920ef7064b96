"""A GPU's registration in the NVLink fabric (`nvidia-smi -q`, "Fabric"), decoded.

On NVSwitch systems (HGX H100/H200, GB200 NVL72) the Fabric Manager registers each GPU in
the NVLink fabric; until it has, the GPU cannot reach its peers over NVLink. The driver
reports the probe's state, its result, the clique and cluster the GPU joined, and (v2 and
later) a health mask and (v3) a health summary.

One call, on the slow cadence (the backend reads it at enumeration and every
SLOW_REFRESH_SECONDS): the newest structure the driver answers, `nvmlDeviceGetGpuFabricInfoV`
with the v3 structure, else v2, else the unversioned `nvmlDeviceGetGpuFabricInfo` (R535 and
later). A driver that does not know a version answers ARGUMENT_VERSION_MISMATCH (or lacks
the symbol): that version is remembered as unsupported and the next older one is asked. A
GPU without a fabric answers NOT_SUPPORTED (remembered under `KEY`): no fabric, no series.

The structures are laid out here, not taken from pynvml: its declared floor has no v3, and
its `state` member is a 4-byte int where nvml.h has an `unsigned char` (the three padding
bytes after it would be read as part of the state). tests/test_nvml_header.py compares
these layouts with nvml.h.

What a completed probe that did not succeed becomes: its status names the NVML error it
ended with (`FabricReading.status`, e.g. "insufficient_resources"), exported as the
`status` label of `gpu_fabric_state{state="completed"}`; the clique and cluster it reports
then are not exported (`gpu_fabric_info` is left out) and no health is made up for it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from gpu_exporter.model import FabricReading
from gpu_exporter.sources.nvml import nvml_h
from gpu_exporter.sources.nvml.calls import Device, NvmlCalls, code_name

KEY = "fabric"  # remembered as unsupported while the GPU has no fabric


class FabricInfo(ctypes.Structure):
    """`nvmlGpuFabricInfo_t`, the unversioned call's answer (no health)."""

    _fields_ = [
        ("clusterUuid", ctypes.c_ubyte * nvml_h.NVML_GPU_FABRIC_UUID_LEN),
        ("status", ctypes.c_int),  # nvmlReturn_t
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),  # nvmlGpuFabricState_t
    ]


class FabricInfoV2(ctypes.Structure):
    """`nvmlGpuFabricInfo_v2_t`: adds the version and the health mask."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * nvml_h.NVML_GPU_FABRIC_UUID_LEN),
        ("status", ctypes.c_int),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
    ]


class FabricInfoV3(ctypes.Structure):
    """`nvmlGpuFabricInfo_v3_t`: adds the health summary."""

    _fields_ = [*FabricInfoV2._fields_, ("healthSummary", ctypes.c_ubyte)]


# (version, C function, structure, its version word; 0: unversioned), newest first
_VERSIONS: tuple[tuple[int, str, type[ctypes.Structure], int], ...] = (
    (3, "nvmlDeviceGetGpuFabricInfoV", FabricInfoV3, nvml_h.nvmlGpuFabricInfo_v3),
    (2, "nvmlDeviceGetGpuFabricInfoV", FabricInfoV2, nvml_h.nvmlGpuFabricInfo_v2),
    (1, "nvmlDeviceGetGpuFabricInfo", FabricInfo, 0),
)
_OLDER = {pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
_TOO_NEW = object()  # the driver does not know this version


def _get(symbol: str, handle: Any, info: ctypes.Structure) -> Any:
    """One call into `info`: `info`, `_TOO_NEW`, or raises the driver's error."""
    try:
        fn = pynvml._nvmlGetFunctionPointer(symbol)
    except pynvml.NVMLError as error:
        if getattr(error, "value", None) in _OLDER:
            return _TOO_NEW
        raise
    ret = fn(handle, ctypes.byref(info))
    if ret in _OLDER:
        return _TOO_NEW
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return info


def read_fabric(calls: NvmlCalls, d: Device) -> FabricReading | None:
    """The device's fabric from the newest structure the driver answers; None where the
    GPU has no fabric (NOT_SUPPORTED, or a state of NOT_SUPPORTED) or the call failed."""
    for version, symbol, structure, word in _VERSIONS:
        too_new = f"{KEY}_v{version}"
        if too_new in d.unsupported:
            continue
        info = structure()
        if word:
            info.version = word
        answer = calls.call(symbol, _get, symbol, d.handle, info, device=d, key=KEY)
        if answer is _TOO_NEW:
            d.unsupported.add(too_new)  # forgotten with the rest every slow period
            continue
        return decode(answer, version) if answer is not None else None
    return None


_STATES = {
    nvml_h.NVML_GPU_FABRIC_STATE_NOT_STARTED: "not_started",
    nvml_h.NVML_GPU_FABRIC_STATE_IN_PROGRESS: "in_progress",
    nvml_h.NVML_GPU_FABRIC_STATE_COMPLETED: "completed",
}
# condition -> (shift, TRUE, FALSE) of its 2-bit value in the health mask
_CONDITIONS: dict[str, tuple[int, int, int]] = {
    "degraded_bandwidth": (
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW,
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE,
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE,
    ),
    "route_recovery": (
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY,
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE,
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE,
    ),
    "route_unhealthy": (
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY,
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE,
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE,
    ),
    "access_timeout_recovery": (
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE,
        nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE,
    ),
}
_TWO_BITS = nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW
CONFIGURATION_FAULTS: dict[int, str] = {
    nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INCORRECT_SYSGUID: (
        "incorrect_sysguid"
    ),
    nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INCORRECT_CHASSIS_SN: (
        "incorrect_chassis_sn"
    ),
    nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NO_PARTITION: "no_partition",
    nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS: (
        "insufficient_nvlinks"
    ),
    nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INCOMPATIBLE_GPU_FW: (
        "incompatible_gpu_fw"
    ),
    nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INVALID_LOCATION: (
        "invalid_location"
    ),
    nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_GPU_STATE_INVALID: (
        "gpu_state_invalid"
    ),
}
_SUMMARIES = {
    nvml_h.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY: "healthy",
    nvml_h.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY: "unhealthy",
    nvml_h.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY: "limited_capacity",
}


def cluster_uuid(raw: bytes) -> str:
    """16 bytes as a UUID: "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lower case."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def decode(info: Any, version: int) -> FabricReading | None:
    """A fabric structure of `version` as a reading; None for a state of NOT_SUPPORTED."""
    code = int(info.state)
    if code == nvml_h.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return None
    state = _STATES.get(code, str(code))
    completed = code == nvml_h.NVML_GPU_FABRIC_STATE_COMPLETED
    status = None
    if completed:  # nvml.h: "Must be checked only if state returns complete"
        status = "success" if info.status == pynvml.NVML_SUCCESS else code_name(info.status)
    conditions: dict[str, bool] = {}
    fault = None
    if version >= 2:
        mask = int(info.healthMask)
        for condition, (shift, true, false) in _CONDITIONS.items():
            value = (mask >> shift) & _TWO_BITS
            if value in (true, false):  # NOT_SUPPORTED (0), or a value nvml.h does not name
                conditions[condition] = value == true
        config = (
            mask >> nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION
        ) & nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION
        if config != nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NOT_SUPPORTED:
            none = nvml_h.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE
            conditions["incorrect_configuration"] = config != none
            if config != none:  # a fault nvml.h does not name yet is named by its number
                fault = CONFIGURATION_FAULTS.get(config, str(config))
    summary = _SUMMARIES.get(int(info.healthSummary)) if version >= 3 else None
    return FabricReading(
        state=state,
        status=status,
        clique_id=int(info.cliqueId) if completed else None,
        cluster_uuid=cluster_uuid(bytes(info.clusterUuid)) if completed else None,
        conditions=conditions,
        configuration_fault=fault,
        summary=summary,
    )
