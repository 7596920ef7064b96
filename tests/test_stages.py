"""Per-stage results of a sample: what each stage cost and whether it worked."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import Attribution, DeviceRaw, HostSample, Snapshot, XidState
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.scenario import Faults
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock
from tests.support.exporter import parse_samples, values

HOST = HostSample(
    cpu_busy_seconds=10.0,
    cpu_iowait_seconds=1.0,
    cpus=8,
    memory_total_bytes=2**34,
    memory_available_bytes=2**33,
    load1=0.5,
)


class Attributor:
    """Process attribution as the sampler sees it, around a plain function."""

    sees_host_pid_namespace = True
    holder_scan = None

    def __init__(self, fn: object) -> None:
        self._fn = fn

    def __call__(self, raws: Mapping[int, DeviceRaw]) -> Mapping[int, Attribution]:
        return self._fn(raws)  # type: ignore[operator, no-any-return]


class Xid:
    def __init__(self, listening: bool) -> None:
        self.listening = listening

    def state(self) -> Mapping[str, XidState]:
        return {}


def sampler(clock: FakeClock, backend: SimulatedBackend | None = None, **hooks: object) -> Sampler:
    return Sampler(
        backend or SimulatedBackend(2, clock=clock.wall),
        interval_seconds=1.0,
        timeout_seconds=2.0,
        collectors=frozenset({"utilization", "memory", "process", "host", "xid"}),
        clock=clock.wall,
        monotonic=clock.monotonic,
        **hooks,  # type: ignore[arg-type]
    )


def rendered(snapshot: Snapshot) -> dict[str, tuple[float, float]]:
    s = parse_samples(Exposition(snapshot).body(openmetrics=False, compressed=False).decode())
    return {
        stage: (
            values(s, "gpu_exporter_stage_duration_seconds", stage=stage)[0],
            values(s, "gpu_exporter_stage_success", stage=stage)[0],
        )
        for stage in ("devices", "processes", "host", "xid", "render")
        if values(s, "gpu_exporter_stage_success", stage=stage)
    }


def test_every_enabled_stage_reports_its_duration_and_success() -> None:
    clock = FakeClock()

    def attribute(raws: Mapping[int, DeviceRaw]) -> Mapping[int, Attribution]:
        clock.now += 0.125  # the /proc walk takes its time
        return {}

    def read_host() -> HostSample:
        clock.now += 0.25
        return HOST

    s = sampler(
        clock, attribute_processes=Attributor(attribute), read_host=read_host, xid=Xid(True)
    )
    s.sample_once()
    stages = rendered(s.sample_once())
    assert stages == {
        "devices": (0.0, 1.0),
        "processes": (0.125, 1.0),
        "host": (0.25, 1.0),
        "xid": (0.0, 1.0),
        "render": (0.0, 1.0),  # the previous sample's publication
    }


def test_a_failing_host_reader_shows_as_host_success_0_not_silence() -> None:
    clock = FakeClock()
    s = sampler(clock, read_host=lambda: None, xid=Xid(False))
    snapshot = s.sample_once()
    assert snapshot.stages["host"].success is False
    assert snapshot.stages["xid"].success is False  # no event set listened to
    assert snapshot.stages["devices"].success is True
    assert "render" not in snapshot.stages  # nothing was published before the first sample


def test_attribution_that_raises_fails_its_stage_and_the_sample_goes_on() -> None:
    clock = FakeClock()

    def broken(raws: Mapping[int, DeviceRaw]) -> Mapping[int, Attribution]:
        raise RuntimeError("bug in attribution")

    snapshot = sampler(clock, attribute_processes=Attributor(broken)).sample_once()
    assert snapshot.stages["processes"].success is False
    assert [d.up for d in snapshot.devices] == [True, True]
    assert all(d.attribution is None for d in snapshot.devices)


def test_a_lost_gpu_or_nvml_down_fails_the_devices_stage() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(2, clock=clock.wall, faults=Faults(lost=frozenset({1})))
    s = sampler(clock, backend)
    assert s.sample_once().stages["devices"].success is False
    backend.faults = Faults(init_error="driver_not_loaded")
    clock.now += 1
    assert s.sample_once().stages["devices"].success is False
    backend.faults = Faults()
    clock.now += 100
    assert s.sample_once().stages["devices"].success is True


def test_a_failed_publication_is_the_next_samples_render_failure() -> None:
    clock = FakeClock()
    calls: list[int] = []

    def publish(snapshot: Snapshot) -> None:
        calls.append(snapshot.samples_total)
        if len(calls) == 1:
            raise ValueError("render bug")

    s = sampler(clock, on_snapshot=publish)
    s.sample_once()
    assert s.sample_once().stages["render"].success is False
    assert s.sample_once().stages["render"].success is True


def test_stages_of_collectors_that_are_off_are_absent() -> None:
    clock = FakeClock()
    s = Sampler(
        SimulatedBackend(1, clock=clock.wall),
        interval_seconds=1.0,
        timeout_seconds=2.0,
        collectors=frozenset({"memory"}),
        read_host=lambda: HOST,
        xid=Xid(True),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    assert set(s.sample_once().stages) == {"devices"}
