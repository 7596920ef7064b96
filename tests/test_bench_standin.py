"""The benchmark's compiled stand-in libnvidia-ml (`benchmarks/standin_nvml`, issue 38)
serves the real program as a driver would: built with the system compiler, loaded by
pynvml from LD_LIBRARY_PATH with nothing patched, and counting what it answered.

The bench's figures are measured, never asserted; this only holds that the stand-in it
measures against is whole: every GPU up with GPM, NVLink and its processes, MIG devices
where asked, and the counts the bench reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.exporter import parse_samples, values

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import standin  # noqa: E402  (benchmarks/ is no package)


def once(tmp_path: Path, mig: int | None) -> tuple[str, standin.Counts]:
    calls = tmp_path / f"calls-{mig}.bin"
    env = standin.environment([os.getpid()], calls, tmp_path / "names.json", 2, mig=mig)
    ran = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "--once"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout, standin.read_counts(calls)


@pytest.mark.e2e
def test_the_bench_stand_in_serves_the_real_program_as_a_driver(tmp_path: Path) -> None:
    text, counts = once(tmp_path, None)
    samples = parse_samples(text)
    assert values(samples, "gpu_up") == [1.0, 1.0]
    assert values(samples, "gpu_temperature_celsius") == [64.0, 64.0]
    assert len(values(samples, "gpu_nvlink_link_up")) == 2 * 18
    assert values(samples, "gpu_sm_active_seconds_total")  # GPM
    assert values(samples, "gpu_process_memory_used_bytes", pid=str(os.getpid())) == [2**30]
    assert counts.calls["nvmlDeviceGetFieldValues"] >= 2
    assert counts.on_gpus > counts.answered - counts.on_gpus
    assert counts.total_cpu_seconds > 0 and counts.cpu_by_thread

    text, counts = once(tmp_path, 3)
    samples = parse_samples(text)
    assert len(values(samples, "gpu_mig_info")) == 2 * 3
    assert counts.calls["nvmlDeviceGetMigDeviceHandleByIndex"] >= 2 * 7  # every slot
