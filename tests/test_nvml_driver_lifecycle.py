"""Contract tests: what changes under a running exporter, and older and newer drivers.

Through the real `pynvml` and the fake library (`tests/support/fake_nvml.py`):

- a NOT_SUPPORTED answer is remembered, but not forever: MIG mode on, then off, and the
  utilization series come back (issue 20, item 5);
- field-value calls of different GPUs never overlap, and a hung one blocks no other GPU;
- MIG after a repartition: instances known by UUID, GPM streams freed, the change seen
  within one interval, MIG memory from the v2 call (item 9);
- a driver before R535 (no clocks-event-reasons call), a driver with the versioned
  temperature call, a board without temperature thresholds (item 10).
"""

from __future__ import annotations

import threading

import pynvml
import pytest

from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import Snapshot
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.backend import SLOW_REFRESH_SECONDS
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.clock import FakeClock
from tests.support.fake_host import GPM_VALUES, advance
from tests.support.fake_nvml import (
    NOT_SUPPORTED,
    R525,
    R570,
    FakeGpu,
    FakeMigDevice,
    FakeNvmlLib,
    Install,
    h100,
    old_fanless,
)
from tests.support.fake_sampling import one_second_sampler, started

M = pynvml
GIB = 2**30
MIB = 2**20
MIG_NAME = "NVIDIA H100 80GB HBM3 MIG "
FIELD_VALUES = "nvmlDeviceGetFieldValues"


def text(snapshot: Snapshot) -> str:
    return Exposition(snapshot).body(openmetrics=False, compressed=False).decode()


def series(snapshot: Snapshot, gpu: int = 0) -> set[str]:
    """The names of the metrics exported for `gpu`."""
    return {
        line.split("{", 1)[0]
        for line in text(snapshot).splitlines()
        if not line.startswith("#") and f'gpu="{gpu}"' in line
    }


# MIG on, then off: what the driver answered by mode is asked again ----------------------

UTILIZATION_SERIES = {
    "gpu_utilization_ratio",
    "gpu_busy_seconds_total",
    "gpu_memory_controller_utilization_ratio",
    "gpu_encoder_utilization_ratio",
    "gpu_decoder_utilization_ratio",
}


def mig_on(gpu: FakeGpu) -> None:
    """MIG enabled as the driver answers it: the parent has no utilization of its own."""
    gpu.mig = (M.NVML_DEVICE_MIG_ENABLE, M.NVML_DEVICE_MIG_ENABLE)
    gpu.samples = {}
    gpu.utilization_percent = gpu.encoder_percent = gpu.decoder_percent = None
    gpu.mig_devices = [FakeMigDevice(0, 0, 0, "MIG-whole", MIG_NAME + "7g.80gb", (80 * GIB, GIB))]


def mig_off(gpu: FakeGpu) -> None:
    gpu.mig = (M.NVML_DEVICE_MIG_DISABLE, M.NVML_DEVICE_MIG_DISABLE)
    gpu.utilization_percent, gpu.encoder_percent, gpu.decoder_percent = (87, 41), 3, 0
    gpu.mig_devices = []


class Host:
    """One H100 sampled every second on a fake clock, its sample buffers filling."""

    def __init__(self, install: Install, collectors: set[str]) -> None:
        self.gpu = h100()
        self.lib, backend, self.clock = started(install, self.gpu)
        self.sampler = one_second_sampler(backend, self.clock, frozenset(collectors))

    def sample(self, seconds: float = 1.0) -> Snapshot:
        self.clock.now += seconds
        if self.gpu.mig is None or self.gpu.mig[0] != M.NVML_DEVICE_MIG_ENABLE:
            advance(self.gpu, int(self.clock.monotonic() * 1e6) + 1_000_000)
        return self.sampler.sample_once()


def test_utilization_comes_back_within_an_interval_of_mig_going_off(install: Install) -> None:
    host = Host(install, {"utilization", "mig"})
    host.sample()
    assert series(host.sample()) >= UTILIZATION_SERIES
    mig_on(host.gpu)
    for _ in range(3):
        under_mig = host.sample()
    assert not UTILIZATION_SERIES & series(under_mig)  # absent, never 0
    assert "gpu_mig_info" in series(under_mig)
    mig_off(host.gpu)
    host.sample()  # the layout check sees MIG off and forgets what MIG mode decided
    back = host.sample()
    assert series(back) >= UTILIZATION_SERIES
    assert "gpu_mig_info" not in series(back)
    assert back.nvml_errors == {}


def test_without_the_mig_collector_support_is_asked_again_at_the_slow_cadence(
    install: Install,
) -> None:
    host = Host(install, {"utilization"})
    host.sample()
    mig_on(host.gpu)
    for _ in range(3):
        host.sample()
    mig_off(host.gpu)
    assert "gpu_utilization_ratio" not in series(host.sample())  # not asked again yet
    host.sample(SLOW_REFRESH_SECONDS)  # re-probed
    assert series(host.sample()) >= UTILIZATION_SERIES


def test_mig_coming_on_is_seen_within_one_interval(install: Install) -> None:
    host = Host(install, {"utilization", "mig"})
    host.sample()
    host.sample()
    mig_on(host.gpu)
    assert "gpu_mig_info" in series(host.sample())  # the sample buffers stopped answering


def test_an_unsupported_call_is_asked_again_once_per_slow_period(install: Install) -> None:
    lib, backend, clock = started(install, old_fanless(0))
    for _ in range(int(2 * SLOW_REFRESH_SECONDS) + 1):  # two slow periods at 1 s
        assert backend.device_reading(0, frozenset({"utilization"})).utilization is not None
        clock.now += 1.0
    assert lib.count("nvmlDeviceGetEncoderUtilization") == 3  # first, then once a period
    assert backend.errors.snapshot() == {}


# Field values: one call at a time, and a hung one blocks no other GPU -------------------


def test_field_value_calls_of_different_gpus_never_overlap(install: Install) -> None:
    first, second = h100(0), h100(1)
    release = threading.Event()
    first.hang[FIELD_VALUES] = release
    second.hang[FIELD_VALUES] = threading.Event()
    second.hang[FIELD_VALUES].set()  # does not wait, but records that it got in
    lib = install(FakeNvmlLib([first, second]))
    backend = PynvmlBackend(field_values_wait_seconds=30.0)
    backend.init()
    ecc = frozenset({"ecc"})
    readings: dict[int, object] = {}

    def read(index: int) -> None:
        readings[index] = backend.device_reading(index, ecc).ecc

    threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in (0, 1)]
    threads[0].start()
    assert lib.entered.setdefault((FIELD_VALUES, 0), threading.Event()).wait(10)
    threads[1].start()
    second_in = lib.entered.setdefault((FIELD_VALUES, 1), threading.Event())
    assert not second_in.wait(0.3)  # waits for the first GPU's call to return
    release.set()
    for thread in threads:
        thread.join(10)
    assert second_in.is_set()
    assert lib.most_inside[FIELD_VALUES] == 1
    assert all(getattr(readings[i], "corrected_errors", None) == 3 for i in (0, 1))
    backend.shutdown()


def test_a_hung_field_value_call_blocks_no_other_gpu(install: Install) -> None:
    hung, healthy = h100(0), h100(1)
    release = threading.Event()
    hung.hang[FIELD_VALUES] = release
    install(FakeNvmlLib([hung, healthy]))
    clock = FakeClock()
    backend = PynvmlBackend(monotonic=clock.monotonic, field_values_wait_seconds=0.05)
    sampler = Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=2.0,
        collectors=frozenset({"ecc"}),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    try:
        snapshots = []
        for _ in range(2):
            snapshots.append(sampler.sample_once())
            clock.now += 1.0
    finally:
        release.set()
        sampler.stop(1.0)
    for snapshot in snapshots:
        stuck, other = snapshot.devices
        assert not stuck.up
        assert other.up and other.reading is not None and other.reading.ecc is not None
        assert other.reading.ecc.corrected_errors == 3
    # the hung holder's lock was given up once; the other GPU did not wait again
    assert snapshots[-1].nvml_errors == {(FIELD_VALUES, "lock_wait_timeout"): 1}


# MIG after a repartition ----------------------------------------------------------------


def mig_hopper() -> FakeGpu:
    """An H100 with GPM in MIG mode: GPU instance 2 (3g, two compute instances) and 9 (1g)."""
    gpu = h100()
    gpu.gpm_supported = True
    gpu.gpm = dict(GPM_VALUES)
    mig_on(gpu)
    gpu.mig_devices = [
        FakeMigDevice(0, 2, 0, "MIG-a", MIG_NAME + "3g.40gb", (40 * GIB, 30 * GIB)),
        FakeMigDevice(3, 2, 1, "MIG-b", MIG_NAME + "3g.40gb", (40 * GIB, 30 * GIB)),
        FakeMigDevice(5, 9, 0, "MIG-c", MIG_NAME + "1g.10gb", (10 * GIB, 0)),
    ]
    for mig in gpu.mig_devices:
        mig.gpm = {M.NVML_GPM_METRIC_SM_UTIL: 50.0}
    return gpu


def repartition(gpu: FakeGpu) -> None:
    """Destroy every instance and make new ones: GPU instance 2 again (a new 1g one, a
    new UUID) and 3."""
    gpu.mig_devices = [
        FakeMigDevice(0, 2, 0, "MIG-d", MIG_NAME + "1g.10gb", (10 * GIB, 0)),
        FakeMigDevice(1, 3, 0, "MIG-e", MIG_NAME + "2g.20gb", (20 * GIB, 0)),
    ]
    for mig in gpu.mig_devices:
        mig.gpm = {M.NVML_GPM_METRIC_SM_UTIL: 10.0}


MIG_GPM = frozenset({"mig", "gpm"})


def test_a_repartition_is_seen_within_one_interval(install: Install) -> None:
    gpu = mig_hopper()
    _lib, backend, clock = started(install, gpu)
    before = backend.device_reading(0, MIG_GPM).mig
    assert before is not None and [m.uuid for m in before.devices] == ["MIG-a", "MIG-b", "MIG-c"]
    repartition(gpu)
    clock.now += 1.0
    after = backend.device_reading(0, MIG_GPM).mig
    assert after is not None
    assert [(m.uuid, m.gpu_instance, m.profile) for m in after.devices] == [
        ("MIG-d", 2, "1g.10gb"),
        ("MIG-e", 3, "2g.20gb"),
    ]
    assert after.instances[2].memory_total_bytes == 10 * GIB
    assert backend.errors.snapshot() == {}


def test_the_first_instance_made_on_an_empty_mig_gpu_is_seen_within_one_interval(
    install: Install,
) -> None:
    gpu = mig_hopper()
    gpu.mig_devices = []  # MIG on, nothing partitioned yet
    _lib, backend, clock = started(install, gpu)
    assert backend.device_reading(0, frozenset({"mig"})).mig is None
    repartition(gpu)
    clock.now += 1.0
    after = backend.device_reading(0, frozenset({"mig"})).mig
    assert after is not None and [m.uuid for m in after.devices] == ["MIG-d", "MIG-e"]


def make_gpu_instance_9_again(
    gpu: FakeGpu, *, reuse_handle: bool, processes: list[tuple[int, int]] | None = None
) -> None:
    """Destroy GPU instance 9 (1g.10gb) and create it again with the same profile: the same
    id, slot and remaining capacity, a new MIG UUID and new memory. The driver may give
    the new instance the old handle ("Handles may be reused and their properties can
    change", nvml.h) or leave the old handle invalid."""
    old = gpu.mig_devices[2]
    new = FakeMigDevice(old.slot, 9, 0, "MIG-c2", old.name, (10 * GIB, 2 * GIB), processes or [])
    if reuse_handle:
        new.struct = old.struct
    new.gpm = dict(old.gpm)
    gpu.mig_devices[2] = new


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
@pytest.mark.parametrize("reuse_handle", [True, False], ids=["handle-reused", "handle-invalid"])
def test_a_gpu_instance_made_again_with_the_same_profile_is_seen_within_one_interval(
    install: Install, reuse_handle: bool, busy: bool
) -> None:
    """Busy: a process runs on the old instance until just before the swap and another
    on the new one from just after it, and the process lists are read (which spare the
    UUID reads of MIG devices that keep running a process)."""
    gpu = mig_hopper()
    if busy:
        for pid, mig in enumerate(gpu.mig_devices, start=4000):
            mig.processes = [(pid, GIB)]
    _lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, MIG_GPM | {"process"} if busy else MIG_GPM)
    for _ in range(3):
        clock.now += 1.0
        before = text(sampler.sample_once())
    assert 'mig_uuid="MIG-c"' in before
    new_process = [(4100, GIB)] if busy else None
    make_gpu_instance_9_again(gpu, reuse_handle=reuse_handle, processes=new_process)
    clock.now += 1.0
    snapshot = sampler.sample_once()
    after = text(snapshot)
    sampler.stop(0)
    assert 'mig_uuid="MIG-c2"' in after
    assert 'mig_uuid="MIG-c"' not in after
    assert 'mig_uuid="MIG-a"' in after and 'mig_uuid="MIG-b"' in after
    used = f'gpu_mig_memory_used_bytes{{gpu="0",gpu_instance="9",uuid="{gpu.uuid}"}}'
    assert f"{used} 2.147483648e+09" in after  # the new instance's memory, not the old one's
    assert snapshot.nvml_errors == {}  # a destroyed instance's handle is no error


def test_instances_made_again_many_times_leave_no_process_list_arrays_behind(
    install: Install,
) -> None:
    """Each MIG device's process list is read into a C array of its own; those of MIG
    devices destroyed are freed at the enumeration that sees them gone."""
    gpu = mig_hopper()
    for pid, mig in enumerate(gpu.mig_devices, start=4000):
        mig.processes = [(pid, GIB)]
    _lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, MIG_GPM | {"process"})
    clock.now += 1.0
    sampler.sample_once()
    held = len(backend._devices[0].buffers)
    for swap in range(20):
        new = [(5000 + swap, GIB)]  # a process cannot outlive its instance
        make_gpu_instance_9_again(gpu, reuse_handle=bool(swap % 2), processes=new)
        gpu.mig_devices[2].uuid = f"MIG-c{swap}"
        clock.now += 1.0
        assert f'mig_uuid="MIG-c{swap}"' in text(sampler.sample_once())
    assert len(backend._devices[0].buffers) == held
    sampler.stop(0)


def test_an_unprivileged_exporter_sees_a_swap_at_once_and_a_new_instance_within_a_minute(
    install: Install,
) -> None:
    """nvmlDeviceGetGpuInstanceRemainingCapacity "Requires privileged user" (nvml.h); the
    systemd unit runs as a dynamic non-root user, to whom it answers NO_PERMISSION."""
    gpu = mig_hopper()
    gpu.fail["nvmlDeviceGetGpuInstanceRemainingCapacity"] = M.NVML_ERROR_NO_PERMISSION
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, MIG_GPM)
    for _ in range(3):
        clock.now += 1.0
        sampler.sample_once()
    make_gpu_instance_9_again(gpu, reuse_handle=True)
    clock.now += 1.0
    swapped = text(sampler.sample_once())
    assert 'mig_uuid="MIG-c2"' in swapped and 'mig_uuid="MIG-c"' not in swapped
    gpu.mig_devices.append(FakeMigDevice(6, 11, 0, "MIG-g", MIG_NAME + "1g.10gb", (10 * GIB, 0)))
    for _ in range(int(SLOW_REFRESH_SECONDS)):
        clock.now += 1.0
        snapshot = sampler.sample_once()
    sampler.stop(0)
    assert 'mig_uuid="MIG-g"' in text(snapshot)  # made in free space: seen at the refresh
    assert snapshot.nvml_errors == {}  # a refusal NVML documents is no error
    # asked at each enumeration only: the start, the swap, the refresh
    assert lib.count("nvmlDeviceGetGpuInstanceRemainingCapacity") == 3


def test_a_mig_config_change_event_shows_a_new_instance_to_an_unprivileged_exporter_at_once(
    install: Install,
) -> None:
    """nvmlEventMigConfigChange, where the driver raises it, is an addition to the check
    every interval: an instance made in free space shows at the next sample, not at the
    refresh a minute later."""
    gpu = mig_hopper()
    gpu.fail["nvmlDeviceGetGpuInstanceRemainingCapacity"] = M.NVML_ERROR_NO_PERMISSION
    gpu.supported_events |= M.nvmlEventMigConfigChange
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, MIG_GPM)
    events = backend.open_events()
    assert events is not None
    for _ in range(3):
        clock.now += 1.0
        sampler.sample_once()
    gpu.mig_devices.append(FakeMigDevice(6, 11, 0, "MIG-g", MIG_NAME + "1g.10gb", (10 * GIB, 0)))
    lib.push_event(0, M.nvmlEventMigConfigChange)
    assert events.wait(1000) is None  # the backend's own: nothing for the Xid listener
    clock.now += 1.0
    snapshot = sampler.sample_once()
    events.close()
    sampler.stop(0)
    assert 'mig_uuid="MIG-g"' in text(snapshot)
    assert snapshot.nvml_errors == {}


def test_gpm_of_a_reused_gpu_instance_id_starts_afresh_and_gone_streams_are_freed(
    install: Install,
) -> None:
    gpu = mig_hopper()
    lib, backend, clock = started(install, gpu)
    for _ in range(2):
        reading = backend.device_reading(0, MIG_GPM).mig
        clock.now += 1.0
    assert reading is not None and reading.instances[2].gpm is not None
    assert lib.live_gpm_samples() == 6  # the GPU's and two GPU instances', two each
    repartition(gpu)
    first = backend.device_reading(0, MIG_GPM).mig
    assert first is not None
    # GPU instance 2 is another instance now: no activity between the old one's sample
    # and the new one's
    assert first.instances[2].gpm is None
    assert lib.live_gpm_samples() == 6  # the GPU's, and the two new instances'
    clock.now += 1.0
    second = backend.device_reading(0, MIG_GPM).mig
    assert second is not None and second.instances[2].gpm is not None
    assert second.instances[2].gpm.sm_ratio == pytest.approx(0.10)
    backend.shutdown()
    assert lib.live_gpm_samples() == 0
    assert lib.count("nvmlGpmSampleAlloc") == lib.count("nvmlGpmSampleFree") == 10


def test_the_activity_counter_of_a_new_instance_on_a_reused_id_starts_from_zero(
    install: Install,
) -> None:
    gpu = mig_hopper()
    _lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, MIG_GPM)
    for _ in range(11):
        old = sampler.sample_once().devices[0].mig_activity.get(2)
        clock.now += 1.0
    assert old is not None and old.sm_seconds == pytest.approx(5.0)  # 50 % for 10 s
    repartition(gpu)
    for _ in range(3):
        new = sampler.sample_once().devices[0].mig_activity.get(2)
        clock.now += 1.0
    sampler.stop(0)
    # another instance: its own count from zero (a counter reset to Prometheus), not
    # the old instance's count continued
    assert new is not None and new.sm_seconds == pytest.approx(0.2)  # 10 % for 2 s


def test_the_mig_check_costs_one_call_per_mig_device_and_one_while_there_is_room(
    install: Install,
) -> None:
    full = mig_hopper()
    full.mig_devices.append(FakeMigDevice(6, 5, 0, "MIG-f", MIG_NAME + "3g.40gb", (40 * GIB, 0)))
    lib, backend, clock = started(install, mig_hopper(), full, h100(2))
    for _ in range(10):
        for index in (0, 1, 2):
            backend.device_reading(index, frozenset({"mig"}))
        clock.now += 1.0
    for gpu in (0, 1):  # MIG mode is read when the MIG devices are enumerated, once
        assert lib.count("nvmlDeviceGetMigMode", gpu=gpu) == 1
        assert lib.count("nvmlDeviceGetMigDeviceHandleByIndex", gpu=gpu) == 7
    # three of seven slices taken: a GPU instance may be made in the free space
    assert lib.count("nvmlDeviceGetGpuInstanceRemainingCapacity", gpu=0) == 10
    # all seven taken: none can be made before one is destroyed, which the UUIDs show
    assert lib.count("nvmlDeviceGetGpuInstanceRemainingCapacity", gpu=1) == 1
    # the enumeration reads the MIG devices' UUIDs, then each interval checks them
    assert lib.count("nvmlDeviceGetUUID", gpu=0) == 3 + 9 * 3
    assert lib.count("nvmlDeviceGetUUID", gpu=1) == 4 + 9 * 4
    assert lib.count("nvmlDeviceGetMigMode", gpu=2) == 1  # MIG off: once a slow period
    assert lib.count("nvmlDeviceGetUUID", gpu=2) == 0
    assert lib.count("nvmlDeviceGetGpuInstanceRemainingCapacity", gpu=2) == 0


def test_mig_memory_used_leaves_the_drivers_reservation_out(install: Install) -> None:
    gpu = mig_hopper()
    for mig in gpu.mig_devices:
        mig.memory_reserved = 512 * MIB
    _lib, backend, _clock = started(install, gpu)
    reading = backend.device_reading(0, frozenset({"mig"})).mig
    assert reading is not None
    assert reading.instances[2].memory_used_bytes == 30 * GIB  # not 30.5 GiB
    assert reading.instances[2].memory_total_bytes == 40 * GIB


def test_mig_memory_on_a_driver_without_v2_is_the_v1_answer(install: Install) -> None:
    gpu = mig_hopper()
    gpu.mig_devices[0].memory_reserved = 512 * MIB
    install(FakeNvmlLib([gpu], missing={"nvmlDeviceGetMemoryInfo_v2"}))
    backend = PynvmlBackend()
    backend.init()
    reading = backend.device_reading(0, frozenset({"mig"})).mig
    assert reading is not None
    assert reading.instances[2].memory_used_bytes == 30 * GIB + 512 * MIB
    assert backend.errors.snapshot() == {}


# Older and newer drivers ----------------------------------------------------------------

CLOCKS = frozenset({"clocks"})


def test_a_driver_before_r535_reports_clock_reasons_through_the_throttle_call(
    install: Install,
) -> None:
    lib = install(FakeNvmlLib([h100()], driver_version=R525))
    backend = PynvmlBackend()
    backend.init()
    for _ in range(3):
        reasons = backend.device_reading(0, CLOCKS).clocks
        assert reasons is not None and reasons.throttle_reasons is not None
        assert reasons.throttle_reasons["sw_power_cap"] is True
        assert reasons.throttle_reasons["hw_slowdown"] is False
    assert lib.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 3
    assert lib.count("nvmlDeviceGetCurrentClocksEventReasons") == 0  # not in this driver
    assert backend.errors.snapshot() == {}


def test_the_fake_r525_driver_lacks_the_clocks_event_reasons_symbol(install: Install) -> None:
    """Pins the fake's driver generations: a missing symbol is FUNCTION_NOT_FOUND."""
    install(FakeNvmlLib([h100()], driver_version=R525))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError) as caught:
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    assert caught.value.value == M.NVML_ERROR_FUNCTION_NOT_FOUND
    pynvml.nvmlShutdown()


TEMPERATURE = frozenset({"temperature"})


def test_a_driver_with_the_versioned_temperature_call_is_read_through_it(
    install: Install,
) -> None:
    # nvml.h 13 deprecates nvmlDeviceGetTemperature; a driver may drop it
    lib = install(FakeNvmlLib([h100()], driver_version=R570, missing={"nvmlDeviceGetTemperature"}))
    backend = PynvmlBackend()
    backend.init()
    for _ in range(2):
        reading = backend.device_reading(0, TEMPERATURE).temperature
        assert reading is not None and reading.gpu_celsius == 64.0
    assert lib.count("nvmlDeviceGetTemperatureV") == 2
    assert backend.errors.snapshot() == {}


def test_a_driver_without_the_versioned_temperature_call_uses_the_older_one(
    install: Install,
) -> None:
    lib, backend, _clock = started(install, h100())  # R550: no nvmlDeviceGetTemperatureV
    for _ in range(3):
        reading = backend.device_reading(0, TEMPERATURE).temperature
        assert reading is not None and reading.gpu_celsius == 64.0
    assert lib.count("nvmlDeviceGetTemperature") == 3
    assert backend.errors.snapshot() == {}


def test_temperature_thresholds_a_board_does_not_answer_are_absent_never_zero(
    install: Install,
) -> None:
    ada = h100(1)
    ada.thresholds_celsius = {}  # NOT_SUPPORTED, as Ada and later may answer
    install(FakeNvmlLib([h100(0), ada]))
    clock = FakeClock()
    sampler = one_second_sampler(PynvmlBackend(monotonic=clock.monotonic), clock, TEMPERATURE)
    snapshot = sampler.sample_once()
    sampler.stop(0)
    assert "gpu_temperature_threshold_celsius" in series(snapshot, 0)
    assert "gpu_temperature_threshold_celsius" not in series(snapshot, 1)
    assert "gpu_temperature_celsius" in series(snapshot, 1)
    assert snapshot.nvml_errors == {}


def test_a_threshold_answered_later_is_exported_after_the_slow_refresh(install: Install) -> None:
    gpu = h100()
    thresholds, gpu.thresholds_celsius = gpu.thresholds_celsius, {}
    gpu.fail["nvmlDeviceGetTemperatureThreshold"] = NOT_SUPPORTED
    lib, backend, clock = started(install, gpu)
    sampler = one_second_sampler(backend, clock, TEMPERATURE)
    sampler.sample_once()
    del gpu.fail["nvmlDeviceGetTemperatureThreshold"]
    gpu.thresholds_celsius = thresholds
    clock.now += SLOW_REFRESH_SECONDS
    sampler.sample_once()  # support is asked again
    clock.now += SLOW_REFRESH_SECONDS
    snapshot = sampler.sample_once()  # the limits are read again
    sampler.stop(0)
    assert 'gpu_temperature_threshold_celsius{gpu="0"' in text(snapshot)
    assert lib.count("nvmlDeviceGetTemperatureThreshold") > 2
