"""Connections past the process's file-descriptor limit: the real program keeps its CPU,
logs once, and serves again as soon as descriptors are free (RLIMIT_NOFILE lowered on
the running program with prlimit(2), as a too-small `LimitNOFILE=` or a flood would).

An accept that fails with EMFILE leaves the connection in the listen queue, so the next
accept fails the same way at once: a loop that retried at once would spin a core for as
long as the flood lasts."""

from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path

import pytest

from tests.support.exporter import Exporter, values
from tests.support.privileges import PROFILES, start_as

pytestmark = pytest.mark.e2e

IDLE_CLIENTS = 8  # more than the descriptors left to the program
SPARE_DESCRIPTORS = 2
WINDOW_SECONDS = 1.0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.parametrize("profile", PROFILES)
def test_connections_past_the_descriptor_limit_cost_no_cpu_and_leave_no_damage(
    profile: str, tmp_path: Path
) -> None:
    exporter: Exporter = start_as(profile, ["--simulate", "1"], tmp_path)
    clients: list[socket.socket] = []
    try:
        exporter.wait_for(lambda s: values(s, "gpu_up") == [1.0], timeout=30)
        pid = exporter.process.pid
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        tight = _open_descriptors(pid) + SPARE_DESCRIPTORS
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (tight, hard))
        try:
            # connections that send nothing: each accepted one holds a descriptor (its
            # thread waits for a head), the rest wait in the listen queue
            clients = [
                socket.create_connection(("127.0.0.1", exporter.port), timeout=5)
                for _ in range(IDLE_CLIENTS)
            ]
            time.sleep(0.3)  # the accept loop meets the limit
            before = _cpu_seconds(pid)
            time.sleep(WINDOW_SECONDS)
            spent = _cpu_seconds(pid) - before
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        # a loop that retries at once spends the whole window on one core
        assert spent < 0.3 * WINDOW_SECONDS, f"{spent:.2f} s of CPU in {WINDOW_SECONDS} s"
        for client in clients:
            client.close()
        # served again within the longest retry (1 s), the program still up
        exporter.wait_for(lambda s: values(s, "gpu_up") == [1.0], timeout=10)
        assert exporter.process.poll() is None
        log = exporter.log()
        assert log.count("accepting a connection failed") == 1, log
        assert "Too many open files" in log
    finally:
        for client in clients:
            client.close()
        exporter.stop()
