"""The benchmark's compiled stand-in libnvidia-ml (`benchmarks/standin_nvml`, issue 38)
serves the real program as a driver would: built with the system compiler, loaded by
pynvml from LD_LIBRARY_PATH with nothing patched, and counting what it answered.

The bench's figures are measured, never asserted; this only holds that the stand-in it
measures against is whole: every GPU up with GPM, NVLink and its processes, MIG devices
where asked, and the counts the bench reads; that it charges a cost file's costs on the
calling thread's CPU (issue 42) and refuses a malformed one without harming the program;
and that `benchmarks/real_gpu.py`, which measures a real driver's costs, runs its cost
part against the charging stand-in and gets those costs back.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.exporter import parse_samples, values

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import cost_file  # noqa: E402
import instructions  # noqa: E402
import real_gpu  # noqa: E402
import real_gpu_process_samples  # noqa: E402
import standin  # noqa: E402  (benchmarks/ is no package)


def python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """This interpreter with `args` in the repository, on `env`; it must succeed."""
    ran = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    return ran


def once(
    tmp_path: Path, mig: int | None, costs: Path | None = None
) -> tuple[str, standin.Counts, str]:
    """gpu-exporter --once on 2 stand-in GPUs, this process on GPU 0: its exposition,
    the stand-in's counts and its stderr."""
    calls = tmp_path / f"calls-{mig}.bin"
    env = standin.environment(
        [os.getpid()], calls, tmp_path / "names.json", 2, mig=mig, costs=costs
    )
    ran = python(["-m", "gpu_exporter", "--once"], env)
    return ran.stdout, standin.read_counts(calls), ran.stderr


@pytest.mark.e2e
def test_the_bench_stand_in_serves_the_real_program_as_a_driver(tmp_path: Path) -> None:
    text, counts, _ = once(tmp_path, None, standin.H200_COSTS)
    samples = parse_samples(text)
    assert values(samples, "gpu_up") == [1.0, 1.0]
    # busy where a process runs, idle (0%) where none does, as a real GPU
    assert values(samples, "gpu_utilization_ratio", gpu="0") == [0.87]
    assert values(samples, "gpu_utilization_ratio", gpu="1") == [0.0]
    # every call charged the H200's cost on the caller's CPU: at least that much inside
    h200 = cost_file.read(standin.H200_COSTS)
    assert counts.cost_entries == len(h200) and counts.cost_refused == 0
    sampled = counts.calls["nvmlDeviceGetSamples"]
    assert sampled >= 2 * 2  # two buffers per GPU
    assert (
        counts.cpu_seconds["nvmlDeviceGetSamples"] >= sampled * h200["nvmlDeviceGetSamples"] / 1e6
    )
    energy = h200["field.83"] / 1e6  # asked of each GPU in its interval's batch
    assert counts.cpu_seconds["nvmlDeviceGetFieldValues"] >= 2 * energy
    assert values(samples, "gpu_temperature_celsius") == [64.0, 64.0]
    assert len(values(samples, "gpu_nvlink_link_up")) == 2 * 18
    assert values(samples, "gpu_sm_active_seconds_total")  # GPM
    assert values(samples, "gpu_process_memory_used_bytes", pid=str(os.getpid())) == [2**30]
    assert counts.calls["nvmlDeviceGetFieldValues"] >= 2
    assert counts.on_gpus > counts.answered - counts.on_gpus
    assert counts.total_cpu_seconds > 0 and counts.cpu_by_thread

    text, counts, _ = once(tmp_path, 3)
    samples = parse_samples(text)
    assert len(values(samples, "gpu_mig_info")) == 2 * 3
    assert counts.calls["nvmlDeviceGetMigDeviceHandleByIndex"] >= 2 * 7  # every slot


@pytest.mark.e2e
def test_a_malformed_cost_file_is_refused_whole_and_the_program_runs_free(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "costs.txt"
    bad.write_text("# made up\nnvmlDeviceGetSamples 2345\nfield.83 3 ms\n")
    text, counts, stderr = once(tmp_path, None, bad)
    why = f"FAKE_NVML_COSTS={bad} line 3: a line is NAME MICROSECONDS; every call is free"
    assert why in stderr
    assert values(parse_samples(text), "gpu_up") == [1.0, 1.0]  # the program unharmed
    assert (counts.cost_entries, counts.cost_refused) == (0, 3)
    with pytest.raises(SystemExit, match="line 3: a line is NAME MICROSECONDS"):
        standin.check_costs(bad)  # the bench stops there, with the library's own words
    with pytest.raises(cost_file.CostFileError, match="line 3: a line is NAME MICROSECONDS"):
        cost_file.read(bad)  # and the Python reader says the same
    for line, why in (
        ("field.1024 5", "a field is field.ID, ID < 1024"),
        ("fieldgroup.76-74 5", "a field group is fieldgroup.A-B, A <= B < 1024"),
        ("nvmlDeviceGetSamples 1.0005", "MICROSECONDS is a number from 0 to 10000000"),
        ("nvmlDeviceGetSamples 10000001", "MICROSECONDS is a number from 0 to 10000000"),
        ("energy 5", "a name is an nvml entry point, field.ID or fieldgroup.A-B"),
    ):
        bad.write_text(f"field.83 3000\n{line}  # a note\n")
        with pytest.raises(SystemExit, match=f"line 2: {why}"):
            standin.check_costs(bad)
        with pytest.raises(cost_file.CostFileError, match=f"line 2: {why}"):
            cost_file.read(bad)
    bad.write_text("field.83 3000\n" * 5000)
    with pytest.raises(SystemExit, match="larger than 64 KiB"):
        standin.check_costs(bad)


def test_real_gpu_py_helps_and_writes_cost_files_the_stand_in_charges(tmp_path: Path) -> None:
    shown = python(["benchmarks/real_gpu.py", "--help"], dict(os.environ))
    assert "--out DIR" in shown.stdout
    shown = python(["benchmarks/real_gpu_process_samples.py", "--help"], dict(os.environ))
    assert "--torch-python" in shown.stdout
    made_up = [
        cost_file.Cost("nvmlDeviceGetSamples", 2345.0, "151 calls"),
        cost_file.Cost("nvmlDeviceGetMemoryInfo_v2", 6.5),
        cost_file.Cost(cost_file.group_name(74, 76), 711.4831),
        cost_file.Cost(cost_file.field_name(83), 3020.0, "83: alone 3022, latencyUsec 3001"),
    ]
    path = tmp_path / "nvml-costs.txt"
    cost_file.write(path, ["Host: a made-up GPU; measured 2026-11-28 by hand"], made_up)
    assert cost_file.read(path) == {
        "nvmlDeviceGetSamples": 2345.0,
        "nvmlDeviceGetMemoryInfo_v2": 6.5,
        "fieldgroup.74-76": 711.483,
        "field.83": 3020.0,
    }
    assert cost_file.origin(path) == "a made-up GPU; measured 2026-11-28"
    assert standin.check_costs(path) == 4
    # its report's top functions, from our scrape (summed over any other label)
    scraped = (
        'gpu_exporter_nvml_call_seconds_total{function="nvmlDeviceGetSamples",gpu="0"} 1.5\n'
        'gpu_exporter_nvml_call_seconds_total{function="nvmlDeviceGetSamples",gpu="1"} 0.5\n'
        'gpu_exporter_nvml_calls_total{function="nvmlDeviceGetSamples",gpu="0"} 800\n'
        'gpu_exporter_nvml_calls_total{function="nvmlDeviceGetSamples",gpu="1"} 200\n'
    )
    assert real_gpu.nvml_call_seconds(scraped) == {"nvmlDeviceGetSamples": (2.0, 1000.0)}
    assert real_gpu.nvml_call_seconds("gpu_up 1\n") == {}
    # each phase's buffer reads and GPM activity, from scrapes either side of its window
    later = scraped.replace(" 800\n", " 830\n")
    assert real_gpu.buffer_reads(scraped) == 1000.0
    assert real_gpu.rate(real_gpu.buffer_reads(scraped), real_gpu.buffer_reads(later), 60) == 0.5
    dram = (
        'gpu_dram_active_seconds_total{gpu="0"} 1.5\ngpu_dram_active_seconds_total{gpu="1"} 0.5\n'
    )
    assert real_gpu.counter_total(dram, "gpu_dram_active_seconds_total") == 2.0
    assert real_gpu.counter_total(scraped, "gpu_dram_active_seconds_total") is None
    assert real_gpu.rate(None, 2.0, 60) is None
    # the functions it times: the stand-in's, which answers every one either exporter calls
    assert {"nvmlDeviceGetSamples", "nvmlDeviceGetFieldValues"} <= set(
        real_gpu.stand_in_functions()
    )


@pytest.mark.e2e
def test_real_gpu_py_measures_the_costs_the_stand_in_charges(tmp_path: Path) -> None:
    """Part 1 of real_gpu.py against the charging stand-in as a driver: it gets the H200's
    dear costs back, the two clocks-event fields one query serves as one group."""
    env = standin.environment(
        [], tmp_path / "calls.bin", tmp_path / "n.json", 1, costs=standin.H200_COSTS
    )
    measure = (
        "import sys, pynvml; sys.path.insert(0, 'benchmarks'); import real_gpu; "
        "from pathlib import Path; pynvml.nvmlInit(); "
        f"real_gpu.measure_costs(pynvml, Path({str(tmp_path)!r})); "
        "h = pynvml.nvmlDeviceGetHandleByIndex(0); real_gpu.COVERAGE_WAIT_SECONDS = 0; "
        "print('\\n'.join(real_gpu.structs_check(pynvml, h))); "
        "print('\\n'.join(real_gpu.buffer_coverage(pynvml, h)))"
    )
    shown = python(["-c", measure], env).stdout
    # our plain ctypes reads beside pynvml's: the same answers
    rows = {row.split(" | ")[0]: row.split(" | ")[1:] for row in shown.splitlines()}
    assert rows["| memory v2"][0] == rows["| memory v2"][1].rstrip(" |"), shown
    assert rows["| clock SM"][0] == rows["| clock SM"][1].rstrip(" |"), shown
    # the buffers' reach, twice: the stand-in's 100 entries a ring
    assert shown.count("| GPU samples | ") == 2 and "| GPU samples | 1 | 100 |" in shown, shown
    measured = cost_file.read(tmp_path / "nvml-costs.txt")
    h200 = cost_file.read(standin.H200_COSTS)
    for name in (
        "nvmlDeviceGetSamples",
        "nvmlDeviceGetTotalEnergyConsumption",
        "field.83",
        "fieldgroup.74-76",
        "field.173",
        "nvmlDeviceGetProcessUtilization",
        "nvmlDeviceGetMaxClockInfo",
    ):
        assert measured[name] >= h200[name] * 0.95, name  # the burn is a floor
    assert "field.74" not in measured and "field.76" not in measured
    # NVLink5's counters (every link in one call) and the platform info call are timed
    header = (tmp_path / "nvml-costs.txt").read_text()
    assert re.search(r"# NVLink5 counters \(\d+ links, \d+ entries", header), header
    assert "# nvmlDeviceGetPlatformInfo: " in header
    assert standin.check_costs(tmp_path / "nvml-costs.txt") == len(measured)


UNLISTED_PROBE = """
import time, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(1)  # no process listed on it
seen = {}
for half in (0.2, 0.7):
    time.sleep((half - time.time() % 1) % 1)
    seen[half] = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
_, entries = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
first_half = [e.timeStamp % 10**6 < 5 * 10**5 for e in entries]
wrong = [e for e, f in zip(entries, first_half) if e.sampleValue.uiVal != (95 if f else 0)]
print(seen[0.2], seen[0.7], len(entries), len(wrong))
"""


def test_the_stand_in_makes_an_unlisted_gpu_busy_half_of_each_second(tmp_path: Path) -> None:
    """With `unlisted_busy` (FAKE_NVML_UNLISTED_BUSY, the bench's default since issue 52) a
    GPU with no process listed is busy in the first half of each second, as the outside
    judge's GPUs, in its rates and in its sample buffer: the bench takes the exporter's
    path for work NVML does not list. Without it the GPU is idle."""
    for busy, expected in ((True, "95 0"), (False, "0 0")):
        env = standin.environment(
            [os.getpid()], tmp_path / "calls.bin", tmp_path / "n.json", 2, unlisted_busy=busy
        )
        rates_busy, rates_idle, entries, wrong = python(["-c", UNLISTED_PROBE], env).stdout.split()
        assert f"{rates_busy} {rates_idle}" == expected
        if busy:
            assert int(entries) > 50 and wrong == "0"


@pytest.mark.e2e
def test_the_per_process_probe_runs_its_reads_against_the_stand_in(tmp_path: Path) -> None:
    """`real_gpu_process_samples.py` runs on a lent GPU, minutes a session: its readers run
    here first, against the stand-in (which lists this process on GPU 0), so a mistake in
    them costs no device time. Each `since` moment asks every distance, in order."""
    env = standin.environment(
        [os.getpid()], tmp_path / "calls.bin", tmp_path / "names.json", 1, costs=None
    )
    probe = (
        "import sys, time; sys.path.insert(0, 'benchmarks'); import pynvml; "
        "import real_gpu_process_samples as probe; pynvml.nvmlInit(); "
        "handle = pynvml.nvmlDeviceGetHandleByIndex(0); start = int(time.time() * 1e6); "
        "print('\\n'.join(probe.reads(pynvml, handle, 0.05, 0.2, start))); print('--'); "
        "print('\\n'.join(probe.sinces(pynvml, handle, start, moments=2, spacing=0.05)))"
    )
    readers, moments = python(["-c", probe], env).stdout.split("--\n")
    assert all("s: " in line and "; GPU buffer " in line for line in readers.splitlines())
    lines = moments.splitlines()
    assert len(lines) == 2
    for line in lines:
        answers = line.split(": ", 1)[1].split("; ")
        backs = [answer.split(" s back: ")[0] for answer in answers]
        assert backs == [f"{back:g}" for back in real_gpu_process_samples.SINCE_BACK_SECONDS]
        # this process's entry, none, or what NVML said (NOT_FOUND: nothing since then)
        said = {a.split(" s back: ")[1] for a in answers if f"pid {os.getpid()}," not in a}
        assert said <= {"no entry", "Not Found"}, line
        assert any(f"pid {os.getpid()}," in a for a in answers), line  # 10 s back reach it


# the summary cachegrind writes to stderr (valgrind 3.19, --cache-sim=no)
CACHEGRIND_SUMMARY = """==4242== Cachegrind, a cache and branch-prediction profiler
==4242== Command: python -c ...
==4242==
==4242== I   refs:      1,234,567,890
"""


def test_instructions_py_counts_a_sample_by_the_difference_of_two_runs() -> None:
    """`benchmarks/instructions.py` reads cachegrind's total and leaves start-up out."""
    assert instructions.instruction_count(CACHEGRIND_SUMMARY) == 1_234_567_890
    with pytest.raises(ValueError, match="I refs"):
        instructions.instruction_count("==1== ERROR SUMMARY: 0 errors\n")
    assert instructions.per_sample((20, 1_000_000), (60, 9_000_000)) == 200_000.0
    with pytest.raises(ValueError, match="more samples"):
        instructions.per_sample((60, 9_000_000), (20, 1_000_000))


def test_instructions_py_samples_the_stand_in_as_the_daemon_does(tmp_path: Path) -> None:
    """What it runs under valgrind (without valgrind here: CI has none) takes samples of
    every GPU on the stand-in, through the daemon's own sampler, and exits cleanly."""
    env = standin.environment([], tmp_path / "calls", tmp_path / "names", 2, unlisted_busy=True)
    env["PYTHONPATH"] = str(REPO)
    python(["-c", instructions.CHILD, "3"], env)
    counts = standin.read_counts(tmp_path / "calls")
    assert counts.calls["nvmlDeviceGetMemoryInfo_v2"] == 2 * 3  # 2 GPUs, 3 samples


def test_every_benchmark_script_imports() -> None:
    """Each script under benchmarks/ loads with the helpers it imports from its
    neighbours: `make bench-rss` failed at its import of a helper that bench.py had
    dropped, unnoticed until someone ran it. Loaded only (no `main`): nothing measured."""
    failed = []
    for script in sorted((REPO / "benchmarks").glob("*.py")):
        try:
            importlib.import_module(script.stem)
        except Exception as error:  # every kind of breakage, named
            failed.append(f"{script.name}: {type(error).__name__}: {error}")
    assert failed == []
