"""A busy fake host for counting NVML calls: H100s with GPM, 18 NVLink links, the power
fields of a recent driver, compute processes and sample buffers that fill as time goes.

`busy_h100` builds one GPU; `advance` fills its sample buffers and per-process samples up
to a time, as the driver does every 1/6 s. The contract tests count calls on it and the
benchmark loads it into other programs (`benchmarks/fake_nvml_site/sitecustomize.py`).
"""

from __future__ import annotations

import pynvml

from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.clock import FakeClock
from tests.support.fake_nvml import FakeGpu, FakeNvmlLib, Install, h100

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
        crc_data = getattr(M, f"NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{link}", None)
        if crc_data is not None:
            gpu.fields[crc_data] = 0
    pids = pids if pids is not None else [10_000 + 100 * index + i for i in range(8)]
    gpu.compute_processes = [(pid, (1 + i % 5) * 2**30) for i, pid in enumerate(pids)]
    gpu.graphics_processes = []
    gpu.process_samples = []
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


def started(install: Install, *gpus: FakeGpu) -> tuple[FakeNvmlLib, PynvmlBackend, FakeClock]:
    """The fake library installed with `gpus`, and a backend on a fake clock, initialised."""
    lib = install(FakeNvmlLib(list(gpus)))
    clock = FakeClock()
    backend = PynvmlBackend(monotonic=clock.monotonic)
    backend.init()
    return lib, backend, clock


def one_second_sampler(
    backend: PynvmlBackend, clock: FakeClock, collectors: frozenset[str]
) -> Sampler:
    """A sampler at a 1 s interval on the fake clock (the test calls `sample_once`)."""
    return Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=collectors,
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
