"""Puts a real GPU capture's fake libnvidia-ml (tests/support/capture_hosts.py) in pynvml's
place in any Python program started with this directory on its PYTHONPATH, so a test can
scrape the real daemon over HTTP as it runs on that captured host.

Python imports `sitecustomize` at start-up; this one does nothing unless asked:

- FAKE_NVML_CAPTURE: the capture file (tests/fixtures/nvidia-smi/*.txt; unset: do nothing);
- FAKE_NVML_CAPTURE_STATE: `idle` (the default) or `load`.
"""

from __future__ import annotations

import os


def _install() -> None:
    import sys
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parents[3]))  # the repository root
    import pynvml

    from tests.support.capture_hosts import capture_host
    from tests.support.nvidia_smi_capture import Capture

    capture = Capture(Path(os.environ["FAKE_NVML_CAPTURE"]))
    pynvml.nvmlLib = capture_host(capture, os.environ.get("FAKE_NVML_CAPTURE_STATE", "idle"))
    pynvml._nvmlGetFunctionPointer_cache.clear()


if os.environ.get("FAKE_NVML_CAPTURE"):
    _install()
