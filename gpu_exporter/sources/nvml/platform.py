"""Where a GPU sits in its rack: `nvmlDeviceGetPlatformInfo` (`nvidia-smi -q`, "Platform
Info"), decoded.

nvml.h 13: "Get platform information of this device. For Blackwell or newer fully
supported devices", into `nvmlPlatformInfo_v2_t` (R570 and later; v1, with a rack GUID
where v2 has the chassis serial number, is deprecated). On a GB200 NVL72 compute tray it
names the rack's chassis serial number, the slot in it (switch trays counted), the tray
index among the compute trays, the host within the slot, the platform's NVLink peer type
and the GPU's module id: `gpu_platform_info`, which the fleet dashboard's rack view and
the alert routing group by.

One call, read with the device's limits (every SLOW_REFRESH_SECONDS). A GPU that does not
support it answers NOT_SUPPORTED (remembered under `KEY`, asked again with the others every
slow period): no series. A driver that lacks the call (before R570: FUNCTION_NOT_FOUND) or
knows no v2 structure (ARGUMENT_VERSION_MISMATCH) is not supported alike.

nvidia-ml-py 13.615.71's wrapper hands its argument to the C function unchanged
(`fn(device, platformInfo)`), so a structure given to it would be passed by value: it is
given `ctypes.byref(info)`, as the fabric's call is. The declared floor (12.560.30) has
no wrapper: the function pointer is called the same way.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from gpu_exporter.model import PlatformInfo
from gpu_exporter.sources.nvml import nvml_h
from gpu_exporter.sources.nvml.calls import Device, NvmlCalls

KEY = "platform"  # remembered as unsupported where the GPU has no platform info
SERIAL_BYTES = 16  # chassisSerialNumber[16] ("for Blackwell it is 13 bytes")


class PlatformInfoV2(ctypes.Structure):
    """`nvmlPlatformInfo_v2_t` (tests/test_nvml_header.py compares it with nvml.h)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("ibGuid", ctypes.c_ubyte * 16),
        ("chassisSerialNumber", ctypes.c_ubyte * SERIAL_BYTES),
        ("slotNumber", ctypes.c_ubyte),
        ("trayIndex", ctypes.c_ubyte),
        ("hostId", ctypes.c_ubyte),
        ("peerType", ctypes.c_ubyte),
        ("moduleId", ctypes.c_ubyte),
    ]


_WRAPPER: Any = getattr(pynvml, "nvmlDeviceGetPlatformInfo", None)
_NOT_SUPPORTED_ALIKE = {
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
}


def get_platform_info(handle: Any, info: PlatformInfoV2) -> PlatformInfoV2:
    """One call into `info` (by reference); raises the driver's error, a driver that
    does not know the call or the v2 structure as NOT_SUPPORTED."""
    try:
        if _WRAPPER is not None:
            _WRAPPER(handle, ctypes.byref(info))
        else:
            fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetPlatformInfo")
            ret = fn(handle, ctypes.byref(info))
            if ret != pynvml.NVML_SUCCESS:
                raise pynvml.NVMLError(ret)
    except pynvml.NVMLError as error:
        if getattr(error, "value", None) in _NOT_SUPPORTED_ALIKE:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED) from error
        raise
    return info


def read_platform(calls: NvmlCalls, d: Device) -> PlatformInfo | None:
    """The GPU's place in its rack; None where it is not supported or the call failed."""
    info = PlatformInfoV2()
    info.version = nvml_h.nvmlPlatformInfo_v2
    answer = calls.call(
        "nvmlDeviceGetPlatformInfo", get_platform_info, d.handle, info, device=d, key=KEY
    )
    return decode(answer) if answer is not None else None


def chassis_serial(raw: bytes) -> str:
    """The chassis serial number: its bytes up to the first NUL, as text where they are
    printable ASCII, else as hex (never a control character in a label)."""
    serial = raw[:SERIAL_BYTES].split(b"\0", 1)[0]
    if serial.isascii() and all(0x20 < byte < 0x7F for byte in serial):
        return serial.decode("ascii")
    return serial.hex()


def decode(info: Any) -> PlatformInfo:
    return PlatformInfo(
        chassis_serial=chassis_serial(bytes(info.chassisSerialNumber)),
        slot=int(info.slotNumber),
        tray=int(info.trayIndex),
        host_id=int(info.hostId),
        peer_type=int(info.peerType),
        module_id=int(info.moduleId),
    )
