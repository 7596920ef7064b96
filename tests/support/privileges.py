"""The real program started as root or as shipped: uid 0 with every capability dropped
(the DaemonSet's securityContext and the systemd unit's CapabilityBoundingSet=, as
util-linux's `setpriv` reproduces them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.exporter import REPO, Exporter, free_port

SETPRIV = shutil.which("setpriv")
SHIPPED = (
    "--reuid=0",
    "--regid=0",
    "--init-groups",
    "--inh-caps=-all",
    "--ambient-caps=-all",
    "--bounding-set=-all",
)
PROFILES = ("root", "uid 0 without capabilities")
"""The profiles an end-to-end test runs under (`pytest.mark.parametrize("profile", ...)`)."""


def prefix(profile: str) -> list[str]:
    """The command that runs a program under `profile`; skips where it cannot be had."""
    if profile == "root":
        return []
    if os.geteuid() != 0 or SETPRIV is None:
        pytest.skip("needs root and setpriv to drop the capabilities")
    return [SETPRIV, *SHIPPED]


def start_as(
    profile: str, args: Sequence[str], tmp_path: Path, env: dict[str, str] | None = None
) -> Exporter:
    """The real program under `profile`, listening on 127.0.0.1, with `env` added to the
    environment; returns at once (wait on what the test expects)."""
    port = free_port()
    full = [*args, "--web.listen-address", f"127.0.0.1:{port}"]
    environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    log_path = tmp_path / f"exporter-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*prefix(profile), sys.executable, "-m", "gpu_exporter", *full],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=environment,
        )
    return Exporter(process, port, log_path, full)
