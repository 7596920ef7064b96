"""The real NVIDIA driver through pynvml: the only package of the exporter that imports it.

- `calls`: the choke point that classifies every NVML return code;
- `fields`: the one `nvmlDeviceGetFieldValues` batch per device and interval;
- `buffers`: single-call reads of the array answers into buffers kept per device;
- `gpm`: GPM activity streams (two reused samples per device or GPU instance);
- `mig`: MIG device enumeration;
- `backend`: `PynvmlBackend`, tying them together behind `sources.backend.Backend`;
- `binding`: pynvml itself, imported first, without the `ctypes.util` it never calls.
"""

from gpu_exporter.sources.nvml import binding  # noqa: F401  (first: pynvml, lean)
from gpu_exporter.sources.nvml.backend import PynvmlBackend, PynvmlEventSet

__all__ = ["PynvmlBackend", "PynvmlEventSet"]
