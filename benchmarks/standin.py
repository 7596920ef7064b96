"""The compiled stand-in libnvidia-ml of the benchmark (`standin_nvml/standin_nvml.c`):
build it, start a program on it, read its counts.

`build()` compiles the C source with the system compiler (`cc`) against NVIDIA's nvml.h
(PyPI nvidia-nvml-dev, a dev dependency) into `benchmarks/.standin/libnvidia-ml.so.1`
(gitignored), again whenever the source is newer. `environment()` puts that folder first
on LD_LIBRARY_PATH, where pynvml's `CDLL("libnvidia-ml.so.1")` finds it as it finds a
driver: nothing in the program is patched. The library keeps its counts in a file it maps
(FAKE_NVML_CALLS), written as the calls happen, so `read_counts()` reads them at any
moment without disturbing the program. Thread names come from a `sitecustomize` that
writes each live Python thread's name by native id on SIGUSR1 (`thread_names_site`):
the only Python the benchmark puts in either program, and it touches no NVML.

With a cost file (`environment(costs=...)`, FAKE_NVML_COSTS; issue 42) every call charges
what a real driver's does, burnt on the calling thread's CPU: `H200_COSTS` holds what one
H200 charged. `check_costs()` loads the library once on a file and says how many entries
it took, or why it refused the file (a refused file leaves every call free).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "standin_nvml" / "standin_nvml.c"
BUILT = HERE / ".standin"
LIBRARY = BUILT / "libnvidia-ml.so.1"
NAMES_SITE = HERE / "thread_names_site"
# what one H200 on driver 580.159.04 charged per call (issue 42; benchmarks/real_gpu.py
# measures another GPU's)
H200_COSTS = HERE / "nvml_costs" / "h200-r580.txt"

MAGIC = b"NVSTAND2"
# magic, functions, thread slots, cost entries loaded, cost file refused (0: no; a line
# number; -1: the whole file)
HEADER = struct.Struct("<8sQQQq")
FUNCTION = struct.Struct("<48sQQQ")  # name, calls, on a GPU (0/1), CPU ns inside
THREAD = struct.Struct("<QQQ")  # kernel thread id (0: free slot), CPU ns inside, calls
MAX_COUNTS_BYTES = 1 << 20  # the file is about 10 KiB; anything larger is not ours


def nvml_header_dir() -> Path:
    """The folder of NVIDIA's nvml.h in this interpreter's site-packages."""
    for entry in sys.path:
        for header in sorted(Path(entry).glob("nvidia/*/include/nvml.h")):
            return header.parent
    raise SystemExit("nvml.h not found: install the dev dependencies (make .venv/.installed)")


def build() -> Path:
    """The stand-in library built (again if its source changed); its folder."""
    if LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BUILT
    BUILT.mkdir(exist_ok=True)
    command = ["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"]
    command += ["-I", str(nvml_header_dir()), "-o", str(LIBRARY), str(SOURCE)]
    subprocess.run(command, check=True)
    return BUILT


def environment(
    pids: Sequence[int],
    calls_file: Path,
    names_file: Path,
    gpus: int,
    *,
    mig: int | None = None,
    mig_idle: bool = False,
    costs: Path | None = None,
    unlisted_busy: bool = False,
) -> dict[str, str]:
    """The environment that loads the stand-in in a program: `gpus` GPUs, `pids` dealt
    over them, with `mig` MIG devices on each (1, 3 or 7; None: MIG off), each call
    charging what `costs` says (None: every call free); with `unlisted_busy`, a GPU with
    no process listed is busy in the first half of each second (FAKE_NVML_UNLISTED_BUSY)."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(build()), os.environ.get("LD_LIBRARY_PATH", "")) if p
    )
    env.update(
        PYTHONPATH=str(NAMES_SITE),
        FAKE_NVML_GPUS=str(gpus),
        FAKE_NVML_PIDS=",".join(str(p) for p in pids),
        FAKE_NVML_CALLS=str(calls_file),
        BENCH_THREAD_NAMES=str(names_file),
    )
    for name in (
        "FAKE_NVML_MIG",
        "FAKE_NVML_MIG_IDLE",
        "FAKE_NVML_REPO",
        "FAKE_NVML_COSTS",
        "FAKE_NVML_UNLISTED_BUSY",
    ):
        env.pop(name, None)
    if unlisted_busy:
        env["FAKE_NVML_UNLISTED_BUSY"] = "1"
    if costs is not None:
        env["FAKE_NVML_COSTS"] = str(costs)
    if mig is not None:
        env["FAKE_NVML_MIG"] = str(mig)
        if mig_idle:
            env["FAKE_NVML_MIG_IDLE"] = "1"
    return env


@dataclass
class Counts:
    """The stand-in's counts in one program at one moment."""

    at: float  # monotonic seconds
    calls: dict[str, int]  # function -> calls
    cpu_seconds: dict[str, float]  # function -> CPU inside it, on the callers' clocks
    on_gpu: frozenset[str]  # functions called for one GPU (its handle, its GPM samples)
    cpu_by_thread: dict[str, float]  # kernel thread id -> CPU seconds inside the library
    cost_entries: int  # entries of the cost file the library charges (0: free)
    cost_refused: int  # 0, or the cost file's refused line (-1: the whole file)

    @property
    def answered(self) -> int:
        return sum(self.calls.values())

    @property
    def on_gpus(self) -> int:
        """Of `answered`, the calls made for one GPU."""
        return sum(n for f, n in self.calls.items() if f in self.on_gpu)

    @property
    def total_cpu_seconds(self) -> float:
        return sum(self.cpu_seconds.values())


def read_counts(calls_file: Path) -> Counts:
    """The counts now, read from the library's mapped file."""
    at = time.monotonic()
    with open(calls_file, "rb") as f:
        data = f.read(MAX_COUNTS_BYTES)
    magic, functions, slots, cost_entries, cost_refused = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise SystemExit(f"{calls_file}: not the stand-in's counts")
    calls: dict[str, int] = {}
    cpu: dict[str, float] = {}
    on_gpu: set[str] = set()
    offset = HEADER.size
    for _ in range(functions):
        raw, n, gpu, ns = FUNCTION.unpack_from(data, offset)
        offset += FUNCTION.size
        name = raw.rstrip(b"\0").decode("ascii")
        calls[name], cpu[name] = n, ns / 1e9
        if gpu:
            on_gpu.add(name)
    by_thread: dict[str, float] = {}
    for _ in range(slots):
        tid, ns, _n = THREAD.unpack_from(data, offset)
        offset += THREAD.size
        if tid:
            by_thread[str(tid)] = ns / 1e9
    return Counts(at, calls, cpu, frozenset(on_gpu), by_thread, cost_entries, cost_refused)


def check_costs(costs: Path) -> int:
    """The entries of `costs` the library charges, loaded once in a bare interpreter;
    SystemExit with the library's own message if it refuses the file."""
    with tempfile.TemporaryDirectory() as tmp:
        calls = Path(tmp) / "calls.bin"
        env = environment([], calls, Path(tmp) / "names.json", 1, costs=costs)
        load = f"import ctypes; ctypes.CDLL({str(LIBRARY)!r})"
        ran = subprocess.run(
            [sys.executable, "-S", "-c", load], env=env, capture_output=True, text=True, timeout=60
        )
        if ran.returncode != 0 or not calls.exists():
            raise SystemExit(f"the stand-in did not load: {ran.stderr.strip()}")
        counts = read_counts(calls)
    if counts.cost_refused:
        raise SystemExit(ran.stderr.strip() or f"{costs}: refused")
    return counts.cost_entries


def thread_names(pid: int, names_file: Path) -> dict[str, str]:
    """Each live Python thread's name by native id (SIGUSR1 to `thread_names_site`)."""
    names_file.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not names_file.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{pid} wrote no thread names")
        time.sleep(0.02)
    return {str(tid): str(name) for tid, name in json.loads(names_file.read_text()).items()}
