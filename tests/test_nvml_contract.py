"""Contract tests: `PynvmlBackend` through the real `pynvml` module and a fake library.

Only the shared library is replaced (`pynvml.nvmlLib`, see `tests/support/fake_nvml.py`);
every wrapper, ctypes structure and exception class is pynvml's own, so the error mapping
is tested against what pynvml really raises.
"""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from gpu_exporter.model import THROTTLE_REASONS
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.backend import DeviceLost, NvmlUnavailable
from gpu_exporter.sources.nvml import PynvmlBackend, fields
from tests.support.fake_nvml import (
    NOT_FOUND,
    NOT_SUPPORTED,
    FakeGpu,
    FakeNvmlLib,
    Install,
    h100,
    old_fanless,
)

ALL_COLLECTORS = frozenset(
    {"utilization", "memory", "temperature", "power", "clocks", "pcie", "ecc", "modes"}
)
GPU_SAMPLES = pynvml.NVML_GPU_UTILIZATION_SAMPLES
MEM_SAMPLES = pynvml.NVML_MEMORY_UTILIZATION_SAMPLES


@pytest.fixture
def host(install: Install) -> FakeNvmlLib:
    """An H100 and an old fanless Tesla on one driver."""
    return install(FakeNvmlLib([h100(0), old_fanless(1)]))


@pytest.fixture
def backend(host: FakeNvmlLib) -> Iterator[PynvmlBackend]:
    b = PynvmlBackend()
    b.init()
    yield b
    b.shutdown()


# Initialisation ------------------------------------------------------------------------


def test_missing_library_is_nvml_unavailable_naming_libnvidia_ml(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_library(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "CDLL", no_library)

    with pytest.raises(NvmlUnavailable) as caught:
        PynvmlBackend().init()

    assert caught.value.error == "library_not_found"
    assert "libnvidia-ml.so.1" in caught.value.reason
    assert isinstance(caught.value.__cause__, pynvml.NVMLError_LibraryNotFound)
    assert pynvml.nvmlLib is None


@pytest.mark.parametrize(
    ("code", "error", "cause"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver_not_loaded", "Driver Not Loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "lib_rm_version_mismatch", "version"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no_permission", "Insufficient Permissions"),
    ],
)
def test_init_failure_is_nvml_unavailable_with_error_and_reason(
    install: Install, code: int, error: str, cause: str
) -> None:
    lib = install(FakeNvmlLib([h100()], fail={"nvmlInitWithFlags": code}))

    with pytest.raises(NvmlUnavailable) as caught:
        PynvmlBackend().init()

    assert caught.value.error == error
    assert cause in caught.value.reason
    assert isinstance(caught.value.__cause__, pynvml.NVMLError)
    assert caught.value.__cause__.value == code
    assert lib.count("nvmlInitWithFlags") == 1


def test_init_then_shutdown_balances_the_library(host: FakeNvmlLib) -> None:
    b = PynvmlBackend()
    b.init()
    assert host.initialised == 1
    b.shutdown()
    b.shutdown()  # idempotent
    assert host.initialised == 0


def test_driver_info_formats_cuda_version(backend: PynvmlBackend) -> None:
    info = backend.driver_info()
    assert info.driver_version == "550.54.15"
    assert info.cuda_driver_version == "12.4"


def test_driver_info_without_cuda_function_is_none(install: Install) -> None:
    install(FakeNvmlLib([h100()], missing={"nvmlSystemGetCudaDriverVersion_v2"}))
    b = PynvmlBackend()
    b.init()
    info = b.driver_info()
    assert info.cuda_driver_version is None
    assert info.driver_version == "550.54.15"
    assert b.errors.snapshot() == {}


# Static facts --------------------------------------------------------------------------


def test_device_static_of_h100_in_base_units(backend: PynvmlBackend) -> None:
    assert backend.device_count() == 2
    s = backend.device_static(0)
    assert s.index == 0
    assert s.uuid == "GPU-h100-0"
    assert s.name == "NVIDIA H100 80GB HBM3"
    assert s.pci_bus_id == "00000000:18:00.0"
    assert s.serial == "1654922001234"
    assert s.vbios_version == "96.00.89.00.01"
    assert s.compute_capability == "9.0"
    assert s.max_clocks_hertz == {
        "graphics": 1980e6,
        "sm": 1980e6,
        "memory": 2619e6,
        "video": 1545e6,
    }
    assert s.slowdown_temperature_celsius == 87.0
    assert s.shutdown_temperature_celsius == 92.0
    assert s.pcie_max_generation == 5
    assert s.pcie_max_width == 16


def test_device_static_of_old_board_leaves_unsupported_facts_out(
    backend: PynvmlBackend,
) -> None:
    s = backend.device_static(1)
    assert s.uuid == "GPU-k80-1"
    assert s.name == "Tesla K80"
    assert s.serial is None  # "0" means no serial
    assert s.compute_capability == "3.7"
    assert s.max_clocks_hertz == {"graphics": 875e6, "memory": 2505e6}
    assert s.slowdown_temperature_celsius is None
    assert s.shutdown_temperature_celsius is None
    assert s.pcie_max_generation is None
    assert backend.errors.snapshot() == {}


def test_device_without_uuid_is_lost(install: Install) -> None:
    gpu = h100()
    gpu.fail["nvmlDeviceGetUUID"] = NOT_SUPPORTED
    install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    with pytest.raises(DeviceLost):
        b.device_static(0)


# Readings ------------------------------------------------------------------------------


def test_device_reading_of_h100_in_base_units(backend: PynvmlBackend) -> None:
    r = backend.device_reading(0, ALL_COLLECTORS)
    assert r.utilization.gpu_ratio == pytest.approx(0.87)
    assert r.utilization.memory_controller_ratio == pytest.approx(0.41)
    assert r.utilization.encoder_ratio == pytest.approx(0.03)
    assert r.utilization.decoder_ratio == 0.0
    assert r.memory.total_bytes == 85_520_809_984
    assert r.memory.reserved_bytes == 593_494_016
    assert r.memory.used_bytes == 42_949_672_960
    assert r.memory.free_bytes == 41_977_643_008
    assert r.temperature.gpu_celsius == 64.0
    assert r.temperature.memory_celsius == 71.0
    assert r.temperature.fan_speed_ratio is None
    assert r.power.watts == pytest.approx(512.345)
    assert r.power.limit_watts == pytest.approx(700.0)
    assert r.power.energy_joules == pytest.approx(123_456.789)
    assert r.clocks.hertz == {"graphics": 1755e6, "sm": 1755e6, "memory": 2619e6, "video": 1260e6}
    assert r.clocks.performance_state == 0
    assert r.clocks.throttle_reasons is not None
    assert {k for k, v in r.clocks.throttle_reasons.items() if v} == {"sw_power_cap"}
    assert set(r.clocks.throttle_reasons) == set(THROTTLE_REASONS)
    assert r.pcie.generation == 5
    assert r.pcie.width == 16
    assert r.pcie.replay_errors == 7
    assert r.ecc.corrected_errors == 3
    assert r.ecc.uncorrected_errors == 0
    assert r.ecc.retired_pages_single_bit == 0
    assert r.ecc.retired_pages_double_bit == 0
    assert r.ecc.retired_pages_pending is False
    assert r.ecc.remapped_rows_correctable == 2
    assert r.ecc.remapped_rows_uncorrectable == 1
    assert r.ecc.remapped_rows_pending is True
    assert r.ecc.remapped_rows_failed is False
    assert r.modes.persistence is True
    assert r.modes.mig is False
    assert r.modes.ecc is True
    assert backend.errors.snapshot() == {}


@pytest.mark.parametrize(
    ("mask", "active"),
    [
        (0, set()),
        (pynvml.nvmlClocksEventReasonGpuIdle, {"gpu_idle"}),
        (
            pynvml.nvmlClocksEventReasonHwThermalSlowdown
            | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
            {"hw_thermal_slowdown", "hw_power_brake_slowdown"},
        ),
        (pynvml.nvmlClocksEventReasonSwThermalSlowdown, {"sw_thermal_slowdown"}),
        (pynvml.nvmlClocksEventReasonSyncBoost, {"sync_boost"}),
        (pynvml.nvmlClocksEventReasonApplicationsClocksSetting, {"applications_clocks_setting"}),
        (pynvml.nvmlClocksEventReasonDisplayClockSetting, {"display_clock_setting"}),
        (pynvml.nvmlClocksEventReasonHwSlowdown, {"hw_slowdown"}),
    ],
)
def test_clocks_event_mask_maps_onto_throttle_reasons(
    install: Install, mask: int, active: set[str]
) -> None:
    gpu = h100()
    gpu.clocks_event_reasons = mask
    install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    reasons = b.device_reading(0, frozenset({"clocks"})).clocks.throttle_reasons
    assert reasons is not None
    assert {k for k, v in reasons.items() if v} == active


def test_old_board_reading_leaves_unsupported_values_out(backend: PynvmlBackend) -> None:
    r = backend.device_reading(1, ALL_COLLECTORS)
    assert r.utilization.gpu_ratio == pytest.approx(0.12)
    assert r.utilization.encoder_ratio is None
    assert r.utilization.decoder_ratio is None
    assert r.temperature.fan_speed_ratio is None
    assert r.temperature.memory_celsius is None
    assert r.power.energy_joules is None
    assert r.clocks.throttle_reasons is None
    assert r.clocks.performance_state is None  # NVML_PSTATE_UNKNOWN
    assert r.pcie.generation is None
    assert r.ecc.corrected_errors is None
    assert r.modes.persistence is None
    assert r.modes.mig is None
    assert r.modes.ecc is False
    assert r.clocks.hertz == {"graphics": 562e6, "memory": 2505e6}
    assert r.power.watts == pytest.approx(58.0)
    assert backend.errors.snapshot() == {}


def test_only_enabled_collectors_touch_the_driver(
    backend: PynvmlBackend, host: FakeNvmlLib
) -> None:
    r = backend.device_reading(0, frozenset({"temperature"}))
    assert r.temperature.gpu_celsius == 64.0
    assert r.temperature.memory_celsius == 71.0
    assert r.power is None
    assert host.count("nvmlDeviceGetPowerUsage") == 0
    assert host.field_requests == [[pynvml.NVML_FI_DEV_MEMORY_TEMP]]


def test_pcie_throughput_only_when_asked_in_bytes_per_second(
    backend: PynvmlBackend, host: FakeNvmlLib
) -> None:
    r = backend.device_reading(0, ALL_COLLECTORS)
    assert r.pcie_throughput is None
    assert host.count("nvmlDeviceGetPcieThroughput") == 0  # ~20 ms per call in the driver
    r = backend.device_reading(0, ALL_COLLECTORS | {"pcie-throughput"})
    assert r.pcie_throughput.tx_bytes_per_second == pytest.approx(1.25e9)
    assert r.pcie_throughput.rx_bytes_per_second == pytest.approx(31e6)
    r = backend.device_reading(1, frozenset({"pcie-throughput"}))
    assert r.pcie_throughput.tx_bytes_per_second is None
    assert r.pcie_throughput.rx_bytes_per_second is None


# NOT_SUPPORTED and FUNCTION_NOT_FOUND are remembered ---------------------------------


def test_not_supported_is_none_and_not_asked_again(
    backend: PynvmlBackend, host: FakeNvmlLib
) -> None:
    for _ in range(3):
        r = backend.device_reading(1, ALL_COLLECTORS)
        assert r.utilization.encoder_ratio is None
        assert r.temperature.gpu_celsius == 41.0
    assert host.count("nvmlDeviceGetEncoderUtilization", gpu=1) == 1
    assert host.count("nvmlDeviceGetCurrentClocksEventReasons", gpu=1) == 1
    assert host.count("nvmlDeviceGetFanSpeed", gpu=1) == 1
    assert host.count("nvmlDeviceGetTemperature", gpu=1) == 3
    # The other device is asked independently.
    backend.device_reading(0, ALL_COLLECTORS)
    assert host.count("nvmlDeviceGetEncoderUtilization", gpu=0) == 1


def test_function_missing_from_library_is_none_and_not_asked_again(install: Install) -> None:
    lib = install(
        FakeNvmlLib(
            [h100()],
            missing={
                "nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons",  # neither name: no reasons
                "nvmlDeviceGetMemoryInfo_v2",
            },
        )
    )
    b = PynvmlBackend()
    b.init()
    for _ in range(3):
        r = b.device_reading(0, ALL_COLLECTORS)
        assert r.clocks.throttle_reasons is None
        # An old driver without the v2 memory call falls back to v1: no reservation.
        assert r.memory.reserved_bytes is None
        assert r.memory.used_bytes == 42_949_672_960
        assert r.memory.total_bytes == 85_520_809_984
    assert lib.count("nvmlDeviceGetMemoryInfo") == 3
    assert lib.count("nvmlDeviceGetMemoryInfo_v2") == 0  # never resolved
    assert b.errors.snapshot() == {}


def test_function_missing_is_raised_by_pynvml_as_function_not_found(install: Install) -> None:
    """Pins the pynvml behaviour the backend relies on."""
    install(FakeNvmlLib([h100()], missing={"nvmlDeviceGetFanSpeed"}))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetFanSpeed(handle)
    pynvml.nvmlShutdown()


_V3_PROCESS_CALLS = {
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
}
_V2_PROCESS_CALLS = {
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
}


def test_unversioned_process_wrapper_raises_library_mismatch_not_nvml_error(
    install: Install,
) -> None:
    """Pins why the backend must not call pynvml's unversioned process wrappers bare."""
    install(FakeNvmlLib([h100()], missing=_V3_PROCESS_CALLS))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLLibraryMismatchError):
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)
    pynvml.nvmlShutdown()


def test_old_driver_without_v3_process_calls_falls_back_to_v2(install: Install) -> None:
    gpu = h100()
    gpu.compute_processes = [(4242, 2**30)]
    gpu.graphics_processes = [(777, 2**20)]
    lib = install(FakeNvmlLib([gpu], missing=_V3_PROCESS_CALLS))
    b = PynvmlBackend()
    b.init()
    for _ in range(2):
        procs = b.processes(0)
        assert procs is not None
        assert [(p.pid, p.context, p.used_memory_bytes) for p in procs] == [
            (4242, "compute", 2**30),
            (777, "graphics", 2**20),
        ]
    assert lib.count("nvmlDeviceGetComputeRunningProcesses_v2") == 2  # one call, twice
    assert b.errors.snapshot() == {}


def test_driver_without_any_process_call_reports_no_process_list(install: Install) -> None:
    lib = install(FakeNvmlLib([h100()], missing=_V3_PROCESS_CALLS | _V2_PROCESS_CALLS))
    b = PynvmlBackend()
    b.init()
    assert b.processes(0) is None
    assert b.processes(0) is None
    assert lib.count("nvmlDeviceGetComputeRunningProcesses_v2") == 0
    assert b.errors.snapshot() == {}
    assert b.device_reading(0, frozenset({"temperature"})).temperature.gpu_celsius == 64.0


# Field values --------------------------------------------------------------------------


def test_field_values_are_fetched_in_one_call_per_reading(
    backend: PynvmlBackend, host: FakeNvmlLib
) -> None:
    first = backend.device_reading(0, ALL_COLLECTORS)
    second = backend.device_reading(0, ALL_COLLECTORS)
    assert host.count("nvmlDeviceGetFieldValues", gpu=0) == 2
    # with the power draw (average and instant), the 10 PCIe error counters, and the
    # counters (energy, ECC, PCIe) that the first reading asks for
    assert len(host.field_requests[0]) == 25
    # the next reading, straight after, asks for neither the fields this H100 lacks nor
    # the counters, not yet due (`counter_fields.py`): it serves the values last read
    absent = {pynvml.NVML_FI_DEV_POWER_AVERAGE, pynvml.NVML_FI_DEV_POWER_INSTANT}
    counters = {pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL}
    assert counters <= set(host.field_requests[0])
    assert not counters & set(host.field_requests[1])
    assert host.field_requests[1] == [
        f for f in host.field_requests[0] if f not in absent and f in host.field_requests[1]
    ]
    assert second.power is not None and first.power is not None
    assert second.power.energy_joules == first.power.energy_joules is not None
    assert second.pcie == first.pcie and second.ecc == first.ecc


def test_field_not_supported_drops_only_that_field_and_is_not_requested_again(
    install: Install,
) -> None:
    gpu = h100()
    gpu.field_errors[pynvml.NVML_FI_DEV_MEMORY_TEMP] = NOT_SUPPORTED
    del gpu.fields[pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER]  # also NOT_SUPPORTED
    lib = install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()

    first = b.device_reading(0, ALL_COLLECTORS)
    second = b.device_reading(0, ALL_COLLECTORS)

    for r in (first, second):
        assert r.temperature.memory_celsius is None
        assert r.pcie.replay_errors is None
        assert r.power.energy_joules == pytest.approx(123_456.789)
        assert r.ecc.corrected_errors == 3
        assert r.temperature.gpu_celsius == 64.0
    assert pynvml.NVML_FI_DEV_MEMORY_TEMP in lib.field_requests[0]
    assert pynvml.NVML_FI_DEV_MEMORY_TEMP not in lib.field_requests[1]
    assert pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER not in lib.field_requests[1]
    # this H100's driver predates the power fields: they are dropped too; the counters
    # are not due again yet (`counter_fields.py`), their values served from the first
    counters = {int(r.field_id) for r in fields.counter_requests(ALL_COLLECTORS, 560)}
    assert set(lib.field_requests[0]) - set(lib.field_requests[1]) - counters == {
        pynvml.NVML_FI_DEV_MEMORY_TEMP,
        pynvml.NVML_FI_DEV_POWER_AVERAGE,
        pynvml.NVML_FI_DEV_POWER_INSTANT,
    }
    assert pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER in counters
    assert b.errors.snapshot() == {}


def test_double_typed_field_value_is_read_as_double(install: Install) -> None:
    gpu = h100()
    gpu.fields[pynvml.NVML_FI_DEV_MEMORY_TEMP] = 70.5
    install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    assert b.device_reading(0, frozenset({"temperature"})).temperature.memory_celsius == 70.5


def test_field_with_other_error_is_counted_and_asked_again(install: Install) -> None:
    gpu = h100()
    gpu.field_errors[pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION] = pynvml.NVML_ERROR_NO_PERMISSION
    lib = install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    for _ in range(2):
        r = b.device_reading(0, frozenset({"power"}))
        assert r.power.energy_joules is None
        assert r.power.watts == pytest.approx(512.345)
    energy = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    power = [pynvml.NVML_FI_DEV_POWER_AVERAGE, pynvml.NVML_FI_DEV_POWER_INSTANT]
    # power fields unsupported here; the failed counter is asked again the next interval
    assert lib.field_requests == [[*power, energy], [energy]]
    assert b.errors.snapshot() == {("nvmlDeviceGetFieldValues", "no_permission"): 2}


def test_field_reporting_gpu_lost_loses_the_device(install: Install) -> None:
    gpu = h100()
    gpu.field_errors[pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL] = pynvml.NVML_ERROR_GPU_IS_LOST
    install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    with pytest.raises(DeviceLost) as caught:
        b.device_reading(0, frozenset({"ecc"}))
    assert caught.value.error == "gpu_is_lost"


def test_field_values_call_not_supported_is_not_repeated(install: Install) -> None:
    gpu = h100()
    gpu.fail["nvmlDeviceGetFieldValues"] = NOT_SUPPORTED
    lib = install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    for _ in range(2):
        r = b.device_reading(0, ALL_COLLECTORS)
        assert r.power.energy_joules is None
        assert r.modes.ecc is None
        assert r.power.watts == pytest.approx(512.345)
    assert lib.count("nvmlDeviceGetFieldValues") == 1


# Errors that take a device or NVML down ---------------------------------------------


@pytest.mark.parametrize(
    ("code", "error", "exception_class"),
    [
        (pynvml.NVML_ERROR_GPU_IS_LOST, "gpu_is_lost", "NVMLError_GpuIsLost"),
        (pynvml.NVML_ERROR_UNKNOWN, "unknown", "NVMLError_Unknown"),
        (pynvml.NVML_ERROR_TIMEOUT, "timeout", "NVMLError_Timeout"),
    ],
)
def test_lost_device_errors_raise_device_lost(
    install: Install, code: int, error: str, exception_class: str
) -> None:
    lost = h100(0)
    lost.fail["nvmlDeviceGetTemperature"] = code
    install(FakeNvmlLib([lost, h100(1)]))
    b = PynvmlBackend()
    b.init()
    with pytest.raises(DeviceLost) as caught:
        b.device_reading(0, ALL_COLLECTORS)
    assert caught.value.error == error
    assert "nvmlDeviceGetTemperature" in caught.value.reason
    assert type(caught.value.__cause__) is getattr(pynvml, exception_class)
    # The other device keeps answering.
    assert b.device_reading(1, ALL_COLLECTORS).temperature.gpu_celsius == 64.0


def test_handle_lookup_failure_is_device_lost(install: Install) -> None:
    gpu = h100()
    gpu.fail["nvmlDeviceGetHandleByIndex_v2"] = pynvml.NVML_ERROR_GPU_IS_LOST
    install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    with pytest.raises(DeviceLost):
        b.device_static(0)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (pynvml.NVML_ERROR_UNINITIALIZED, "uninitialized"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver_not_loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "lib_rm_version_mismatch"),
    ],
)
def test_nvml_down_mid_run_raises_nvml_unavailable(install: Install, code: int, error: str) -> None:
    gpu = h100()
    lib = install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    assert b.device_reading(0, ALL_COLLECTORS).power.watts == pytest.approx(512.345)

    gpu.fail["nvmlDeviceGetPowerUsage"] = code
    with pytest.raises(NvmlUnavailable) as caught:
        b.device_reading(0, ALL_COLLECTORS)
    assert caught.value.error == error

    lib.fail["nvmlDeviceGetCount_v2"] = code
    with pytest.raises(NvmlUnavailable) as caught:
        b.device_count()
    assert caught.value.error == error


def test_other_errors_are_counted_and_the_field_is_none(install: Install) -> None:
    gpu = h100()
    gpu.fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NO_PERMISSION
    gpu.fail["nvmlDeviceGetEnforcedPowerLimit"] = pynvml.NVML_ERROR_CORRUPTED_INFOROM
    lib = install(FakeNvmlLib([gpu]))
    b = PynvmlBackend()
    b.init()
    for _ in range(2):
        r = b.device_reading(0, ALL_COLLECTORS)
        assert r.power.watts is None
        assert r.power.limit_watts is None
        assert r.temperature.gpu_celsius == 64.0
    # Not remembered as unsupported: the condition may clear.
    assert lib.count("nvmlDeviceGetPowerUsage") == 2
    assert b.errors.snapshot() == {
        ("nvmlDeviceGetPowerUsage", "no_permission"): 2,
        ("nvmlDeviceGetEnforcedPowerLimit", "corrupted_inforom"): 2,
    }
    del gpu.fail["nvmlDeviceGetPowerUsage"]
    assert b.device_reading(0, ALL_COLLECTORS).power.watts == pytest.approx(512.345)


# Sample buffers ------------------------------------------------------------------------


def test_utilization_samples_newer_than_since_sorted(
    backend: PynvmlBackend, host: FakeNvmlLib
) -> None:
    # A ring buffer as the driver keeps it: wrapped around, not in time order.
    host.gpus[0].samples[GPU_SAMPLES] = [
        (1_400_000, 0),
        (1_500_000, 50),
        (1_100_000, 100),
        (1_200_000, 100),
        (1_300_000, 25),
    ]
    samples = backend.utilization_samples(0, "gpu", 1_150_000)
    assert samples is not None
    assert [(s.timestamp_us, s.ratio) for s in samples] == [
        (1_200_000, 1.0),
        (1_300_000, 0.25),
        (1_400_000, 0.0),
        (1_500_000, 0.5),
    ]
    everything = backend.utilization_samples(0, "gpu", 0)
    assert everything is not None
    assert len(everything) == 5


def test_samples_are_filtered_even_when_the_driver_returns_the_whole_buffer(
    install: Install,
) -> None:
    gpu = h100()
    gpu.samples[GPU_SAMPLES] = [(2_000_000, 10), (1_000_000, 90), (3_000_000, 20)]
    gpu.process_samples = [(4242, 2_000_000, 95, 30), (4343, 1_000_000, 10, 5)]
    install(FakeNvmlLib([gpu], filters_by_timestamp=False))
    b = PynvmlBackend()
    b.init()
    samples = b.utilization_samples(0, "gpu", 1_000_000)
    assert samples is not None
    assert [(s.timestamp_us, s.ratio) for s in samples] == [(2_000_000, 0.1), (3_000_000, 0.2)]
    assert b.utilization_samples(0, "gpu", 3_000_000) == []
    procs = b.process_utilization(0, 1_500_000)
    assert procs is not None
    assert [p.pid for p in procs] == [4242]


def test_utilization_samples_with_nothing_new_is_empty(
    backend: PynvmlBackend, host: FakeNvmlLib
) -> None:
    host.gpus[0].samples[MEM_SAMPLES] = [(1_000_000, 40)]
    assert backend.utilization_samples(0, "memory_controller", 1_000_000) == []
    assert backend.utilization_samples(0, "memory_controller", 1_000_000) == []
    assert host.count("nvmlDeviceGetSamples", gpu=0) == 2  # asked again: not unsupported
    assert backend.errors.snapshot() == {}


def test_utilization_samples_not_supported_is_none_and_not_asked_again(
    backend: PynvmlBackend, host: FakeNvmlLib
) -> None:
    assert backend.utilization_samples(1, "gpu", 0) is None
    assert backend.utilization_samples(1, "gpu", 0) is None
    assert host.count("nvmlDeviceGetSamples", gpu=1) == 1


def test_processes_from_compute_and_graphics_lists(
    backend: PynvmlBackend, host: FakeNvmlLib
) -> None:
    host.gpus[0].compute_processes = [(4242, 40 * 2**30), (4343, 512 * 2**20)]
    host.gpus[0].graphics_processes = [(777, 64 * 2**20)]
    procs = backend.processes(0)
    assert procs is not None
    assert [(p.pid, p.context, p.used_memory_bytes) for p in procs] == [
        (4242, "compute", 40 * 2**30),
        (4343, "compute", 512 * 2**20),
        (777, "graphics", 64 * 2**20),
    ]
    host.gpus[0].compute_processes = []
    host.gpus[0].graphics_processes = []
    assert backend.processes(0) == []


def test_processes_not_supported_is_none(backend: PynvmlBackend, host: FakeNvmlLib) -> None:
    assert backend.processes(1) is None
    assert backend.processes(1) is None
    assert host.count("nvmlDeviceGetComputeRunningProcesses_v3", gpu=1) == 1


def test_process_utilization_newer_than_since(backend: PynvmlBackend, host: FakeNvmlLib) -> None:
    host.gpus[0].process_samples = [(4242, 2_000_000, 95, 30), (4343, 1_000_000, 10, 5)]
    samples = backend.process_utilization(0, 1_500_000)
    assert samples is not None
    assert [(s.pid, s.timestamp_us, s.sm_ratio, s.memory_controller_ratio) for s in samples] == [
        (4242, 2_000_000, pytest.approx(0.95), pytest.approx(0.30))
    ]
    assert backend.process_utilization(0, 2_000_000) == []  # NOT_FOUND: nothing newer
    assert backend.process_utilization(1, 0) is None
    assert backend.process_utilization(1, 0) is None
    assert host.count("nvmlDeviceGetProcessUtilization", gpu=1) == 1
    assert backend.errors.snapshot() == {}


# Through the sampler -------------------------------------------------------------------


def _sampler(backend: PynvmlBackend, collectors: frozenset[str] = ALL_COLLECTORS) -> Sampler:
    return Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=collectors,
        clock=lambda: 1_700_000_000.0,
    )


def test_sampler_snapshot_keeps_a_healthy_gpu_when_another_is_lost(install: Install) -> None:
    lost = old_fanless(1)
    lib = install(FakeNvmlLib([h100(0), lost]))
    sampler = _sampler(PynvmlBackend())
    try:
        first = sampler.sample_once()
        assert first.nvml_up
        assert first.driver is not None
        assert first.driver.cuda_driver_version == "12.4"
        assert [d.up for d in first.devices] == [True, True]

        lost.fail["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_GPU_IS_LOST
        second = sampler.sample_once()
    finally:
        sampler.stop()

    assert second.nvml_up
    healthy, down = second.devices
    assert healthy.up
    assert healthy.reading is not None
    assert healthy.reading.temperature.gpu_celsius == 64.0
    assert healthy.reading.power.watts == pytest.approx(512.345)
    assert not down.up
    assert down.reading is None
    assert down.uuid == "GPU-k80-1"
    assert down.down_reason is not None
    assert "nvmlDeviceGetTemperature" in down.down_reason
    assert lib.initialised == 0  # stop() shut NVML down


def test_sampler_reports_nvml_down_when_the_driver_goes_away(install: Install) -> None:
    lib = install(FakeNvmlLib([h100(0)]))
    sampler = _sampler(PynvmlBackend())
    try:
        assert sampler.sample_once().nvml_up
        lib.fail["nvmlDeviceGetCount_v2"] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
        snapshot = sampler.sample_once()
    finally:
        sampler.stop()
    assert not snapshot.nvml_up
    assert snapshot.devices == ()
    assert snapshot.nvml_down_reason is not None
    assert "Driver Not Loaded" in snapshot.nvml_down_reason


def test_sampler_busy_seconds_integrate_the_driver_buffer_exactly(install: Install) -> None:
    gpu = h100(0)
    t0 = 5_000_000_000
    gpu.samples[GPU_SAMPLES] = [(t0 - 166_667, 30), (t0, 40)]
    gpu.samples[MEM_SAMPLES] = [(t0, 10)]
    lib = install(FakeNvmlLib([gpu]))
    sampler = _sampler(PynvmlBackend(), frozenset({"utilization"}))
    try:
        first = sampler.sample_once()
        # The first sample only sets the cursor: history before the counter is not counted.
        assert first.devices[0].busy_seconds == 0.0
        assert first.devices[0].memory_controller_busy_seconds == 0.0

        # 100% for 0.5 s, then idle for 0.5 s; the memory controller 50% for 1 s.
        gpu.samples[GPU_SAMPLES] += [
            (t0 + 250_000, 100),
            (t0 + 500_000, 100),
            (t0 + 750_000, 0),
            (t0 + 1_000_000, 0),
        ]
        gpu.samples[MEM_SAMPLES] += [(t0 + 1_000_000, 50)]
        second = sampler.sample_once()

        # Nothing newer: NOT_FOUND, and the counters hold.
        third = sampler.sample_once()
    finally:
        sampler.stop()

    assert second.devices[0].busy_seconds == pytest.approx(0.5)
    assert second.devices[0].memory_controller_busy_seconds == pytest.approx(0.5)
    assert third.devices[0].busy_seconds == pytest.approx(0.5)
    assert third.nvml_errors == {}
    # The sampler asked for entries newer than its cursor, so none was counted twice.
    assert lib.count("nvmlDeviceGetSamples", gpu=0) >= 4


def _utilization_sampler(now: list[float]) -> Sampler:
    """A sampler of the utilization collector whose monotonic clock is `now[0]`."""
    return Sampler(
        PynvmlBackend(),
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=frozenset({"utilization"}),
        monotonic=lambda: now[0],
    )


def _entries(t0: int, start_s: float, end_s: float, percent: int) -> list[tuple[int, int]]:
    """Driver entries every 1/6 s in (start_s, end_s] after t0, as the ring holds them."""
    ticks = range(int(start_s * 6) + 1, int(end_s * 6) + 1)
    return [(t0 + round(k * 1e6 / 6), percent) for k in ticks]


def test_sampler_counts_a_dry_buffer_as_uncovered_not_busy(install: Install) -> None:
    # The driver adds no entries while the GPU idles and answers NOT_FOUND (seen on GB10):
    # idle 10 s with no entries, then busy 10 s, twice over 40 s.
    gpu = h100(0)
    t0 = 5_000_000_000
    gpu.samples[GPU_SAMPLES] = _entries(t0, -1.0, 0.0, 0)
    gpu.samples[MEM_SAMPLES] = _entries(t0, -1.0, 0.0, 0)
    install(FakeNvmlLib([gpu]))
    now = [100.0]
    sampler = _utilization_sampler(now)
    try:
        first = sampler.sample_once().devices[0]
        for second in range(1, 41):
            if 10 <= second - 1 < 20 or 30 <= second - 1 < 40:
                gpu.samples[GPU_SAMPLES] += _entries(t0, second - 1, second, 100)
                gpu.samples[MEM_SAMPLES] += _entries(t0, second - 1, second, 50)
            now[0] += 1.0
            last = sampler.sample_once()
    finally:
        sampler.stop()
    device = last.devices[0]
    assert last.nvml_errors == {}  # NOT_FOUND is an empty buffer, not an error
    assert first.busy_seconds == 0.0
    assert device.busy_seconds is not None
    assert device.busy_seconds == pytest.approx(20.0, abs=3.0)  # not 40
    assert device.busy_uncovered_seconds == pytest.approx(40.0 - device.busy_seconds)
    assert device.memory_controller_busy_seconds == pytest.approx(10.0, abs=1.5)  # not 20
    assert device.memory_controller_busy_uncovered_seconds == pytest.approx(20.0, abs=1.0)


def test_sampler_counts_entries_lost_to_a_wrapped_buffer_as_uncovered(install: Install) -> None:
    gpu = h100(0)
    t0 = 5_000_000_000
    gpu.samples[GPU_SAMPLES] = _entries(t0, -1.0, 0.0, 100)
    install(FakeNvmlLib([gpu]))
    sampler = _sampler(PynvmlBackend(), frozenset({"utilization"}))
    try:
        sampler.sample_once()
        # 30 s of full load before the next read; the driver keeps its newest 100 entries.
        gpu.samples[GPU_SAMPLES] = _entries(t0, 0.0, 30.0, 100)[-100:]
        device = sampler.sample_once().devices[0]
    finally:
        sampler.stop()
    assert device.busy_seconds == pytest.approx(100 / 6, abs=0.2)  # not 30
    assert device.busy_uncovered_seconds == pytest.approx(30.0 - 100 / 6, abs=0.2)


def test_sampler_integrates_the_reading_where_the_buffer_is_not_supported(
    install: Install,
) -> None:
    gpu: FakeGpu = old_fanless(0)
    install(FakeNvmlLib([gpu]))
    now = [100.0]
    sampler = _utilization_sampler(now)
    try:
        sampler.sample_once()
        now[0] += 2.0
        snapshot = sampler.sample_once()
    finally:
        sampler.stop()
    assert snapshot.devices[0].busy_seconds == pytest.approx(0.12 * 2.0)
    assert snapshot.devices[0].memory_controller_busy_seconds == pytest.approx(0.05 * 2.0)


def test_sampler_counts_other_errors_in_the_snapshot(install: Install) -> None:
    gpu = h100(0)
    gpu.fail["nvmlDeviceGetFanSpeed"] = pynvml.NVML_ERROR_NO_PERMISSION
    install(FakeNvmlLib([gpu]))
    sampler = _sampler(PynvmlBackend())
    try:
        sampler.sample_once()
        snapshot = sampler.sample_once()
    finally:
        sampler.stop()
    assert snapshot.devices[0].up
    assert snapshot.nvml_errors == {("nvmlDeviceGetFanSpeed", "no_permission"): 2}


def test_fake_library_rejects_unknown_functions(install: Install) -> None:
    lib = install(FakeNvmlLib([h100()]))
    assert not hasattr(lib, "nvmlDeviceGetNotARealFunction")
    assert NOT_FOUND == pynvml.NVML_ERROR_NOT_FOUND
