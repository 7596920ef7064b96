"""glibc malloc settings for a small daemon that runs for months, unless the operator set
them in the environment.

- One arena (M_ARENA_MAX): glibc gives a thread that finds the arena in use an arena of
  its own (up to eight per core), and each keeps the memory freed into it resident. The
  daemon's threads run Python under one interpreter lock, so they rarely allocate at the
  same moment: extra arenas buy nothing here and cost about 2 MiB of resident memory.
- A fixed mmap threshold of 128 KiB (M_MMAP_THRESHOLD): by default glibc raises the
  threshold to the size of each large block freed, so the next exposition body and gzip
  state (hundreds of KiB, once per scrape) come from the heap, which does not shrink
  between them: about 1 MiB more after a few scrapes.

Measured on the benchmark host (`benchmarks/README.md`). Applied before the first thread
starts. On a C library without `mallopt` (musl) nothing changes.
"""

from __future__ import annotations

import ctypes
import os

# glibc's <malloc.h>: option -> (its environment variable, the value the daemon sets)
M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3
SETTINGS: dict[int, tuple[str, int]] = {
    M_ARENA_MAX: ("MALLOC_ARENA_MAX", 1),
    M_MMAP_THRESHOLD: ("MALLOC_MMAP_THRESHOLD_", 128 * 1024),
}


def tune_malloc() -> list[str]:
    """Apply SETTINGS; the names of those the C library took. An operator's environment
    variable (read by glibc at start) leaves its setting in force."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no such symbol in this C library
        return []
    taken: list[str] = []
    for option, (variable, value) in SETTINGS.items():
        if variable not in os.environ and mallopt(option, value):
            taken.append(variable)
    return taken
