"""The files systemd passes (sd_listen_fds(3)): LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES
read as systemd writes them, anything else ignored with one log line, never a crash."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_exporter.systemd_fds import parse_listen_fds
from tests.support.exporter import REPO

PID = 4242


@pytest.mark.parametrize(
    ("listen_pid", "listen_fds", "names", "passed"),
    [
        (None, None, None, {}),  # not started by systemd with files
        ("4242", "1", "kmsg", {"kmsg": 3}),
        ("4242", "3", "web:kmsg:web", {"web": 3, "kmsg": 4}),  # the first of a name wins
        ("4242", "2", None, {"unknown": 3}),  # no names: systemd's "unknown"
        ("4242", "0", "", {}),
        ("4243", "1", "kmsg", {}),  # meant for another process (our parent's, inherited)
        ("04242", "1", "kmsg", {"kmsg": 3}),
    ],
)
def test_files_passed_to_this_process_are_found_by_name(
    listen_pid: str | None, listen_fds: str | None, names: str | None, passed: dict[str, int]
) -> None:
    assert parse_listen_fds(listen_pid, listen_fds, names, pid=PID) == passed


@pytest.mark.parametrize(
    ("listen_pid", "listen_fds", "names", "says"),
    [
        ("", "1", "kmsg", "LISTEN_PID"),
        (None, "1", "kmsg", "LISTEN_PID"),
        ("42a", "1", "kmsg", "LISTEN_PID"),
        ("-4242", "1", "kmsg", "LISTEN_PID"),
        ("٤٢٤٢", "1", "kmsg", "LISTEN_PID"),  # Arabic-Indic digits: not ASCII
        ("4" * 100_000, "1", "kmsg", "LISTEN_PID"),
        ("4242", None, "kmsg", "LISTEN_FDS"),
        ("4242", "one", "kmsg", "LISTEN_FDS"),
        ("4242", " 1", "kmsg", "LISTEN_FDS"),
        ("4242", "65", None, "LISTEN_FDS"),  # more than any unit passes
        ("4242", "9" * 1000, "kmsg", "LISTEN_FDS"),
        ("4242", "2", "kmsg", "LISTEN_FDNAMES"),  # one name for two files
        ("4242", "1", "kmsg:web", "LISTEN_FDNAMES"),
        ("4242", "1", "k" * 256, "LISTEN_FDNAMES"),
        ("4242", "1", "km\nsg", "LISTEN_FDNAMES"),
        ("4242", "1", ":" * 10_000_000, "LISTEN_FDNAMES"),
    ],
)
def test_a_malformed_variable_is_refused_naming_it(
    listen_pid: str | None, listen_fds: str | None, names: str | None, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        parse_listen_fds(listen_pid, listen_fds, names, pid=PID)


PROBE = """
import logging, os, sys
from gpu_exporter.systemd_fds import inherited_fds
logging.basicConfig(level=logging.INFO, format="%(message)s %(reason)s", stream=sys.stdout)
print(inherited_fds(), inherited_fds() is inherited_fds())
print(sorted(k for k in os.environ if k.startswith("LISTEN_")), os.get_inheritable(3))
"""


def passed_to_a_program(variables: str) -> list[str]:
    """What a program started as systemd starts it (`variables`, fd 3 open) takes."""
    result = subprocess.run(
        ["sh", "-c", f'{variables} exec "$@" 3</dev/null', "sh", sys.executable, "-c", PROBE],
        capture_output=True, text=True, timeout=30, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_a_program_takes_its_files_once_and_unsets_the_variables() -> None:
    taken = passed_to_a_program("LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=kmsg")
    # taken once (a second call answers the same), kept from the programs it runs
    assert taken == ["{'kmsg': 3} True", "[] False"]


def test_a_malformed_variable_is_ignored_with_one_line() -> None:
    taken = passed_to_a_program("LISTEN_PID=$$ LISTEN_FDS=x LISTEN_FDNAMES=kmsg")
    assert taken[0] == "ignoring the files systemd passed LISTEN_FDS='x' is not a count of 0 to 64"
    assert taken[1:] == ["{} True", "[] True"]  # unset all the same; fd 3 left alone
