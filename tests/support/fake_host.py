"""A busy fake host for counting NVML calls: H100s with GPM, 18 NVLink links, the power
fields of a recent driver, compute processes and sample buffers that fill as time goes.

`busy_h100` builds one GPU, `busy_mig_h100` one with MIG on; `advance` fills its sample
buffers and per-process samples up to a time, as the driver does every 1/6 s;
`LiveFakeNvml` does that by itself from a clock. The contract tests count calls on it
and the benchmark loads it into other programs
(`benchmarks/fake_nvml_site/sitecustomize.py`), so it imports nothing but
pynvml and the fake library: it must not weigh on the program it is measured in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pynvml

from tests.support.fake_nvml import FakeGpu, FakeMigDevice, FakeNvmlLib, h100

M = pynvml
NVLINK_LINKS = 18
SAMPLE_PERIOD_US = 166_667  # the driver fills its buffers every 1/6 s

GPM_VALUES: dict[int, float] = {  # percent, or MiB/s for the bus rates
    M.NVML_GPM_METRIC_GRAPHICS_UTIL: 90.0,
    M.NVML_GPM_METRIC_SM_UTIL: 40.0,
    M.NVML_GPM_METRIC_SM_OCCUPANCY: 25.0,
    M.NVML_GPM_METRIC_DRAM_BW_UTIL: 30.0,
    M.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 55.0,
    M.NVML_GPM_METRIC_FP64_UTIL: 0.0,
    M.NVML_GPM_METRIC_FP32_UTIL: 10.0,
    M.NVML_GPM_METRIC_FP16_UTIL: 20.0,
    M.NVML_GPM_METRIC_INTEGER_UTIL: 5.0,
    M.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 100.0,  # MiB/s
    M.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 300.0,
    M.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 1000.0,
    M.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 2000.0,
}


def busy_h100(index: int = 0, pids: list[int] | None = None) -> FakeGpu:
    """An H100 SXM on a recent driver, training: GPM, NVLink, compute processes, idle
    video engines."""
    gpu = h100(index)
    gpu.gpm_supported = True
    gpu.gpm = dict(GPM_VALUES)
    gpu.encoder_percent = 0
    gpu.decoder_percent = 0
    gpu.fields[M.NVML_FI_DEV_POWER_AVERAGE] = 512_345  # mW: what GetPowerUsage reports
    gpu.fields[M.NVML_FI_DEV_POWER_INSTANT] = 530_000
    gpu.fields[M.NVML_FI_DEV_NVLINK_LINK_COUNT] = NVLINK_LINKS
    for link in range(NVLINK_LINKS):
        gpu.fields[(M.NVML_FI_DEV_NVLINK_GET_STATE, link)] = 1
        gpu.fields[(M.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, link)] = 0
        gpu.fields[(M.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, link)] = 0
        gpu.fields[(M.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, link)] = 0
        gpu.nvlink_error_counters[(link, M.NVML_NVLINK_ERROR_DL_CRC_DATA)] = 0
        crc_data = getattr(M, f"NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{link}", None)
        if crc_data is not None:
            gpu.fields[crc_data] = 0
    pids = pids if pids is not None else [10_000 + 100 * index + i for i in range(8)]
    gpu.compute_processes = [(pid, (1 + i % 5) * 2**30) for i, pid in enumerate(pids)]
    gpu.graphics_processes = []
    gpu.process_samples = []
    return gpu


GIB = 2**30
MIG_NAME = "NVIDIA H100 80GB HBM3 MIG "
MIG_LAYOUTS: dict[str, list[tuple[int, int, int, str]]] = {
    # (slot, GPU instance, compute instance, profile) of each MIG device
    "1 MIG device": [(0, 0, 0, "7g.80gb")],
    "3 MIG devices": [(0, 2, 0, "3g.40gb"), (3, 2, 1, "3g.40gb"), (5, 9, 0, "1g.10gb")],
    "7 MIG devices": [(slot, 7 + slot, 0, "1g.10gb") for slot in range(7)],
}


def busy_mig_h100(layout: str, *, busy: bool = True) -> FakeGpu:
    """`busy_h100` with MIG on in one of MIG_LAYOUTS, GPM per GPU instance; with `busy`, a
    training process on each MIG device. The parent answers what nvml.h says a GPU with
    MIG on answers (`FakeNvmlLib.MIG_UNSUPPORTED`)."""
    gpu = busy_h100()
    gpu.mig = (M.NVML_DEVICE_MIG_ENABLE, M.NVML_DEVICE_MIG_ENABLE)
    gpu.utilization_percent = gpu.encoder_percent = gpu.decoder_percent = None
    gpu.mig_devices = [
        FakeMigDevice(
            slot,
            gi,
            ci,
            f"MIG-{slot}",
            MIG_NAME + profile,
            (10 * GIB, 8 * GIB),
            processes=[(20_000 + slot, 8 * GIB)] if busy else [],
            gpm={M.NVML_GPM_METRIC_SM_UTIL: 50.0},
        )
        for slot, gi, ci, profile in MIG_LAYOUTS[layout]
    ]
    return gpu


def nvlinked(links: int = 18, *, gpm: bool = False) -> FakeGpu:
    """An H100 with `links` active NVLink links, as its driver answers: per link (scopeId)
    the state, replay errors = link, recovery 0, flit CRC = 2 x link, 1000 KiB sent and
    3000 received; the data-CRC error counter (nvmlDeviceGetNvLinkErrorCounter) 7, and
    the legacy per-lane data-CRC fields a false 0. With `gpm`, GPM at GPM_VALUES."""
    gpu = h100()
    if gpm:
        gpu.gpm_supported = True
        gpu.gpm = dict(GPM_VALUES)
    gpu.fields[M.NVML_FI_DEV_NVLINK_LINK_COUNT] = links
    for link in range(links):
        gpu.fields[(M.NVML_FI_DEV_NVLINK_GET_STATE, link)] = 1
        gpu.fields[(M.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, link)] = link
        gpu.fields[(M.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, link)] = 0
        gpu.fields[(M.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, link)] = 2 * link
        gpu.fields[(M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link)] = 1000  # KiB
        gpu.fields[(M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link)] = 3000
        legacy = getattr(M, f"NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{link}", None)
        if legacy is not None:
            gpu.fields[legacy] = 0  # Hopper: SUCCESS, and a false 0
        gpu.nvlink_error_counters[(link, M.NVML_NVLINK_ERROR_DL_CRC_DATA)] = 7
    return gpu


def advance(gpu: FakeGpu, now_us: int, *, keep: int = 100) -> None:
    """Fill the GPU's sample buffers (the last `keep` entries) and per-process samples up
    to `now_us`, one entry per driver sample period."""
    newest = now_us - now_us % SAMPLE_PERIOD_US
    stamps = [
        newest - i * SAMPLE_PERIOD_US for i in range(keep) if newest - i * SAMPLE_PERIOD_US > 0
    ]
    stamps.reverse()
    gpu.samples = {
        M.NVML_GPU_UTILIZATION_SAMPLES: [(ts, 87) for ts in stamps],
        M.NVML_MEMORY_UTILIZATION_SAMPLES: [(ts, 41) for ts in stamps],
    }
    gpu.process_samples = [
        (pid, newest, 10 + i % 50, 5) for i, (pid, _used) in enumerate(gpu.compute_processes or [])
    ]


class LiveFakeNvml(FakeNvmlLib):
    """A fake library whose sample buffers fill with time, as a driver's do."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        clock: Callable[[], float] = time.monotonic,
        driver_version: str = "550.54.15",
    ) -> None:
        # it runs for minutes: no call history
        super().__init__(gpus, record=False, driver_version=driver_version)
        self._clock = clock
        self._start = clock()
        self._advanced_us = -1

    def _advance(self) -> None:
        now_us = int((self._clock() - self._start) * 1e6) + 10 * SAMPLE_PERIOD_US
        if now_us - self._advanced_us >= SAMPLE_PERIOD_US:
            self._advanced_us = now_us
            for gpu in self.gpus:
                advance(gpu, now_us)

    def c_nvmlDeviceGetSamples(self, *args: Any) -> int:  # noqa: N802 (the C symbol)
        self._advance()
        return super().c_nvmlDeviceGetSamples(*args)

    def c_nvmlDeviceGetProcessUtilization(self, *args: Any) -> int:  # noqa: N802
        self._advance()
        return super().c_nvmlDeviceGetProcessUtilization(*args)
