"""End to end: the real program on Blackwell hardware, scraped over HTTP at the defaults
(5 s interval), as root and under the shipped privileges (uid 0 without capabilities, as
the DaemonSet and the systemd unit run it).

- the simulated GB200 NVL72 tray (`--simulate.hardware gb200-nvl72`): NVLink5 counters,
  recovery events, BER, platform info, and the IMEX daemon the tray needs, down when the
  scenario says so;
- the real NVML backend on the GB200 stand-in driver (`benchmarks/fake_nvml_site`,
  `FAKE_NVML_KIND=gb200`): the same series through real pynvml, and the IMEX daemon found
  in, and then gone from, this host's real /proc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.model import NVLINK5_ERRORS, NVLINK_LEGACY_ERRORS
from tests.support.exporter import (
    REPO,
    Exporter,
    Samples,
    fake_library_env,
    free_port,
    values,
)

SHIPPED = ["setpriv", "--reuid=0", "--inh-caps=-all", "--bounding-set=-all"]
PRIVILEGES = {"root": [], "shipped": SHIPPED}


def _start(
    args: list[str], tmp_path: Path, prefix: list[str], env: dict[str, str] | None = None
) -> Exporter:
    port = free_port()
    full = [*args, "--web.listen-address", f"127.0.0.1:{port}"]
    log_path = tmp_path / "exporter.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "gpu_exporter", *full],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env or dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    return Exporter(process, port, log_path, full)


@pytest.fixture(params=list(PRIVILEGES))
def prefix(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "shipped" and (os.geteuid() != 0 or not shutil.which("setpriv")):
        pytest.skip("the shipped privileges need root and setpriv")
    return PRIVILEGES[request.param]


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text("faults: {}\n")
    path.chmod(0o644)
    return path


def _nvlink5_series(s: Samples, uuid_of_gpu0: str | None = None) -> None:
    for error in NVLINK5_ERRORS:
        assert values(s, "gpu_nvlink_errors_total", gpu="0", error_type=error), error
    for error in NVLINK_LEGACY_ERRORS:  # nvml.h 13: "unsupported for Blackwell+"
        assert not values(s, "gpu_nvlink_errors_total", error_type=error), error
    for result in ("successful", "failed", "all"):
        assert values(s, "gpu_nvlink_link_recovery_events_total", gpu="0", result=result)
    for ber_type in ("effective", "symbol"):
        assert values(s, "gpu_nvlink_ber", gpu="0", ber_type=ber_type)
    (platform,) = [labels for (name, labels), _ in s.items() if name == "gpu_platform_info"][:1]
    assert {"chassis_serial", "slot", "tray", "host_id", "peer_type", "module_id"} <= {
        k for k, _ in platform
    }
    assert values(s, "gpu_fabric_daemon_required", daemon="nvidia-imex") == [1.0]
    assert values(s, "gpu_fabric_daemon_required", daemon="nv-fabricmanager") == [0.0]


def test_the_simulated_gb200_tray_shows_its_nvlink5_series_and_imex_daemon(
    tmp_path: Path, prefix: list[str], scenario: Path
) -> None:
    args = ["--simulate", "4", "--simulate.hardware", "gb200-nvl72"]
    args += ["--simulate.scenario", str(scenario)]
    exporter = _start(args, tmp_path, prefix)
    try:
        s = exporter.wait_for(lambda s: values(s, "gpu_fabric_daemon_up"), timeout=30)
        _nvlink5_series(s)
        assert len(values(s, "gpu_platform_info")) == 4
        trays = {dict(labels)["tray"] for (n, labels) in s if n == "gpu_platform_info"}
        assert len(trays) == 1  # 4 GPUs: one compute tray
        assert values(s, "gpu_fabric_daemon_up", daemon="nvidia-imex") == [1.0]
        assert values(s, "gpu_fabric_info", gpu="0")  # clique and cluster UUID (v3)
        symbol = values(s, "gpu_nvlink_errors_total", gpu="0", error_type="symbol")
        # the IMEX daemon stops: down at the next look (every 15 s, at a 5 s interval)
        scenario.write_text("faults: {fabric_daemons_down: [nvidia-imex]}\n")
        s = exporter.wait_for(
            lambda s: values(s, "gpu_fabric_daemon_up", daemon="nvidia-imex") == [0.0],
            timeout=40,
        )
        # and the counters moved meanwhile (corrected symbol errors trickle in)
        assert values(s, "gpu_nvlink_errors_total", gpu="0", error_type="symbol")[0] > symbol[0]
    finally:
        exporter.stop()


@pytest.fixture
def imex(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose program is `nvidia-imex` (a copy of sleep), as the daemon runs."""
    program = tmp_path / "bin" / "nvidia-imex"
    program.parent.mkdir()
    shutil.copy("/bin/sleep", program)
    process = subprocess.Popen([str(program), "600"])
    yield process
    process.kill()
    process.wait()


def test_the_real_backend_on_a_gb200_finds_the_imex_daemon_in_the_hosts_proc(
    tmp_path: Path, prefix: list[str], imex: subprocess.Popen[bytes]
) -> None:
    env = dict(fake_library_env(2), FAKE_NVML_KIND="gb200", PYTHONUNBUFFERED="1")
    exporter = _start([], tmp_path, prefix, env)
    try:
        s = exporter.wait_for(lambda s: values(s, "gpu_fabric_daemon_up"), timeout=30)
        _nvlink5_series(s)
        assert values(s, "gpu_fabric_daemon_up", daemon="nvidia-imex") == [1.0]
        assert not values(s, "gpu_fabric_daemon_up", daemon="nv-fabricmanager")
        imex.kill()
        imex.wait()
        exporter.wait_for(
            lambda s: values(s, "gpu_fabric_daemon_up", daemon="nvidia-imex") == [0.0],
            timeout=40,
        )
    finally:
        exporter.stop()


def _exec_comm(process: subprocess.Popen[bytes], comm: str) -> None:
    path = Path(f"/proc/{process.pid}/comm")
    deadline = time.monotonic() + 5
    while path.read_text().strip() != comm and time.monotonic() < deadline:
        time.sleep(0.01)  # until the child has exec'd the program


def test_fabric_manager_is_found_by_the_kernels_cut_of_its_name(tmp_path: Path) -> None:
    """`nv-fabricmanager` is 16 bytes: the kernel keeps 15 as its command name."""
    from gpu_exporter.sources.fabric_daemons import running

    program = tmp_path / "nv-fabricmanager"
    shutil.copy("/bin/sleep", program)
    process = subprocess.Popen([str(program), "600"])
    try:
        _exec_comm(process, "nv-fabricmanage")
        assert running("/proc", ["nv-fabricmanager"]) == {"nv-fabricmanager": True}
    finally:
        process.kill()
        process.wait()
    assert running("/proc", ["nv-fabricmanager"]) == {"nv-fabricmanager": False}


def test_a_process_merely_named_like_the_daemon_is_not_it(tmp_path: Path) -> None:
    """The command name is the kernel's cut of the program's; the program must match too:
    a program whose name only starts like Fabric Manager's is not Fabric Manager."""
    from gpu_exporter.sources.fabric_daemons import running

    program = tmp_path / "nv-fabricmanager-helper"
    shutil.copy("/bin/sleep", program)
    process = subprocess.Popen([str(program), "600"])
    try:
        # the comm of "nv-fabricmanager-helper" is its first 15 bytes: "nv-fabricmanage"
        comm = Path(f"/proc/{process.pid}/comm")
        deadline = time.monotonic() + 5
        while comm.read_text().strip() != "nv-fabricmanage" and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd the program
        assert comm.read_text().strip() == "nv-fabricmanage"
        assert running("/proc", ["nv-fabricmanager"]) == {"nv-fabricmanager": False}
    finally:
        process.kill()
        process.wait()
