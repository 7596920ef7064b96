"""Contract tests for issue 14: how many NVML calls a sample costs, and what each saves.

Through the real `pynvml` and the fake library (`tests/support/fake_nvml.py`, which
answers the array calls with C semantics: NVML_ERROR_INSUFFICIENT_SIZE and the count it
needs when a buffer is too small). Counts, never times.
"""

from __future__ import annotations

import ctypes
import itertools
import random
from collections import Counter
from typing import Any

import pynvml
import pytest

from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.model import UtilizationDomain
from gpu_exporter.sources.backend import SLOW_REFRESH_SECONDS, DeviceLost
from gpu_exporter.sources.nvml import PynvmlBackend, buffers, counter_fields, fields, gpm, structs
from gpu_exporter.sources.nvml.calls import Device
from tests.support.clock import FakeClock
from tests.support.fake_host import MIG_LAYOUTS, advance, busy_h100, busy_mig_h100
from tests.support.fake_nvml import FakeGpu, FakeNvmlLib, Install, h100
from tests.support.fake_sampling import one_second_sampler, started

M = pynvml
DEFAULT_COLLECTORS = frozenset(c.name for c in COLLECTORS if c.default_enabled) - {"host", "xid"}
GPUS = 8
INTERVALS = 180  # three slow periods at a 1 s interval


def _us(clock: FakeClock) -> int:
    return int(clock.monotonic() * 1e6) + 1_000_000


# The budget ---------------------------------------------------------------------------


def test_at_most_16_nvml_calls_per_gpu_per_interval_with_gpm_and_nvlink(
    install: Install,
) -> None:
    gpus = [busy_h100(i) for i in range(GPUS)]
    lib, backend, clock = started(install, *gpus)
    sampler = one_second_sampler(backend, clock, DEFAULT_COLLECTORS)
    for gpu in gpus:
        advance(gpu, _us(clock))
    sampler.sample_once()  # the first sample reads the identity and allocates
    before = sum(lib.calls.values())
    for _ in range(INTERVALS):
        clock.now += 1.0
        for gpu in gpus:
            advance(gpu, _us(clock))
        snapshot = sampler.sample_once()
    calls = sum(lib.calls.values()) - before
    sampler.stop(0)

    per_gpu_per_interval = calls / GPUS / INTERVALS
    assert per_gpu_per_interval <= 16, per_gpu_per_interval
    device = snapshot.devices[0]
    reading = device.reading
    assert device.up and reading is not None
    # nothing was given up for it: every collector still reports
    assert reading.gpm is not None and reading.nvlink is not None
    assert reading.power is not None and reading.power.watts == pytest.approx(512.345)
    assert reading.power.limit_watts == pytest.approx(700.0)
    assert reading.utilization is not None and reading.utilization.gpu_ratio == 0.87
    assert reading.utilization.encoder_ratio == 0.0
    assert reading.modes is not None and reading.modes.persistence is True
    assert reading.pcie is not None and reading.pcie.generation == 5
    assert device.attribution is not None or device.busy_seconds is not None


def _mig_calls(install: Install, gpu: FakeGpu) -> dict[str, float]:
    """NVML calls per interval of one GPU sampled like the budget test's, by function."""
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, DEFAULT_COLLECTORS)
    sampler.sample_once()  # the first sample reads the identity and enumerates
    before = Counter(lib.calls)
    for _ in range(INTERVALS):
        clock.now += 1.0
        snapshot = sampler.sample_once()
    sampler.stop(0)
    mig = snapshot.devices[0].reading.mig if snapshot.devices[0].reading else None
    assert mig is not None and all(i.gpm is not None for i in mig.instances.values())
    calls = Counter(lib.calls)
    calls.subtract(before)
    del calls[("nvmlDeviceGetCount_v2", None)]  # the host's, not the GPU's
    return {fn: n / INTERVALS for (fn, _gpu), n in calls.items() if n}


def test_a_mig_gpu_pays_for_its_instances_data_and_one_call_per_idle_device_to_see_changes(
    install: Install,
) -> None:
    busy = _mig_calls(install, busy_mig_h100("1 MIG device"))
    idle = _mig_calls(install, busy_mig_h100("1 MIG device", busy=False))
    three = _mig_calls(install, busy_mig_h100("3 MIG devices"))
    once = 1 / SLOW_REFRESH_SECONDS + 1e-9  # once a slow period
    for calls in (busy, idle):
        assert sum(calls.values()) <= 16, calls
        # what the data needs: the GPU's and its GPU instance's memory and GPM
        assert calls["nvmlDeviceGetMemoryInfo_v2"] == calls["nvmlGpmMetricsGet"] == 2
        # MIG mode at each enumeration only (and in the modes collector); no remaining
        # capacity while the 7g instance fills the GPU
        assert calls["nvmlDeviceGetMigMode"] <= 2 * once
        assert calls["nvmlDeviceGetGpuInstanceRemainingCapacity"] <= once
        # what a MIG parent does not answer (nvml.h) is not asked every interval
        assert calls.get("nvmlDeviceGetProcessUtilization", 0) <= once
    # busy: its process list shows the MIG device is the same instance, no UUID read
    assert busy["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert busy["nvmlDeviceGetUUID"] <= once  # at the enumerations
    # idle: its UUID, and its empty list only when its instance's memory moves
    assert idle["nvmlDeviceGetUUID"] == 1
    assert idle["nvmlDeviceGetComputeRunningProcesses_v3"] <= once
    # each further GPU instance costs its memory and GPM, each MIG device its process
    # list, and a GPU with room for another instance its remaining capacity
    assert three["nvmlDeviceGetUUID"] <= 3 * once
    assert three["nvmlDeviceGetGpuInstanceRemainingCapacity"] == 1
    extra = sum(three.values()) - sum(busy.values())
    assert extra == pytest.approx(3 * 1 + 2 + 1, abs=0.2), extra


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
@pytest.mark.parametrize("layout", list(MIG_LAYOUTS))
def test_a_mig_gpu_stays_within_16_calls_plus_4_per_mig_device(
    install: Install, layout: str, busy: bool
) -> None:
    """Issue 38's budget: 16 calls per GPU per interval, plus at most 4 per MIG device
    (its memory, GPM sample and metrics, and its process list or UUID to see a swap)."""
    gpu = busy_mig_h100(layout, busy=busy)
    calls = _mig_calls(install, gpu)
    assert sum(calls.values()) <= 16 + 4 * len(gpu.mig_devices), calls


# Single-call buffers ------------------------------------------------------------------


def test_sample_buffer_is_read_with_one_call_per_domain(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, clock = started(install, gpu)
    for _ in range(3):
        clock.now += 1.0
        advance(gpu, _us(clock))
        samples = backend.utilization_samples(0, "gpu", 0)
        assert samples and [s.ratio for s in samples] == [0.87] * len(samples)
    assert lib.count("nvmlDeviceGetSamples", gpu=0) == 3


def test_sample_buffer_grows_when_the_driver_says_it_is_too_small(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, clock = started(install, gpu)
    clock.now += 100.0
    advance(gpu, _us(clock), keep=300)  # more than the first buffer holds
    first = backend.utilization_samples(0, "gpu", 0)
    assert first is not None and len(first) == 300
    assert [s.timestamp_us for s in first] == sorted(s.timestamp_us for s in first)
    assert lib.count("nvmlDeviceGetSamples", gpu=0) == 2  # too small, then the whole ring
    again = backend.utilization_samples(0, "gpu", 0)
    assert again == first
    assert lib.count("nvmlDeviceGetSamples", gpu=0) == 3  # the grown buffer is kept
    assert backend.errors.snapshot() == {}


def test_process_list_grows_and_keeps_its_buffer(install: Install) -> None:
    pids = list(range(1000, 1050))  # more than the first buffer holds
    gpu = busy_h100(pids=pids)
    lib, backend, _clock = started(install, gpu)
    for _ in range(2):
        procs = backend.processes(0)
        assert procs is not None and [p.pid for p in procs] == pids
        assert procs[1].used_memory_bytes == 2 * 2**30
    assert lib.count("nvmlDeviceGetComputeRunningProcesses_v3", gpu=0) == 3  # 2 + 1


def test_process_utilization_grows_and_keeps_its_buffer(install: Install) -> None:
    pids = list(range(2000, 2100))
    gpu = busy_h100(pids=pids)
    lib, backend, clock = started(install, gpu)
    clock.now += 10.0
    advance(gpu, _us(clock))
    for _ in range(2):
        samples = backend.process_utilization(0, 0)
        assert samples is not None and [s.pid for s in samples] == pids
    assert lib.count("nvmlDeviceGetProcessUtilization", gpu=0) == 3


def test_an_empty_process_utilization_buffer_is_quietly_empty(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, _clock = started(install, gpu)
    assert backend.process_utilization(0, 0) == []  # NOT_FOUND: nothing newer
    assert backend.errors.snapshot() == {}
    assert lib.count("nvmlDeviceGetProcessUtilization", gpu=0) == 1


def test_a_driver_without_the_sample_call_has_no_samples_and_is_not_asked_again(
    install: Install,
) -> None:
    lib = install(FakeNvmlLib([busy_h100()], missing={"nvmlDeviceGetSamples"}))
    backend = PynvmlBackend()
    backend.init()
    assert backend.utilization_samples(0, "gpu", 0) is None
    assert backend.utilization_samples(0, "gpu", 0) is None
    assert lib.count("nvmlDeviceGetSamples") == 0
    assert backend.errors.snapshot() == {}


# Field batch --------------------------------------------------------------------------


def test_power_draw_comes_from_the_field_batch_without_a_power_call(install: Install) -> None:
    lib, backend, _clock = started(install, busy_h100())
    reading = backend.device_reading(0, frozenset({"power"}))
    assert reading.power is not None and reading.power.watts == pytest.approx(512.345)
    assert lib.count("nvmlDeviceGetPowerUsage") == 0
    batch = lib.field_requests[-1]
    assert M.NVML_FI_DEV_POWER_AVERAGE in batch and M.NVML_FI_DEV_POWER_INSTANT in batch
    assert M.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION in batch


def test_power_draw_is_the_instant_field_where_the_gpu_has_no_average(install: Install) -> None:
    gpu = busy_h100()
    del gpu.fields[M.NVML_FI_DEV_POWER_AVERAGE]  # GA100 and older: instantaneous only
    lib, backend, _clock = started(install, gpu)
    reading = backend.device_reading(0, frozenset({"power"}))
    assert reading.power is not None and reading.power.watts == pytest.approx(530.0)
    assert lib.count("nvmlDeviceGetPowerUsage") == 0


def test_power_draw_falls_back_to_the_call_on_drivers_without_the_fields(
    install: Install,
) -> None:
    lib, backend, _clock = started(install, h100())  # no power fields
    for _ in range(2):
        reading = backend.device_reading(0, frozenset({"power"}))
        assert reading.power is not None and reading.power.watts == pytest.approx(512.345)
    assert lib.count("nvmlDeviceGetPowerUsage") == 2
    # unsupported: dropped (the second reading wanted no other field: no call at all)
    assert all(M.NVML_FI_DEV_POWER_AVERAGE not in r for r in lib.field_requests[1:])


def test_one_field_call_per_interval_carries_every_field(install: Install) -> None:
    lib, backend, _clock = started(install, busy_h100())
    backend.device_static(0)
    backend.device_reading(0, DEFAULT_COLLECTORS)
    assert lib.count("nvmlDeviceGetFieldValues", gpu=0) == 2  # static (link count) + 1
    batch = set(lib.field_requests[-1])
    assert {
        M.NVML_FI_DEV_ECC_CURRENT,
        M.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
        M.NVML_FI_DEV_MEMORY_TEMP,
        M.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        M.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
        M.NVML_FI_DEV_POWER_AVERAGE,
        M.NVML_FI_DEV_NVLINK_GET_STATE,
        M.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    } <= batch


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (fields.FieldValue, M.c_nvmlFieldValue_t),
        (buffers.SampleEntry, M.c_nvmlSample_t),
        (buffers.ProcessInfo, M.c_nvmlProcessInfo_v3_t),
        (buffers.ProcessInfo, M.c_nvmlProcessInfo_v2_t),
        (buffers.ProcessUtilization, M.c_nvmlProcessUtilizationSample_t),
        (gpm.Metric, M.c_nvmlGpmMetric_t),
        (gpm.MetricsRequest, M.c_nvmlGpmMetricsGet_t),
        (structs.MemoryV2, M.c_nvmlMemory_v2_t),
        (structs.Utilization, M.c_nvmlUtilization_t),
        (structs.TemperatureV1, M.c_nvmlTemperature_v1_t),
    ],
)
def test_the_kept_c_structures_are_laid_out_as_pynvml_s(ours: Any, theirs: Any) -> None:
    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
    for name, _type in theirs._fields_:
        assert getattr(ours, name).offset == getattr(theirs, name).offset, name
        assert getattr(ours, name).size == getattr(theirs, name).size, name


def test_the_struct_layouts_read_every_field_where_ctypes_put_it() -> None:
    """Written through ctypes (as the driver would), read back with `struct`: every
    field at its place, at the top of its range, and only the first `n` entries."""
    samples = buffers.sample_buffer()
    samples.array[0].timeStamp = 2**64 - 1
    samples.array[0].sampleValue.uiVal = 2**32 - 1
    samples.array[1].timeStamp = 5
    samples.array[1].sampleValue.uiVal = 97
    assert samples.layout.size == ctypes.sizeof(buffers.SampleEntry)
    assert list(samples.entries(2)) == [(2**64 - 1, 2**32 - 1), (5, 97)]
    assert list(samples.entries(1)) == [(2**64 - 1, 2**32 - 1)]

    processes = buffers.process_buffer()
    processes.array[0].pid = 2**32 - 1
    processes.array[0].usedGpuMemory = 2**64 - 1
    processes.array[0].gpuInstanceId = 3
    processes.array[1].pid = 42
    processes.array[1].usedGpuMemory = 7 * 2**30
    assert processes.layout.size == ctypes.sizeof(buffers.ProcessInfo)
    assert list(processes.entries(2)) == [(2**32 - 1, 2**64 - 1), (42, 7 * 2**30)]

    utilization = buffers.process_sample_buffer()
    entry = utilization.array[0]
    entry.pid, entry.timeStamp = 42, 2**64 - 1
    entry.smUtil, entry.memUtil, entry.encUtil, entry.decUtil = 1, 2, 3, 4
    assert utilization.layout.size == ctypes.sizeof(buffers.ProcessUtilization)
    assert list(utilization.entries(1)) == [(42, 2**64 - 1, 1, 2, 3, 4)]

    request = gpm.MetricsRequest()
    request.metrics[0].nvmlReturn = M.NVML_ERROR_NOT_SUPPORTED
    request.metrics[0].value = -1.5
    request.metrics[1].value = 1e300
    assert gpm.METRIC_ANSWER.size == ctypes.sizeof(gpm.Metric)
    start = gpm.MetricsRequest.metrics.offset
    raw = memoryview(request).cast("B")[start : start + 2 * gpm.METRIC_ANSWER.size]
    assert list(gpm.METRIC_ANSWER.iter_unpack(raw)) == [
        (M.NVML_ERROR_NOT_SUPPORTED, -1.5),
        (M.NVML_SUCCESS, 1e300),
    ]


@pytest.mark.parametrize(
    ("value_type", "member", "value"),
    [
        (M.NVML_VALUE_TYPE_DOUBLE, "dVal", 512.345),
        (M.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 4_000_000_000),
        (M.NVML_VALUE_TYPE_UNSIGNED_LONG, "ulVal", 2**40 + 3),
        (M.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**63 + 5),
        (M.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -(2**40)),
        (M.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -7),
        (M.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", 65535),
    ],
)
def test_every_value_type_is_read_as_its_union_member(
    value_type: int, member: str, value: float
) -> None:
    a, b = fields.FieldRequest("a", 1), fields.FieldRequest("b", 2, 3)
    batch = fields.FieldBatch((a, b))
    assert [(e.fieldId, e.scopeId) for e in batch.array] == [(1, 0), (2, 3)]
    for entry in batch.array:
        entry.value.ullVal = 0xFFFF_FFFF_FFFF_FFFF  # the bytes beyond a short member
        setattr(entry.value, member, value)
        entry.valueType = value_type
    batch.array[0].nvmlReturn = M.NVML_SUCCESS  # as the driver writes each entry's code
    batch.array[1].nvmlReturn = M.NVML_ERROR_NOT_SUPPORTED
    assert list(batch.answers()) == [
        (a, M.NVML_SUCCESS, float(value)),
        (b, M.NVML_ERROR_NOT_SUPPORTED, 0.0),
    ]


def test_the_field_batch_is_one_array_kept_between_intervals(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrays: list[Any] = []  # held, so a freed array's memory cannot come back as "the same"
    answer = FakeNvmlLib.c_nvmlDeviceGetFieldValues

    def spy(self: FakeNvmlLib, handle: Any, count: Any, ptr: Any) -> int:
        arrays.append(ptr._obj)
        return answer(self, handle, count, ptr)

    monkeypatch.setattr(FakeNvmlLib, "c_nvmlDeviceGetFieldValues", spy)
    # the counters' period as a real driver's cost gives it (30 s), not as this host's
    # timing of two microsecond calls does (a call without them that happened to take
    # longer made them due again, and the batch another array)
    monkeypatch.setattr(
        counter_fields.CounterCadence,
        "period_seconds",
        property(lambda _: counter_fields.MAX_AGE_SECONDS),
    )
    _lib, backend, _clock = started(install, busy_h100())
    backend.device_static(0)  # the link count
    arrays.clear()
    collectors = DEFAULT_COLLECTORS | {"nvlink"}
    backend.device_reading(0, collectors)  # with the counters (`counter_fields.py`)
    arrays.clear()
    first = backend.device_reading(0, collectors)  # the intervals between their reads
    second = backend.device_reading(0, collectors)
    assert len(arrays) == 2 and arrays[0] is arrays[1]
    assert first.nvlink == second.nvlink and first.nvlink is not None
    assert len(first.nvlink.links) == 18 and first.nvlink.links[17].up
    assert second.power is not None and second.power.watts == pytest.approx(512.345)


def test_fields_and_links_answering_as_before_are_not_decoded_or_rebuilt_again(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamps = itertools.count(1)
    answer = FakeNvmlLib.c_nvmlDeviceGetFieldValues

    def stamped(self: FakeNvmlLib, handle: Any, count: Any, ptr: Any) -> int:
        code = answer(self, handle, count, ptr)
        for entry in ptr._obj[: count.value]:  # as a driver stamps every entry, every call
            entry.timestamp, entry.latencyUsec = next(stamps), 3
        return code

    decoded: list[str] = []
    decode = fields.FieldBatch.answers

    def counted(self: fields.FieldBatch, *args: Any) -> Any:
        for request, code, value in decode(self, *args):
            decoded.append(request.key)
            yield request, code, value

    monkeypatch.setattr(FakeNvmlLib, "c_nvmlDeviceGetFieldValues", stamped)
    monkeypatch.setattr(fields.FieldBatch, "answers", counted)
    gpu = busy_h100()
    _lib, backend, clock = started(install, gpu)
    backend.device_static(0)  # the link count
    collectors = DEFAULT_COLLECTORS | {"nvlink"}
    backend.device_reading(0, collectors)  # with the counters (`counter_fields.py`)
    clock.now += counter_fields.MAX_AGE_SECONDS  # and again, GPM's NVLink bytes now read
    backend.device_reading(0, collectors)  # (the batch asking for the driver's dropped)
    clock.now += counter_fields.MAX_AGE_SECONDS  # their batch without the unsupported ones
    backend.device_reading(0, collectors)
    decoded.clear()
    first = backend.device_reading(0, collectors)  # the intervals between their reads
    every = len(decoded)
    decoded.clear()
    again = backend.device_reading(0, collectors)
    assert again == first
    assert decoded == []  # new timestamps, the same answers: nothing decoded again
    assert again.nvlink is not None and first.nvlink is not None
    assert again.nvlink.links is first.nvlink.links  # the same links: not built again
    gpu.fields[(M.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 17)] = 5
    gpu.fields[M.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION] += 1000
    clock.now += counter_fields.MAX_AGE_SECONDS  # the counters are due again
    changed = backend.device_reading(0, collectors)
    # the two whose answers changed, where a batch read the first time decodes them all
    assert sorted(decoded) == ["energy_millijoules", "nvlink/17/replay"] and every > 2
    assert changed.nvlink is not None and changed.nvlink.links[17].errors["replay"] == 5
    assert changed.nvlink.links[16].errors["replay"] == 0
    assert changed.power is not None and first.power is not None
    assert changed.power.energy_joules == pytest.approx(first.power.energy_joules + 1)
    assert changed.ecc == first.ecc


def test_a_field_that_becomes_unsupported_leaves_the_kept_batch(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, _clock = started(install, gpu)
    backend.device_reading(0, DEFAULT_COLLECTORS)
    assert M.NVML_FI_DEV_MEMORY_TEMP in lib.field_requests[-1]
    gpu.field_errors[M.NVML_FI_DEV_MEMORY_TEMP] = M.NVML_ERROR_NOT_SUPPORTED
    reading = backend.device_reading(0, DEFAULT_COLLECTORS)
    assert reading.temperature is not None and reading.temperature.memory_celsius is None
    backend.device_reading(0, DEFAULT_COLLECTORS)
    assert M.NVML_FI_DEV_MEMORY_TEMP not in lib.field_requests[-1]
    assert M.NVML_FI_DEV_ECC_CURRENT in lib.field_requests[-1]


def test_a_device_s_kept_batch_follows_its_unsupported_fields(install: Install) -> None:
    """The call's supported fields are sorted out again only where the requests or the
    unsupported fields changed since the device's last call: a field unsupported since is
    left out, one forgotten is asked again, and so is one forgotten while another turned
    unsupported (as many fields unsupported as before, not the same)."""
    gpu = h100()
    lib, backend, _clock = started(install, gpu)
    d = Device(M.nvmlDeviceGetHandleByIndex(0))
    temp, mode = M.NVML_FI_DEV_MEMORY_TEMP, M.NVML_FI_DEV_ECC_CURRENT
    requests = (fields.FieldRequest("temp", temp), fields.FieldRequest("mode", mode))

    def read() -> tuple[set[str], list[int]]:
        values = fields.read_fields(backend.calls, d, requests)
        assert values is not None
        return set(values), lib.field_requests[-1]

    assert read() == ({"temp", "mode"}, [temp, mode])
    assert read() == ({"temp", "mode"}, [temp, mode])
    gpu.field_errors[temp] = M.NVML_ERROR_NOT_SUPPORTED
    assert read() == ({"mode"}, [temp, mode])
    assert read() == ({"mode"}, [mode])  # unsupported since the last call: left out
    assert read() == ({"mode"}, [mode])
    d.forget()
    del gpu.field_errors[temp]
    assert read() == ({"temp", "mode"}, [temp, mode])  # forgotten: asked again
    gpu.field_errors[temp] = M.NVML_ERROR_NOT_SUPPORTED
    assert read() == ({"mode"}, [temp, mode])
    assert read() == ({"mode"}, [mode])
    d.forget()  # and before the next call, another field answered NOT_SUPPORTED
    d.unsupported_fields.add("mode")
    del gpu.field_errors[temp]
    assert read() == ({"temp"}, [temp])
    assert set(fields.read_fields(backend.calls, d, requests[:1]) or {}) == {"temp"}
    assert lib.field_requests[-1] == [temp]  # other requests: another batch
    assert read() == ({"temp"}, [temp])


def test_a_device_keeps_no_array_asking_for_fields_it_found_unsupported(
    install: Install,
) -> None:
    """An H100 with 18 NVLink links is asked NVLink5's ~290 per-link counters once and
    answers NOT_SUPPORTED: the array that asked them (40 bytes an entry, and a pristine
    copy) is not kept beside the smaller ones asked since, and GPUs asking for the same
    counters share one set of their names."""
    gpus = [busy_h100(i) for i in range(2)]
    _lib, backend, clock = started(install, *gpus)
    collectors = DEFAULT_COLLECTORS | {"nvlink"}
    for i in range(2):
        backend.device_static(i)  # the link count
    for _ in range(3):  # the counters' reads, and intervals between them
        for i in range(2):
            backend.device_reading(i, collectors)
            backend.device_reading(i, collectors)
        clock.now += counter_fields.MAX_AGE_SECONDS
    states = [backend._devices[i] for i in range(2)]
    for state in states:
        d = state.device
        assert len(d.unsupported_fields) > 200  # NVLink5's, per link
        asked = [{request.key for request in requests} for requests in d.field_batches]
        assert asked and all(keys.isdisjoint(d.unsupported_fields) for keys in asked)
        kept = sum(len(requests) for requests in d.field_batches)
        assert kept < len(d.unsupported_fields)  # the supported fields, in two or three calls
    assert states[0].counters._keys is states[1].counters._keys


@pytest.mark.parametrize("duplicates", [False, True])
def test_a_kept_batch_reads_what_a_new_batch_reads(
    monkeypatch: pytest.MonkeyPatch, duplicates: bool
) -> None:
    """`FieldBatch.read` decodes only what changed since its last read: a run of RUN
    entries, or where no entry's code or type changed, the entries whose values did.
    Entries changing at random, now and then in code or type: it reads what a batch
    decoding every entry reads, in the same order, decoding no more than changed."""
    rng = random.Random(3)
    requests = tuple(
        fields.FieldRequest(f"field{i % 15 if duplicates else i}", i) for i in range(20)
    )
    kept = fields.FieldBatch(requests)
    decoded: list[str] = []
    decode = fields.FieldBatch.answers

    def counted(self: fields.FieldBatch, *args: Any) -> Any:
        for request, code, value in decode(self, *args):
            if self is kept:
                decoded.append(request.key)
            yield request, code, value

    monkeypatch.setattr(fields.FieldBatch, "answers", counted)
    types = (
        M.NVML_VALUE_TYPE_DOUBLE,
        M.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
        M.NVML_VALUE_TYPE_SIGNED_INT,
    )
    codes = (M.NVML_SUCCESS, M.NVML_SUCCESS, M.NVML_ERROR_NOT_SUPPORTED, M.NVML_ERROR_UNKNOWN)
    shortcuts = 0
    for step in range(600):
        kinds_changed, values_changed = step == 0, 0
        for entry in kept.array:
            entry.timestamp, entry.latencyUsec = step, rng.randrange(100)  # every call
            dice = rng.random()
            if dice < 0.15:
                entry.value.ullVal = rng.randrange(1 << 52)  # never a NaN as a double
                values_changed += 1
            elif dice < 0.16:
                entry.nvmlReturn = rng.choice(codes)
                kinds_changed = True
            elif dice < 0.165:
                entry.valueType = rng.choice(types)
                kinds_changed = True
        fresh = fields.FieldBatch(requests)
        ctypes.memmove(fresh.array, kept.array, ctypes.sizeof(kept.array))
        decoded.clear()
        values, failures = kept.read()
        every_value, every_failure = fresh.read()
        assert list(values.items()) == list(every_value.items()) and failures == every_failure
        if not kinds_changed and not duplicates:
            assert len(decoded) <= values_changed
            shortcuts += 1
    assert shortcuts > 300 or duplicates  # the shortcut taken (keys unique), hundreds of times


# Utilization from the sample buffers ----------------------------------------------------


def test_utilization_is_the_newest_sample_without_a_rates_call(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, clock = started(install, gpu)
    clock.now += 5.0
    advance(gpu, _us(clock))
    gpu.samples[M.NVML_GPU_UTILIZATION_SAMPLES][-1] = (
        gpu.samples[M.NVML_GPU_UTILIZATION_SAMPLES][-1][0],
        33,
    )
    backend.utilization_samples(0, "gpu", 0)
    backend.utilization_samples(0, "memory_controller", 0)
    reading = backend.device_reading(0, frozenset({"utilization"}))
    assert reading.utilization is not None
    assert (
        reading.utilization.gpu_ratio == 0.33
        and reading.utilization.memory_controller_ratio == 0.41
    )
    assert lib.count("nvmlDeviceGetUtilizationRates") == 0


def test_utilization_is_asked_when_the_buffers_had_nothing_new(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, clock = started(install, gpu)
    clock.now += 5.0
    advance(gpu, _us(clock))
    since = _us(clock) + 1  # nothing newer: NOT_FOUND
    assert backend.utilization_samples(0, "gpu", since) == []
    assert backend.utilization_samples(0, "memory_controller", since) == []
    reading = backend.device_reading(0, frozenset({"utilization"}))
    assert reading.utilization is not None and reading.utilization.gpu_ratio == 0.87
    assert lib.count("nvmlDeviceGetUtilizationRates") == 1
    # the next reading does not reuse an earlier interval's samples
    backend.device_reading(0, frozenset({"utilization"}))
    assert lib.count("nvmlDeviceGetUtilizationRates") == 2


# Slow values ------------------------------------------------------------------------------


def test_settings_are_read_once_a_minute_and_a_change_shows_after_it(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, clock = started(install, gpu)
    collectors = frozenset({"power", "modes"})
    for _ in range(int(SLOW_REFRESH_SECONDS)):
        reading = backend.device_reading(0, collectors)
        clock.now += 1.0
    assert reading.power is not None and reading.power.limit_watts == pytest.approx(700.0)
    for name in (
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetMigMode",
    ):
        assert lib.count(name, gpu=0) == 1, name
    gpu.power_limit_milliwatts = 600_000  # an administrator lowers the limit
    reading = backend.device_reading(0, collectors)
    assert reading.power is not None and reading.power.limit_watts == pytest.approx(600.0)
    assert lib.count("nvmlDeviceGetEnforcedPowerLimit", gpu=0) == 2


def test_a_slow_value_that_fails_is_absent_and_asked_again(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, clock = started(install, gpu)
    power = frozenset({"power"})
    backend.device_reading(0, power)
    clock.now += SLOW_REFRESH_SECONDS
    gpu.fail["nvmlDeviceGetEnforcedPowerLimit"] = pynvml.NVML_ERROR_NO_PERMISSION
    reading = backend.device_reading(0, power)
    assert reading.power is not None and reading.power.limit_watts is None  # not the old 700
    del gpu.fail["nvmlDeviceGetEnforcedPowerLimit"]
    clock.now += 1.0
    reading = backend.device_reading(0, power)  # not cached while failing: asked again
    assert reading.power is not None and reading.power.limit_watts == pytest.approx(700.0)
    assert lib.count("nvmlDeviceGetEnforcedPowerLimit", gpu=0) == 3


def test_slow_values_are_read_again_after_reinitialisation(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, _clock = started(install, gpu)
    backend.device_reading(0, frozenset({"power"}))
    backend.shutdown()
    gpu.power_limit_milliwatts = 650_000
    backend.init()
    reading = backend.device_reading(0, frozenset({"power"}))
    assert reading.power is not None and reading.power.limit_watts == pytest.approx(650.0)
    assert lib.count("nvmlDeviceGetEnforcedPowerLimit", gpu=0) == 2


def test_slow_values_are_dropped_when_the_device_is_lost(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, _clock = started(install, gpu)
    backend.device_reading(0, frozenset({"power", "memory"}))
    gpu.fail["nvmlDeviceGetMemoryInfo_v2"] = pynvml.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(DeviceLost):
        backend.device_reading(0, frozenset({"power", "memory"}))
    del gpu.fail["nvmlDeviceGetMemoryInfo_v2"]
    backend.device_reading(0, frozenset({"power", "memory"}))
    assert lib.count("nvmlDeviceGetEnforcedPowerLimit", gpu=0) == 2


def test_encoder_and_decoder_are_read_every_interval_only_while_busy(install: Install) -> None:
    gpu = busy_h100()
    gpu.encoder_percent = 12
    lib, backend, clock = started(install, gpu)
    utilization = frozenset({"utilization"})
    for _ in range(10):
        reading = backend.device_reading(0, utilization)
        clock.now += 1.0
    assert reading.utilization is not None and reading.utilization.encoder_ratio == 0.12
    assert reading.utilization.decoder_ratio == 0.0
    assert lib.count("nvmlDeviceGetEncoderUtilization", gpu=0) == 10  # busy
    assert lib.count("nvmlDeviceGetDecoderUtilization", gpu=0) == 1  # idle: once a minute
    gpu.encoder_percent = 0
    backend.device_reading(0, utilization)
    clock.now += 1.0
    backend.device_reading(0, utilization)
    assert lib.count("nvmlDeviceGetEncoderUtilization", gpu=0) == 11


def test_pcie_link_below_its_maximum_is_read_every_interval(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, clock = started(install, gpu)
    backend.device_static(0)
    pcie = frozenset({"pcie"})
    for _ in range(5):
        backend.device_reading(0, pcie)
        clock.now += 1.0
    assert lib.count("nvmlDeviceGetCurrPcieLinkGeneration", gpu=0) == 1  # at max: slow
    clock.now += SLOW_REFRESH_SECONDS
    gpu.pcie_current = (3, 8)  # downtrained
    for _ in range(5):
        reading = backend.device_reading(0, pcie)
        clock.now += 1.0
    assert reading.pcie is not None and (reading.pcie.generation, reading.pcie.width) == (3, 8)
    assert lib.count("nvmlDeviceGetCurrPcieLinkGeneration", gpu=0) == 6
    assert lib.count("nvmlDeviceGetCurrPcieLinkWidth", gpu=0) == 6


def test_graphics_list_while_empty_is_read_once_a_minute_or_for_an_unlisted_pid(
    install: Install,
) -> None:
    gpu = busy_h100(pids=[100])
    lib, backend, clock = started(install, gpu)
    graphics = "nvmlDeviceGetGraphicsRunningProcesses_v3"
    for _ in range(5):
        backend.processes(0)
        clock.now += 1.0
    assert lib.count(graphics, gpu=0) == 1
    gpu.graphics_processes = [(200, 2**20)]  # a renderer starts and works
    gpu.process_samples = [(100, 1, 10, 5), (200, 1, 30, 5)]
    assert backend.process_utilization(0, 0) is not None  # sees PID 200: not listed
    procs = backend.processes(0)
    assert procs is not None and {(p.pid, p.context) for p in procs} == {
        (100, "compute"),
        (200, "graphics"),
    }
    assert lib.count(graphics, gpu=0) == 2
    backend.processes(0)  # not empty: every interval
    assert lib.count(graphics, gpu=0) == 3


def test_an_idle_mig_devices_empty_list_is_read_again_in_the_interval_its_memory_moves(
    install: Install,
) -> None:
    gpu = busy_mig_h100("1 MIG device", busy=False)
    lib, backend, clock = started(install, gpu)
    collectors = frozenset({"mig", "process"})

    def pids() -> list[int]:
        clock.now += 1.0
        backend.device_reading(0, collectors)  # the MIG instances' memory, first
        return [p.pid for p in backend.processes(0) or []]

    assert [pids() for _ in range(10)] == [[]] * 10
    # read while the instance's memory had not yet stood still since the interval
    # before an empty list was read, then not again
    assert lib.count("nvmlDeviceGetComputeRunningProcesses_v3") == 2
    mig = gpu.mig_devices[0]
    mig.processes = [(4242, 2**30)]  # a CUDA process starts: its context takes memory
    mig.memory_bytes = (mig.memory_bytes[0], mig.memory_bytes[1] + 2**30)
    assert pids() == [4242]


def test_limits_are_re_read_every_minute_and_the_identity_once(install: Install) -> None:
    gpu = busy_h100()
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, frozenset({"clocks"}))
    for _ in range(int(SLOW_REFRESH_SECONDS)):
        snapshot = sampler.sample_once()
        clock.now += 1.0
    static = snapshot.devices[0].static
    assert static is not None and static.max_clocks_hertz["sm"] == 1980e6
    gpu.max_clocks_mhz[M.NVML_CLOCK_SM] = 1755
    snapshot = sampler.sample_once()
    sampler.stop(0)
    static = snapshot.devices[0].static
    assert static is not None and static.max_clocks_hertz["sm"] == 1755e6
    assert lib.count("nvmlDeviceGetMaxClockInfo", gpu=0) == 2 * 4
    assert lib.count("nvmlDeviceGetUUID", gpu=0) == 1
    assert lib.count("nvmlDeviceGetName", gpu=0) == 1


def test_re_reading_the_limits_keeps_the_sample_cursors(install: Install) -> None:
    gpu = busy_h100()
    _lib, backend, clock = started(install, gpu)
    asked: list[int] = []
    read_samples = backend.utilization_samples

    def spy(index: int, domain: UtilizationDomain, since_us: int) -> Any:
        asked.append(since_us)
        return read_samples(index, domain, since_us)

    backend.utilization_samples = spy  # type: ignore[method-assign]
    sampler = one_second_sampler(backend, clock, frozenset({"utilization"}))
    for _ in range(int(SLOW_REFRESH_SECONDS) + 2):
        advance(gpu, _us(clock))
        sampler.sample_once()
        clock.now += 1.0
    sampler.stop(0)
    assert asked[:2] == [0, 0]  # the first sample reads the whole buffer
    assert 0 not in asked[2:]  # never again, the minute's static re-read included
