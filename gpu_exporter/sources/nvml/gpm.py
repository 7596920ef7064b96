"""GPM (GPU Performance Monitoring, Hopper and newer): activity between two samples.

Per device, or per MIG GPU instance, a `GpmStream` keeps two GPM samples allocated once
and reused: each interval it takes a new sample into the older one and asks
`nvmlGpmMetricsGet` for the metrics between the two. That is two NVML calls per interval.
The samples are freed when the stream is closed (on NVML re-initialisation and at exit).

The metrics request is a plain ctypes structure laid out as pynvml's
`c_nvmlGpmMetricsGet_t` (`MetricsRequest`; a test compares them), and its answers are
read with one `struct` pass: pynvml's structure sends every field access through Python.
nvml.h sizes it for NVML_GPM_METRIC_MAX metrics (477 in 13.x: 19 KiB) though a stream
asks for about ten, so there is one request per thread that reads, not one per stream
(per GPU, and per GPU instance under MIG): its metric ids are written again only when a
stream asks for other ones than the last (a host's GPUs ask for the same ones; a MIG
instance for fewer).
"""

from __future__ import annotations

import ctypes
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpu_exporter.model import GpmReading
from gpu_exporter.records import Record
from gpu_exporter.sources.backend import DeviceLost, NvmlUnavailable
from gpu_exporter.sources.nvml.buffers import unpack
from gpu_exporter.sources.nvml.calls import Device, NvmlCalls, Outcome, classify

MIB = 2**20

# GPM metric -> (what it measures, its scale to base units)
_RATIOS: dict[int, str] = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: "graphics_engine",
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram",
}
_PIPES: dict[int, str] = {
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor",
    pynvml.NVML_GPM_METRIC_FP64_UTIL: "fp64",
    pynvml.NVML_GPM_METRIC_FP32_UTIL: "fp32",
    pynvml.NVML_GPM_METRIC_FP16_UTIL: "fp16",
    pynvml.NVML_GPM_METRIC_INTEGER_UTIL: "integer",
}
_PCIE: dict[int, str] = {
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: "tx",
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: "rx",
}
_NVLINK: dict[int, str] = {
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: "tx",
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: "rx",
}
DEVICE_METRICS: tuple[int, ...] = (*_RATIOS, *_PIPES, *_PCIE, *_NVLINK)
INSTANCE_METRICS: tuple[int, ...] = (*_RATIOS, *_PIPES)  # bus traffic is per GPU


class Metric(ctypes.Structure):
    """`nvmlGpmMetric_t`, as pynvml's `c_nvmlGpmMetric_t`."""

    _fields_ = [
        ("metricId", ctypes.c_uint),
        ("nvmlReturn", pynvml._nvmlReturn_t),
        ("value", ctypes.c_double),
        ("metricInfo", pynvml.c_metricInfo_t),
    ]


class MetricsRequest(ctypes.Structure):
    """`nvmlGpmMetricsGet_t`, as pynvml's `c_nvmlGpmMetricsGet_t`."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("numMetrics", ctypes.c_uint),
        ("sample1", pynvml.c_nvmlGpmSample_t),
        ("sample2", pynvml.c_nvmlGpmSample_t),
        ("metrics", Metric * pynvml.NVML_GPM_METRIC_MAX),
    ]


METRIC_ANSWER = struct.Struct("@4xid24x")  # of one `Metric`: its return code and value


class _ThreadRequest(threading.local):
    """The calling thread's metrics request (made at its first call) and the metric ids
    written into it."""

    request: MetricsRequest | None = None
    written: tuple[int, ...] = ()


_REQUESTS = _ThreadRequest()


def supported(calls: NvmlCalls, d: Device) -> bool:
    """`nvmlGpmQueryDeviceSupport` (remembered by the caller: it does not change)."""
    answer = calls.query(d, "gpm_support", pynvml.nvmlGpmQueryDeviceSupport)
    return answer is not None and bool(answer.isSupportedDevice)


@dataclass(repr=False)
class GpmStream(Record):
    """Two reused GPM samples of one device or GPU instance, and the metrics between."""

    calls: NvmlCalls
    device: Device  # whose unsupported cache the stream's calls use
    key: str  # e.g. "gpm", "gpm/mig/1"
    take: Callable[[Any], Any]  # fills a sample: nvmlGpmSampleGet or nvmlGpmMigSampleGet
    metric_ids: tuple[int, ...]
    monotonic: Callable[[], float] = time.monotonic
    _samples: list[Any] = field(default_factory=list)
    _next: int = 0  # which sample the next take fills
    _taken_at: float | None = None  # when the other sample was taken
    _wanted: tuple[int, ...] = ()  # the metric ids asked for: metric_ids less unsupported
    _unsupported: set[int] = field(default_factory=set)

    def read(self) -> GpmReading | None:
        """Take a sample; the metrics since the previous one, or None (first, or failed)."""
        if not self._samples and not self._allocate():
            return None
        sample = self._samples[self._next]
        taken = self.calls.call(
            "nvmlGpmSampleGet", self.take, sample, device=self.device, key=self.key
        )
        if taken is None:
            self._taken_at = None  # a gap: the next sample starts afresh
            return None
        now = self.monotonic()
        previous, previous_at = self._samples[1 - self._next], self._taken_at
        self._next, self._taken_at = 1 - self._next, now
        if previous_at is None or now <= previous_at:
            return None
        values = self._metrics(previous, sample)
        return None if values is None else _reading(values, now - previous_at)

    def nvlink_directions(self) -> frozenset[str]:
        """The NVLink directions ("tx", "rx") whose bytes this stream counts: those whose
        metric has not answered NOT_SUPPORTED (all until the first metrics call)."""
        return frozenset(
            d for m, d in _NVLINK.items() if m in self.metric_ids and m not in self._unsupported
        )

    def close(self) -> None:
        """Free the samples; never raises."""
        samples, self._samples = self._samples, []
        for sample in samples:
            try:
                self.calls.call("nvmlGpmSampleFree", pynvml.nvmlGpmSampleFree, sample)
            except (NvmlUnavailable, DeviceLost):
                pass  # the library is gone, and the samples with it

    def forget(self) -> None:
        """Ask again for the metrics that answered NOT_SUPPORTED (support may change)."""
        self._unsupported.clear()

    def _allocate(self) -> bool:
        while len(self._samples) < 2:
            sample = self.calls.call(
                "nvmlGpmSampleAlloc", pynvml.nvmlGpmSampleAlloc, device=self.device, key=self.key
            )
            if sample is None:
                self.close()
                return False
            self._samples.append(sample)
        return True

    def _metrics(self, sample1: Any, sample2: Any) -> dict[int, float] | None:
        wanted = self._wanted
        if len(wanted) + len(self._unsupported) != len(self.metric_ids):
            # the first request, or a metric turned unsupported (or asked again): the
            # ids asked for change; else they are those of the last call
            wanted = self._wanted = tuple(m for m in self.metric_ids if m not in self._unsupported)
        if not wanted:
            return None
        held = _REQUESTS
        request = held.request
        if request is None:
            request = held.request = MetricsRequest()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        if wanted != held.written:  # another stream asked for other ids last
            request.numMetrics = len(wanted)
            for i, metric in enumerate(wanted):
                request.metrics[i].metricId = metric
            held.written = wanted
        request.sample1, request.sample2 = sample1, sample2
        answered = self.calls.call(
            "nvmlGpmMetricsGet",
            _metrics_get,
            request,
            device=self.device,
            key=f"{self.key}/metrics",
        )
        if answered is None:
            return None
        answers = unpack(request, METRIC_ANSWER, len(wanted), MetricsRequest.metrics.offset)
        out: dict[int, float] = {}
        success = pynvml.NVML_SUCCESS
        for metric, (code, value) in zip(wanted, answers, strict=True):
            if code == success:
                out[metric] = value
            elif classify(code) is Outcome.UNSUPPORTED:
                self._unsupported.add(metric)
            else:
                message = f"metric {metric}: {pynvml.NVMLError(code)}"
                self.calls.entry_failed("nvmlGpmMetricsGet", code, message, self.device)
        return out


def _metrics_get(request: MetricsRequest) -> bool:
    """`nvmlGpmMetricsGet` into `request`, through pynvml's function lookup as its own
    wrapper does; raises `pynvml.NVMLError` (classified by `NvmlCalls.call`)."""
    pynvml._nvmlCheckReturn(
        pynvml._nvmlGetFunctionPointer("nvmlGpmMetricsGet")(ctypes.byref(request))
    )
    return True


def _ratio(percent: float) -> float:
    """A GPM percentage as a ratio within 0..1 (NaN: 0)."""
    ratio = percent / 100.0
    return 1.0 if ratio > 1.0 else ratio if ratio > 0.0 else 0.0


def _reading(values: dict[int, float], elapsed: float) -> GpmReading:
    ratios = {name: _ratio(values[m]) for m, name in _RATIOS.items() if m in values}
    return GpmReading(
        elapsed_seconds=elapsed,
        graphics_engine_ratio=ratios.get("graphics_engine"),
        sm_ratio=ratios.get("sm"),
        sm_occupancy_ratio=ratios.get("sm_occupancy"),
        dram_ratio=ratios.get("dram"),
        pipe_ratios={name: _ratio(values[m]) for m, name in _PIPES.items() if m in values},
        pcie_bytes_per_second={
            d: max(0.0, values[m]) * MIB for m, d in _PCIE.items() if m in values
        },
        nvlink_bytes_per_second={
            d: max(0.0, values[m]) * MIB for m, d in _NVLINK.items() if m in values
        },
    )


def sample_address(sample: Any) -> int:
    """A GPM sample's identity (an opaque pointer)."""
    return int(ctypes.cast(sample, ctypes.c_void_p).value or 0)
