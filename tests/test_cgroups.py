"""Attribution labels parsed from fixture `/proc/PID/cgroup` files of every runtime and version."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.attribution.cgroups import CgroupLabels, cgroup_paths, parse_cgroup

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"
ID = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00998877665544332211"
POD = "0d3c8b2e-6f1a-4b7c-9e2d-5a6b7c8d9e0f"

EXPECTED: dict[str, CgroupLabels] = {
    # Docker: cgroupfs and systemd drivers, cgroup v1 and v2, and a private cgroup namespace
    "docker-v1-cgroupfs.txt": CgroupLabels(container_id=ID),
    "docker-v1-systemd.txt": CgroupLabels(container_id=ID),
    "docker-v2-systemd.txt": CgroupLabels(container_id=ID),
    "docker-v2-cgroupfs.txt": CgroupLabels(container_id=ID),
    "docker-v2-cgroupns.txt": CgroupLabels(container_id=ID),
    # containerd without Kubernetes (ctr, nerdctl)
    "containerd-v2-cgroupfs.txt": CgroupLabels(container_id=ID),
    "containerd-v2-nerdctl.txt": CgroupLabels(container_id=ID),
    # kubelet with containerd and CRI-O, both drivers and versions
    "kubelet-containerd-v1-cgroupfs.txt": CgroupLabels(container_id=ID, pod_uid=POD),
    "kubelet-containerd-v2-systemd.txt": CgroupLabels(container_id=ID, pod_uid=POD),
    "kubelet-crio-v2-systemd.txt": CgroupLabels(container_id=ID, pod_uid=POD),
    "kubelet-crio-v1-systemd.txt": CgroupLabels(container_id=ID, pod_uid=POD),
    "kubelet-v2-cgroupfs.txt": CgroupLabels(container_id=ID, pod_uid=POD),
    # conmon monitors a container but is not in it
    "crio-conmon-v2.txt": CgroupLabels(pod_uid=POD),
    "podman-conmon-v2.txt": CgroupLabels(systemd_unit="user@1000.service"),
    # Podman rootful and rootless, v1 and v2
    "podman-v2-rootful.txt": CgroupLabels(container_id=ID),
    "podman-v2-rootless.txt": CgroupLabels(container_id=ID),
    "podman-v1-cgroupfs.txt": CgroupLabels(container_id=ID),
    "podman-v1-systemd.txt": CgroupLabels(container_id=ID),
    # systemd services, user services and login sessions
    "systemd-v2-service.txt": CgroupLabels(systemd_unit="train.service"),
    "systemd-v1-service.txt": CgroupLabels(systemd_unit="train.service"),
    "systemd-v2-session.txt": CgroupLabels(systemd_unit="session-4.scope"),
    "systemd-v2-user-service.txt": CgroupLabels(systemd_unit="jupyter.service"),
    # Slurm job steps
    "slurm-v2.txt": CgroupLabels(systemd_unit="slurmstepd.scope", slurm_job_id="48213"),
    "slurm-v1.txt": CgroupLabels(systemd_unit="slurmd.service", slurm_job_id="48213"),
    # nothing to say
    "v2-root.txt": CgroupLabels(),
    "empty.txt": CgroupLabels(),
}


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in FIXTURES.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cgroup_file_yields_its_owners_labels(name: str) -> None:
    assert parse_cgroup((FIXTURES / name).read_text()) == EXPECTED[name]


def test_unified_line_is_read_before_the_legacy_hierarchies() -> None:
    text = "4:memory:/docker/x\n0::/system.slice/a.service\n"
    assert cgroup_paths(text) == ["/system.slice/a.service", "/docker/x"]


def test_container_on_a_hybrid_host_drops_the_runtimes_own_unit() -> None:
    # the v2 line names containerd.service, the v1 lines the container inside it
    labels = parse_cgroup((FIXTURES / "docker-v1-cgroupfs.txt").read_text())
    assert labels.systemd_unit == ""


def test_short_or_uppercase_ids_are_not_container_ids() -> None:
    assert parse_cgroup("0::/docker/3f4e5d6c7b8a\n").container_id == ""
    assert parse_cgroup(f"0::/docker/{ID.upper()}\n").container_id == ""


def test_static_pod_uid_without_dashes() -> None:
    uid = "6d8f1f7b27e1b0e1b5b1d2d8c7b0f6f5"
    assert parse_cgroup(f"0::/kubepods/pod{uid}/{ID}\n").pod_uid == uid


def test_malformed_lines_are_ignored() -> None:
    assert parse_cgroup("garbage\n\n:\n") == CgroupLabels()
