"""A fake `libnvidia-ml.so.1` for driving the real `pynvml` wrappers without a GPU.

pynvml resolves every C function through `_nvmlGetFunctionPointer(name)`, which does
`getattr(pynvml.nvmlLib, name)` (and caches the result). `FakeNvmlLib` stands in for that
`CDLL` object: each attribute is a Python function that receives exactly the ctypes
arguments pynvml builds (`byref(...)` objects, arrays, structures, `c_uint`s) and returns an
NVML return code. A function absent from the fake (see `FakeNvmlLib.missing`) raises
`AttributeError`, which pynvml turns into NVML_ERROR_FUNCTION_NOT_FOUND, as it does for an
old driver that lacks the symbol.

`FakeGpu` holds what one device reports, in NVML's own units (MHz, milliwatts, percent,
millijoules). `FakeGpu.fail` forces a return code per C function, so one fake host can
replay several devices and driver generations (an H100 on a recent driver, an old fanless
board that answers NOT_SUPPORTED for much of the API).

The event API (nvmlEventSetCreate / RegisterEvents / EventSetWait_v2 / EventSetFree) is
faked too: `FakeGpu.supported_events` is what nvmlDeviceGetSupportedEventTypes reports,
`FakeNvmlLib.registrations` records every nvmlDeviceRegisterEvents call, and a test
queues driver events with `FakeNvmlLib.push_event`; nvmlEventSetWait_v2 delivers the first
one the set registered for (blocking up to its timeout, as the driver does) or answers
NVML_ERROR_TIMEOUT.

GPM is faked as the driver does it: `FakeGpu.gpm` gives each metric's percent (or rate)
per interval, as a number or a function of the interval's index; nvmlGpmMetricsGet
answers for the pair of samples it is given, with per-metric return codes from
`FakeGpu.gpm_errors`. Samples are tracked from alloc to free (`live_gpm_samples`).
MIG devices (`FakeGpu.mig_devices`, in sparse slots) have handles of their own, answered
by the identity, memory and process calls; their calls count towards the parent GPU.
Their GPU instances have handles too (nvmlDeviceGetGpuInstanceById), whose
nvmlGpuInstanceGetInfo gives `FakeMigDevice.placement`; `FakeGpu.minor` is the minor
number, which need not be the index.
Field values honour `scopeId`: `FakeGpu.fields` may be keyed by `(field id, scope)`; the
NVLink throughput fields also answer scopeId UINT_MAX with the sum over the links, the
ECC totals are added into the value the caller's array holds, and the T.Limit thresholds
are signed integers, as the driver does. `FakeGpu.tlimit_margin_celsius` is what
nvmlDeviceGetMarginTemperature answers.
A process that dies stays listed, as on a real driver while a child holds the device
files (`FakeGpu.process_exited`; `released=True` is the driver letting go).
The arrays follow the C API: a buffer whose count is smaller than the answer gets
NVML_ERROR_INSUFFICIENT_SIZE with the count it needs (samples, process lists, process
utilization), so callers that keep a buffer per device must grow it.

Driver generations: a symbol newer than the fake's `driver_version` branch is missing
(`SINCE_BRANCH`), so `FakeNvmlLib(gpus, driver_version=R525)` lacks
nvmlDeviceGetCurrentClocksEventReasons and answers the older
nvmlDeviceGetCurrentClocksThrottleReasons. MIG can be repartitioned under a running
exporter by replacing `FakeGpu.mig_devices`; nvmlDeviceGetGpuInstanceRemainingCapacity
answers from it. The handle of a MIG device that is gone answers
NVML_ERROR_INVALID_ARGUMENT; a new `FakeMigDevice` given the old one's `struct` is the
driver reusing that handle for a new instance. `FakeGpu.hang` holds a C function until
a test releases it (a wedged driver call), and `FakeNvmlLib.most_inside` records how
many calls of one function ran at the same time.
"""

# The fake's methods are named after the C symbols they stand in for (c_ + symbol).
# ruff: noqa: N802, N815

from __future__ import annotations

import ctypes
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

SUCCESS = pynvml.NVML_SUCCESS
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
INSUFFICIENT_SIZE = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
TIMEOUT = pynvml.NVML_ERROR_TIMEOUT

XID = pynvml.nvmlEventTypeXidCriticalError
SBE = pynvml.nvmlEventTypeSingleBitEccError
DBE = pynvml.nvmlEventTypeDoubleBitEccError
PSTATE = pynvml.nvmlEventTypePState
CLOCK = pynvml.nvmlEventTypeClock
ALL_LINKS = 0xFFFFFFFF  # scopeId UINT_MAX: every NVLink link at once
NVLINK_THROUGHPUT = frozenset(
    {
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
    }
)
# The T.Limit thresholds: signed degrees (an H100 answers -2 for slowdown), which the driver
# gives as NVML_VALUE_TYPE_SIGNED_INT
TLIMIT_FIELDS = frozenset(
    {
        pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT,
        pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT,
        pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT,
        pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT,
    }
)
ECC_TOTALS = frozenset(
    {
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
        pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
        pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
    }
)


@dataclass
class FakeGpu:
    """One device as the driver reports it (NVML units: MHz, mW, %, mJ, bytes)."""

    uuid: str
    name: str
    pci_bus_id: str = "00000000:01:00.0"
    serial: str = "0"
    vbios: str = "00.00.00.00.00"
    compute_capability: tuple[int, int] = (9, 0)
    max_clocks_mhz: dict[int, int] = field(default_factory=dict)  # NVML_CLOCK_* -> MHz
    clocks_mhz: dict[int, int] = field(default_factory=dict)
    thresholds_celsius: dict[int, int] = field(default_factory=dict)  # NVML_TEMPERATURE_THRESHOLD_*
    pcie_max: tuple[int, int] | None = None  # (generation, width)
    pcie_current: tuple[int, int] | None = None
    pcie_throughput_kb: tuple[int, int] | None = None  # (tx, rx) KB/s over the last 20 ms
    utilization_percent: tuple[int, int] | None = None  # (gpu, memory)
    encoder_percent: int | None = None
    decoder_percent: int | None = None
    memory_bytes: tuple[int, int, int, int] | None = None  # (total, reserved, used, free)
    temperature_celsius: int | None = None
    # nvmlDeviceGetMarginTemperature: degrees below T.Limit (Ada and later; None answers
    # NOT_SUPPORTED); the T.Limit thresholds are fields (TLIMIT_FIELDS)
    tlimit_margin_celsius: int | None = None
    fan_percent: int | None = None
    power_milliwatts: int | None = None
    power_limit_milliwatts: int | None = None
    pstate: int | None = None
    clocks_event_reasons: int | None = None
    persistence: int | None = None
    mig: tuple[int, int] | None = None  # (current, pending)
    # nvmlDeviceGetFieldValues: field id -> value (int: unsigned long long, float: double),
    # or a per-field return code in field_errors; a field in neither is NOT_SUPPORTED.
    fields: dict[int | tuple[int, int], int | float] = field(default_factory=dict)
    field_errors: dict[int | tuple[int, int], int] = field(default_factory=dict)
    # nvmlDeviceGetSamples: sampling type -> ring buffer of (timestamp us, percent), kept
    # in ring order (not necessarily sorted); a type absent here is NOT_SUPPORTED.
    samples: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    compute_processes: list[tuple[int, int]] | None = None  # (pid, used bytes)
    graphics_processes: list[tuple[int, int]] | None = None
    process_samples: list[tuple[int, int, int, int]] | None = None  # (pid, ts us, sm %, mem %)
    # nvmlDeviceGetSupportedEventTypes: nvmlEventType* bits (0: the device supports none).
    supported_events: int = 0
    # GPM: metric id -> percent (or MiB/s), fixed or a function of the interval's index
    gpm_supported: bool = False
    gpm: dict[int, float | Callable[[int], float]] = field(default_factory=dict)
    gpm_errors: dict[int, int] = field(default_factory=dict)  # metric id -> return code
    mig_devices: list[FakeMigDevice] = field(default_factory=list)  # MIG on: mig=(1, 1)
    mig_slots: int = 7  # nvmlDeviceGetMaxMigDeviceCount
    minor: int | None = None  # nvmlDeviceGetMinorNumber (the N of /dev/nvidiaN); None: the index
    fail: dict[str, int] = field(default_factory=dict)  # C function name -> return code
    # nvmlDeviceGetFieldValues *adds* these fields' answers into the `value` it is given,
    # as the driver does for aggregate ECC totals (NVIDIA/go-nvml#46): a caller that
    # reuses its array without clearing it reads a total that grows every call.
    adds_into_value: frozenset[int] = ECC_TOTALS
    # field ids whose entries the driver leaves as they are (nvml.h promises the call's
    # SUCCESS only "if any values ... were populated")
    unpopulated_fields: set[int] = field(default_factory=set)
    # scopeId UINT_MAX on the NVLink throughput fields: the sum over the links that answer
    # (nvml.h); False: a driver without the aggregate answers NOT_SUPPORTED for it.
    nvlink_aggregate: bool = True
    # nvmlDeviceGetNvLinkErrorCounter: (link, NVML_NVLINK_ERROR_*) -> count; absent is
    # NOT_SUPPORTED.
    nvlink_error_counters: dict[tuple[int, int], int] = field(default_factory=dict)
    # C function name -> an event the call waits for before answering (a hung call)
    hang: dict[str, threading.Event] = field(default_factory=dict)
    # nvmlDeviceGetGpuFabricInfo(V): None answers NOT_SUPPORTED (no NVLink fabric)
    fabric: FakeFabric | None = None
    # nvmlDeviceGetPlatformInfo (R570 and later): None answers NOT_SUPPORTED (before
    # Blackwell)
    platform: FakePlatform | None = None

    def process_exited(self, pid: int, *, released: bool = False) -> None:
        """Process `pid` died. As the real driver does (R580 on an H200: a job forked a
        child that kept the device files it inherited, then died), NVML keeps listing the
        dead PID with its memory, so by default nothing changes here. `released`: the last
        holder of its context closed the files and the driver let go: it leaves the lists."""
        if not released:
            return
        for name in ("compute_processes", "graphics_processes"):
            listed = getattr(self, name)
            if listed is not None:
                setattr(self, name, [(p, used) for p, used in listed if p != pid])
        for mig in self.mig_devices:
            mig.processes = [(p, used) for p, used in mig.processes if p != pid]


@dataclass
class FakeFabric:
    """What the fabric calls answer, in nvml.h's codes. `max_version` is the newest
    structure the driver knows: a newer one answers ARGUMENT_VERSION_MISMATCH."""

    state: int = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = SUCCESS  # nvmlReturn_t of the completed probe
    clique_id: int = 0
    cluster_uuid: bytes = bytes(16)
    health_mask: int = 0  # every condition NOT_SUPPORTED
    health_summary: int = 0  # NOT_SUPPORTED
    max_version: int = 3


@dataclass
class FakePlatform:
    """What nvmlDeviceGetPlatformInfo answers in its v2 structure (nvmlPlatformInfo_v2_t);
    a v1 structure or another version word answers ARGUMENT_VERSION_MISMATCH."""

    chassis_serial: bytes = b"1821424001234"  # 13 bytes, as a GB200's
    slot: int = 3
    tray: int = 2
    host_id: int = 1
    peer_type: int = 2
    module_id: int = 1
    ib_guid: bytes = bytes(range(1, 9))  # "for Blackwell, ibGuid is 8 bytes"


_GPU_INSTANCE_SLICES = re.compile(r"(\d+)g\.\S*$")  # "... MIG 3g.40gb" -> 3


@dataclass
class FakeMigDevice:
    """One MIG device (a compute instance of a GPU instance) in slot `slot` of its GPU."""

    slot: int
    gpu_instance: int
    compute_instance: int
    uuid: str
    name: str  # e.g. "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    memory_bytes: tuple[int, int]  # (total, used)
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, used bytes)
    gpm: dict[int, float | Callable[[int], float]] = field(default_factory=dict)
    struct: Any = field(default_factory=lambda: pynvml.struct_c_nvmlDevice_t())
    # reserved for the driver: v1 counts it in `used`, v2 reports it apart
    memory_reserved: int = 0
    # nvmlGpuInstanceGetInfo of its GPU instance: (profile id, placement start, size); the
    # first MIG device of a GPU instance speaks for it; None: NOT_FOUND
    placement: tuple[int, int, int] | None = None
    gi_struct: Any = field(default_factory=lambda: pynvml.struct_c_nvmlGpuInstance_t())


@dataclass
class FakeGpmSample:
    """One allocated GPM sample: which device (and GPU instance) filled it, and when."""

    struct: Any
    gpu: int | None = None
    gpu_instance: int | None = None
    interval: int = -1  # the index of the take for that device (or instance)
    freed: bool = False


@dataclass
class FakeEvent:
    """A driver event waiting to be delivered by nvmlEventSetWait_v2."""

    gpu: int  # index into FakeNvmlLib.gpus
    event_type: int  # one nvmlEventType* bit
    data: int = 0  # eventData: the Xid code for nvmlEventTypeXidCriticalError


@dataclass
class FakeEventSet:
    """One nvmlEventSet_t: the devices registered on it and their event masks."""

    struct: Any  # the pynvml struct_c_nvmlEventSet_t the handle points at
    registered: dict[int, int] = field(default_factory=dict)  # gpu index -> mask
    freed: bool = False


def h100(index: int = 0) -> FakeGpu:
    """An H100 SXM on a recent driver: everything supported."""
    return FakeGpu(
        uuid=f"GPU-h100-{index}",
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        serial="1654922001234",
        vbios="96.00.89.00.01",
        compute_capability=(9, 0),
        max_clocks_mhz={
            pynvml.NVML_CLOCK_GRAPHICS: 1980,
            pynvml.NVML_CLOCK_SM: 1980,
            pynvml.NVML_CLOCK_MEM: 2619,
            pynvml.NVML_CLOCK_VIDEO: 1545,
        },
        clocks_mhz={
            pynvml.NVML_CLOCK_GRAPHICS: 1755,
            pynvml.NVML_CLOCK_SM: 1755,
            pynvml.NVML_CLOCK_MEM: 2619,
            pynvml.NVML_CLOCK_VIDEO: 1260,
        },
        thresholds_celsius={
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 87,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: 92,
        },
        pcie_max=(5, 16),
        pcie_current=(5, 16),
        pcie_throughput_kb=(1_250_000, 31_000),
        utilization_percent=(87, 41),
        encoder_percent=3,
        decoder_percent=0,
        memory_bytes=(85_520_809_984, 593_494_016, 42_949_672_960, 41_977_643_008),
        temperature_celsius=64,
        tlimit_margin_celsius=24,
        fan_percent=None,  # SXM boards are fanless too, but answer NOT_SUPPORTED
        power_milliwatts=512_345,
        power_limit_milliwatts=700_000,
        pstate=0,
        clocks_event_reasons=pynvml.nvmlClocksEventReasonSwPowerCap,
        persistence=pynvml.NVML_FEATURE_ENABLED,
        mig=(pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE),
        fields={
            pynvml.NVML_FI_DEV_ECC_CURRENT: 1,
            pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: 3,
            pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: 0,
            pynvml.NVML_FI_DEV_RETIRED_SBE: 0,
            pynvml.NVML_FI_DEV_RETIRED_DBE: 0,
            pynvml.NVML_FI_DEV_RETIRED_PENDING: 0,
            pynvml.NVML_FI_DEV_REMAPPED_COR: 2,
            pynvml.NVML_FI_DEV_REMAPPED_UNC: 1,
            pynvml.NVML_FI_DEV_REMAPPED_PENDING: 1,
            pynvml.NVML_FI_DEV_REMAPPED_FAILURE: 0,
            pynvml.NVML_FI_DEV_MEMORY_TEMP: 71,
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: 123_456_789,
            pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: 7,
            # the PCIe link error counters (173-182): a few correctable errors
            pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS: 12,
            **dict.fromkeys(range(pynvml.NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED, 183), 0),
            # T.Limit thresholds as an H100 on R590 answers them (tests/fixtures/nvidia-smi)
            pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT: -8,
            pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT: -2,
            pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: 0,
            pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT: 0,
        },
        samples={
            pynvml.NVML_GPU_UTILIZATION_SAMPLES: [],
            pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: [],
        },
        compute_processes=[],
        graphics_processes=[],
        process_samples=[],
        supported_events=SBE | DBE | PSTATE | XID | CLOCK,
    )


def old_fanless(index: int = 1) -> FakeGpu:
    """A Kepler-era Tesla on an old driver: most optional calls are NOT_SUPPORTED."""
    return FakeGpu(
        uuid=f"GPU-k80-{index}",
        name="Tesla K80",
        pci_bus_id=f"00000000:{0x84 + index:02X}:00.0",
        serial="0",  # boards without a serial report "0"
        vbios="80.21.1B.00.01",
        compute_capability=(3, 7),
        max_clocks_mhz={pynvml.NVML_CLOCK_GRAPHICS: 875, pynvml.NVML_CLOCK_MEM: 2505},
        clocks_mhz={pynvml.NVML_CLOCK_GRAPHICS: 562, pynvml.NVML_CLOCK_MEM: 2505},
        utilization_percent=(12, 5),
        memory_bytes=(12_884_901_888, 0, 1_073_741_824, 11_811_160_064),
        temperature_celsius=41,
        power_milliwatts=58_000,
        power_limit_milliwatts=149_000,
        pstate=pynvml.NVML_PSTATE_UNKNOWN,
        fields={pynvml.NVML_FI_DEV_ECC_CURRENT: 0},
        supported_events=PSTATE | XID,  # ECC is off: no ECC events
        fail={
            "nvmlDeviceGetEncoderUtilization": NOT_SUPPORTED,
            "nvmlDeviceGetDecoderUtilization": NOT_SUPPORTED,
            "nvmlDeviceGetCurrentClocksEventReasons": NOT_SUPPORTED,
        },
    )


def gb200(index: int = 0, links: int = 18) -> FakeGpu:
    """A GB200 of an NVL72 compute tray, as nvml.h 13 says Blackwell answers: NVLink5's
    counters per link (scopeId) and not the legacy ones (161-163 and
    nvmlDeviceGetNvLinkErrorCounter answer NOT_SUPPORTED: "unsupported for Blackwell+"),
    platform info (tray 2, module index + 1), a v3 fabric with its clique and cluster UUID.
    Each NVLink5 counter of link L answers `NVLINK5_VALUES[field] + L`; the BER fields a
    code of mantissa 3, exponent 14 (3e-14) on every link but link 1, whose effective BER
    is 5e-12 (mantissa 5, exponent 12)."""
    gpu = h100(index)
    gpu.uuid = f"GPU-gb200-{index}"
    gpu.name = "NVIDIA GB200"
    gpu.compute_capability = (10, 0)
    gpu.fields[pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT] = links
    for link in range(links):
        gpu.fields[(pynvml.NVML_FI_DEV_NVLINK_GET_STATE, link)] = 1
        for field_id, value in NVLINK5_VALUES.items():
            gpu.fields[(field_id, link)] = value + link
        for field_id in NVLINK5_BER_FIELDS:
            gpu.fields[(field_id, link)] = (3 << 8) | 14
    gpu.fields[(NVLINK5_BER_FIELDS[0], 1)] = (5 << 8) | 12
    gpu.fabric = FakeFabric(
        clique_id=32766,
        cluster_uuid=bytes.fromhex("c1a5e0d100004c3b9d2ea1b2c3d4e5f6"),
        health_mask=0,
        health_summary=1,  # NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
    )
    gpu.platform = FakePlatform(module_id=index + 1)
    return gpu


# NVLink5 counters (nvml.h 13) -> link 0's value; link L answers value + L
NVLINK5_VALUES: dict[int, int] = {
    202: 7_000_000,  # NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES, bytes
    204: 9_000_000,  # NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES, bytes
    206: 100,  # MALFORMED_PACKET_ERRORS
    207: 200,  # BUFFER_OVERRUN_ERRORS
    208: 300,  # RCV_ERRORS
    209: 400,  # RCV_REMOTE_ERRORS
    210: 500,  # RCV_GENERAL_ERRORS
    211: 600,  # LOCAL_LINK_INTEGRITY_ERRORS
    212: 700,  # XMIT_DISCARDS
    213: 10,  # LINK_RECOVERY_SUCCESSFUL_EVENTS
    214: 20,  # LINK_RECOVERY_FAILED_EVENTS
    215: 40,  # LINK_RECOVERY_EVENTS (all, whatever the result)
    219: 800,  # EFFECTIVE_ERRORS
    221: 900,  # SYMBOL_ERRORS
}
NVLINK5_BER_FIELDS = (220, 222)  # EFFECTIVE_BER, SYMBOL_BER: (mantissa << 8) | exponent

R525 = "525.147.05"  # a driver before R535: no clocks-event-reasons call
R570 = "570.124.06"  # the first branch whose bindings wrap nvmlDeviceGetTemperatureV
R580 = "580.95.05"  # a Blackwell-era branch


def _branch(driver_version: str) -> int:
    return int(driver_version.split(".")[0])


class FakeNvmlLib:
    """Stands in for pynvml's `nvmlLib` (the loaded CDLL)."""

    # What nvml.h says a GPU with MIG enabled does not answer ("On MIG-enabled GPUs,
    # querying ... is not currently supported"): utilization rates (nvml.h:7904),
    # encoder and decoder utilization (7924, 8015), the GPU and memory sample types
    # (8440) and process utilization (9407). Answered NOT_SUPPORTED while MIG is on.
    MIG_UNSUPPORTED = frozenset(
        {
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetEncoderUtilization",
            "nvmlDeviceGetDecoderUtilization",
            "nvmlDeviceGetSamples",
            "nvmlDeviceGetProcessUtilization",
        }
    )

    # C symbol -> the first driver branch that has it (older drivers lack the symbol).
    # Clocks-event reasons: renamed from throttle reasons in R535 (nvidia-ml-py 12.535.77
    # wraps it, 11.525.150 does not); nvmlDeviceGetTemperatureV: first wrapped by
    # nvidia-ml-py 12.570.86 (12.560.30 does not).
    SINCE_BRANCH: dict[str, int] = {
        "nvmlDeviceGetCurrentClocksEventReasons": 535,
        "nvmlDeviceGetTemperatureV": 570,
        # the fabric calls: nvml.h 12.2 (R535) has the first, 12.4 (R550) the versioned one
        "nvmlDeviceGetGpuFabricInfo": 535,
        "nvmlDeviceGetGpuFabricInfoV": 550,
        # nvml.h: nvmlPlatformInfo_v2_t; R570's header is the first to declare the call
        "nvmlDeviceGetPlatformInfo": 570,
    }

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver_version: str = "550.54.15",
        cuda_version: int = 12040,
        missing: set[str] | None = None,
        fail: dict[str, int] | None = None,
        filters_by_timestamp: bool = True,
        record: bool = True,
    ) -> None:
        self.gpus = gpus
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.missing = set(missing or ())  # C functions this "driver" lacks
        self.fail = dict(fail or {})  # library-wide forced return codes
        # False: sample buffers come back whole whatever the "since" timestamp, as some
        # drivers do, so the caller has to filter.
        self.filters_by_timestamp = filters_by_timestamp
        # False: keep no per-call history (field ids, GPM requests, wait timeouts), so a
        # long-running program does not grow by it (the benchmark); counts are kept
        self.record = record
        self.calls: Counter[tuple[str, int | None]] = Counter()  # (function, gpu index)
        self.field_requests: list[list[int]] = []  # field ids of each GetFieldValues call
        self.initialised = 0
        self._structs = [pynvml.struct_c_nvmlDevice_t() for _ in gpus]
        self.event_sets: list[FakeEventSet] = []  # every set created, freed ones included
        self.registrations: list[tuple[int, int]] = []  # (gpu index, mask) per RegisterEvents
        self.wait_timeouts_ms: list[int] = []  # the timeout of every EventSetWait_v2 call
        self.pending_events: list[FakeEvent] = []
        self._events_changed = threading.Condition()
        self.field_scopes: list[list[tuple[int, int]]] = []  # (field id, scope) per call
        self.gpm_samples: list[FakeGpmSample] = []
        self.gpm_requests: list[list[int]] = []  # metric ids of each nvmlGpmMetricsGet
        self._gpm_takes: Counter[tuple[int, int | None]] = Counter()
        # nvmlDeviceGetSamples calls by (GPU, sampling type)
        self.sample_reads: Counter[tuple[int | None, int]] = Counter()
        self.inside: Counter[str] = Counter()  # calls of each function running now
        self.most_inside: Counter[str] = Counter()  # the most that ever ran at once
        self.entered: dict[tuple[str, int | None], threading.Event] = {}  # hung calls
        self._inside_lock = threading.Lock()

    # Lookup ------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Callable[..., int]:
        if name.startswith("_") or name in self.missing:
            raise AttributeError(name)
        if _branch(self.driver_version) < self.SINCE_BRANCH.get(name, 0):
            raise AttributeError(name)  # newer than this driver
        impl = getattr(type(self), "c_" + name, None)
        if impl is None:
            raise AttributeError(name)
        bound: Callable[..., int] = impl.__get__(self)

        def call(*args: Any) -> int:
            index = self._index_of(args[0]) if args else None
            self.calls[(name, index)] += 1
            if index is None and args and isinstance(args[0], pynvml.c_nvmlDevice_t):
                # a handle no device has any more: a destroyed MIG device's (nvml.h:
                # "the MIG device handle would remain invalid")
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            if name in self.fail:
                return self.fail[name]
            if index is not None and name in self.gpus[index].fail:
                return self.gpus[index].fail[name]
            if index is not None and name in self.MIG_UNSUPPORTED and self._mig_on(index):
                return NOT_SUPPORTED
            with self._inside_lock:
                self.inside[name] += 1
                self.most_inside[name] = max(self.most_inside[name], self.inside[name])
            try:
                hang = self.gpus[index].hang.get(name) if index is not None else None
                if hang is not None:
                    self.entered.setdefault((name, index), threading.Event()).set()
                    hang.wait()
                return bound(*args)
            finally:
                with self._inside_lock:
                    self.inside[name] -= 1

        return call

    def count(self, name: str, gpu: int | None = None) -> int:
        """How often the C function `name` was called (for `gpu`, or in all)."""
        if gpu is None:
            return sum(n for (fn, _), n in self.calls.items() if fn == name)
        return self.calls[(name, gpu)]

    def _index_of(self, handle: Any) -> int | None:
        """The GPU of a device handle; a MIG device's calls count towards its parent."""
        if not isinstance(handle, pynvml.c_nvmlDevice_t) or not handle:
            return None
        address = ctypes.addressof(handle.contents)
        for index, struct in enumerate(self._structs):
            if ctypes.addressof(struct) == address:
                return index
        for index, gpu in enumerate(self.gpus):
            if any(ctypes.addressof(m.struct) == address for m in gpu.mig_devices):
                return index
        return None

    def _mig_on(self, index: int) -> bool:
        mig = self.gpus[index].mig
        return mig is not None and mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE

    def _mig_of(self, handle: Any) -> FakeMigDevice | None:
        if not isinstance(handle, pynvml.c_nvmlDevice_t) or not handle:
            return None
        address = ctypes.addressof(handle.contents)
        for gpu in self.gpus:
            for mig in gpu.mig_devices:
                if ctypes.addressof(mig.struct) == address:
                    return mig
        return None

    def _gpu(self, handle: Any) -> FakeGpu:
        index = self._index_of(handle)
        assert index is not None, f"not a fake device handle: {handle!r}"
        return self.gpus[index]

    # Library ------------------------------------------------------------------------

    def c_nvmlInitWithFlags(self, flags: int) -> int:
        self.initialised += 1
        return SUCCESS

    def c_nvmlShutdown(self) -> int:
        self.initialised -= 1
        return SUCCESS

    def c_nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        buf.value = self.driver_version.encode()
        return SUCCESS

    def c_nvmlSystemGetCudaDriverVersion_v2(self, ptr: Any) -> int:
        ptr._obj.value = self.cuda_version
        return SUCCESS

    c_nvmlSystemGetCudaDriverVersion = c_nvmlSystemGetCudaDriverVersion_v2

    def c_nvmlDeviceGetCount_v2(self, ptr: Any) -> int:
        ptr._obj.value = len(self.gpus)
        return SUCCESS

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, ptr: Any) -> int:
        if not 0 <= index.value < len(self.gpus):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        failure = self.gpus[index.value].fail.get("nvmlDeviceGetHandleByIndex_v2")
        if failure is not None:
            return failure
        ptr._obj.contents = self._structs[index.value]
        return SUCCESS

    # Identity -----------------------------------------------------------------------

    @staticmethod
    def _string(buf: Any, value: str) -> int:
        buf.value = value.encode()
        return SUCCESS

    def c_nvmlDeviceGetUUID(self, handle: Any, buf: Any, size: Any) -> int:
        mig = self._mig_of(handle)
        return self._string(buf, mig.uuid if mig else self._gpu(handle).uuid)

    def c_nvmlDeviceGetName(self, handle: Any, buf: Any, size: Any) -> int:
        mig = self._mig_of(handle)
        return self._string(buf, mig.name if mig else self._gpu(handle).name)

    def c_nvmlDeviceGetSerial(self, handle: Any, buf: Any, size: Any) -> int:
        return self._string(buf, self._gpu(handle).serial)

    def c_nvmlDeviceGetVbiosVersion(self, handle: Any, buf: Any, size: Any) -> int:
        return self._string(buf, self._gpu(handle).vbios)

    def c_nvmlDeviceGetPciInfo_v3(self, handle: Any, ptr: Any) -> int:
        ptr._obj.busId = self._gpu(handle).pci_bus_id.encode()
        return SUCCESS

    def c_nvmlDeviceGetMinorNumber(self, handle: Any, ptr: Any) -> int:
        minor = self._gpu(handle).minor
        return self._put(ptr, self._index_of(handle) if minor is None else minor)

    def c_nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:
        major._obj.value, minor._obj.value = self._gpu(handle).compute_capability
        return SUCCESS

    # Scalars ------------------------------------------------------------------------

    @staticmethod
    def _put(ptr: Any, value: int | None) -> int:
        if value is None:
            return NOT_SUPPORTED
        ptr._obj.value = value
        return SUCCESS

    def c_nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).max_clocks_mhz.get(clock.value))

    def c_nvmlDeviceGetClockInfo(self, handle: Any, clock: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).clocks_mhz.get(clock.value))

    def c_nvmlDeviceGetTemperatureThreshold(self, handle: Any, which: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).thresholds_celsius.get(which.value))

    def c_nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any, ptr: Any) -> int:
        pcie = self._gpu(handle).pcie_max
        return self._put(ptr, pcie[0] if pcie else None)

    def c_nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any, ptr: Any) -> int:
        pcie = self._gpu(handle).pcie_max
        return self._put(ptr, pcie[1] if pcie else None)

    def c_nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any, ptr: Any) -> int:
        pcie = self._gpu(handle).pcie_current
        return self._put(ptr, pcie[0] if pcie else None)

    def c_nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any, ptr: Any) -> int:
        pcie = self._gpu(handle).pcie_current
        return self._put(ptr, pcie[1] if pcie else None)

    def c_nvmlDeviceGetPcieThroughput(self, handle: Any, counter: Any, ptr: Any) -> int:
        kb = self._gpu(handle).pcie_throughput_kb
        if kb is None:
            return NOT_SUPPORTED
        return self._put(ptr, kb[0] if counter.value == pynvml.NVML_PCIE_UTIL_TX_BYTES else kb[1])

    def c_nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).temperature_celsius)

    @staticmethod
    def _put_versioned(ptr: Any, version: int, member: str, value: int | None) -> int:
        """Answer a versioned structure's `member` (a wrong `version` is refused)."""
        if ptr._obj.version != version:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if value is None:
            return NOT_SUPPORTED
        setattr(ptr._obj, member, value)
        return SUCCESS

    def c_nvmlDeviceGetTemperatureV(self, handle: Any, ptr: Any) -> int:
        temperature = self._gpu(handle).temperature_celsius
        return self._put_versioned(ptr, pynvml.nvmlTemperature_v1, "temperature", temperature)

    def c_nvmlDeviceGetMarginTemperature(self, handle: Any, ptr: Any) -> int:
        margin = self._gpu(handle).tlimit_margin_celsius
        return self._put_versioned(
            ptr, pynvml.nvmlMarginTemperature_v1, "marginTemperature", margin
        )

    def c_nvmlDeviceGetFanSpeed(self, handle: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).fan_percent)

    def c_nvmlDeviceGetPowerUsage(self, handle: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).power_milliwatts)

    def c_nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).power_limit_milliwatts)

    # the limit the administrator set; equal to the enforced one on this fake
    c_nvmlDeviceGetPowerManagementLimit = c_nvmlDeviceGetEnforcedPowerLimit

    def c_nvmlDeviceIsMigDeviceHandle(self, handle: Any, ptr: Any) -> int:
        ptr._obj.value = int(self._mig_of(handle) is not None)
        return SUCCESS

    def c_nvmlDeviceGetPerformanceState(self, handle: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).pstate)

    def c_nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).clocks_event_reasons)

    # the same bits under their pre-R535 name (nvml.h: nvmlClocksThrottleReason* are
    # defined as the nvmlClocksEventReason* values)
    c_nvmlDeviceGetCurrentClocksThrottleReasons = c_nvmlDeviceGetCurrentClocksEventReasons

    def c_nvmlDeviceGetPersistenceMode(self, handle: Any, ptr: Any) -> int:
        return self._put(ptr, self._gpu(handle).persistence)

    def c_nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        mig = self._gpu(handle).mig
        if mig is None:
            return NOT_SUPPORTED
        current._obj.value, pending._obj.value = mig
        return SUCCESS

    def c_nvmlDeviceGetUtilizationRates(self, handle: Any, ptr: Any) -> int:
        rates = self._gpu(handle).utilization_percent
        if rates is None:
            return NOT_SUPPORTED
        ptr._obj.gpu, ptr._obj.memory = rates
        return SUCCESS

    def c_nvmlDeviceGetEncoderUtilization(self, handle: Any, util: Any, period: Any) -> int:
        period._obj.value = 167_000
        return self._put(util, self._gpu(handle).encoder_percent)

    def c_nvmlDeviceGetDecoderUtilization(self, handle: Any, util: Any, period: Any) -> int:
        period._obj.value = 167_000
        return self._put(util, self._gpu(handle).decoder_percent)

    def c_nvmlDeviceGetMemoryInfo(self, handle: Any, ptr: Any) -> int:
        mig = self._mig_of(handle)
        if mig is not None:  # v1: `used` includes the reservation
            total, used = mig.memory_bytes
            used += mig.memory_reserved
            ptr._obj.total, ptr._obj.used, ptr._obj.free = total, used, total - used
            return SUCCESS
        memory = self._gpu(handle).memory_bytes
        if memory is None:
            return NOT_SUPPORTED
        total, _reserved, used, free = memory
        ptr._obj.total, ptr._obj.used, ptr._obj.free = total, used, free
        return SUCCESS

    def c_nvmlDeviceGetMemoryInfo_v2(self, handle: Any, ptr: Any) -> int:
        mig = self._mig_of(handle)
        if mig is not None:
            if ptr._obj.version != pynvml.nvmlMemory_v2:
                return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            total, used = mig.memory_bytes
            reserved = mig.memory_reserved
            ptr._obj.total, ptr._obj.reserved, ptr._obj.used = total, reserved, used
            ptr._obj.free = total - reserved - used
            return SUCCESS
        memory = self._gpu(handle).memory_bytes
        if memory is None:
            return NOT_SUPPORTED
        if ptr._obj.version != pynvml.nvmlMemory_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        ptr._obj.total, ptr._obj.reserved, ptr._obj.used, ptr._obj.free = memory
        return SUCCESS

    # Fabric ---------------------------------------------------------------------------

    @staticmethod
    def _fabric_common(info: Any, fabric: FakeFabric) -> None:
        info.clusterUuid[:] = list(fabric.cluster_uuid)
        info.status = fabric.status
        info.cliqueId = fabric.clique_id
        info.state = fabric.state

    def c_nvmlDeviceGetGpuFabricInfo(self, handle: Any, ptr: Any) -> int:
        fabric = self._gpu(handle).fabric
        if fabric is None:
            return NOT_SUPPORTED
        self._fabric_common(ptr._obj, fabric)
        return SUCCESS

    def c_nvmlDeviceGetGpuFabricInfoV(self, handle: Any, ptr: Any) -> int:
        fabric = self._gpu(handle).fabric
        info = ptr._obj
        version = int(info.version) >> 24
        if (fabric is not None and version > fabric.max_version) or version < 2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if fabric is None:
            return NOT_SUPPORTED
        self._fabric_common(info, fabric)
        info.healthMask = fabric.health_mask
        if version >= 3:
            info.healthSummary = fabric.health_summary
        return SUCCESS

    # Platform -------------------------------------------------------------------------

    def c_nvmlDeviceGetPlatformInfo(self, handle: Any, ptr: Any) -> int:
        """`ptr` must point at the caller's structure (ctypes.byref): a structure passed
        by value is not a pointer, and the driver would read garbage through it."""
        if not hasattr(ptr, "_obj"):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT  # not a pointer
        info = ptr._obj
        if int(info.version) != pynvml.nvmlPlatformInfo_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        platform = self._gpu(handle).platform
        if platform is None:
            return NOT_SUPPORTED
        info.ibGuid[: len(platform.ib_guid)] = list(platform.ib_guid)
        serial = platform.chassis_serial[:16]
        info.chassisSerialNumber[: len(serial)] = list(serial)
        info.slotNumber, info.trayIndex, info.hostId = (
            platform.slot,
            platform.tray,
            platform.host_id,
        )
        info.peerType, info.moduleId = platform.peer_type, platform.module_id
        return SUCCESS

    # Arrays -------------------------------------------------------------------------

    def c_nvmlDeviceGetFieldValues(self, handle: Any, count: Any, ptr: Any) -> int:
        gpu = self._gpu(handle)
        assert len(ptr._obj) >= count.value  # a caller may pass a longer array
        values = ptr._obj[: count.value]
        if self.record:
            self.field_requests.append([int(v.fieldId) for v in values])
            self.field_scopes.append([(int(v.fieldId), int(v.scopeId)) for v in values])
        for entry in values:
            field_id = int(entry.fieldId)
            scoped = (field_id, int(entry.scopeId))
            if field_id in gpu.unpopulated_fields:
                continue
            if scoped in gpu.field_errors or field_id in gpu.field_errors:
                entry.nvmlReturn = gpu.field_errors.get(scoped, gpu.field_errors.get(field_id))
            elif scoped in gpu.fields or field_id in gpu.fields:
                value = gpu.fields[scoped] if scoped in gpu.fields else gpu.fields[field_id]
                entry.nvmlReturn = SUCCESS
                if isinstance(value, float):
                    entry.valueType = pynvml.NVML_VALUE_TYPE_DOUBLE
                    entry.value.dVal = value
                elif field_id in TLIMIT_FIELDS:
                    entry.valueType = pynvml.NVML_VALUE_TYPE_SIGNED_INT
                    entry.value.siVal = value
                else:
                    entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                    added = entry.value.ullVal if field_id in gpu.adds_into_value else 0
                    entry.value.ullVal = value + added
            elif (total := self._nvlink_total(gpu, field_id, int(entry.scopeId))) is not None:
                entry.nvmlReturn = SUCCESS
                entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                entry.value.ullVal = total
            else:
                entry.nvmlReturn = NOT_SUPPORTED
        return SUCCESS

    @staticmethod
    def _nvlink_total(gpu: FakeGpu, field_id: int, scope: int) -> int | None:
        """A throughput field at scopeId UINT_MAX: the sum over the links that answer."""
        if scope != ALL_LINKS or field_id not in NVLINK_THROUGHPUT or not gpu.nvlink_aggregate:
            return None
        per_link = [
            v
            for key, v in gpu.fields.items()
            if isinstance(key, tuple) and key[0] == field_id and key not in gpu.field_errors
        ]
        return int(sum(per_link)) if per_link else None

    def c_nvmlDeviceGetNvLinkErrorCounter(
        self, handle: Any, link: Any, counter: Any, ptr: Any
    ) -> int:
        key = (int(getattr(link, "value", link)), int(getattr(counter, "value", counter)))
        return self._put(ptr, self._gpu(handle).nvlink_error_counters.get(key))

    def c_nvmlDeviceGetSamples(
        self, handle: Any, kind: Any, since: Any, value_type: Any, count: Any, buf: Any
    ) -> int:
        self.sample_reads[(self._index_of(handle), int(kind.value))] += 1
        ring = self._gpu(handle).samples.get(kind.value)
        if ring is None:
            return NOT_SUPPORTED
        newer = [(ts, pct) for ts, pct in ring if self._newer(ts, since)]
        if not newer:
            return NOT_FOUND  # what the driver answers when nothing is newer
        value_type._obj.value = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        if buf is None:
            count._obj.value = len(newer)
            return SUCCESS
        if count._obj.value < len(newer):  # the C API: too small, here is what it needs
            count._obj.value = len(newer)
            return INSUFFICIENT_SIZE
        for slot, (ts, pct) in zip(buf, newer, strict=False):
            slot.timeStamp = ts
            slot.sampleValue.uiVal = pct
        count._obj.value = len(newer)
        return SUCCESS

    def _newer(self, timestamp_us: int, since: Any) -> bool:
        return not self.filters_by_timestamp or timestamp_us > since.value

    def _process_list(self, procs: list[tuple[int, int]] | None, count: Any, buf: Any) -> int:
        if procs is None:
            return NOT_SUPPORTED
        if buf is None:
            count._obj.value = len(procs)
            return INSUFFICIENT_SIZE if procs else SUCCESS
        if count._obj.value < len(procs):
            count._obj.value = len(procs)
            return INSUFFICIENT_SIZE
        for slot, (pid, used) in zip(buf, procs, strict=False):
            slot.pid = pid
            slot.usedGpuMemory = used
        count._obj.value = len(procs)
        return SUCCESS

    def c_nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, count: Any, buf: Any) -> int:
        mig = self._mig_of(handle)
        if mig is not None:
            return self._process_list(mig.processes, count, buf)
        return self._process_list(self._gpu(handle).compute_processes, count, buf)

    def c_nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any, count: Any, buf: Any) -> int:
        return self._process_list(self._gpu(handle).graphics_processes, count, buf)

    # R470 and older branches only have the _v2 symbols (same struct layout in pynvml).
    c_nvmlDeviceGetComputeRunningProcesses_v2 = c_nvmlDeviceGetComputeRunningProcesses_v3
    c_nvmlDeviceGetGraphicsRunningProcesses_v2 = c_nvmlDeviceGetGraphicsRunningProcesses_v3

    def c_nvmlDeviceGetProcessUtilization(
        self, handle: Any, buf: Any, count: Any, since: Any
    ) -> int:
        samples = self._gpu(handle).process_samples
        if samples is None:
            return NOT_SUPPORTED
        newer = [s for s in samples if self._newer(s[1], since)]
        if not newer:
            return NOT_FOUND
        if buf is None or count._obj.value < len(newer):
            count._obj.value = len(newer)
            return INSUFFICIENT_SIZE
        for slot, (pid, ts, sm, mem) in zip(buf, newer, strict=False):
            slot.pid, slot.timeStamp, slot.smUtil, slot.memUtil = pid, ts, sm, mem
        count._obj.value = len(newer)
        return SUCCESS

    # MIG ----------------------------------------------------------------------------

    def c_nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, ptr: Any) -> int:
        gpu = self._gpu(handle)
        if gpu.mig is None or gpu.mig[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return NOT_SUPPORTED
        return self._put(ptr, gpu.mig_slots)

    def c_nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, ptr: Any) -> int:
        for mig in self._gpu(handle).mig_devices:
            if mig.slot == index.value:
                ptr._obj.contents = mig.struct
                return SUCCESS
        return NOT_FOUND  # an empty slot

    def c_nvmlDeviceGetGpuInstanceRemainingCapacity(
        self, handle: Any, profile: Any, ptr: Any
    ) -> int:
        """One-slice GPU instances that still fit: the slices no GPU instance takes (a
        profile "3g.40gb" takes 3, as does a compute instance's "1c.3g.71gb")."""
        gpu = self._gpu(handle)
        if gpu.mig is None or gpu.mig[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return NOT_SUPPORTED
        if int(getattr(profile, "value", profile)) != pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE:
            return NOT_SUPPORTED  # only the one-slice profile is faked
        slices = {
            m.gpu_instance: int(_GPU_INSTANCE_SLICES.search(m.name).group(1))  # type: ignore[union-attr]
            for m in gpu.mig_devices
        }
        return self._put(ptr, max(0, gpu.mig_slots - sum(slices.values())))

    def c_nvmlDeviceGetGpuInstanceId(self, handle: Any, ptr: Any) -> int:
        mig = self._mig_of(handle)
        return self._put(ptr, mig.gpu_instance) if mig else pynvml.NVML_ERROR_INVALID_ARGUMENT

    def c_nvmlDeviceGetComputeInstanceId(self, handle: Any, ptr: Any) -> int:
        mig = self._mig_of(handle)
        return self._put(ptr, mig.compute_instance) if mig else pynvml.NVML_ERROR_INVALID_ARGUMENT

    def c_nvmlDeviceGetGpuInstanceById(self, handle: Any, gpu_instance: Any, ptr: Any) -> int:
        gpu = self._gpu(handle)
        if gpu.mig is None or gpu.mig[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return NOT_SUPPORTED
        wanted = int(getattr(gpu_instance, "value", gpu_instance))
        for mig in gpu.mig_devices:
            if mig.gpu_instance == wanted:
                ptr._obj.contents = mig.gi_struct
                return SUCCESS
        return NOT_FOUND

    def c_nvmlGpuInstanceGetInfo(self, handle: Any, ptr: Any) -> int:
        address = ctypes.addressof(handle.contents)
        for gpu_struct, gpu in zip(self._structs, self.gpus, strict=True):
            for mig in gpu.mig_devices:
                if ctypes.addressof(mig.gi_struct) != address:
                    continue
                if mig.placement is None:
                    return NOT_FOUND
                info = ptr._obj
                info.device = ctypes.pointer(gpu_struct)
                info.id = mig.gpu_instance
                info.profileId, info.placement.start, info.placement.size = mig.placement
                return SUCCESS
        return pynvml.NVML_ERROR_INVALID_ARGUMENT

    # GPM ----------------------------------------------------------------------------

    def c_nvmlGpmQueryDeviceSupport(self, handle: Any, ptr: Any) -> int:
        ptr._obj.isSupportedDevice = int(self._gpu(handle).gpm_supported)
        return SUCCESS

    def c_nvmlGpmSampleAlloc(self, ptr: Any) -> int:
        sample = FakeGpmSample(pynvml.struct_c_nvmlGpmSample_t())
        self.gpm_samples.append(sample)
        ptr._obj.contents = sample.struct
        return SUCCESS

    def _gpm_sample(self, pointer: Any) -> FakeGpmSample | None:
        if not pointer:
            return None
        address = ctypes.addressof(pointer.contents)
        for sample in self.gpm_samples:
            if ctypes.addressof(sample.struct) == address and not sample.freed:
                return sample
        return None

    def c_nvmlGpmSampleFree(self, pointer: Any) -> int:
        sample = self._gpm_sample(pointer)
        if sample is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        sample.freed = True
        return SUCCESS

    def _take(self, handle: Any, gpu_instance: int | None, pointer: Any) -> int:
        index = self._index_of(handle)
        sample = self._gpm_sample(pointer)
        if index is None or sample is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        if not self.gpus[index].gpm_supported:
            return NOT_SUPPORTED
        if gpu_instance is not None and all(
            m.gpu_instance != gpu_instance for m in self.gpus[index].mig_devices
        ):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT  # no such GPU instance (any more)
        key = (index, gpu_instance)
        sample.gpu, sample.gpu_instance, sample.interval = index, gpu_instance, self._gpm_takes[key]
        self._gpm_takes[key] += 1
        return SUCCESS

    def c_nvmlGpmSampleGet(self, handle: Any, pointer: Any) -> int:
        return self._take(handle, None, pointer)

    def c_nvmlGpmMigSampleGet(self, handle: Any, gpu_instance: Any, pointer: Any) -> int:
        # pynvml passes a plain int here (ctypes would convert it for the real C function)
        return self._take(handle, int(getattr(gpu_instance, "value", gpu_instance)), pointer)

    def c_nvmlGpmMetricsGet(self, ptr: Any) -> int:
        request = ptr._obj
        first, second = self._gpm_sample(request.sample1), self._gpm_sample(request.sample2)
        if first is None or second is None or first.gpu is None or first.gpu != second.gpu:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        gpu = self.gpus[first.gpu]
        values = gpu.gpm
        if second.gpu_instance is not None:
            mig = next(m for m in gpu.mig_devices if m.gpu_instance == second.gpu_instance)
            values = mig.gpm
        ids = [int(request.metrics[i].metricId) for i in range(request.numMetrics)]
        if self.record:
            self.gpm_requests.append(ids)
        for i, metric in enumerate(ids):
            entry = request.metrics[i]
            if metric in gpu.gpm_errors:
                entry.nvmlReturn = gpu.gpm_errors[metric]
            elif metric in values:
                value = values[metric]
                entry.nvmlReturn = SUCCESS
                entry.value = value(second.interval) if callable(value) else value
            else:
                entry.nvmlReturn = NOT_SUPPORTED
        return SUCCESS

    def gpm_interval(self, gpu: int) -> int:
        """The GPM interval the GPU's next sample ends (the index `FakeGpu.gpm`'s
        functions are given for the metrics between it and the one before)."""
        return self._gpm_takes[(gpu, None)]

    def live_gpm_samples(self) -> int:
        """GPM samples allocated and not freed."""
        return sum(not s.freed for s in self.gpm_samples)

    # Events -------------------------------------------------------------------------

    def push_event(self, gpu: int, event_type: int, data: int = 0) -> None:
        """Queue a driver event; a waiting nvmlEventSetWait_v2 wakes up for it."""
        with self._events_changed:
            self.pending_events.append(FakeEvent(gpu, event_type, data))
            self._events_changed.notify_all()

    def _event_set(self, handle: Any) -> FakeEventSet | None:
        if not isinstance(handle, pynvml.c_nvmlEventSet_t) or not handle:
            return None
        address = ctypes.addressof(handle.contents)
        for event_set in self.event_sets:
            if ctypes.addressof(event_set.struct) == address and not event_set.freed:
                return event_set
        return None

    def c_nvmlEventSetCreate(self, ptr: Any) -> int:
        event_set = FakeEventSet(pynvml.struct_c_nvmlEventSet_t())
        self.event_sets.append(event_set)
        ptr._obj.contents = event_set.struct
        return SUCCESS

    def c_nvmlDeviceGetSupportedEventTypes(self, handle: Any, ptr: Any) -> int:
        ptr._obj.value = self._gpu(handle).supported_events
        return SUCCESS

    def c_nvmlDeviceRegisterEvents(self, handle: Any, mask: Any, set_handle: Any) -> int:
        index = self._index_of(handle)
        event_set = self._event_set(set_handle)
        if index is None or event_set is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self.registrations.append((index, int(mask.value)))
        if int(mask.value) & ~self.gpus[index].supported_events:
            return NOT_SUPPORTED  # as the driver answers for an unsupported type
        event_set.registered[index] = event_set.registered.get(index, 0) | int(mask.value)
        return SUCCESS

    def c_nvmlEventSetWait_v2(self, set_handle: Any, ptr: Any, timeout_ms: Any) -> int:
        event_set = self._event_set(set_handle)
        if event_set is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        if self.record:
            self.wait_timeouts_ms.append(int(timeout_ms.value))

        def deliverable() -> FakeEvent | None:
            for event in self.pending_events:
                if event_set.registered.get(event.gpu, 0) & event.event_type:
                    return event
            return None

        with self._events_changed:
            event = self._events_changed.wait_for(deliverable, int(timeout_ms.value) / 1000.0)
            if event is None:
                return TIMEOUT
            self.pending_events.remove(event)
        data = ptr._obj
        data.device = ctypes.pointer(self._structs[event.gpu])
        data.eventType = event.event_type
        data.eventData = event.data
        data.gpuInstanceId = 0xFFFFFFFF  # not a MIG instance
        data.computeInstanceId = 0xFFFFFFFF
        return SUCCESS

    def c_nvmlEventSetFree(self, set_handle: Any) -> int:
        event_set = self._event_set(set_handle)
        if event_set is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        event_set.freed = True
        return SUCCESS

    def live_event_sets(self) -> int:
        """Event sets created and not freed."""
        return sum(not s.freed for s in self.event_sets)


Install = Callable[[FakeNvmlLib], FakeNvmlLib]
"""The `install` fixture (conftest.py): puts a fake library in pynvml's place."""
