"""SHA-256 of a label value that had to be cut, without loading OpenSSL.

`hashlib` loads OpenSSL's libcrypto when it is imported: 3.4 MiB of the exporter's
28.9 MiB resident memory on the benchmark's 8-GPU host (libcrypto's pages in
/proc/PID/smaps), for a digest the exporter takes only when a label value is cut.
CPython's own SHA-256 module (`_sha256` up to 3.11, `_sha2` from 3.12; hashlib's
fallback when OpenSSL is missing) gives the same digest without it; `hashlib` is the
fallback where neither exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_sha256: Callable[[bytes], Any]
try:
    from _sha2 import sha256 as _sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:
    try:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        from hashlib import sha256 as _sha256


def sha256_hex(data: bytes) -> str:
    """The SHA-256 digest of `data`, in 64 lower-case hex digits."""
    return str(_sha256(data).hexdigest())
