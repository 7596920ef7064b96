"""NVIDIA's DRA device names read back from NVML alone (issue 29, item 1).

The names are those of NVIDIA/k8s-dra-driver-gpu (`CanonicalName`): `gpu-<minor>`, and
for a MIG device `gpu-<minor>-mig-<profile id>-<start>-<size>` (v25.3 to v25.8) or
`gpu-<minor>-mig-<profile name>-<profile id>-<start>` (v25.12 on). The NVML side runs
through the real pynvml against the fake library: minor numbers that are not the
indices, and each GPU instance's placement from nvmlGpuInstanceGetInfo, read when the
MIG devices are enumerated and not every interval.
"""

from __future__ import annotations

import pynvml
import pytest

from gpu_exporter.attribution.dra import DraName, is_host_gpu, parse
from gpu_exporter.attribution.kubernetes import KubernetesAttributor
from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.model import ContainerDevices, DraDevice, KubeletReading, KubernetesState
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.nvml import PynvmlBackend
from tests.support.clock import FakeClock
from tests.support.fake_host import advance
from tests.support.fake_nvml import FakeGpu, FakeMigDevice, FakeNvmlLib, Install, h100

GIB = 2**30
MIG_NAME = "NVIDIA H100 80GB HBM3 MIG "
COLLECTED = frozenset(c.name for c in COLLECTORS if c.default_enabled) - {"host", "xid"}
INTERVALS = 180  # three MIG enumerations after the first, at a 1 s interval


# The names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("gpu-0", DraName(0)),
        ("gpu-13", DraName(13)),
        ("gpu-1-mig-19-4-1", DraName(1, 19, 4, 1)),  # NVIDIA's example: a 1g.10gb, v25.3
        ("gpu-6-mig-3g40gb-9-0", DraName(6, 9, 0)),  # v25.12 on
        ("gpu-0-mig-1g10gb-me-20-3", DraName(0, 20, 3)),  # "1g.10gb+me", made RFC 1123
        ("gpu-0-mig-1c3g40gb-9-4", DraName(0, 9, 4)),
    ],
)
def test_the_dra_drivers_names_parse(name: str, parsed: DraName) -> None:
    assert parse(name) == parsed


@pytest.mark.parametrize(
    "name",
    [
        *(
            "",
            "gpu-",
            "gpu-x",
            "nvidia0",
            "GPU-0",
            "gpu-0-mig",
            "gpu-1-mig-19-4",
            "gpu-1-mig-a-b-c",
        ),
        # the driver writes %d: no leading zero, no sign, ASCII digits only
        *(
            "gpu-02",
            "gpu-+2",
            "gpu-1-mig-019-4-1",
            "gpu-\u0663",
            "gpu-\uff10",
            "gpu-1-mig-\u0669-4-1",
        ),
        "gpu-1-mig-3g40gb-9-\uff10",
        "gpu-1-mig-" + "a" * 50 + "-9-0",  # 64 characters: longer than a DNS label
    ],
)
def test_other_names_do_not_parse(name: str) -> None:
    assert parse(name) is None


def test_passthrough_gpus_and_other_drivers_devices_are_not_read() -> None:
    def device(driver: str, name: str) -> DraDevice:
        return DraDevice("c", "ns", driver, "node-a", name)

    assert is_host_gpu(device("gpu.nvidia.com", "gpu-0"))
    assert is_host_gpu(device("gpu.nvidia.com", "garbage"))  # read, and explained
    assert not is_host_gpu(device("gpu.nvidia.com", "gpu-vfio-0"))
    assert not is_host_gpu(device("compute-domain.nvidia.com", "channel-0"))


# From NVML, through the real pynvml --------------------------------------------------


def mig_gpu(minor: int) -> FakeGpu:
    """An H100 in MIG mode: a 3g.40gb GPU instance 2 at slices 4-7 (two compute
    instances) and a 1g.10gb GPU instance 9 at slice 1."""
    gpu = h100(1)
    gpu.minor = minor
    gpu.mig = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
    gpu.samples = {}
    gpu.utilization_percent = None
    big = (40 * GIB, GIB)
    gpu.mig_devices = [
        FakeMigDevice(0, 2, 0, "MIG-a", MIG_NAME + "3g.40gb", big, placement=(9, 4, 4)),
        FakeMigDevice(3, 2, 1, "MIG-b", MIG_NAME + "3g.40gb", big, placement=(9, 4, 4)),
        FakeMigDevice(5, 9, 0, "MIG-c", MIG_NAME + "1g.10gb", (10 * GIB, 0), placement=(19, 1, 1)),
    ]
    return gpu


def claimed(*names: str) -> KubeletReading:
    return KubeletReading(
        allocations=tuple(
            ContainerDevices(
                "ml",
                f"pod-{i}",
                "c",
                "gpu.nvidia.com",
                (name,),
                DraDevice(f"claim-{i}", "ml", "gpu.nvidia.com", "node-a", name),
            )
            for i, name in enumerate(names)
        )
    )


class Node:
    """GPU 0 is /dev/nvidia2 (a whole H100), GPU 1 /dev/nvidia0 in MIG mode."""

    def __init__(self, install: Install, reading: KubeletReading) -> None:
        self.whole = h100(0)
        self.whole.minor = 2
        self.lib = install(FakeNvmlLib([self.whole, mig_gpu(0)]))
        self.clock = FakeClock()
        self.backend = PynvmlBackend(monotonic=self.clock.monotonic)
        self.backend.init()
        attributor = KubernetesAttributor()
        self.sampler = Sampler(
            self.backend,
            interval_seconds=1.0,
            timeout_seconds=5.0,
            collectors=COLLECTED | {"kubernetes"},
            attribute_kubernetes=lambda devices: attributor(devices, reading),
            clock=self.clock.wall,
            monotonic=self.clock.monotonic,
        )

    def sample(self) -> KubernetesState:
        self.clock.now += 1.0
        advance(self.whole, int(self.clock.monotonic() * 1e6) + 1_000_000)
        snapshot = self.sampler.sample_once()
        assert snapshot.kubernetes is not None
        return snapshot.kubernetes


def test_claims_resolve_by_minor_number_and_gpu_instance_placement(install: Install) -> None:
    node = Node(install, claimed("gpu-2", "gpu-0-mig-9-4-4", "gpu-0-mig-1g10gb-19-1"))
    state = node.sample()
    assert state.up and state.reason is None
    assert {(a.gpu, a.gpu_instance, a.pod) for a in state.allocations} == {
        (0, "", "pod-0"),
        (1, "2", "pod-1"),
        (1, "9", "pod-2"),
    }
    assert node.backend.errors.snapshot() == {}
    node.sampler.stop(0)


def test_placements_are_read_when_the_mig_devices_are_and_not_every_interval(
    install: Install,
) -> None:
    node = Node(install, claimed("gpu-0-mig-9-4-4"))
    for _ in range(INTERVALS):
        state = node.sample()
    assert state.up and len(state.allocations) == 1
    enumerations = 1 + INTERVALS // 60
    # two GPU instances: one question each per enumeration, however many MIG devices
    assert node.lib.count("nvmlDeviceGetGpuInstanceById") <= 2 * enumerations
    assert node.lib.count("nvmlGpuInstanceGetInfo") <= 2 * enumerations
    node.sampler.stop(0)


def test_without_root_the_placement_is_refused_quietly_and_the_reason_says_so(
    install: Install,
) -> None:
    node = Node(install, claimed("gpu-2", "gpu-0-mig-9-4-4"))
    node.lib.fail["nvmlDeviceGetGpuInstanceById"] = pynvml.NVML_ERROR_NO_PERMISSION
    for _ in range(INTERVALS):
        state = node.sample()
    assert [(a.gpu, a.gpu_instance) for a in state.allocations] == [(0, "")]
    assert state.up  # the whole GPU's claim matched
    assert "gpu-0-mig-9-4-4" in (state.reason or "")
    assert "NVML did not give the MIG placement (it needs root)" in (state.reason or "")
    assert node.backend.errors.snapshot() == {}  # an expected answer, not an error
    assert node.lib.count("nvmlDeviceGetGpuInstanceById") <= 1 + INTERVALS // 60
    node.sampler.stop(0)
