"""Contract tests for issue 20: what a real driver does to the field values and GPM
metrics, and what the exporter makes of it.

Through the real `pynvml` and the fake library (`tests/support/fake_nvml.py`), which was
taught each behaviour first:

- the driver *adds* into an existing `value` for aggregate ECC totals (NVIDIA/go-nvml#46),
  and may leave an entry untouched while the call still answers SUCCESS (nvml.h: SUCCESS
  "if any values in values were populated");
- one entry of a batch may answer UNKNOWN or TIMEOUT while the others are fine.
"""

from __future__ import annotations

import pynvml
import pytest

from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import DeviceReading
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.clock import FakeClock
from tests.support.exporter import parse_samples, values
from tests.support.fake_host import busy_h100
from tests.support.fake_nvml import FakeNvmlLib, Install, h100
from tests.support.fake_sampling import sample_fake, started

M = pynvml
FIELD_COLLECTORS = frozenset({"ecc", "temperature", "power"})
# what one entry of a batch may answer while the others are fine
ENTRY_FAILURES = [(M.NVML_ERROR_UNKNOWN, "unknown"), (M.NVML_ERROR_TIMEOUT, "timeout")]


def readings(
    backend: PynvmlBackend, clock: FakeClock, n: int, collectors: frozenset[str]
) -> list[DeviceReading]:
    backend.device_static(0)  # the NVLink link count
    out = []
    for _ in range(n):
        out.append(backend.device_reading(0, collectors))
        clock.now += 1.0
    return out


# Item 3: the field array is cleared before every call ---------------------------------


def test_the_ecc_total_is_the_drivers_count_every_interval_not_a_growing_sum(
    install: Install,
) -> None:
    gpu = h100()  # corrected (SBE volatile total) 3, added into the value it is given
    lib, backend, clock = started(install, gpu)
    for reading in readings(backend, clock, 4, FIELD_COLLECTORS):
        assert reading.ecc is not None and reading.ecc.corrected_errors == 3
        assert reading.ecc.uncorrected_errors == 0
    assert lib.count("nvmlDeviceGetFieldValues") == 5  # link count + 4: the array is reused


def test_an_entry_the_driver_leaves_unpopulated_is_left_out_neither_stale_nor_zero(
    install: Install,
) -> None:
    gpu = h100()
    _lib, backend, clock = started(install, gpu)
    (first,) = readings(backend, clock, 1, FIELD_COLLECTORS)
    assert first.temperature is not None and first.temperature.memory_celsius == 71.0
    gpu.unpopulated_fields.add(M.NVML_FI_DEV_MEMORY_TEMP)
    second = backend.device_reading(0, FIELD_COLLECTORS)
    assert second.temperature is not None and second.temperature.memory_celsius is None
    assert second.ecc is not None and second.ecc.corrected_errors == 3  # the others stay
    assert backend.errors.snapshot() == {("nvmlDeviceGetFieldValues", "unknown"): 1}


# Item 8: one bad entry leaves one value out, not the GPU ------------------------------


@pytest.mark.parametrize(("code", "name"), ENTRY_FAILURES)
def test_a_field_answering_unknown_or_timeout_leaves_only_that_field_out(
    install: Install, code: int, name: str
) -> None:
    gpu = h100()
    gpu.field_errors[M.NVML_FI_DEV_ECC_SBE_VOL_TOTAL] = code
    lib, backend, clock = started(install, gpu)
    for reading in readings(backend, clock, 2, FIELD_COLLECTORS):  # no DeviceLost
        assert reading.ecc is not None and reading.ecc.corrected_errors is None
        assert reading.ecc.uncorrected_errors == 0
        assert reading.temperature is not None and reading.temperature.memory_celsius == 71.0
    assert M.NVML_FI_DEV_ECC_SBE_VOL_TOTAL in lib.field_requests[-1]  # asked again
    assert backend.errors.snapshot() == {("nvmlDeviceGetFieldValues", name): 2}


@pytest.mark.parametrize(("code", "name"), ENTRY_FAILURES)
def test_a_gpm_metric_answering_unknown_or_timeout_leaves_only_that_metric_out(
    install: Install, code: int, name: str
) -> None:
    gpu = busy_h100()
    gpu.gpm_errors[M.NVML_GPM_METRIC_SM_OCCUPANCY] = code
    _lib, backend, clock = started(install, gpu)
    *_, last = readings(backend, clock, 3, frozenset({"gpm"}))
    assert last.gpm is not None
    assert last.gpm.sm_occupancy_ratio is None
    assert last.gpm.sm_ratio == pytest.approx(0.40)
    assert backend.errors.snapshot() == {("nvmlGpmMetricsGet", name): 2}  # 2 metric calls


def test_a_bad_field_keeps_the_gpu_up_and_is_counted_in_the_exposition(
    install: Install,
) -> None:
    gpu = h100()
    gpu.field_errors[M.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION] = M.NVML_ERROR_UNKNOWN
    install(FakeNvmlLib([gpu]))
    snapshot = sample_fake({"power", "ecc"})
    text = Exposition(snapshot).body(openmetrics=False, compressed=False).decode()
    samples = parse_samples(text)
    assert values(samples, "gpu_up") == [1.0]
    assert values(samples, "gpu_power_watts") == [pytest.approx(512.345)]
    assert values(samples, "gpu_energy_joules_total") == []
    errors = values(
        samples,
        "gpu_exporter_nvml_errors_total",
        function="nvmlDeviceGetFieldValues",
        error="unknown",
    )
    assert errors and errors[0] >= 1


def test_a_failed_field_values_call_populated_nothing_and_nothing_is_read(
    install: Install,
) -> None:
    """The call answers SUCCESS "if any values in values were populated" (nvml.h): any
    other answer means none was, so no entry is read (not last interval's either)."""
    gpu = h100()
    _lib, backend, clock = started(install, gpu)
    (first,) = readings(backend, clock, 1, FIELD_COLLECTORS)
    assert first.ecc is not None and first.ecc.corrected_errors == 3
    gpu.fail["nvmlDeviceGetFieldValues"] = M.NVML_ERROR_INVALID_ARGUMENT
    second = backend.device_reading(0, FIELD_COLLECTORS)
    assert second.ecc is not None and second.ecc.corrected_errors is None
    assert second.temperature is not None and second.temperature.memory_celsius is None
    assert second.temperature.gpu_celsius == 64.0  # the device is still read
    assert backend.errors.snapshot() == {("nvmlDeviceGetFieldValues", "invalid_argument"): 1}
