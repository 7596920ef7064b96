"""The simulated host's built-in tenants, through the real sampler and attributor."""

from __future__ import annotations

import os

import pytest

from gpu_exporter.attribution.processes import ProcessAttributor
from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.model import Snapshot
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sources.scenario import Scenario, SimulatedProcess
from gpu_exporter.sources.simulated import SimulatedBackend
from gpu_exporter.sources.simulated_tenants import BUILTIN_PID_BASE
from tests.support.clock import FakeClock


def sampler(backend: SimulatedBackend, clock: FakeClock) -> Sampler:
    return Sampler(
        backend,
        interval_seconds=1.0,
        timeout_seconds=5.0,
        collectors=frozenset(c.name for c in COLLECTORS),
        attribute_processes=ProcessAttributor(lookup=backend.host_process),
        clock=clock.wall,
        monotonic=clock.monotonic,
    )


def two_samples(gpus: int, seconds: float = 10.0) -> tuple[Snapshot, Snapshot]:
    clock = FakeClock()
    s = sampler(SimulatedBackend(gpus, clock=clock.wall), clock)
    first = s.sample_once()
    clock.now += seconds
    second = s.sample_once()
    s.stop(0)
    return first, second


def test_training_job_on_the_flickering_gpu_has_four_busy_workers() -> None:
    first, second = two_samples(4)
    (a,) = first.devices[0].attribution.processes or ()
    (b,) = second.devices[0].attribution.processes or ()
    assert (b.process, b.user, b.workers) == ("python", "alice", 4)
    assert b.container_id and b.pod_uid and int(b.pid) >= BUILTIN_PID_BASE
    assert a.cpu_seconds is not None and b.cpu_seconds is not None
    cores = (b.cpu_seconds - a.cpu_seconds) / 10.0
    assert 4.0 <= cores <= 4.5  # the 4 workers flat out, the main process a little
    assert b.sm_ratio in (0.0, 0.95)


def test_idle_allocated_gpu_holds_leaked_memory_with_no_process() -> None:
    _, snapshot = two_samples(4)
    leaked = snapshot.devices[1]
    assert leaked.attribution.processes == ()
    assert leaked.reading is not None
    assert leaked.attribution.unattributed_memory_bytes == leaked.reading.memory.used_bytes > 0


def test_healthy_gpus_have_all_their_memory_attributed() -> None:
    _, snapshot = two_samples(8)
    for device in snapshot.devices:
        if device.index % 4 in (0, 2):
            assert device.attribution.unattributed_memory_bytes == 0, device.index
            assert device.attribution.processes, device.index


def test_on_the_mig_gpu_the_process_runs_on_an_instance_and_no_leak_is_guessed() -> None:
    _, snapshot = two_samples(8)
    for index in (3, 7):  # busy-hot: MIG-partitioned
        attribution = snapshot.devices[index].attribution
        assert attribution is not None
        (p,) = attribution.processes
        assert (p.process, p.gpu_instance, p.compute_instance) == ("tritonserver", "2", "0")
        assert p.memory_used_bytes == 35 * 2**30  # from the MIG device's own process list
        assert p.sm_ratio is None  # per-process utilization is not supported under MIG
        # each GPU instance holds memory no process accounts for: no leak is made up
        assert attribution.unattributed_memory_bytes is None


def test_every_profile_has_distinct_labels_per_gpu() -> None:
    _, snapshot = two_samples(8)
    jobs = {
        d.index: (d.attribution.processes or ())[0]
        for d in snapshot.devices
        if d.attribution.processes
    }
    assert jobs[0].container_id != jobs[4].container_id
    assert jobs[2].slurm_job_id and jobs[2].slurm_job_id != jobs[6].slurm_job_id
    assert (jobs[3].process, jobs[3].container_id != "") == ("tritonserver", True)


def test_scenario_processes_replace_the_built_in_ones() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(2, clock=clock.wall)
    backend._scenario = Scenario(
        processes=(SimulatedProcess(gpu=1, pid=os.getpid(), memory_bytes=2**30, sm_ratio=0.5),)
    )
    s = sampler(backend, clock)
    snapshot = s.sample_once()
    s.stop(0)
    assert snapshot.devices[0].attribution.processes == ()
    (p,) = snapshot.devices[1].attribution.processes or ()
    assert (p.pid, p.memory_used_bytes, p.sm_ratio) == (str(os.getpid()), 2**30, 0.5)
    assert backend.host_process(BUILTIN_PID_BASE + 1) is None


@pytest.mark.parametrize("pid", [1, BUILTIN_PID_BASE + 150, BUILTIN_PID_BASE + 99 * 100 + 1])
def test_host_process_answers_only_for_built_in_pids(pid: int) -> None:
    assert SimulatedBackend(4).host_process(pid) is None


def test_the_paraview_server_in_both_lists_is_one_process_with_its_memory_once() -> None:
    _, snapshot = two_samples(4)
    near_oom = snapshot.devices[2]
    assert near_oom.reading is not None and near_oom.attribution is not None
    processes = near_oom.attribution.processes
    assert [(p.process, p.context) for p in processes] == [
        ("python", "compute"),
        ("pvserver", "compute+graphics"),  # nvidia-smi's C+G
    ]
    used = near_oom.reading.memory.used_bytes
    assert sum(p.memory_used_bytes or 0 for p in processes) == used  # counted once
    assert near_oom.attribution.unattributed_memory_bytes == 0
    assert processes[1].sm_ratio == 0.0  # it ran no kernel: the GPU's activity is the job's


def test_a_scenario_process_may_be_compute_and_graphics() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(1, clock=clock.wall)
    backend._scenario = Scenario(
        processes=(
            SimulatedProcess(
                gpu=0, pid=os.getpid(), memory_bytes=2**20, context="compute+graphics"
            ),
        )
    )
    s = sampler(backend, clock)
    s.sample_once()
    assert {(p.context, p.used_memory_bytes) for p in backend.processes(0) or ()} == {
        ("compute", 2**20),
        ("graphics", 2**20),
    }  # as NVML lists it
    (p,) = s.sample_once().devices[0].attribution.processes or ()
    s.stop(0)
    assert (p.pid, p.context, p.memory_used_bytes) == (str(os.getpid()), "compute+graphics", 2**20)
