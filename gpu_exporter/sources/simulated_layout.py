"""The simulated host's hardware: which profile each GPU follows, the MIG instances of
the MIG-partitioned one, and the GPUs' minor numbers. Shared by the backend
(`simulated.py`) and the scenario file's checks (`scenario.py`), which may place a
process on one of those instances.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.model import MigPlacement
from gpu_exporter.records import Record

PROFILES = ("input-starved", "idle-allocated", "near-oom", "busy-hot")
MIG_PROFILE = "busy-hot"
MIB = 1024**2


@dataclass(frozen=True, repr=False)
class SimulatedInstance(Record):
    """A MIG GPU instance of the busy-hot GPU (one compute instance each, id 0)."""

    gpu_instance: int
    profile: str
    memory_total_bytes: int
    memory_used_bytes: int  # with no scenario process on it
    busy: bool  # runs the built-in inference server
    placement: MigPlacement  # an H100 80GB's profile id and memory slices


MIG_INSTANCES: tuple[SimulatedInstance, ...] = (
    SimulatedInstance(2, "3g.40gb", 40448 * MIB, 35 * 1024 * MIB, True, MigPlacement(9, 0, 4)),
    SimulatedInstance(3, "2g.20gb", 20096 * MIB, 13 * MIB, False, MigPlacement(14, 4, 2)),
    SimulatedInstance(9, "1g.10gb", 9984 * MIB, 13 * MIB, False, MigPlacement(19, 6, 1)),
)


def profile(index: int) -> str:
    """The profile GPU `index` follows (they repeat every four GPUs)."""
    return PROFILES[index % len(PROFILES)]


def mig_instances(index: int) -> tuple[SimulatedInstance, ...]:
    """GPU `index`'s MIG instances; none when it is not MIG-partitioned."""
    return MIG_INSTANCES if profile(index) == MIG_PROFILE else ()


def minor_number(index: int, gpus: int) -> int:
    """The N of GPU `index`'s /dev/nvidiaN: counting down from the last, so that it differs
    from the NVML index, as on hosts where the driver numbered the boards in another order."""
    return gpus - 1 - index
