"""Xids from the kernel log, end to end: the real program on a simulated host reads a
file of /dev/kmsg records naming its GPUs' bus ids, and falls back to NVML's events where
it may not read it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.exporter import REPO, Exporter, free_port, start_exporter, values
from tests.test_faults_e2e import FAST, write_scenario

# the simulated GPUs' bus ids: 00000000:18:00.0, 00000000:28:00.0 (sources/simulated.py)
GPU0, GPU1 = "0000:18:00", "0000:28:00"


def record(seq: int, usec: int, message: str) -> str:
    return f"4,{seq},{usec},-;{message}\n"


def test_xids_since_boot_are_counted_once_each_with_their_time(tmp_path: Path) -> None:
    now_usec = int(time.monotonic() * 1e6)
    before = max(0, now_usec - 300_000_000)  # logged 5 minutes ago (or at boot)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(
        record(3, before, "Linux version 6.8")  # records 0 to 2 were overwritten
        + record(4, before, f"NVRM: Xid (PCI:{GPU0}): 79, pid=1, GPU has fallen off the bus.")
        + " SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n"
        + record(5, before, "NVRM: Xid (PCI:0000:99:00): 48, pid=1, a GPU NVML does not list")
        + "garbage that is no record\n"
        + record(6, before, f"NVRM: Xid (PCI:{GPU0}): seventy-nine")
        + record(7, before, "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 3")
    )
    scenario = tmp_path / "scenario.json"
    write_scenario(scenario, {})
    started = time.time()
    exporter = start_exporter(
        ["--simulate", "2", "--simulate.scenario", str(scenario), *FAST]
        + ["--collector.xid.kernel-log", str(kmsg), "--log.level", "debug"],
        tmp_path,
    )
    try:
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="0"))
        assert values(s, "gpu_xid_errors_total", gpu="0", xid="79") == [1.0]
        logged = values(s, "gpu_xid_error_timestamp_seconds", gpu="0", xid="79")[0]
        assert abs(logged - (started - (now_usec - before) / 1e6)) < 5
        assert values(s, "gpu_last_xid_timestamp_seconds", gpu="0") == [logged]
        unknown = values(s, "gpu_xid_errors_unknown_gpu_total", pci_bus_id="00000000:99:00.0")
        assert unknown == [1.0] and not values(s, "gpu_xid_errors_total", xid="48")
        assert values(s, "gpu_nvswitch_sxid_errors_total", nvswitch="0", sxid="20034") == [1.0]
        assert values(s, "gpu_exporter_xid_kernel_log_up") == [1.0]
        assert values(s, "gpu_exporter_xid_kernel_log_lost_records_total") == [3.0]
        assert values(s, "gpu_exporter_xid_kernel_log_malformed_records_total") == [2.0]
        assert values(s, "gpu_exporter_stage_success", stage="xid") == [1.0]

        # an Xid during the run, which NVML's event API reports too: counted once
        write_scenario(scenario, {"events": [{"gpu": 1, "xid": 48}]})
        with kmsg.open("a") as log:
            log.write(record(8, now_usec, f"NVRM: Xid (PCI:{GPU1}): 48, pid=7, DBE"))
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="1", xid="48"))
        deadline = time.monotonic() + 10
        while "Xid event left to the kernel log" not in exporter.log():
            assert time.monotonic() < deadline, exporter.log()
            time.sleep(0.05)
        time.sleep(0.5)  # samples after the event
        s = exporter.scrape()
        assert values(s, "gpu_xid_errors_total", gpu="1", xid="48") == [1.0]
        assert values(s, "gpu_xid_error_timestamp_seconds", gpu="1", xid="48")[0] >= started
        assert exporter.log().count('msg="Xid error"') == 1  # the live one, once
    finally:
        exporter.stop()


def test_a_kernel_log_it_may_not_read_leaves_nvml_events_counting(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Permission denied (as without CAP_SYSLOG): the self-metric says 0, one log line
    says why, the exporter serves on, and NVML's events count the Xids."""
    shared = Path(tempfile.mkdtemp(prefix="gpu-exporter-kmsg-"))  # pytest's is root's only
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    shared.chmod(0o755)
    kmsg = shared / "kmsg"
    kmsg.write_text(record(0, 1, f"NVRM: Xid (PCI:{GPU0}): 79, pid=1, x"))
    kmsg.chmod(0o600 if os.geteuid() == 0 else 0)  # root reads anything: run as nobody
    scenario = shared / "scenario.json"
    write_scenario(scenario, {})
    scenario.chmod(0o644)
    as_other = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    port = free_port()
    args = ["--simulate", "1", "--simulate.scenario", str(scenario), *FAST]
    args += ["--collector.xid.kernel-log", str(kmsg), "--web.listen-address", f"127.0.0.1:{port}"]
    log_path = tmp_path / "exporter.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [*(as_other if os.geteuid() == 0 else []), sys.executable, "-m", "gpu_exporter", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    exporter = Exporter(process, port, log_path, args)
    try:
        s = exporter.wait_for(lambda s: values(s, "gpu_exporter_xid_kernel_log_up"), timeout=30)
        assert values(s, "gpu_exporter_xid_kernel_log_up") == [0.0]
        assert values(s, "gpu_up", gpu="0") == [1.0]
        exporter.wait_health(200)
        write_scenario(scenario, {"events": [{"gpu": 0, "xid": 79}]})
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="0") == [1.0])
        assert values(s, "gpu_exporter_stage_success", stage="xid") == [1.0]
        warnings = [line for line in exporter.log().splitlines() if "kernel log" in line]
        assert len(warnings) == 1, exporter.log()
        assert "permission denied" in warnings[0] and "CAP_SYSLOG" in warnings[0]
    finally:
        exporter.stop()


def test_the_kernel_log_systemd_passes_open_is_read_and_kept_across_a_reload(
    tmp_path: Path,
) -> None:
    """As under gpu-exporter-kmsg.socket: the default /dev/kmsg comes open as fd 3, named
    kmsg; that file is read, not the path. A SIGHUP turning the collector off and on
    reads the same file again from its start, counting nothing twice."""
    passed = tmp_path / "passed-kmsg"
    passed.write_text(record(0, 1, f"NVRM: Xid (PCI:{GPU0}): 79, pid=1, fallen off the bus"))
    config = tmp_path / "config.yml"
    config.write_text("collect.interval: 0.2s\n")
    scenario = tmp_path / "scenario.json"
    write_scenario(scenario, {})
    port = free_port()
    args = ["--simulate", "2", "--simulate.scenario", str(scenario), "--config.file", str(config)]
    args += ["--collector.xid.kernel-log", "/dev/kmsg", "--web.listen-address", f"127.0.0.1:{port}"]
    log_path = tmp_path / "exporter.log"
    systemd = 'LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=kmsg exec "$@" 3<"$PASSED"'
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            ["sh", "-c", systemd, "sh", sys.executable, "-m", "gpu_exporter", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=dict(os.environ, PYTHONUNBUFFERED="1", PASSED=str(passed)),
        )
    exporter = Exporter(process, port, log_path, args)
    try:
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="0"), timeout=30)
        assert values(s, "gpu_xid_errors_total", gpu="0", xid="79") == [1.0]
        assert values(s, "gpu_exporter_xid_kernel_log_up") == [1.0]
        assert "reading the kernel log from the file systemd opened" in exporter.log()

        config.write_text("collect.interval: 0.2s\ncollector.xid: false\n")
        exporter.signal(signal.SIGHUP)
        exporter.wait_for(lambda s: not values(s, "gpu_xid_errors_total"))
        config.write_text("collect.interval: 0.2s\n")
        exporter.signal(signal.SIGHUP)
        with passed.open("a") as log:  # logged while the reader was off, or since
            log.write(record(1, 2, f"NVRM: Xid (PCI:{GPU1}): 48, pid=7, DBE"))
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="1"))
        assert values(s, "gpu_xid_errors_total", gpu="1", xid="48") == [1.0]
        assert values(s, "gpu_xid_errors_total", gpu="0", xid="79") == [1.0]
        assert values(s, "gpu_exporter_xid_kernel_log_up") == [1.0]
        assert values(s, "gpu_exporter_xid_kernel_log_lost_records_total") == [0.0]
    finally:
        exporter.stop()
