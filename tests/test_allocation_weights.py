"""The share of its GPU each Kubernetes allocation holds (`attribution/weights.py`)."""

from __future__ import annotations

import pytest

from gpu_exporter.attribution.weights import allocation_weights
from gpu_exporter.model import DeviceSample, GpuAllocation
from tests.support.snapshots import mig_snapshot

GIB = 1024**3
UUID = "GPU-00000000-0000-0000-0000-000000000000"


def given(gpu_instance: str, pod: str) -> GpuAllocation:
    return GpuAllocation(0, UUID, gpu_instance, "ml", pod, "main")


def mig(instances: dict[int, tuple[str, int | None]]) -> tuple[DeviceSample]:
    """The devices of one 80 GiB GPU with these MIG instances (profile, memory)."""
    snapshot = mig_snapshot(
        {gi: (profile, 0, memory, 0.0) for gi, (profile, memory) in instances.items()},
        (),
    )
    (device,) = snapshot.devices
    return (device,)


def test_a_whole_gpu_is_1_and_containers_sharing_it_get_1_over_n_each() -> None:
    (device,) = mig({})
    alone = given("", "a")
    assert allocation_weights([alone], [device]) == {alone: 1.0}
    shared = [given("", p) for p in ("a", "b", "c")]
    weights = allocation_weights(shared, [device])
    assert list(weights.values()) == pytest.approx([1 / 3] * 3)
    assert sum(weights.values()) == pytest.approx(1.0)


def test_a_mig_instance_weighs_the_larger_of_its_compute_and_memory_share() -> None:
    devices = mig({2: ("3g.40gb", 40 * GIB), 9: ("1g.10gb", 10 * GIB), 5: ("1c.2g.20gb", 4 * GIB)})
    a, b, c = given("2", "a"), given("9", "b"), given("5", "c")
    weights = allocation_weights([a, b, c], devices)
    assert weights[a] == pytest.approx(0.5)  # memory: 40 of 80 GiB beats 3 of 7 slices
    assert weights[b] == pytest.approx(1 / 7)  # compute: 1 of 7 beats 10 of 80 GiB
    assert weights[c] == pytest.approx(2 / 7)  # a compute instance's GPU instance: 2g


def test_instances_whose_shares_exceed_the_gpu_are_scaled_to_add_up_to_1() -> None:
    devices = mig({1: ("4g.40gb", 40 * GIB), 2: ("3g.40gb", 40 * GIB)})
    a, b = given("1", "a"), given("2", "b")
    weights = allocation_weights([a, b], devices)
    assert weights[a] + weights[b] == pytest.approx(1.0)
    assert weights[a] / weights[b] == pytest.approx((4 / 7) / 0.5)
    # a free instance still takes its share: the allocated one keeps its own
    assert allocation_weights([a], devices)[a] == pytest.approx(weights[a])


def test_an_instance_without_profile_or_memory_or_an_unknown_gpu_has_no_weight() -> None:
    devices = mig({4: ("", None)})
    unknown = given("4", "a")
    elsewhere = GpuAllocation(1, "GPU-other", "", "ml", "b", "main")
    assert allocation_weights([unknown, elsewhere], devices) == {elsewhere: 1.0}
    assert allocation_weights([given("7", "c")], devices) == {}


def test_replicas_weigh_what_each_holds_of_those_advertised_and_the_rest_is_nobodys() -> None:
    (device,) = mig({})
    a, b = given("", "a"), given("", "b")
    target = (0, UUID, "")
    # 1 of 4 replicas alone: a quarter, not the whole GPU; a neighbour changes nothing
    assert allocation_weights([a], [device], {a: 1}, {target: 4}) == {a: 0.25}
    weights = allocation_weights([a, b], [device], {a: 1, b: 2}, {target: 4})
    assert weights == {a: 0.25, b: 0.5}
    # advertised unknown (an older kubelet): 1/n of the containers, as before
    assert allocation_weights([a, b], [device], {a: 1, b: 2}, None) == {a: 0.5, b: 0.5}
    # replicas held that are no longer advertised still count: never more than the GPU
    stale = allocation_weights([a, b], [device], {a: 2, b: 3}, {target: 4})
    assert stale == {a: pytest.approx(0.4), b: pytest.approx(0.6)}


def test_replicas_of_a_mig_instance_are_shares_of_its_share() -> None:
    devices = mig({9: ("1g.10gb", 10 * GIB)})
    a = given("9", "a")
    weights = allocation_weights([a], devices, {a: 1}, {(0, UUID, "9"): 2})
    assert weights[a] == pytest.approx(1 / 7 / 2)
