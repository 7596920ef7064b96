"""Every parser of outside input, timed on a 100,000-character input shaped to make it
work hardest (issue 35: each under 10 ms).

The cases are `tests/support/outside_input.py`'s, which `tests/test_parser_bounds.py`
checks without a clock (no pattern that backtracks, no pattern given more than a head's
bound). Each is run 20 times; the best and the median are printed, in milliseconds of
this thread's CPU. `make bench-parsers` writes the table to benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_exporter.docs import write_section
from tests.support.outside_input import SIZE, cases

RUNS = 20
LIMIT_MS = 10.0


def measure() -> list[tuple[str, float, float]]:
    """(case, best ms, median ms) of each case."""
    out = []
    for case in cases():
        times = []
        for _ in range(RUNS):
            start = time.thread_time()
            case.run(case.text)
            times.append((time.thread_time() - start) * 1000)
        times.sort()
        out.append((case.name, times[0], times[len(times) // 2]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="README", help="write the table between markers")
    args = parser.parse_args()
    rows = measure()
    worst = max(median for _, _, median in rows)
    lines = [
        f"Parsers of outside input ({date.today().isoformat()}), {SIZE:,} characters each, "
        f"{RUNS} runs, thread CPU:",
        "",
        "| parser | best ms | median ms |",
        "|---|---|---|",
        *(f"| {name} | {best:.3f} | {median:.3f} |" for name, best, median in rows),
        "",
        f"Slowest median {worst:.3f} ms, limit {LIMIT_MS:.0f} ms: "
        f"{'PASS' if worst <= LIMIT_MS else 'FAIL'}.",
    ]
    print("\n".join(lines))
    if args.write:
        write_section(args.write, "parsers", "\n".join(lines))
    return 0 if worst <= LIMIT_MS else 1


if __name__ == "__main__":
    sys.exit(main())
