"""Build the package as pip's build stage does: setuptools' PEP 517 backend, no network."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

from tests.support.exporter import REPO

SOURCE = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "LICENSE",
    "gpu_exporter",
    "deploy",
    "grafana",
    "docs",
)
"""What a build reads: the code, its metadata, and the files setup.py ships beside it."""


def copy_source(dest: Path) -> Path:
    """A copy of the checkout's build inputs at `dest`, without caches: a build writes
    build/ and *.egg-info/ into its source, which must not be the shared checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCE:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, dest / name, ignore=ignore)
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


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
