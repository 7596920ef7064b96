"""`make self-check-demo`: `gpu-exporter --self-check` without a GPU, as the README shows it.

It checks a simulated 1-GPU host (`--simulate 1`) against the tests' stand-in nvidia-smi
(tests/support/fake_nvidia_smi.py), which answers for the same simulated host in
nvidia-smi's formats. On a host with the NVIDIA driver, run `gpu-exporter --self-check`
instead: it asks the real nvidia-smi.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu_exporter.config import DEFAULT_LISTEN_ADDRESS
from tests.support.fake_nvidia_smi import install

GPUS = 1


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="gpu-exporter-self-check-demo-") as tmp:
        install(Path(tmp))
        env = {
            **os.environ,
            "PATH": f"{tmp}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_SMI_GPUS": str(GPUS),
            # a simulated host's UUIDs follow its host name and listen address
            "FAKE_SMI_HOST_ID": f"{socket.gethostname()}:{DEFAULT_LISTEN_ADDRESS}",
        }
        command = [sys.executable, "-m", "gpu_exporter", "--simulate", str(GPUS), "--self-check"]
        return subprocess.run(command, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
