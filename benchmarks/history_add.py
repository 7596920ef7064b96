"""The live page's history: CPU per `History.add`, 8 GPUs and the host.

`History.add(snapshot)` runs once per published sample (every second by default), so its
cost is paid for as long as the exporter runs. Feeds a `History` samples of
`benchmarks/history_memory.py` (8 GPUs, 4 processes each, and the host) at a fixed
interval (1 s by default; 0.1 s puts ten samples in each fine point), in rounds of
`--chunk` samples, each built just before it is added (as the sampler's snapshot is:
samples built long before are out of the caches, and reading them costs more), and prints
the CPU time per call (`time.process_time` around each call) of the fastest round: on a
shared machine the fastest is the one least disturbed. A few seconds; a figure to
compare, never asserted.

`--against PATH` times another copy of `gpu_exporter/sampling/history.py` (the one
before a change, say) too, its rounds alternating with the installed one's, so that both
see the same machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

from history_memory import GPUS, snapshot, static

from gpu_exporter.sampling import history


def load(path: str) -> ModuleType:
    """The history module at `path`."""
    spec = importlib.util.spec_from_file_location("history_under_test", Path(path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def measure(modules: list[ModuleType], rounds: int, chunk: int, interval: float) -> list[float]:
    """Microseconds of CPU per `History.add` of each module: its fastest round of `chunk`
    samples, the modules' rounds alternating, each module feeding its own History."""
    statics = [static(i) for i in range(GPUS)]
    histories = [module.History() for module in modules]
    for kept in histories:  # warm up: rates have a sample before, tiers hold points
        for k in range(chunk):
            kept.add(snapshot(k * interval, statics))
    best = [float("inf")] * len(modules)
    for r in range(1, rounds + 1):
        for i, kept in enumerate(histories):
            spent = 0.0
            for k in range(r * chunk, (r + 1) * chunk):
                sample = snapshot(k * interval, statics)
                start = time.process_time()
                kept.add(sample)
                spent += time.process_time() - start
            best[i] = min(best[i], spent)
    return [b / chunk * 1e6 for b in best]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="PATH", help="another history.py to time too")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--chunk", type=int, default=60, help="samples a round (60: a 1-minute point at 1 s)"
    )
    args = parser.parse_args()
    modules = [history] + ([load(args.against)] if args.against else [])
    figures = measure(modules, args.rounds, args.chunk, args.interval)
    for name, us in zip(["installed", args.against], figures, strict=False):
        print(
            f"History.add ({name}), {GPUS} GPUs and the host, a sample every "
            f"{args.interval:g} s: {us:.0f} us of CPU per call "
            f"(fastest of {args.rounds} rounds of {args.chunk})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
