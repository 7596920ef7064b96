"""Which fabric daemon a node needs, and when the exporter looks for it
(`sources/fabric_daemons.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.model import (
    DeviceReading,
    DeviceSample,
    DeviceStatic,
    FabricReading,
    HealthReading,
)
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.fabric_daemons import (
    FabricDaemonWatch,
    host_processes,
    nvswitches_present,
    required,
    running,
)
from gpu_exporter.sources.scenario import Faults
from gpu_exporter.sources.simulated import SimulatedBackend
from tests.support.clock import FakeClock

REGISTERED = FabricReading(state="completed", status="success", clique_id=1)


def gpu(name: str, fabric: FabricReading | None, *, up: bool = True) -> DeviceSample:
    static = DeviceStatic(
        index=0,
        uuid="GPU-0",
        name=name,
        pci_bus_id=None,
        serial=None,
        vbios_version=None,
        compute_capability=None,
        max_clocks_hertz={},
        slowdown_temperature_celsius=None,
        shutdown_temperature_celsius=None,
        pcie_max_generation=None,
        pcie_max_width=None,
    )
    reading = DeviceReading(health=HealthReading(fabric=fabric)) if up else None
    return DeviceSample(index=0, static=static, up=up, reading=reading)


@pytest.mark.parametrize(
    ("devices", "fabric_manager", "imex"),
    [
        ([gpu("NVIDIA H100 80GB HBM3", REGISTERED)], True, False),  # HGX board
        ([gpu("NVIDIA B200", FabricReading(state="not_started"))], True, False),  # FM down
        ([gpu("NVIDIA GB200", REGISTERED)], False, True),  # NVL72 tray
        ([gpu("NVIDIA GB300", FabricReading(state="in_progress"))], False, True),
        ([gpu("NVIDIA L40S", None), gpu("NVIDIA H100 PCIe", None)], False, False),  # PCIe
        ([gpu("NVIDIA H100 80GB HBM3", REGISTERED, up=False)], False, False),  # down: unknown
        ([], False, False),
    ],
    ids=["hgx", "hgx-unregistered", "gb200", "gb300", "pcie", "down", "none"],
)
def test_the_daemon_the_gpus_need(
    devices: list[DeviceSample], fabric_manager: bool, imex: bool
) -> None:
    assert required(devices) == {"nv-fabricmanager": fabric_manager, "nvidia-imex": imex}


@pytest.mark.parametrize(
    ("nvswitches", "fabric_manager"),
    [(True, True), (False, False), (None, True)],
    ids=["switches-on-the-node", "pass-through-vm", "bus-unreadable"],
)
def test_fabric_manager_is_needed_where_the_nvswitches_are(
    nvswitches: bool | None, fabric_manager: bool
) -> None:
    """A VM given one GPU of an HGX board sees its fabric registration completed (the
    H100 SXM captures), while Fabric Manager runs in the hypervisor's service VM beside the
    switches: no page for a daemon the guest cannot run. The IMEX daemon is the tray's own."""
    hgx = [gpu("NVIDIA H100 80GB HBM3", REGISTERED)]
    assert required(hgx, nvswitches) == {"nv-fabricmanager": fabric_manager, "nvidia-imex": False}
    tray = [gpu("NVIDIA GB200", REGISTERED)]
    assert required(tray, nvswitches) == {"nv-fabricmanager": False, "nvidia-imex": True}


def _pci(root: Path, address: str, vendor: bytes, cls: bytes) -> None:
    device = root / "bus/pci/devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_bytes(vendor + b"\n")
    (device / "class").write_bytes(cls + b"\n")


def test_an_nvswitch_is_told_by_its_pci_vendor_and_class(tmp_path: Path) -> None:
    """An HGX H100 board's NVSwitch is a bridge (class 0x0680) of NVIDIA's (0x10de); its
    GPUs (0x0302), a Mellanox bridge or an unreadable bus are not."""
    assert nvswitches_present(str(tmp_path)) is None
    _pci(tmp_path, "0000:18:00.0", b"0x10de", b"0x030200")  # H100 SXM: 3D controller
    _pci(tmp_path, "0000:19:00.0", b"0x15b3", b"0x068000")  # not NVIDIA's bridge
    assert nvswitches_present(str(tmp_path)) is False
    _pci(tmp_path, "0000:05:00.0", b"0x10de", b"0x068000")  # H100 NVSwitch (10de:22a3)
    assert nvswitches_present(str(tmp_path)) is True


def test_the_pci_bus_is_read_only_while_a_gpu_has_a_fabric_and_then_rarely() -> None:
    clock = FakeClock()
    asked: list[float] = []

    def switches() -> bool:
        asked.append(clock.monotonic())
        return False

    watch = FabricDaemonWatch(Looks({}), nvswitches=switches, monotonic=clock.monotonic)
    assert watch([gpu("NVIDIA L40S", None)]).required["nv-fabricmanager"] is False
    assert asked == []
    for _ in range(70):  # 350 s of 5 s samples
        state = watch([gpu("NVIDIA H100 80GB HBM3", REGISTERED)])
        clock.now += 5.0
    assert state.required == {"nv-fabricmanager": False, "nvidia-imex": False}
    assert len(asked) == 2  # at the first sample with a fabric, and 300 s later


class Looks:
    """A `Look` that records what it was asked and answers `answer`."""

    def __init__(self, answer: dict[str, bool] | None) -> None:
        self.answer = answer
        self.asked: list[list[str]] = []

    def __call__(self, daemons: Sequence[str]) -> dict[str, bool] | None:
        self.asked.append(list(daemons))
        return None if self.answer is None else {d: self.answer[d] for d in daemons}


def test_proc_is_looked_at_every_15_seconds_and_only_while_a_gpu_needs_a_daemon() -> None:
    clock = FakeClock()
    look = Looks({"nv-fabricmanager": True, "nvidia-imex": False})
    watch = FabricDaemonWatch(look, monotonic=clock.monotonic)
    pcie = [gpu("NVIDIA L40S", None)]
    for _ in range(3):
        state = watch(pcie)
        clock.now += 5
    assert look.asked == [] and state.running == {}  # no daemon needed: no walk of /proc
    hgx = [gpu("NVIDIA H100 80GB HBM3", REGISTERED)]
    for _ in range(4):  # 0, 5, 10, 15 s
        state = watch(hgx)
        clock.now += 5
    assert look.asked == [["nv-fabricmanager"], ["nv-fabricmanager"]]
    assert state.running == {"nv-fabricmanager": True}
    assert state.required == {"nv-fabricmanager": True, "nvidia-imex": False}
    # the GPUs' needs change (a tray's GPUs appear): looked at at once
    watch([gpu("NVIDIA GB200", REGISTERED)])
    assert look.asked[-1] == ["nvidia-imex"]


def test_a_daemon_that_cannot_be_seen_is_left_out_not_reported_down(tmp_path: Path) -> None:
    """A container without the host's PID namespace: /proc is its own."""
    look = host_processes(str(tmp_path), lambda _root: False)
    state = FabricDaemonWatch(look)([gpu("NVIDIA GB200", REGISTERED)])
    assert state.required["nvidia-imex"] is True
    assert state.running == {}


def _process(proc: Path, pid: int, comm: bytes, cmdline: bytes) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "comm").write_bytes(comm)
    (proc / str(pid) / "cmdline").write_bytes(cmdline)


def test_running_reads_the_command_name_and_the_program(tmp_path: Path) -> None:
    _process(tmp_path, 10, b"nv-fabricmanage\n", b"/usr/bin/nv-fabricmanager\0-c\0/etc/fm.cfg\0")
    _process(tmp_path, 11, b"nvidia-imex\n", b"")  # a zombie: no command line
    _process(tmp_path, 12, b"bash\n", b"/usr/bin/nvidia-imex\0")  # a wrapper: not the daemon
    (tmp_path / "self").mkdir()
    assert running(str(tmp_path), ["nv-fabricmanager", "nvidia-imex"]) == {
        "nv-fabricmanager": True,
        "nvidia-imex": False,
    }
    _process(tmp_path, 13, b"nvidia-imex\n", b"nvidia-imex\0-c\0/etc/nvidia-imex/config.cfg\0")
    assert running(str(tmp_path), ["nvidia-imex"]) == {"nvidia-imex": True}


def test_an_unreadable_proc_says_not_running_only_for_what_was_asked(tmp_path: Path) -> None:
    assert running(str(tmp_path / "missing"), ["nvidia-imex"]) == {"nvidia-imex": False}


def test_a_huge_command_line_is_read_only_as_far_as_its_bound(tmp_path: Path) -> None:
    _process(tmp_path, 20, b"nvidia-imex\n", b"nvidia-imex\0" + b"x" * 10_000_000)
    assert running(str(tmp_path), ["nvidia-imex"]) == {"nvidia-imex": True}


def test_no_daemon_series_while_nvml_is_down_and_both_when_it_is_up() -> None:
    """Without the GPUs the exporter cannot say what they need: nothing, never a 0."""
    clock = FakeClock()
    backend = SimulatedBackend(
        2, clock=clock.wall, faults=Faults(init_error="driver_not_loaded"), hardware="gb200-nvl72"
    )
    sampler = Sampler(
        backend,
        interval_seconds=5.0,
        timeout_seconds=5.0,
        collectors=frozenset({"health", "nvlink"}),
        fabric_daemons=FabricDaemonWatch(backend.daemons_running, monotonic=clock.monotonic),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )
    down = sampler.sample_once()
    assert down.fabric_daemons is None
    text = Exposition(down).body(openmetrics=False, compressed=False).decode()
    assert "gpu_fabric_daemon_required{" not in text and "gpu_fabric_daemon_up{" not in text
    backend.faults = Faults()
    clock.now += 5.0
    up = sampler.sample_once()
    sampler.stop(0)
    assert up.fabric_daemons is not None
    assert up.fabric_daemons.required == {"nv-fabricmanager": False, "nvidia-imex": True}
    assert up.fabric_daemons.running == {"nvidia-imex": True}
