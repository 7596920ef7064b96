"""Contract tests for issue 20 (items 3, 6, 7, 8): what a real driver does to the field
values and GPM metrics, and what the exporter makes of it.

Through the real `pynvml` and the fake library (`tests/support/fake_nvml.py`), which was
taught each behaviour first:

- the driver *adds* into an existing `value` for aggregate ECC totals (NVIDIA/go-nvml#46),
  and may leave an entry untouched while the call still answers SUCCESS (nvml.h: SUCCESS
  "if any values in values were populated");
- one entry of a batch may answer UNKNOWN or TIMEOUT while the others are fine;
- Hopper's legacy per-lane data-CRC fields (39-44, 102-107) answer SUCCESS with a false 0,
  and there is none for links 12-17; the scoped error fields (161-163) are unsupported on
  Blackwell and later (nvml.h); nvmlDeviceGetNvLinkErrorCounter has every counter per link;
- an inactive NVLink port answers NOT_SUPPORTED for its data counters, while scopeId
  UINT_MAX gives the "aggregate value summed up across all links" (nvml.h).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import DeviceReading
from gpu_exporter.sources.backend import SLOW_REFRESH_SECONDS
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.clock import FakeClock
from tests.support.exporter import fake_library_env, parse_samples, values
from tests.support.fake_host import busy_h100, nvlinked
from tests.support.fake_nvml import NOT_SUPPORTED, FakeGpu, FakeNvmlLib, Install, h100
from tests.support.fake_sampling import sample_fake, started

M = pynvml
ALL_LINKS = 0xFFFFFFFF  # scopeId UINT_MAX
KIB = 1024
NVLINK = frozenset({"nvlink"})
GPM_NVLINK = frozenset({"nvlink", "gpm"})
FIELD_COLLECTORS = frozenset({"ecc", "temperature", "power"})
LINK_FIELDS = (
    M.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    M.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
    M.NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
)
# what one entry of a batch may answer while the others are fine
ENTRY_FAILURES = [(M.NVML_ERROR_UNKNOWN, "unknown"), (M.NVML_ERROR_TIMEOUT, "timeout")]
COUNTERS = {
    "replay": M.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": M.NVML_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": M.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    "crc_data": M.NVML_NVLINK_ERROR_DL_CRC_DATA,
}


def inactive(gpu: FakeGpu, link: int) -> None:
    """An unbridged port: state inactive, data counters NOT_SUPPORTED."""
    gpu.fields[(M.NVML_FI_DEV_NVLINK_GET_STATE, link)] = 0
    for field_id in (
        M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    ):
        gpu.field_errors[(field_id, link)] = NOT_SUPPORTED


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


# Item 6: NVLink error counters the driver really has ----------------------------------


def test_hopper_data_crc_errors_come_from_the_error_counter_on_every_link(
    install: Install,
) -> None:
    lib, backend, clock = started(install, nvlinked())
    (reading,) = readings(backend, clock, 1, NVLINK)
    assert reading.nvlink is not None
    links = reading.nvlink.links
    assert {link: s.errors.get("crc_data") for link, s in links.items()} == dict.fromkeys(
        range(18), 7
    )  # not the legacy fields' 0 on links 0-11, and links 12-17 too
    assert links[3].errors == {"replay": 3, "recovery": 0, "crc_flit": 6, "crc_data": 7}
    legacy = {
        M.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0,
        M.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L11,
    }
    assert not legacy & set(lib.field_requests[-1])


def test_a_data_crc_counter_the_driver_cannot_give_is_absent_never_zero(
    install: Install,
) -> None:
    gpu = nvlinked()
    gpu.nvlink_error_counters.clear()  # NOT_SUPPORTED; the legacy fields still say 0
    lib, backend, clock = started(install, gpu)
    (reading,) = readings(backend, clock, 1, NVLINK)
    clock.now += SLOW_REFRESH_SECONDS
    again = backend.device_reading(0, NVLINK)
    for r in (reading, again):
        assert r.nvlink is not None
        assert all("crc_data" not in s.errors for s in r.nvlink.links.values())
        assert r.nvlink.links[2].errors == {"replay": 2, "recovery": 0, "crc_flit": 4}
    # asked once per link per slow period: a NOT_SUPPORTED answer is asked again then
    assert lib.count("nvmlDeviceGetNvLinkErrorCounter") == 36
    backend.device_reading(0, NVLINK)
    assert lib.count("nvmlDeviceGetNvLinkErrorCounter") == 36  # not every interval
    assert backend.errors.snapshot() == {}


def test_blackwell_link_errors_come_from_the_error_counter_where_the_fields_are_unsupported(
    install: Install,
) -> None:
    gpu = nvlinked()
    for link in range(18):
        for field_id in LINK_FIELDS:
            gpu.field_errors[(field_id, link)] = NOT_SUPPORTED  # nvml.h: Blackwell+
        for i, counter in enumerate(COUNTERS.values()):
            gpu.nvlink_error_counters[(link, counter)] = 10 * link + i
    _lib, backend, clock = started(install, gpu)
    (reading,) = readings(backend, clock, 1, NVLINK)
    assert reading.nvlink is not None
    assert reading.nvlink.links[17].errors == {
        "replay": 170,
        "recovery": 171,
        "crc_flit": 172,
        "crc_data": 173,
    }


def test_link_error_counters_are_read_on_the_slow_cadence(install: Install) -> None:
    """One call per link and counter would break the call budget every interval
    (test_nvml_efficiency_contract): they are read every SLOW_REFRESH_SECONDS."""
    gpu = nvlinked()
    lib, backend, clock = started(install, gpu)
    *_, last = readings(backend, clock, 5, NVLINK)
    assert lib.count("nvmlDeviceGetNvLinkErrorCounter") == 18
    gpu.nvlink_error_counters[(7, M.NVML_NVLINK_ERROR_DL_CRC_DATA)] = 9
    assert last.nvlink is not None and last.nvlink.links[7].errors["crc_data"] == 7
    clock.now += SLOW_REFRESH_SECONDS
    later = backend.device_reading(0, NVLINK)
    assert lib.count("nvmlDeviceGetNvLinkErrorCounter") == 36
    assert later.nvlink is not None and later.nvlink.links[7].errors["crc_data"] == 9


# Item 7: NVLink bytes on partially bridged boards --------------------------------------


def test_an_inactive_port_leaves_the_byte_total_of_the_others(install: Install) -> None:
    gpu = nvlinked(12)
    inactive(gpu, 3)
    lib, backend, clock = started(install, gpu)
    (reading,) = readings(backend, clock, 1, NVLINK)
    assert reading.nvlink is not None
    assert reading.nvlink.data_bytes == {"tx": 11 * 1000 * KIB, "rx": 11 * 3000 * KIB}
    assert reading.nvlink.links[3].up is False
    scopes = set(lib.field_scopes[-1])
    assert (M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS) in scopes  # the aggregate
    assert (M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0) not in scopes  # not per link
    assert backend.errors.snapshot() == {}


def test_without_the_aggregate_the_active_links_are_summed(install: Install) -> None:
    gpu = nvlinked(12)
    gpu.nvlink_aggregate = False  # a driver without scopeId UINT_MAX
    inactive(gpu, 3)
    lib, backend, clock = started(install, gpu)
    _first, second, third = readings(backend, clock, 3, NVLINK)
    for reading in (second, third):
        assert reading.nvlink is not None
        assert reading.nvlink.data_bytes == {"tx": 11 * 1000 * KIB, "rx": 11 * 3000 * KIB}
    scopes = set(lib.field_scopes[-1])
    assert (M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS) not in scopes  # not again
    assert (M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0) in scopes


def test_an_active_link_without_a_data_counter_leaves_that_total_out(install: Install) -> None:
    gpu = nvlinked(4)
    gpu.nvlink_aggregate = False
    gpu.field_errors[(M.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 2)] = M.NVML_ERROR_NO_PERMISSION
    _lib, backend, clock = started(install, gpu)
    *_, last = readings(backend, clock, 2, NVLINK)
    assert last.nvlink is not None
    assert last.nvlink.data_bytes == {"rx": 4 * 3000 * KIB}  # a partial tx would understate


@pytest.mark.parametrize(
    ("unsupported", "from_counters"),
    [
        (
            {M.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, M.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC},
            {"tx", "rx"},
        ),
        ({M.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC}, {"rx"}),
    ],
)
def test_gpm_without_nvlink_metrics_falls_back_to_the_data_counters(
    install: Install, unsupported: set[int], from_counters: set[str]
) -> None:
    gpu = nvlinked(gpm=True)
    for metric in unsupported:
        gpu.gpm_errors[metric] = NOT_SUPPORTED
    _lib, backend, clock = started(install, gpu)
    *_, last = readings(backend, clock, 4, GPM_NVLINK)
    assert last.nvlink is not None and last.gpm is not None
    totals = {"tx": 18 * 1000 * KIB, "rx": 18 * 3000 * KIB}
    assert last.nvlink.data_bytes == {d: totals[d] for d in from_counters}
    assert set(last.gpm.nvlink_bytes_per_second) == {"tx", "rx"} - from_counters


def test_a_partially_bridged_board_exports_its_nvlink_bytes(install: Install) -> None:
    gpu = nvlinked(12)
    for link in range(4, 12):  # bridged on links 0-3 only
        inactive(gpu, link)
    install(FakeNvmlLib([gpu]))
    snapshot = sample_fake({"nvlink"})
    samples = parse_samples(Exposition(snapshot).body(openmetrics=False, compressed=False).decode())
    assert values(samples, "gpu_nvlink_bytes_total", direction="tx") == [4 * 1000 * KIB]
    assert values(samples, "gpu_nvlink_bytes_total", direction="rx") == [4 * 3000 * KIB]


# End to end: the program against the fake libnvidia-ml --------------------------------


@pytest.mark.e2e
def test_once_against_the_fake_library_reports_the_drivers_counters(tmp_path: Path) -> None:
    """`--once` samples twice into the same field array: the ECC total stays the
    driver's (the fake adds into a reused value), and every NVLink link has a data-CRC
    counter from the error-counter call (per link: `--collector.nvlink.per-link`)."""
    ran = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "--once", "--collector.nvlink.per-link"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=fake_library_env(1),
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    samples = parse_samples(ran.stdout)
    assert values(samples, "gpu_up") == [1.0]
    assert values(samples, "gpu_ecc_errors_total", error_type="corrected") == [3.0]
    crc_data = values(samples, "gpu_nvlink_errors_total", error_type="crc_data")
    assert crc_data == [0.0] * 18  # links 12-17 too
