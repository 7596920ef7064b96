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

from tests.support.exporter import (
    REPO,
    Exporter,
    Samples,
    free_port,
    run_exporter,
    start_exporter,
    values,
)
from tests.support.privileges import PROFILES, start_as
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

        # an Xid during the run, which NVML's event API reports too: counted once, and
        # dated by its record (logged a minute before it is read), not when it is read
        write_scenario(scenario, {"events": [{"gpu": 1, "xid": 48}]})
        minute_ago = int(time.monotonic() * 1e6) - 60_000_000
        with kmsg.open("a") as log:
            log.write(record(8, minute_ago, f"NVRM: Xid (PCI:{GPU1}): 48, pid=7, DBE"))
        written = time.time()
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="1", xid="48"))
        deadline = time.monotonic() + 10
        while "Xid event left to the kernel log" not in exporter.log():
            assert time.monotonic() < deadline, exporter.log()
            time.sleep(0.05)
        time.sleep(0.5)  # samples after the event
        s = exporter.scrape()
        assert values(s, "gpu_xid_errors_total", gpu="1", xid="48") == [1.0]
        dated = values(s, "gpu_xid_error_timestamp_seconds", gpu="1", xid="48")[0]
        assert abs(dated - (written - 60)) < 5
        assert exporter.log().count('msg="Xid error"') == 1  # the live one, once
    finally:
        exporter.stop()


def test_a_kernel_log_it_may_not_read_leaves_nvml_events_counting(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Permission denied (a plain file's mode): the self-metric says 0, one log line says
    why (not CAP_SYSLOG, which only /dev/kmsg needs), the exporter serves on, and NVML's
    events count the Xids."""
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
        assert "permission denied" in warnings[0] and "may not read it" in warnings[0]
        assert "CAP_SYSLOG" not in warnings[0]  # a plain file: its mode, not a capability
    finally:
        exporter.stop()


def test_the_kernel_log_systemd_passes_open_is_read_and_kept_across_a_reload(
    tmp_path: Path,
) -> None:
    """As under gpu-exporter-kmsg.socket: the default /dev/kmsg comes open as fd 3, named
    kmsg; that file is read, not the path. A SIGHUP turning the collector off and on
    goes on reading the same file from where it stopped, counting nothing twice, and an
    Xid logged while it was off is dated by its record."""
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
        boot = time.time() - time.monotonic()  # the record's USEC is 2: logged at boot
        dated = values(s, "gpu_xid_error_timestamp_seconds", gpu="1", xid="48")[0]
        assert abs(dated - boot) < 5
    finally:
        exporter.stop()


def series_count(samples: Samples, name: str) -> int:
    return sum(1 for (metric, _labels) in samples if metric == name)


def test_only_the_drivers_records_count_with_bounded_labels_across_rotation(
    tmp_path: Path,
) -> None:
    """One file, read through the real program: a program's records quoting an Xid are
    not counted (but shown), a bad header is not called lost, CRLF and a SEQ above 2^64
    and a second boot blind nothing, 70 unknown bus ids make at most 64 series; then,
    followed: copytruncate, rename-and-recreate, a last line without its newline and a
    storm of 300 Xids are all counted, with a bounded number of log lines."""
    now = int(time.monotonic() * 1e6)
    spoof = f"myjob[4242]: NVRM: Xid (PCI:{GPU1}): 79, pid=1, GPU has fallen off the bus."
    unknown = "".join(
        record(10 + n, now, f"NVRM: Xid (PCI:0000:{0x40 + n:02x}:00): 13, pid=1") for n in range(70)
    )
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(
        (
            record(0, now, f"NVRM: Xid (PCI:{GPU0}): 79, pid=1, GPU has fallen off the bus.")
            + f"12,1,{now},-;{spoof}\n30,2,{now},-;{spoof}\n"  # user.warning, daemon.info
            + "4,x,1,-;a header no record has\n"  # SEQ 3: malformed, not lost
            + record(4, now, f"NVRM: Xid (PCI:{GPU0}): 13, pid=1").replace("\n", "\r\n")
            + f"4,{'9' * 20},{now},-;SEQ above 2^64 - 1\n"
            + record(5, now, f"NVRM: Xid (PCI:{GPU0}): 31, pid=1")
            + record(0, now, f"NVRM: Xid (PCI:{GPU1}): 43, pid=1")  # a second boot
            + unknown  # SEQ 10 to 79: 1 to 9 are lost
        ).encode()
    )
    scenario = tmp_path / "scenario.json"
    write_scenario(scenario, {})
    exporter = start_exporter(
        ["--simulate", "2", "--simulate.scenario", str(scenario), *FAST]
        + ["--collector.xid.kernel-log", str(kmsg)],
        tmp_path,
    )
    try:
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="1"))
        assert values(s, "gpu_exporter_xid_kernel_log_backlog_read") == [1.0]
        assert values(s, "gpu_xid_errors_total", gpu="0", xid="79") == [1.0]
        assert values(s, "gpu_xid_errors_total", gpu="0", xid="13") == [1.0]  # the CRLF one
        assert values(s, "gpu_xid_errors_total", gpu="0", xid="31") == [1.0]  # after 10^20
        assert values(s, "gpu_xid_errors_total", gpu="1", xid="43") == [1.0]  # second boot
        assert not values(s, "gpu_xid_errors_total", gpu="1", xid="79")  # the programs'
        assert not values(s, "gpu_recommended_action", gpu="1", action="reboot_node")
        assert values(s, "gpu_exporter_xid_kernel_log_userspace_records_total") == [2.0]
        assert values(s, "gpu_exporter_xid_kernel_log_malformed_records_total") == [2.0]
        assert values(s, "gpu_exporter_xid_kernel_log_lost_records_total") == [9.0]
        assert values(s, "gpu_exporter_xid_kernel_log_seq_resets_total") == [1.0]
        assert series_count(s, "gpu_xid_errors_unknown_gpu_total") == 62  # 64 with the GPUs'
        assert values(s, "gpu_exporter_xid_kernel_log_capped_records_total") == [8.0]

        def xids(samples: Samples, gpu: str, code: int) -> list[float]:
            return values(samples, "gpu_xid_errors_total", gpu=gpu, xid=str(code))

        # copytruncate: copied away, then truncated in place and written on
        shutil.copy(kmsg, tmp_path / "kmsg.1")
        kmsg.write_text(record(80, now, f"NVRM: Xid (PCI:{GPU1}): 48, pid=7, DBE"))
        exporter.wait_for(lambda s: xids(s, "1", 48) == [1.0])
        # renamed away and created again (logrotate's default)
        kmsg.rename(tmp_path / "kmsg.2")
        kmsg.write_text(record(81, now, f"NVRM: Xid (PCI:{GPU1}): 94, pid=7"))
        exporter.wait_for(lambda s: xids(s, "1", 94) == [1.0])
        # a last line whose newline never comes: whole once unchanged for a second
        with kmsg.open("a") as log:
            log.write(record(82, now, f"NVRM: Xid (PCI:{GPU1}): 95, pid=7").rstrip("\n"))
        exporter.wait_for(lambda s: xids(s, "1", 95) == [1.0])
        # a storm: each Xid counted, not each one logged
        with kmsg.open("a") as log:
            log.write("\n")  # the line above was already taken whole: this ends it empty
            log.write(
                "".join(record(83 + n, now, f"NVRM: Xid (PCI:{GPU0}): 13, x") for n in range(300))
            )
        s = exporter.wait_for(lambda s: xids(s, "0", 13) == [301.0])
        assert values(s, "gpu_exporter_xid_kernel_log_up") == [1.0]
        assert values(s, "gpu_exporter_xid_kernel_log_lost_records_total") == [9.0]
        assert values(s, "gpu_exporter_xid_kernel_log_malformed_records_total") == [2.0]
        logged = exporter.log().count('msg="Xid error"')
        assert 3 <= logged <= 20, logged  # 10 a window of 10 s, not 303
    finally:
        exporter.stop()


def test_a_fifo_is_up_from_its_first_record_and_a_dying_writer_glues_nothing(
    tmp_path: Path,
) -> None:
    """A FIFO no one writes is not up, and NVML's events count meanwhile; a writer that
    dies mid-record leaves a line that is dropped (malformed), not glued to the next
    writer's record, which is counted on its GPU."""
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    scenario = tmp_path / "scenario.json"
    write_scenario(scenario, {})
    exporter = start_exporter(
        ["--simulate", "2", "--simulate.scenario", str(scenario), *FAST]
        + ["--collector.xid.kernel-log", str(fifo)],
        tmp_path,
    )
    try:
        s = exporter.wait_for(lambda s: values(s, "gpu_exporter_xid_kernel_log_up"))
        assert values(s, "gpu_exporter_xid_kernel_log_up") == [0.0]
        write_scenario(scenario, {"events": [{"gpu": 0, "xid": 79}]})
        exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="0", xid="79"))

        def write(data: bytes) -> None:
            writer = os.open(fifo, os.O_WRONLY)
            os.write(writer, data)
            os.close(writer)

        write(f"4,1,5,-;NVRM: Xid (PCI:{GPU0}): 3".encode())  # its writer dies here
        exporter.wait_for(
            lambda s: values(s, "gpu_exporter_xid_kernel_log_malformed_records_total") == [1.0]
        )
        write(record(2, 5, f"NVRM: Xid (PCI:{GPU1}): 79, pid=1, fallen off the bus").encode())
        s = exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="1", xid="79"))
        assert values(s, "gpu_exporter_xid_kernel_log_up") == [1.0]
        assert values(s, "gpu_xid_errors_total", gpu="1", xid="79") == [1.0]
        assert values(s, "gpu_xid_errors_total", gpu="0") == [1.0]  # NVML's 79, no phantom
    finally:
        exporter.stop()


def test_what_is_not_a_kernel_log_is_said_and_once_ends(tmp_path: Path) -> None:
    """Character devices other than /dev/kmsg are refused (NVML's events count), --once
    ends over /dev/zero, a syslog file is called what it is, an empty file is not up, a
    last record without its newline is counted by --once, and the real /dev/kmsg is
    read (read-only) where it may be."""
    scenario = tmp_path / "scenario.json"
    write_scenario(scenario, {})
    exporter = start_exporter(
        ["--simulate", "1", "--simulate.scenario", str(scenario), *FAST]
        + ["--collector.xid.kernel-log", "/dev/null"],
        tmp_path,
    )
    try:
        s = exporter.wait_for(lambda s: values(s, "gpu_exporter_xid_kernel_log_up"))
        assert values(s, "gpu_exporter_xid_kernel_log_up") == [0.0]
        write_scenario(scenario, {"events": [{"gpu": 0, "xid": 79}]})
        exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="0", xid="79"))
        assert "/dev/null: a character device (1:3), not /dev/kmsg (1:11)" in exporter.log()
    finally:
        exporter.stop()

    syslog = tmp_path / "kern.log"
    syslog.write_text(f"Nov 28 10:00:00 host kernel: NVRM: Xid (PCI:{GPU0}): 79, pid=1\n" * 20)
    empty = tmp_path / "empty"
    empty.write_text("")
    unended = tmp_path / "unended"
    unended.write_text(record(0, 5, "Linux") + f"4,1,5,-;NVRM: Xid (PCI:{GPU0}): 13, pid=1")
    cases = {"/dev/zero": "not /dev/kmsg (1:11)", str(syslog): "is not a kernel log"}
    cases |= {str(empty): None, str(unended): None}
    if os.access("/dev/kmsg", os.R_OK):
        cases["/dev/kmsg"] = None
    for path, said in cases.items():
        once = run_exporter(
            ["--simulate", "1", "--once", "--no-collector.host", "--collector.xid.kernel-log", path]
        )
        assert once.returncode == 0, once.stderr
        up = "gpu_exporter_xid_kernel_log_up 1.0" in once.stdout
        assert up == (path in (str(unended), "/dev/kmsg")), (path, once.stdout)
        assert (said is None) == ("cannot read the kernel log" not in once.stderr), once.stderr
        if said is not None:
            assert said in once.stderr
        if path == str(unended):
            assert 'xid="13"} 1.0' in once.stdout


@pytest.mark.parametrize("profile", PROFILES)
def test_copytruncate_written_again_before_the_next_poll_counts_each_xid_once(
    tmp_path: Path, profile: str
) -> None:
    """Issue 48: a followed file truncated in place and written again at once, to as long
    as what was read or longer, was read on from the old offset: its Xids were never
    counted. The real program, as root and as shipped (uid 0, no capabilities)."""
    now = int(time.monotonic() * 1e6)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(record(0, now, f"NVRM: Xid (PCI:{GPU0}): 79, pid=1, x"))
    scenario = tmp_path / "scenario.json"
    write_scenario(scenario, {})
    args = ["--simulate", "2", "--simulate.scenario", str(scenario), *FAST]
    exporter = start_as(profile, [*args, "--collector.xid.kernel-log", str(kmsg)], tmp_path)
    try:
        exporter.wait_for(lambda s: values(s, "gpu_xid_errors_total", gpu="0", xid="79"), 30)
        shutil.copy(kmsg, tmp_path / "kmsg.1")  # copytruncate, then the next records at once
        with kmsg.open("r+") as log:
            log.truncate(0)
            log.write(
                "".join(
                    record(seq, now, f"NVRM: Xid (PCI:{GPU1}): 48, pid=7, DBE")
                    for seq in range(1, 4)
                )
            )
        s = exporter.wait_for(
            lambda s: values(s, "gpu_xid_errors_total", gpu="1", xid="48") == [3.0], 30
        )
        assert values(s, "gpu_xid_errors_total", gpu="0", xid="79") == [1.0]  # not again
        assert values(s, "gpu_exporter_xid_kernel_log_lost_records_total") == [0.0]
        assert values(s, "gpu_exporter_xid_kernel_log_malformed_records_total") == [0.0]
        assert "truncated and written again" in exporter.log()
    finally:
        exporter.stop()
