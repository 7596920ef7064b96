"""Contract tests: Blackwell's NVLink5 counters and platform info, through the real
`pynvml` and a fake library that answers as nvml.h 13 says a GB200 does.

Each NVLink5 counter is given its own value on the fake (`NVLINK5_VALUES`, link L answers
value + L), so a counter read under the wrong id, name or unit shows as a wrong number in
the exposition. An H100 keeps answering the legacy fields and has no NVLink5 series.
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.metrics.specs import RenderOptions
from gpu_exporter.model import NVLINK5_ERRORS, NVLINK_LEGACY_ERRORS, Snapshot
from gpu_exporter.sources.nvml import PynvmlBackend, nvlink5, platform
from tests.support.clock import FakeClock
from tests.support.exporter import parse_samples, values
from tests.support.fake_host import nvlinked
from tests.support.fake_nvml import (
    NVLINK5_VALUES,
    R580,
    FakeGpu,
    FakeNvmlLib,
    FakePlatform,
    Install,
    gb200,
    h100,
)
from tests.support.fake_sampling import one_second_sampler, sample_fake, started

M = pynvml
LINKS = 18
NVLINK = frozenset({"nvlink"})
UUID = "GPU-gb200-0"


def _sum_over_links(field_id: int) -> int:
    return sum(NVLINK5_VALUES[field_id] + link for link in range(LINKS))


# nvml.h 13's field -> (metric, its label, the label's value): the contract of each counter
COUNTERS: dict[int, tuple[str, str, str]] = {
    206: ("gpu_nvlink_errors_total", "error_type", "malformed_packet"),
    207: ("gpu_nvlink_errors_total", "error_type", "buffer_overrun"),
    208: ("gpu_nvlink_errors_total", "error_type", "rx"),
    209: ("gpu_nvlink_errors_total", "error_type", "rx_remote"),
    210: ("gpu_nvlink_errors_total", "error_type", "rx_general"),
    211: ("gpu_nvlink_errors_total", "error_type", "local_link_integrity"),
    212: ("gpu_nvlink_errors_total", "error_type", "tx_discard"),
    219: ("gpu_nvlink_errors_total", "error_type", "effective"),
    221: ("gpu_nvlink_errors_total", "error_type", "symbol"),
    213: ("gpu_nvlink_link_recovery_events_total", "result", "successful"),
    214: ("gpu_nvlink_link_recovery_events_total", "result", "failed"),
    215: ("gpu_nvlink_link_recovery_events_total", "result", "all"),
}


def _exposition(snapshot: Snapshot, *, per_link: bool = False) -> str:
    options = RenderOptions(nvlink_per_link=per_link)
    return Exposition(snapshot, options).body(openmetrics=False, compressed=False).decode()


@pytest.fixture
def gb200_samples(install: Install) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    install(FakeNvmlLib([gb200()], driver_version=R580))
    return parse_samples(_exposition(sample_fake({"nvlink", "health"})))


@pytest.mark.parametrize("field_id", sorted(COUNTERS))
def test_each_nvlink5_counter_is_its_series_summed_over_the_links(
    field_id: int, gb200_samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]
) -> None:
    name, label, value = COUNTERS[field_id]
    got = values(gb200_samples, name, gpu="0", uuid=UUID, **{label: value})
    assert got == [_sum_over_links(field_id)], f"field {field_id} -> {name}{{{label}={value}}}"


def test_the_counter_table_names_every_nvlink5_field_the_code_reads() -> None:
    read = {*nvlink5.ERROR_FIELDS.values(), *nvlink5.RECOVERY_FIELDS.values()}
    assert read == set(COUNTERS)
    assert {value for _, label, value in COUNTERS.values() if label == "error_type"} == set(
        NVLINK5_ERRORS
    )


def test_nvlink5_bytes_count_bytes_where_gpm_does_not(
    gb200_samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> None:
    """202/204 are bytes (nvml.h: "Total Tx bytes"), not the legacy counters' KiB."""
    got = {
        d: values(gb200_samples, "gpu_nvlink_bytes_total", gpu="0", direction=d)
        for d in ("tx", "rx")
    }
    assert got == {"tx": [_sum_over_links(202)], "rx": [_sum_over_links(204)]}


def test_ber_is_the_worst_link_in_errors_per_bit(
    gb200_samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> None:
    """Link 1's effective BER code is mantissa 5, exponent 12; every other link's 3e-14."""
    effective = values(gb200_samples, "gpu_nvlink_ber", gpu="0", ber_type="effective")
    symbol = values(gb200_samples, "gpu_nvlink_ber", gpu="0", ber_type="symbol")
    assert effective == [pytest.approx(5e-12)]
    assert symbol == [pytest.approx(3e-14)]


def test_the_legacy_nvlink_error_types_are_absent_on_blackwell(
    gb200_samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> None:
    for error in NVLINK_LEGACY_ERRORS:
        assert values(gb200_samples, "gpu_nvlink_errors_total", error_type=error) == []
    # and the links are still there
    assert values(gb200_samples, "gpu_nvlink_link_up", gpu="0", link="17") == [1.0]


def test_per_link_the_nvlink5_series_carry_the_link(install: Install) -> None:
    install(FakeNvmlLib([gb200()], driver_version=R580))
    samples = parse_samples(_exposition(sample_fake({"nvlink"}), per_link=True))
    assert values(samples, "gpu_nvlink_errors_total", link="5", error_type="symbol") == [905.0]
    assert values(samples, "gpu_nvlink_link_recovery_events_total", link="3", result="all") == [
        43.0
    ]
    assert values(samples, "gpu_nvlink_ber", link="1", ber_type="effective") == [
        pytest.approx(5e-12)
    ]
    assert values(samples, "gpu_nvlink_ber", link="2", ber_type="effective") == [
        pytest.approx(3e-14)
    ]
    assert len(values(samples, "gpu_nvlink_ber")) == 2 * LINKS


def test_an_h100_keeps_the_legacy_counters_and_has_no_nvlink5_series(install: Install) -> None:
    install(FakeNvmlLib([nvlinked()], driver_version=R580))
    samples = parse_samples(_exposition(sample_fake({"nvlink"})))
    assert values(samples, "gpu_nvlink_errors_total", gpu="0", error_type="replay") == [
        float(sum(range(LINKS)))
    ]
    for error in NVLINK5_ERRORS:
        assert values(samples, "gpu_nvlink_errors_total", error_type=error) == []
    assert values(samples, "gpu_nvlink_link_recovery_events_total") == []
    assert values(samples, "gpu_nvlink_ber") == []
    assert values(samples, "gpu_platform_info") == []  # NOT_SUPPORTED before Blackwell


def test_nvlink5_counters_ride_in_the_interval_call_with_the_other_counters(
    install: Install,
) -> None:
    """No call of their own: they are asked for in the field call that asks for the
    energy counter (the counters' cadence), scoped to each link."""
    lib, backend, _clock = started(install, gb200())
    backend.device_static(0)
    before = lib.count("nvmlDeviceGetFieldValues")
    backend.device_reading(0, NVLINK | {"power"})
    assert lib.count("nvmlDeviceGetFieldValues") == before + 1
    scopes = set(lib.field_scopes[-1])
    assert (M.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0) in scopes
    assert {(field_id, 17) for field_id in COUNTERS} <= scopes
    assert (220, 17) in scopes and (222, 17) in scopes


def test_on_an_h100_the_nvlink5_fields_are_not_asked_again_within_a_slow_period(
    install: Install,
) -> None:
    lib, backend, clock = started(install, nvlinked())
    backend.device_static(0)
    for _ in range(3):
        backend.device_reading(0, NVLINK | {"power"})
        clock.now += 1.0
    asked = {field_id for batch in lib.field_requests[-2:] for field_id in batch}
    assert not asked & set(COUNTERS)
    assert backend.errors.snapshot() == {}


def test_recovery_totals_are_left_out_while_a_link_that_counted_them_does_not_answer(
    install: Install,
) -> None:
    gpu = gb200(links=2)
    _lib, backend, clock = started(install, gpu)
    backend.device_static(0)
    first = backend.device_reading(0, NVLINK)
    assert first.nvlink is not None
    assert first.nvlink.recovery_totals == {"successful": 21, "failed": 41, "all": 81}
    gpu.field_errors[(214, 1)] = M.NVML_ERROR_UNKNOWN  # link 1's failed counter fails
    clock.now += 31.0  # the counters are due again
    failed = backend.device_reading(0, NVLINK)
    assert failed.nvlink is not None
    assert failed.nvlink.recovery_totals == {"successful": 21, "all": 81}


def test_platform_info_is_read_by_reference_and_decoded(install: Install) -> None:
    lib, backend, _clock = started(install, gb200(2), driver_version=R580)
    static = backend.device_static(0)
    assert static.platform is not None
    assert (static.platform.chassis_serial, static.platform.tray) == ("1821424001234", 2)
    assert (static.platform.slot, static.platform.host_id) == (3, 1)
    assert (static.platform.peer_type, static.platform.module_id) == (2, 3)
    assert lib.count("nvmlDeviceGetPlatformInfo") == 1


def test_the_wrapper_given_a_structure_by_value_is_refused(install: Install) -> None:
    """Pins why the code passes ctypes.byref: nvidia-ml-py's wrapper hands its argument
    through unchanged, and a structure by value is no pointer to the driver."""
    install(FakeNvmlLib([gb200()], driver_version=R580))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = platform.PlatformInfoV2(version=M.nvmlPlatformInfo_v2)
    with pytest.raises(pynvml.NVMLError):
        pynvml.nvmlDeviceGetPlatformInfo(handle, info)
    pynvml.nvmlDeviceGetPlatformInfo(handle, ctypes.byref(info))
    assert info.trayIndex == 2
    pynvml.nvmlShutdown()


@pytest.mark.parametrize(
    ("gpu", "driver"),
    [(h100(), R580), (gb200(), "550.54.15")],
    ids=["not-supported", "driver-without-the-call"],
)
def test_platform_info_is_absent_where_not_supported(
    install: Install, gpu: FakeGpu, driver: str
) -> None:
    lib = install(FakeNvmlLib([gpu], driver_version=driver))
    snapshot = sample_fake({"nvlink"})
    assert "gpu_platform_info{" not in _exposition(snapshot)
    assert snapshot.nvml_errors == {}
    assert lib.count("nvmlDeviceGetPlatformInfo") <= 1  # asked once, not every interval


def test_platform_info_series(install: Install) -> None:
    install(FakeNvmlLib([gb200()], driver_version=R580))
    text = _exposition(sample_fake({"health"}))
    assert (
        'gpu_platform_info{chassis_serial="1821424001234",gpu="0",host_id="1",module_id="1",'
        'peer_type="2",slot="3",tray="2",uuid="GPU-gb200-0"} 1.0'
    ) in text


def test_a_serial_that_is_not_printable_is_shown_in_hex() -> None:
    assert platform.chassis_serial(b"1821424001234\0\0\0") == "1821424001234"
    assert platform.chassis_serial(b"\x01\x02ab\0") == "01026162"
    assert platform.chassis_serial(b"12 3") == "31322033"  # a space is no serial's


@pytest.mark.parametrize(
    ("code", "rate"),
    [((3 << 8) | 14, 3e-14), ((15 << 8) | 255, 15e-255), (0, 0.0), ((1 << 8) | 0, 1.0)],
)
def test_a_ber_code_is_mantissa_times_ten_to_the_minus_exponent(code: int, rate: float) -> None:
    assert nvlink5.ber(code) == pytest.approx(rate, rel=1e-12, abs=0.0)


def _calls_per_interval(install: Install, gpu: FakeGpu) -> tuple[float, Snapshot]:
    """NVML calls per 1 s interval over three slow periods, with the default collectors."""
    collectors = frozenset(c.name for c in COLLECTORS if c.default_enabled) - {"host", "xid"}
    lib, backend, clock = started(install, gpu, driver_version=R580)
    sampler = one_second_sampler(backend, clock, collectors)
    sampler.sample_once()
    before = sum(lib.calls.values())
    intervals = 180
    for _ in range(intervals):
        clock.now += 1.0
        snapshot = sampler.sample_once()
    sampler.stop(0)
    return (sum(lib.calls.values()) - before) / intervals, snapshot


def test_a_gb200_costs_no_more_calls_than_an_h100_with_nvlink(install: Install) -> None:
    """NVLink5's counters ride in the interval's field call (no call of their own), and
    the legacy per-link counter calls, which a GB200 does not answer, are not made on its
    links: a GB200 costs no more calls per interval than the same H100 with 18 links."""
    h100_calls, _ = _calls_per_interval(install, nvlinked())
    gb200_calls, snapshot = _calls_per_interval(install, gb200())
    assert gb200_calls <= h100_calls
    reading = snapshot.devices[0].reading
    assert reading is not None and reading.nvlink is not None
    assert reading.nvlink.recovery_totals["all"] == _sum_over_links(215)


def test_platform_info_is_read_with_the_limits_once_a_slow_period(install: Install) -> None:
    """Not every interval: where a GPU sits does not change while it runs, but a driver
    that starts answering (after an upgrade, a reset) is heard within a minute."""
    lib = install(FakeNvmlLib([gb200()], driver_version=R580))
    clock = FakeClock()
    backend = PynvmlBackend(monotonic=clock.monotonic)
    sampler = one_second_sampler(backend, clock, frozenset({"nvlink", "health"}))
    for _ in range(59):
        snapshot = sampler.sample_once()
        clock.now += 1.0
    assert lib.count("nvmlDeviceGetPlatformInfo") == 1
    static = snapshot.devices[0].static
    assert static is not None and static.platform is not None and static.platform.tray == 2
    lib.gpus[0].platform = FakePlatform(tray=5, module_id=1)  # the stand-in's tray moves
    for _ in range(2):
        snapshot = sampler.sample_once()
        clock.now += 1.0
    sampler.stop(0)
    assert lib.count("nvmlDeviceGetPlatformInfo") == 2
    static = snapshot.devices[0].static
    assert static is not None and static.platform is not None and static.platform.tray == 5
