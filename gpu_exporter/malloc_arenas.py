"""One glibc malloc arena for the whole daemon, unless MALLOC_ARENA_MAX says otherwise.

glibc gives a thread that finds the arena in use an arena of its own (up to eight per
core), and each arena keeps the memory freed into it resident. The daemon's threads run
Python under one interpreter lock, so they rarely allocate at the same moment: extra
arenas buy nothing here and cost about 2 MiB of resident memory on the benchmark host
(`benchmarks/README.md`). Called before the first thread starts. On a C library without
`mallopt` (musl) nothing changes.
"""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's <malloc.h>
ARENAS = 1


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at `arenas`; True when the C library took the setting.

    An operator's MALLOC_ARENA_MAX (read by glibc at start) is left in force."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no such symbol in this C library
        return False
    return bool(mallopt(M_ARENA_MAX, arenas))
