"""Contract tests: temperature limits on Ada and later, relative to T.Limit (issue 20, item 10).

nvml.h 13 (nvmlDeviceGetTemperatureThreshold) says that call "is no longer the preferred
interface" for the shutdown, slowdown and maximum-operating thresholds on Ada and later,
and names the NVML_FI_DEV_TEMPERATURE_*_TLIMIT fields (193-196) instead; the real H100
and L40S captures (tests/fixtures/nvidia-smi, R590/R595) print only those, as degrees
relative to T.Limit ("GPU Slowdown T.Limit Temp : -2 C"), next to the current distance
to T.Limit ("GPU T.Limit Temp : 46 C", nvmlDeviceGetMarginTemperature).

Through the real `pynvml` and the fake library (`tests/support/fake_nvml.py`), whose
T.Limit fields are signed integers as the driver answers them.
"""

from __future__ import annotations

import pynvml
import pytest

from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import Snapshot
from gpu_exporter.sources.backend import SLOW_REFRESH_SECONDS
from gpu_exporter.sources.nvml import backend as nvml_backend
from tests.support.fake_nvml import NOT_SUPPORTED, FakeGpu, Install, h100, old_fanless
from tests.support.fake_sampling import one_second_sampler, started

M = pynvml
TEMPERATURE = frozenset({"temperature"})
TLIMIT_IDS = {193, 194, 195, 196}  # nvml.h 13, NVML_FI_DEV_TEMPERATURE_*_TLIMIT
MARGIN = "nvmlDeviceGetMarginTemperature"


def h100_r590(index: int = 0) -> FakeGpu:
    """An H100 as the R590 capture shows it: no absolute thresholds, T.Limit ones."""
    gpu = h100(index)
    gpu.thresholds_celsius = {}
    gpu.fail["nvmlDeviceGetTemperatureThreshold"] = NOT_SUPPORTED
    gpu.temperature_celsius = 59
    gpu.tlimit_margin_celsius = 26
    return gpu


def values(snapshot: Snapshot, metric: str) -> dict[str, float]:
    """`metric`'s samples: the label text after uuid (or "") -> value."""
    body = Exposition(snapshot).body(openmetrics=False, compressed=False).decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith(metric + "{"):
            labels, value = line[len(metric) + 1 :].rsplit("} ", 1)
            key = ",".join(p for p in labels.split(",") if not p.startswith("uuid="))
            out[key] = float(value)
    return out


def sample(install: Install, *gpus: FakeGpu, n: int = 1) -> Snapshot:
    _lib, backend, clock = started(install, *gpus)
    sampler = one_second_sampler(backend, clock, TEMPERATURE)
    for _ in range(n):
        snapshot = sampler.sample_once()
        clock.now += 1.0
    sampler.stop(0)
    return snapshot


def test_an_h100_without_absolute_thresholds_exports_its_tlimit_thresholds_and_margin(
    install: Install,
) -> None:
    snapshot = sample(install, h100_r590())
    assert values(snapshot, "gpu_temperature_tlimit_threshold_celsius") == {
        'gpu="0",threshold="shutdown"': -8.0,
        'gpu="0",threshold="slowdown"': -2.0,
        'gpu="0",threshold="max_operating"': 0.0,
        'gpu="0",threshold="memory_max_operating"': 0.0,
    }
    assert values(snapshot, "gpu_temperature_tlimit_margin_celsius") == {'gpu="0"': 26.0}
    assert values(snapshot, "gpu_temperature_threshold_celsius") == {}
    assert values(snapshot, "gpu_temperature_celsius") == {'gpu="0"': 59.0}
    assert snapshot.nvml_errors == {}


def test_a_margin_past_t_limit_is_negative_never_a_wrapped_unsigned_number(
    install: Install,
) -> None:
    gpu = h100_r590()
    gpu.tlimit_margin_celsius = -3  # 3 C past T.Limit: slowing down (threshold -2)
    snapshot = sample(install, gpu)
    assert values(snapshot, "gpu_temperature_tlimit_margin_celsius") == {'gpu="0"': -3.0}


def test_a_board_without_t_limit_has_no_tlimit_series_and_keeps_its_absolute_thresholds(
    install: Install,
) -> None:
    turing = old_fanless(1)  # answers NOT_SUPPORTED for the margin and the T.Limit fields
    turing.thresholds_celsius = {
        M.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 97,
        M.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: 100,
    }
    snapshot = sample(install, h100_r590(0), turing)
    assert set(values(snapshot, "gpu_temperature_tlimit_margin_celsius")) == {'gpu="0"'}
    assert all(
        key.startswith('gpu="0"')
        for key in values(snapshot, "gpu_temperature_tlimit_threshold_celsius")
    )
    assert values(snapshot, "gpu_temperature_threshold_celsius") == {
        'gpu="1",threshold="slowdown"': 97.0,
        'gpu="1",threshold="shutdown"': 100.0,
    }
    assert snapshot.nvml_errors == {}


def test_tlimit_thresholds_share_the_limits_field_call_and_are_read_once_a_slow_period(
    install: Install,
) -> None:
    gpu = h100_r590()
    gpu.fields[M.NVML_FI_DEV_NVLINK_LINK_COUNT] = 18
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, TEMPERATURE)
    intervals = int(2 * SLOW_REFRESH_SECONDS)
    for _ in range(intervals):
        sampler.sample_once()
        clock.now += 1.0
    sampler.stop(0)
    with_tlimit = [ids for ids in lib.field_requests if TLIMIT_IDS & set(ids)]
    # the limits are read at start and once a slow period; each read asks all four
    # thresholds in the same call as the NVLink link count
    assert 2 <= len(with_tlimit) <= 3
    for ids in with_tlimit:
        assert set(ids) >= TLIMIT_IDS and M.NVML_FI_DEV_NVLINK_LINK_COUNT in ids
    # no call of their own: one batch an interval, one with the limits
    assert lib.count("nvmlDeviceGetFieldValues") == intervals + len(with_tlimit)


def test_the_margin_is_read_again_in_the_interval_the_temperature_moves(
    install: Install,
) -> None:
    gpu = h100_r590()
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, TEMPERATURE)

    def margin() -> float | None:
        clock.now += 1.0
        reading = sampler.sample_once().devices[0].reading
        assert reading is not None and reading.temperature is not None
        return reading.temperature.tlimit_margin_celsius

    assert margin() == 26.0
    for _ in range(10):  # a steady temperature: the margin is not asked every interval
        assert margin() == 26.0
    assert lib.count(MARGIN) == 1
    gpu.temperature_celsius, gpu.tlimit_margin_celsius = 66, 19  # the load rises
    assert margin() == 19.0
    gpu.tlimit_margin_celsius = 18  # the margin alone moves: seen within a slow period
    clock.now += SLOW_REFRESH_SECONDS
    assert margin() == 18.0
    sampler.stop(0)


def test_a_board_without_the_margin_is_asked_again_only_once_a_slow_period(
    install: Install,
) -> None:
    gpu = h100_r590()
    gpu.tlimit_margin_celsius = None  # NOT_SUPPORTED
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, TEMPERATURE)
    for _ in range(int(SLOW_REFRESH_SECONDS) - 1):
        gpu.temperature_celsius = 50 + int(clock.now) % 7  # moving: no reason to ask again
        sampler.sample_once()
        clock.now += 1.0
    sampler.stop(0)
    assert lib.count(MARGIN) == 1


def test_bindings_without_the_margin_call_still_export_the_tlimit_thresholds(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-ml-py 12.560.30 (the declared floor) has the fields but no
    # nvmlDeviceGetMarginTemperature wrapper
    monkeypatch.setattr(nvml_backend, "_MARGIN_TEMPERATURE", None)
    snapshot = sample(install, h100_r590())
    assert values(snapshot, "gpu_temperature_tlimit_margin_celsius") == {}
    assert len(values(snapshot, "gpu_temperature_tlimit_threshold_celsius")) == 4
    assert snapshot.nvml_errors == {}
