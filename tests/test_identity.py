"""Process identity read from /proc: the same name, user and command line as psutil gives
for every process on this machine, and the command-line splitting rules."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpu_exporter.attribution import identity as identity_module
from gpu_exporter.attribution.identity import (
    CMDLINE_MAX_CHARS,
    MAX_READ_BYTES,
    identify,
    read_file,
    real_uid,
    split_cmdline,
    user_name,
)
from gpu_exporter.attribution.proctree import boot_time_seconds, parse_stat


def _utf8(text: str | None) -> str | None:
    """psutil's text as the exporter writes it: bytes that are not UTF-8 (which psutil
    keeps as surrogates, and no label may hold) as replacement characters."""
    if text is None:
        return None
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _comm(pid: int) -> str:
    """The process's name as /proc/PID/stat gives it now."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return parse_stat(handle.read()).comm


def test_every_process_here_is_named_as_psutil_names_it(tmp_path: Path) -> None:
    # one whose name the kernel cuts at 15 characters, with an argument that is not UTF-8
    program = tmp_path / "python_with_a_long_name"
    program.symlink_to(sys.executable)
    sleep = "import time; time.sleep(30)"
    long_name = subprocess.Popen([str(program), "-c", sleep, os.fsdecode(b"caf\xe9")])
    try:
        time.sleep(0.3)
        compared = 0
        cut = ("", "")
        for proc in psutil.process_iter():
            try:
                comm = _comm(proc.pid)
                before = identify("/proc", proc.pid, comm, cmdline=True)
                with proc.oneshot():
                    theirs = (proc.name(), proc.username(), " ".join(proc.cmdline()) or None)
            except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
                continue
            try:
                comm_after = _comm(proc.pid)
            except (FileNotFoundError, ProcessLookupError):
                continue
            identity, complete = identify("/proc", proc.pid, comm, cmdline=True)
            if not complete or (identity, complete) != before or comm_after != comm:
                # it exited or ran another program in between, or it is a kernel worker
                # whose name (kworker/u8:3-<workqueue>) follows the work it runs
                continue
            ours = (identity.process, identity.user, identity.cmdline)
            cmdline = _utf8(theirs[2])
            kept = cmdline and cmdline[:CMDLINE_MAX_CHARS]
            assert ours == (_utf8(theirs[0]), _utf8(theirs[1]), kept), proc.pid
            compared += 1
            if proc.pid == long_name.pid:
                cut = (comm, identity.process)
                assert identity.cmdline is not None and identity.cmdline.endswith(" caf\ufffd")
        assert compared >= 3
        assert cut == ("python_with_a_l", "python_with_a_long_name")
    finally:
        long_name.kill()
        long_name.wait()


def test_a_process_that_calls_itself_xorg_is_known_by_its_executable() -> None:
    """A process can take any name; its executable's file name is what psutil's exe()
    gives, and the expected-host-processes pattern must match both."""
    import re

    from gpu_exporter.attribution.expected import EXPECTED_HOST_PROCESSES
    from gpu_exporter.attribution.kubernetes import is_expected

    rename = "open('/proc/self/comm', 'w').write('Xorg'); import time; time.sleep(30)"
    impostor = subprocess.Popen([sys.executable, "-c", rename])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{impostor.pid}/comm").read_text().strip() != "Xorg":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        identity, complete = identify("/proc", impostor.pid, "Xorg", cmdline=False)
        assert complete and identity.process == "Xorg"
        assert identity.executable == os.path.basename(psutil.Process(impostor.pid).exe())
        expected = re.compile(EXPECTED_HOST_PROCESSES)
        assert not is_expected(expected, identity.process, identity.executable)
        assert is_expected(expected, "Xorg", "Xorg")  # /usr/lib/xorg/Xorg
        assert is_expected(expected, "Xorg", "")  # its link unreadable: the name decides
    finally:
        impostor.kill()
        impostor.wait()
    # a process in a container is not asked: its executable's path is the container's
    with_pod = identity_module.identify(
        "/proc",
        os.getpid(),
        "python",
        cmdline=False,
        read=lambda path: (
            b"0::/kubepods.slice/kubepods-pod" + b"1" * 32 + b".slice/x\n"
            if path.endswith("cgroup")
            else read_file(path)
        ),
    )[0]
    assert with_pod.labels.pod_uid and with_pod.executable == ""


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", []),  # a kernel thread or a zombie
        (b"python\0train.py\0--lr=0.1\0", ["python", "train.py", "--lr=0.1"]),
        (b"python\0\0x\0", ["python", "", "x"]),  # an empty argument is kept
        (b"nginx: worker process\0", ["nginx:", "worker", "process"]),  # setproctitle
        (b"postgres: writer   ", ["postgres:", "writer", "", ""]),  # no NUL at all
        (b"caf\xc3\xa9\0\xff\0", ["café", "\ufffd"]),  # undecodable bytes never break a label
    ],
)
def test_command_lines_split_as_psutil_splits_them(data: bytes, words: list[str]) -> None:
    assert split_cmdline(data) == words


def test_a_command_line_of_megabytes_is_read_only_as_far_as_it_is_used(tmp_path: Path) -> None:
    huge = b"python\0train.py\0" + b"--x=" + b"y" * 2**21 + b"\0"
    proc = tmp_path / "10"
    proc.mkdir()
    (proc / "cmdline").write_bytes(huge)
    (proc / "status").write_bytes(b"Uid:\t0\t0\t0\t0\n")
    (proc / "cgroup").write_bytes(b"0::/\n")
    read: list[int] = []

    def reader(path: str) -> bytes:
        data = read_file(path)
        read.append(len(data))
        return data

    identity, complete = identify(str(tmp_path), 10, "python", cmdline=True, read=reader)
    assert complete and max(read) == MAX_READ_BYTES
    assert identity.cmdline == ("python train.py --x=" + "y" * 4000)[:CMDLINE_MAX_CHARS]
    assert split_cmdline(huge[:MAX_READ_BYTES])[:2] == ["python", "train.py"]


def test_the_real_uid_is_the_first_of_the_uid_line() -> None:
    assert real_uid(b"Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n") == 1000
    assert real_uid(b"Name:\tx\n") is None
    with open("/proc/self/status", "rb") as handle:
        assert real_uid(handle.read()) == os.getuid()


def test_an_account_name_that_is_not_utf8_gets_replacement_characters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Entry:
        pw_name = os.fsdecode(b"caf\xe9")  # as pwd returns a Latin-1 name from /etc/passwd

    monkeypatch.setattr(identity_module.pwd, "getpwuid", lambda uid: Entry())
    assert user_name(1000) == "caf\ufffd"
    assert user_name(0).encode("utf-8")


def test_boot_time_is_psutils() -> None:
    assert boot_time_seconds() == psutil.boot_time()
