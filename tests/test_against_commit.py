"""`benchmarks/against_commit.py` compares this checkout with an earlier commit by running
each commit's own package: this holds that the exported tree is the one that runs, both
as the tool starts it for the judge's bursts and as the bench starts it (`cwd=tree`), and
not this checkout's editable install. Its figures are measured, never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import against_commit  # noqa: E402  (benchmarks/ is no package)
import bench  # noqa: E402

SAYS = "print('the exported tree runs')\n"


def test_an_exported_commit_runs_its_own_package(tmp_path: Path) -> None:
    short = against_commit.export("HEAD", tmp_path)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    assert head.stdout.startswith(short) and len(short) >= 7
    assert list((tmp_path / "gpu_exporter" / "__pycache__").glob("cli.*.pyc"))
    main = tmp_path / "gpu_exporter" / "__main__.py"
    main.write_text(SAYS + main.read_text())
    ran = subprocess.run(
        [*against_commit.program(tmp_path), "--version"], capture_output=True, text=True
    )
    assert ran.returncode == 0 and ran.stdout.startswith("the exported tree runs\ngpu-exporter ")
    # the bench's start, as `cpu_alone` makes it with tree=
    ran = subprocess.run(
        [*bench.exporter_command(0)[:3], "--version"], cwd=tmp_path, capture_output=True, text=True
    )
    assert ran.stdout.startswith("the exported tree runs\n"), ran.stderr
    ran = subprocess.run(
        [*bench.exporter_command(0)[:3], "--version"], cwd=REPO, capture_output=True, text=True
    )
    assert ran.returncode == 0 and "exported" not in ran.stdout
