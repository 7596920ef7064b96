"""The processes a simulated host runs unless its scenario file lists its own.

Each profile of `simulated.py` has a plausible tenant:

- `input-starved`: a PyTorch training job in a Kubernetes pod whose 4 DataLoader workers
  keep 4 cores busy, yet cannot feed the GPU (utilization flickers between 0 and 95%);
- `idle-allocated`: no live process. A job crashed while a process it forked kept the
  device files open: the driver still lists the dead owner's PID with all the memory, as
  R580 does (nvidia-smi prints `[No data]`), so it is a dead owner
  (`gpu_memory_dead_owner_info`) and all the memory shows in
  `gpu_memory_unattributed_bytes`;
- `near-oom`: a Slurm fine-tuning job using nearly all the memory, beside a ParaView
  server of another job that renders offscreen with OpenGL and computes with CUDA: a
  process in both of NVML's lists, which nvidia-smi shows once as type C+G;
- `busy-hot`: an inference server in a Docker container.

Their PIDs start above Linux's largest possible PID (4194304), so they never name a real
process, and their host side (name, user, cgroup, CPU) comes from here, not from /proc.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from gpu_exporter.digest import sha256_hex
from gpu_exporter.model import CgroupLabels, ProcessContext
from gpu_exporter.records import Record

BUILTIN_PID_BASE = 5_000_000  # > PID_MAX_LIMIT (2**22): never a real PID
PIDS_PER_GPU = 100
GIB = 1024**3


@dataclass(frozen=True, repr=False)
class BuiltinProcess(Record):
    """One simulated tenant process; its GPU memory is a share of the GPU's used memory."""

    offset: int  # pid = BUILTIN_PID_BASE + gpu * PIDS_PER_GPU + offset
    process: str
    user: str
    cmdline: str
    runtime: str  # "kubernetes", "docker", "slurm" or "" (how its cgroup labels look)
    memory_share: float  # of the GPU's used memory, 0..1
    cpu_cores: float  # CPU seconds per second of the process and its descendants
    workers: int  # descendant processes
    resident_memory_bytes: int
    age_seconds: float  # started this long before the simulated driver load (fixed)
    contexts: tuple[ProcessContext, ...] = ("compute",)  # the NVML lists it is in
    sm_share: float = 1.0  # of the GPU's SM activity, 0..1
    dead: str = ""  # "gone": a crashed owner the driver still lists (`HostProcess.dead`)


PROFILE_PROCESSES: dict[str, tuple[BuiltinProcess, ...]] = {
    "input-starved": (
        BuiltinProcess(
            offset=1,
            process="python",
            user="alice",
            cmdline="python train.py --config configs/resnet50.yaml --data /datasets/imagenet "
            "--batch-size 256 --num-workers 4",
            runtime="kubernetes",
            memory_share=1.0,
            cpu_cores=0.35 + 4 * 0.97,  # the main process, plus 4 workers flat out
            workers=4,
            resident_memory_bytes=9 * GIB,
            age_seconds=3 * 3600.0,
        ),
    ),
    "idle-allocated": (
        BuiltinProcess(
            offset=1,
            process="python",
            user="bob",
            cmdline="python train.py --config configs/vit-l.yaml",
            runtime="kubernetes",
            memory_share=1.0,
            cpu_cores=0.0,
            workers=0,
            resident_memory_bytes=0,
            age_seconds=6 * 3600.0,
            sm_share=0.0,
            dead="gone",
        ),
    ),
    "near-oom": (
        BuiltinProcess(
            offset=1,
            process="python",
            user="carol",
            cmdline="python finetune.py --model llama-3-8b --batch-size 16 --grad-accum 8",
            runtime="slurm",
            memory_share=0.98,
            cpu_cores=1.1,
            workers=2,
            resident_memory_bytes=22 * GIB,
            age_seconds=9 * 3600.0,
        ),
        BuiltinProcess(
            offset=2,
            process="pvserver",
            user="dave",
            cmdline="pvserver --force-offscreen-rendering --displays=:0",
            runtime="slurm",
            memory_share=0.02,
            cpu_cores=0.05,
            workers=0,
            resident_memory_bytes=3 * GIB,
            age_seconds=5 * 3600.0,
            contexts=("compute", "graphics"),
            sm_share=0.0,  # waiting for a client: it ran no kernel
        ),
    ),
    "busy-hot": (
        BuiltinProcess(
            offset=1,
            process="tritonserver",
            user="triton-server",
            cmdline="tritonserver --model-repository=/models --http-port=8000",
            runtime="docker",
            memory_share=1.0,
            cpu_cores=2.4,
            workers=0,
            resident_memory_bytes=5 * GIB,
            age_seconds=2 * 86400.0,
        ),
    ),
}


def builtin_pid(gpu: int, process: BuiltinProcess) -> int:
    return BUILTIN_PID_BASE + gpu * PIDS_PER_GPU + process.offset


def split_pid(pid: int) -> tuple[int, int] | None:
    """(gpu, offset) of a built-in PID, or None for any other PID."""
    if pid < BUILTIN_PID_BASE:
        return None
    return divmod(pid - BUILTIN_PID_BASE, PIDS_PER_GPU)


def labels(gpu: int, process: BuiltinProcess) -> CgroupLabels:
    """Stable, made-up attribution labels of one built-in process."""
    digest = sha256_hex(f"{gpu}/{process.offset}/{process.cmdline}".encode())
    if process.runtime == "kubernetes":
        return CgroupLabels(container_id=digest, pod_uid=str(uuid.UUID(digest[:32])))
    if process.runtime == "docker":
        return CgroupLabels(container_id=digest)
    if process.runtime == "slurm":
        return CgroupLabels(
            systemd_unit="slurmstepd.scope", slurm_job_id=str(48213 + gpu * 7 + process.offset)
        )
    return CgroupLabels()
