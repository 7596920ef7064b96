"""Where each GPU instance of a MIG GPU sits: its profile id and memory-slice placement.

NVIDIA's DRA driver (`gpu.nvidia.com`) names a MIG device by these, so the kubernetes
collector can tell which GPU instance a claim holds without asking the API server
(`attribution/dra.py`). Two calls per GPU instance, `nvmlDeviceGetGpuInstanceById` and
`nvmlGpuInstanceGetInfo` (`nvidia-smi mig -lgi` shows the same), made only when the MIG
devices are enumerated (`mig.enumerate_mig`), never every interval.

NVML asks for a privileged user here: as any other user the calls answer NO_PERMISSION,
an expected answer, not an error (NOT_FOUND too: the instance went away since it was
listed). The placement is then None, and the first unanswered instance ends the asking
until the next enumeration; NOT_SUPPORTED is remembered on the parent as usual.
"""

from __future__ import annotations

import pynvml

from gpu_exporter.model import MigPlacement
from gpu_exporter.sources.nvml.calls import Device, NvmlCalls

_QUIET = frozenset({pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_NOT_FOUND})
KEY = "gpu_instance_placement"  # remembered as unsupported on the parent under this key


class GpuInstancePlacements:
    """The placements of one GPU's instances, read once each during one enumeration."""

    def __init__(self, calls: NvmlCalls, parent: Device) -> None:
        self._calls = calls
        self._parent = parent
        self._read: dict[int, MigPlacement | None] = {}  # by GPU instance id
        self._refused = False  # one went unanswered: ask no more in this enumeration

    def of(self, gpu_instance: int) -> MigPlacement | None:
        """GPU instance `gpu_instance`'s placement; None where NVML does not say."""
        if gpu_instance not in self._read:
            placement = None if self._refused else self._ask(gpu_instance)
            self._refused = placement is None
            self._read[gpu_instance] = placement
        return self._read[gpu_instance]

    def _ask(self, gpu_instance: int) -> MigPlacement | None:
        calls, parent = self._calls, self._parent
        handle = calls.call(
            "nvmlDeviceGetGpuInstanceById",
            pynvml.nvmlDeviceGetGpuInstanceById,
            parent.handle,
            gpu_instance,
            device=parent,
            key=KEY,
            quiet=_QUIET,
        )
        if handle is None:
            return None
        info = calls.call(
            "nvmlGpuInstanceGetInfo",
            pynvml.nvmlGpuInstanceGetInfo,
            handle,
            device=parent,
            key=KEY,
            quiet=_QUIET,
        )
        if info is None:
            return None
        return MigPlacement(
            profile_id=int(info.profileId),
            start=int(info.placement.start),
            size=int(info.placement.size),
        )
