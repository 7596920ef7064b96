"""Build the package as pip's build stage does: setuptools' PEP 517 backend, no network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Literal


def build(kind: Literal["sdist", "wheel"], source: Path, out: Path) -> tuple[Path, str]:
    """Build an sdist or a wheel of the checkout at `source` into `out`; returns the
    archive and the backend's stderr (its warnings)."""
    code = (
        "import sys; from setuptools import build_meta; "
        f"print(build_meta.build_{kind}(sys.argv[1]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=source,
    )
    assert result.returncode == 0, result.stderr
    return out / result.stdout.split()[-1], result.stderr
