"""Contract tests: GPM, MIG and NVLink through the real `pynvml` and a fake library.

As in `test_nvml_contract.py`, only libnvidia-ml is replaced (`tests/support/fake_nvml.py`):
pynvml's wrappers, structures (`c_nvmlGpmMetricsGet_t`, `c_nvmlFieldValue_t` with its
`scopeId`, `c_nvmlProcessInfo_v3_t`) and exception classes are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable

import pynvml
import pytest

from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import DeviceReading
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.nvml import PynvmlBackend
from gpu_exporter.sources.nvml.backend import SLOW_REFRESH_SECONDS
from gpu_exporter.sources.nvml.mig import REFRESH_SECONDS, profile_of
from tests.support.clock import FakeClock
from tests.support.fake_host import GPM_VALUES, nvlinked
from tests.support.fake_nvml import (
    NOT_FOUND,
    NOT_SUPPORTED,
    FakeGpu,
    FakeMigDevice,
    FakeNvmlLib,
    Install,
    h100,
    old_fanless,
)
from tests.support.fake_sampling import sample_fake, started

M = pynvml
GPM_ON = frozenset({"gpm"})
GIB = 2**30


def hopper(index: int = 0) -> FakeGpu:
    """An H100 with GPM: every metric at a known percent (or MiB/s)."""
    gpu = h100(index)
    gpu.gpm_supported = True
    gpu.gpm = dict(GPM_VALUES)
    return gpu


def readings(
    backend: PynvmlBackend, clock: FakeClock, n: int, collectors: frozenset[str] = GPM_ON
) -> list[DeviceReading]:
    out = []
    for _ in range(n):
        out.append(backend.device_reading(0, collectors))
        clock.now += 1.0
    return out


# GPM ----------------------------------------------------------------------------------


def test_gpm_between_two_samples_in_base_units(install: Install) -> None:
    _lib, backend, clock = started(install, hopper())
    first, second = readings(backend, clock, 2)
    assert first.gpm is None  # one sample: nothing to compare yet
    g = second.gpm
    assert g is not None and g.elapsed_seconds == 1.0
    assert (g.graphics_engine_ratio, g.sm_ratio) == pytest.approx((0.90, 0.40))
    assert (g.sm_occupancy_ratio, g.dram_ratio) == pytest.approx((0.25, 0.30))
    assert g.pipe_ratios == pytest.approx(
        {"tensor": 0.55, "fp64": 0.0, "fp32": 0.10, "fp16": 0.20, "integer": 0.05}
    )
    assert g.pcie_bytes_per_second == {"tx": 100.0 * 2**20, "rx": 300.0 * 2**20}
    assert g.nvlink_bytes_per_second == {"tx": 1000.0 * 2**20, "rx": 2000.0 * 2**20}
    assert backend.errors.snapshot() == {}


def test_gpus_asking_for_different_metrics_each_get_their_own_answers(
    install: Install,
) -> None:
    """One metrics request serves every stream a thread reads (nvml.h sizes it for 477
    metrics): read in turn, a GPU that lacks a metric and one that has it each get their
    own ids asked and their own answers, interval after interval."""
    full, lacking = hopper(0), hopper(1)
    del lacking.gpm[M.NVML_GPM_METRIC_DRAM_BW_UTIL]  # NOT_SUPPORTED on that one
    lacking.gpm[M.NVML_GPM_METRIC_SM_UTIL] = 70.0
    lib, backend, clock = started(install, full, lacking)
    for interval in range(4):
        first, second = backend.device_reading(0, GPM_ON), backend.device_reading(1, GPM_ON)
        clock.now += 1.0
        if interval == 0:
            assert first.gpm is None and second.gpm is None
            continue
        assert first.gpm is not None and second.gpm is not None
        assert (first.gpm.sm_ratio, first.gpm.dram_ratio) == pytest.approx((0.40, 0.30))
        assert second.gpm.sm_ratio == pytest.approx(0.70)
        assert second.gpm.dram_ratio is None  # not supported: absent, never 0
    asked = lib.gpm_requests
    dram = M.NVML_GPM_METRIC_DRAM_BW_UTIL
    assert all(dram in ids for ids in asked[0::2])  # the full GPU's, every interval
    assert dram in asked[1] and all(dram not in ids for ids in asked[3::2])  # asked once
    assert backend.errors.snapshot() == {}


def test_gpm_unsupported_device_has_no_gpm_and_is_asked_once(install: Install) -> None:
    lib, backend, clock = started(install, old_fanless(0))
    assert all(r.gpm is None for r in readings(backend, clock, 4))
    assert lib.count("nvmlGpmQueryDeviceSupport") == 1
    assert lib.count("nvmlGpmSampleAlloc") == 0
    assert backend.errors.snapshot() == {}


def test_driver_without_gpm_functions_has_no_gpm(install: Install) -> None:
    gpu = hopper()
    lib = install(FakeNvmlLib([gpu], missing={"nvmlGpmQueryDeviceSupport"}))
    backend = PynvmlBackend()
    backend.init()
    for _ in range(3):
        assert backend.device_reading(0, GPM_ON).gpm is None
    assert lib.count("nvmlGpmSampleAlloc") == 0
    assert backend.errors.snapshot() == {}


def test_two_samples_are_allocated_once_and_reused_two_calls_per_interval(
    install: Install,
) -> None:
    lib, backend, clock = started(install, hopper())
    readings(backend, clock, 10)
    assert lib.count("nvmlGpmSampleAlloc") == 2
    assert lib.count("nvmlGpmSampleGet") == 10
    assert lib.count("nvmlGpmMetricsGet") == 9
    assert lib.live_gpm_samples() == 2


def test_gpm_samples_are_freed_at_shutdown_and_reinitialisation(install: Install) -> None:
    lib, backend, clock = started(install, hopper())
    readings(backend, clock, 3)
    backend.shutdown()
    assert lib.live_gpm_samples() == 0
    backend.init()  # the driver came back: new samples, freed again at the end
    readings(backend, clock, 3)
    assert lib.live_gpm_samples() == 2
    backend.shutdown()
    assert lib.live_gpm_samples() == 0
    assert lib.count("nvmlGpmSampleAlloc") == lib.count("nvmlGpmSampleFree") == 4


def test_a_failing_metric_is_left_out_and_the_others_stay(install: Install) -> None:
    gpu = hopper()
    gpu.gpm_errors = {
        M.NVML_GPM_METRIC_SM_OCCUPANCY: NOT_SUPPORTED,
        M.NVML_GPM_METRIC_DRAM_BW_UTIL: M.NVML_ERROR_NO_PERMISSION,
    }
    lib, backend, clock = started(install, gpu)
    *_, last = readings(backend, clock, 4)
    assert last.gpm is not None
    assert last.gpm.sm_occupancy_ratio is None and last.gpm.dram_ratio is None
    assert last.gpm.sm_ratio == pytest.approx(0.40)
    assert last.gpm.pipe_ratios["tensor"] == pytest.approx(0.55)
    # NOT_SUPPORTED is not asked again; another error is counted and asked again
    assert M.NVML_GPM_METRIC_SM_OCCUPANCY in lib.gpm_requests[0]
    assert all(M.NVML_GPM_METRIC_SM_OCCUPANCY not in ids for ids in lib.gpm_requests[1:])
    assert all(M.NVML_GPM_METRIC_DRAM_BW_UTIL in ids for ids in lib.gpm_requests)
    assert backend.errors.snapshot() == {("nvmlGpmMetricsGet", "no_permission"): 3}


def test_a_metric_left_out_is_asked_again_at_the_reprobe_and_comes_back(
    install: Install,
) -> None:
    gpu = hopper()
    gpu.gpm_errors = {M.NVML_GPM_METRIC_SM_OCCUPANCY: NOT_SUPPORTED}
    lib, backend, clock = started(install, gpu)
    readings(backend, clock, 3)
    assert [M.NVML_GPM_METRIC_SM_OCCUPANCY in ids for ids in lib.gpm_requests] == [
        True,
        False,
    ]
    gpu.gpm_errors = {}  # e.g. after a mode change: the driver answers it again
    clock.now += SLOW_REFRESH_SECONDS
    *_, last = readings(backend, clock, 3)
    assert M.NVML_GPM_METRIC_SM_OCCUPANCY in lib.gpm_requests[-1]
    assert M.NVML_GPM_METRIC_SM_OCCUPANCY in lib.gpm_requests[-2]  # asked at the re-probe
    assert last.gpm is not None and last.gpm.sm_occupancy_ratio is not None
    assert len(lib.gpm_requests[-1]) == len(lib.gpm_requests[0])  # every metric again


def test_a_failing_sample_leaves_a_gap_not_a_made_up_value(install: Install) -> None:
    gpu = hopper()
    _lib, backend, clock = started(install, gpu)
    readings(backend, clock, 2)
    gpu.fail["nvmlGpmSampleGet"] = M.NVML_ERROR_NO_PERMISSION
    failed = readings(backend, clock, 1)[0]
    assert failed.gpm is None
    del gpu.fail["nvmlGpmSampleGet"]
    after = readings(backend, clock, 2)
    assert after[0].gpm is None  # the gap is not bridged: the next pair starts afresh
    assert after[1].gpm is not None and after[1].gpm.elapsed_seconds == 1.0
    assert backend.errors.snapshot() == {("nvmlGpmSampleGet", "no_permission"): 1}


def test_a_lost_gpu_during_gpm_is_device_lost(install: Install) -> None:
    from gpu_exporter.sources.backend import DeviceLost

    gpu = hopper()
    _lib, backend, clock = started(install, gpu)
    readings(backend, clock, 1)
    gpu.fail["nvmlGpmSampleGet"] = M.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(DeviceLost):
        backend.device_reading(0, GPM_ON)


def run_sampler(
    install: Install, sm: Callable[[int], float] | float, seconds: int = 10
) -> tuple[float, float]:
    """(sm active seconds, wall seconds) after `seconds` one-second samples."""
    gpu = hopper()
    gpu.gpm[M.NVML_GPM_METRIC_SM_UTIL] = sm
    install(FakeNvmlLib([gpu]))
    clock = FakeClock()
    sampler = Sampler(
        PynvmlBackend(monotonic=clock.monotonic),
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=GPM_ON,
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    first = sampler.sample_once()
    for _ in range(seconds):
        clock.now += 1.0
        last = sampler.sample_once()
    sampler.stop(0)
    start = first.devices[0].activity
    end = last.devices[0].activity
    assert end is not None and end.sm_seconds is not None
    return end.sm_seconds - (start.sm_seconds or 0.0 if start else 0.0), float(seconds)


def test_counter_rate_of_a_constant_activity_is_that_activity(install: Install) -> None:
    active, wall = run_sampler(install, 37.0)
    assert active / wall == pytest.approx(0.37, abs=0.02)


def test_counter_rate_of_a_square_wave_is_its_mean(install: Install) -> None:
    # on for one interval, off for the next: GPM reports each interval's own mean
    active, wall = run_sampler(install, lambda interval: 100.0 if interval % 2 else 0.0)
    assert active / wall == pytest.approx(0.5, abs=0.02)


# MIG ----------------------------------------------------------------------------------


def mig_h100() -> FakeGpu:
    """An H100 in MIG mode: three MIG devices in sparse slots, two sharing a GPU instance."""
    gpu = hopper()
    gpu.mig = (M.NVML_DEVICE_MIG_ENABLE, M.NVML_DEVICE_MIG_ENABLE)
    gpu.utilization_percent = None  # NOT_SUPPORTED on a MIG parent, as the driver answers
    gpu.samples = {}
    gpu.process_samples = None
    gpu.compute_processes = [(4242, 0)]  # the parent's list: no memory under MIG
    name = "NVIDIA H100 80GB HBM3 MIG "
    gpu.mig_devices = [
        FakeMigDevice(0, 2, 0, "MIG-a", name + "3g.40gb", (40 * GIB, 30 * GIB), [(4242, 29 * GIB)]),
        FakeMigDevice(3, 2, 1, "MIG-b", name + "3g.40gb", (40 * GIB, 30 * GIB), [(5353, GIB)]),
        FakeMigDevice(5, 9, 0, "MIG-c", name + "1g.10gb", (10 * GIB, 0), []),
    ]
    gpu.mig_devices[0].gpm = {
        M.NVML_GPM_METRIC_SM_UTIL: 80.0,
        M.NVML_GPM_METRIC_GRAPHICS_UTIL: 95.0,
    }
    gpu.mig_devices[2].gpm = {M.NVML_GPM_METRIC_SM_UTIL: 0.0, M.NVML_GPM_METRIC_GRAPHICS_UTIL: 0.0}
    return gpu


def test_mig_devices_are_enumerated_over_sparse_slots(install: Install) -> None:
    lib, backend, _clock = started(install, mig_h100())
    reading = backend.device_reading(0, frozenset({"mig"}))
    assert reading.mig is not None
    assert [
        (m.uuid, m.gpu_instance, m.compute_instance, m.profile) for m in reading.mig.devices
    ] == [
        ("MIG-a", 2, 0, "3g.40gb"),
        ("MIG-b", 2, 1, "3g.40gb"),
        ("MIG-c", 9, 0, "1g.10gb"),
    ]
    assert lib.count("nvmlDeviceGetMigDeviceHandleByIndex") == 7  # every slot asked
    assert backend.errors.snapshot() == {}  # the empty slots' NOT_FOUND is no error


def test_mig_memory_is_per_gpu_instance(install: Install) -> None:
    _lib, backend, _clock = started(install, mig_h100())
    reading = backend.device_reading(0, frozenset({"mig"}))
    assert reading.mig is not None
    memory = {
        gi: (i.memory_total_bytes, i.memory_used_bytes) for gi, i in reading.mig.instances.items()
    }
    assert memory == {2: (40 * GIB, 30 * GIB), 9: (10 * GIB, 0)}


def test_mig_enumeration_is_cached_and_refreshed(install: Install) -> None:
    lib, backend, clock = started(install, mig_h100())
    backend.device_reading(0, frozenset({"mig"}))
    clock.now += 1
    backend.device_reading(0, frozenset({"mig"}))
    assert lib.count("nvmlDeviceGetMigDeviceHandleByIndex") == 7
    clock.now += REFRESH_SECONDS
    backend.device_reading(0, frozenset({"mig"}))
    assert lib.count("nvmlDeviceGetMigDeviceHandleByIndex") == 14


def test_mig_processes_come_from_each_mig_device_with_their_instances(install: Install) -> None:
    lib, backend, _clock = started(install, mig_h100())
    processes = backend.processes(0)
    assert processes is not None
    assert [
        (p.pid, p.used_memory_bytes, p.gpu_instance, p.compute_instance) for p in processes
    ] == [(4242, 29 * GIB, 2, 0), (5353, GIB, 2, 1)]
    assert lib.count("nvmlDeviceGetComputeRunningProcesses_v3", gpu=0) > 0
    # the parent's own list (no memory under MIG) is not used
    parent_calls = [
        args
        for (name, _gpu), args in lib.calls.items()
        if name == "nvmlDeviceGetGraphicsRunningProcesses_v3"
    ]
    assert parent_calls == []


def test_mig_gpm_per_gpu_instance(install: Install) -> None:
    lib, backend, clock = started(install, mig_h100())
    both = frozenset({"mig", "gpm"})
    backend.device_reading(0, both)
    clock.now += 1
    reading = backend.device_reading(0, both)
    assert reading.mig is not None
    busy, idle = reading.mig.instances[2].gpm, reading.mig.instances[9].gpm
    assert busy is not None and idle is not None
    assert (busy.sm_ratio, busy.graphics_engine_ratio) == pytest.approx((0.80, 0.95))
    assert (idle.sm_ratio, idle.graphics_engine_ratio) == (0.0, 0.0)
    assert busy.pcie_bytes_per_second == {}  # bus traffic is the whole GPU's
    assert lib.count("nvmlGpmMigSampleGet") == 4  # two instances, two intervals
    backend.shutdown()
    assert lib.live_gpm_samples() == 0


def test_the_mig_parent_stays_up_without_utilization(install: Install) -> None:
    lib = install(FakeNvmlLib([mig_h100()]))
    snapshot = sample_fake({"utilization", "memory", "mig", "process"})
    (device,) = snapshot.devices
    assert device.up
    assert device.reading is not None and device.reading.utilization is not None
    assert device.reading.utilization.gpu_ratio is None
    assert device.busy_seconds is None  # neither the sample buffer nor a reading
    assert snapshot.nvml_errors == {}  # NOT_SUPPORTED is no error
    assert lib.count("nvmlDeviceGetUtilizationRates") == 1  # remembered, not asked again
    assert snapshot.stages["devices"].success


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb"),
        ("NVIDIA A30 MIG 2g.12gb+me", "2g.12gb+me"),
        ("NVIDIA H100 80GB HBM3", ""),
        (None, ""),
    ],
)
def test_mig_profile_is_read_from_the_device_name(name: str | None, profile: str) -> None:
    assert profile_of(name) == profile


# NVLink -------------------------------------------------------------------------------


NVLINK = frozenset({"nvlink"})


def test_nvlink_links_state_and_errors_in_one_field_values_call(install: Install) -> None:
    gpu = nvlinked()
    gpu.fields[(M.NVML_FI_DEV_NVLINK_GET_STATE, 5)] = 0  # link 5 is down
    lib, backend, _clock = started(install, gpu)
    assert backend.device_static(0).nvlink_links == 18
    before = lib.count("nvmlDeviceGetFieldValues")
    reading = backend.device_reading(0, NVLINK)
    assert lib.count("nvmlDeviceGetFieldValues") == before + 1  # one batch, not one per link
    assert reading.nvlink is not None
    links = reading.nvlink.links
    assert sorted(links) == list(range(18))
    assert links[5].up is False and links[4].up is True
    assert links[3].errors == {"replay": 3, "recovery": 0, "crc_flit": 6, "crc_data": 7}
    assert links[15].errors == {"replay": 15, "recovery": 0, "crc_flit": 30, "crc_data": 7}
    scopes = set(lib.field_scopes[-1])
    assert (M.NVML_FI_DEV_NVLINK_GET_STATE, 17) in scopes
    assert (M.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 0) in scopes
    # without GPM the bytes come from the driver's data counters, summed over the links
    assert reading.nvlink.data_bytes == {"tx": 18 * 1000 * 1024.0, "rx": 18 * 3000 * 1024.0}
    # the error counters summed over the 18 links, the down one included
    replay = sum(range(18))
    totals = {"replay": replay, "recovery": 0, "crc_flit": 2 * replay, "crc_data": 18 * 7}
    assert reading.nvlink.error_totals == totals
    assert backend.errors.snapshot() == {}


def test_with_gpm_nvlink_bytes_come_from_gpm_not_the_data_counters(install: Install) -> None:
    lib, backend, _clock = started(install, nvlinked(gpm=True))
    backend.device_static(0)
    reading = backend.device_reading(0, NVLINK | GPM_ON)
    assert reading.nvlink is not None and reading.nvlink.data_bytes == {}
    requested = {field_id for field_id, _scope in lib.field_scopes[-1]}
    assert M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX not in requested


def test_a_board_without_nvlink_has_no_nvlink_reading_and_no_per_link_fields(
    install: Install,
) -> None:
    lib, backend, _clock = started(install, h100())
    assert backend.device_static(0).nvlink_links is None
    reading = backend.device_reading(0, NVLINK)
    assert reading.nvlink is None
    assert all(scope == 0 for batch in lib.field_scopes for _field, scope in batch)


def test_a_failing_link_field_is_left_out_and_counted(install: Install) -> None:
    gpu = nvlinked(2)
    gpu.field_errors[(M.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 1)] = M.NVML_ERROR_NO_PERMISSION
    gpu.field_errors[(M.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 0)] = NOT_SUPPORTED
    lib, backend, _clock = started(install, gpu)
    backend.device_static(0)
    for _ in range(2):
        reading = backend.device_reading(0, NVLINK)
    assert reading.nvlink is not None
    assert "recovery" not in reading.nvlink.links[1].errors
    assert "crc_flit" not in reading.nvlink.links[0].errors
    assert reading.nvlink.links[0].errors["recovery"] == 0
    assert backend.errors.snapshot() == {("nvmlDeviceGetFieldValues", "no_permission"): 2}
    last = set(lib.field_scopes[-1])
    assert (M.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 0) not in last  # NOT_SUPPORTED: not asked again
    assert (M.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 1) in last


def test_an_error_total_is_left_out_while_a_link_that_counted_it_does_not_answer(
    install: Install,
) -> None:
    """A sum over the links that answered would step back (a counter reset to Prometheus,
    whose increase() would count the next value whole): the type is left out instead,
    and comes back at the driver's value. Ports that never answer (no bridge) are not
    waited for."""
    gpu = nvlinked(6)
    for port in (4, 5):  # bridged on links 0-3 only: no error counters on 4 and 5
        gpu.fields[(M.NVML_FI_DEV_NVLINK_GET_STATE, port)] = 0
        for field_id in (
            M.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
            M.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
            M.NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
        ):
            gpu.field_errors[(field_id, port)] = NOT_SUPPORTED
        del gpu.nvlink_error_counters[(port, M.NVML_NVLINK_ERROR_DL_CRC_DATA)]
    _lib, backend, clock = started(install, gpu)
    backend.device_static(0)
    every = {"replay": 6, "recovery": 0, "crc_flit": 12, "crc_data": 28}  # links 0-3
    (first,) = readings(backend, clock, 1, NVLINK)
    assert first.nvlink is not None and first.nvlink.error_totals == every
    # link 2's recovery counter fails to read; link 3 goes down and its flit-CRC field
    # answers NOT_SUPPORTED from then on (its data-CRC counter is re-read once a minute)
    gpu.field_errors[(M.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 2)] = M.NVML_ERROR_UNKNOWN
    gpu.fields[(M.NVML_FI_DEV_NVLINK_GET_STATE, 3)] = 0
    gpu.field_errors[(M.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 3)] = NOT_SUPPORTED
    gpu.fields[(M.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 0)] = 4  # link 0 counts 4 replays
    (failed,) = readings(backend, clock, 1, NVLINK)
    assert failed.nvlink is not None
    assert failed.nvlink.error_totals == {"replay": 10, "crc_data": 28}
    # link 2 answers again and link 3 comes back: the totals return, none smaller
    del gpu.field_errors[(M.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 2)]
    del gpu.field_errors[(M.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 3)]
    gpu.fields[(M.NVML_FI_DEV_NVLINK_GET_STATE, 3)] = 1
    clock.now += 120.0  # NOT_SUPPORTED answers are asked again after a slow period
    *_, back = readings(backend, clock, 2, NVLINK)
    assert back.nvlink is not None
    assert back.nvlink.error_totals == {**every, "replay": 10}


def test_an_empty_mig_slot_answers_not_found(install: Install) -> None:
    """Pins the driver behaviour the enumeration relies on."""
    install(FakeNvmlLib([mig_h100()]))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError) as caught:
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 1)
    assert caught.value.value == NOT_FOUND
    pynvml.nvmlShutdown()


def test_gpm_series_are_absent_on_gpus_without_gpm_never_zero(install: Install) -> None:
    install(FakeNvmlLib([old_fanless(0), hopper(1)]))
    snapshot = sample_fake({"gpm", "nvlink", "mig", "memory"})
    text = Exposition(snapshot).body(openmetrics=False, compressed=False).decode()
    assert 'gpu_sm_active_seconds_total{gpu="1"' in text
    assert 'gpu_sm_active_seconds_total{gpu="0"' not in text
    assert 'gpu_pipe_active_seconds_total{gpu="0"' not in text
    assert "gpu_nvlink_link_up" not in text and "gpu_mig_info" not in text  # neither has them
    assert 'gpu_memory_used_bytes{gpu="0"' in text
