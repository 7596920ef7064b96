"""Instructions a sample: the sampler's cost, counted rather than timed.

The running exporter's CPU spreads by +-10% between 20 s runs on the benchmark's virtual
machines (and the first of two back-to-back runs reads 5-7% higher, whichever program it
is), more than most single changes to the hot path. The instructions a sample executes
do not: valgrind's cachegrind counts them (`I refs`) to the instruction, and the
difference between a process that takes SHORT samples and one that takes LONG, divided
by LONG - SHORT, leaves start-up out. It repeated to 0.3% in the eleventh and twelfth
sittings (benchmarks/README.md) and moved with the live figures where those could tell.

Each sample runs as the daemon's does (`Sampler.sample_once`, the reads on the reader
thread), on the benchmark's stand-in driver (`standin.py`), every call free (a charge is
a spin loop: its instructions are the driver's, not ours), with `--unlisted-busy` the
bench's default host (a GPU with no process listed busy half of each second). Not
timed, not in `make test`: it needs valgrind (`apt-get install valgrind`) and about 20 s
a tree at 8 GPUs.

    .venv/bin/python benchmarks/instructions.py                 # this checkout
    .venv/bin/python benchmarks/instructions.py . /tmp/old-tree # A/B, same host

A tree is a directory holding the `gpu_exporter` package (a `git worktree` or a
`git archive` of another commit).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import standin  # noqa: E402  (the benchmark's own module, beside this one)

# what the child runs: the daemon's sampler, N samples, then out without teardown
CHILD = """
import os, sys
from gpu_exporter.config import load_settings
from gpu_exporter.daemon import Exporter
sampler = Exporter(load_settings(["--collect.interval", "1"]), []).sampler
for _ in range(int(sys.argv[1])):
    sampler.sample_once()
os._exit(0)
"""

_I_REFS = re.compile(r"I\s+refs:\s+([0-9][0-9,]{0,30})")  # no nested repeats: no backtracking


def instruction_count(cachegrind_stderr: str) -> int:
    """The `I refs` total of a cachegrind run's summary (its stderr)."""
    found = _I_REFS.search(cachegrind_stderr)
    if found is None:
        raise ValueError("no 'I refs' line in valgrind's output")
    return int(found.group(1).replace(",", ""))


def per_sample(short: tuple[int, int], long: tuple[int, int]) -> float:
    """Instructions a sample from two runs, each (samples, instructions)."""
    (n1, i1), (n2, i2) = short, long
    if n2 <= n1:
        raise ValueError("the long run must take more samples than the short one")
    return (i2 - i1) / (n2 - n1)


def count(tree: Path, samples: int, env: dict[str, str]) -> int:
    """Instructions of one child process on `tree` taking `samples` samples."""
    child_env = dict(env, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            "-c",
            CHILD,
            str(samples),
        ],
        cwd=tree,
        env=child_env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the sampler failed under valgrind:\n{done.stderr[-2000:]}")
    return instruction_count(done.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[HERE.parent])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--short", type=int, default=20, help="samples of the short run")
    parser.add_argument("--long", type=int, default=60, help="samples of the long run")
    parser.add_argument(
        "--unlisted-idle",
        action="store_true",
        help="GPUs with no process listed read 0 (the bench's --unlisted-idle)",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found: apt-get install valgrind")
    for tree in args.trees:
        if not (tree / "gpu_exporter" / "__init__.py").is_file():
            raise SystemExit(f"{tree}: no gpu_exporter package there")
    with tempfile.TemporaryDirectory() as scratch:
        env = standin.environment(
            [],
            Path(scratch) / "calls",
            Path(scratch) / "names",
            args.gpus,
            unlisted_busy=not args.unlisted_idle,
        )
        for tree in args.trees:
            short = (args.short, count(tree.resolve(), args.short, env))
            long = (args.long, count(tree.resolve(), args.long, env))
            print(f"{tree}: {per_sample(short, long) / 1e6:.3f} million instructions a sample")


if __name__ == "__main__":
    main()
