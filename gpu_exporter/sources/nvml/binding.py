"""pynvml imported without `ctypes.util`, which it names and never calls on Linux.

nvidia-ml-py's pynvml starts with `from ctypes.util import find_library`, used only to
find `nvml.dll` on Windows; on Linux it opens `libnvidia-ml.so.1` by name. Python 3.11's
`ctypes.util` imports `shutil`, `subprocess` and `tempfile` at its top, and they `bz2`,
`lzma` and `random`: 1.3 MiB of the exporter's resident memory (benchmarks/README.md,
"the judge's resident memory"), a twentieth of it, for a function never called. So
pynvml is imported here once, first, with a stand-in `ctypes.util` whose `find_library`
imports the real module on its first call; the stand-in is gone from `sys.modules`
afterwards, so any later `import ctypes.util` gets the real one.
"""

from __future__ import annotations

import importlib
import sys
import types


def _find_library(name: str) -> str | None:
    """`ctypes.util.find_library`, imported when first asked (never, on Linux); asked
    while pynvml is still being imported, the stand-in steps aside first."""
    if getattr(sys.modules.get("ctypes.util"), "find_library", None) is _find_library:
        del sys.modules["ctypes.util"]
    real: types.ModuleType = importlib.import_module("ctypes.util")
    found: str | None = real.find_library(name)
    return found


def _import_pynvml() -> types.ModuleType:
    if "pynvml" in sys.modules or "ctypes.util" in sys.modules:
        return importlib.import_module("pynvml")
    stand_in = types.ModuleType("ctypes.util", "stands in while pynvml is imported")
    stand_in.find_library = _find_library  # type: ignore[attr-defined]
    sys.modules["ctypes.util"] = stand_in
    try:
        return importlib.import_module("pynvml")
    finally:
        if sys.modules.get("ctypes.util") is stand_in:
            del sys.modules["ctypes.util"]


pynvml = _import_pynvml()
