"""The Makefile's promise to a newcomer: `make demo` builds only what the exporter needs."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def runtime_packages() -> set[str]:
    """The exporter, pip, and the dependencies it declares (not those of its extras)."""
    declared = importlib.metadata.requires("gpu-exporter") or []
    names = {
        re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower() for d in declared if "extra ==" not in d
    }
    return names | {"gpu-exporter", "pip"}


def test_the_demo_venv_holds_the_exporter_and_its_runtime_dependencies_only(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    made = subprocess.run(
        ["make", "--no-print-directory", f"VENV={venv}", f"{venv}/.runtime"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert "BuildBackendWarning" not in made.stderr  # setuptools' Editable installation banner
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {line.split("==")[0].split(" @ ")[0].lower() for line in listed.stdout.split()}
    names = {n.replace("_", "-") for n in names if n}
    assert names - {"setuptools", "wheel"} == runtime_packages(), names
    once = subprocess.run(
        [str(venv / "bin" / "gpu-exporter"), "--once", "--simulate", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert once.returncode == 0, once.stderr
    assert 'gpu_exporter_build_info{backend="simulated"' in once.stdout


def plan(target: str) -> str:
    """The commands `make TARGET` would run, with the venv at /nonexistent/venv."""
    return subprocess.run(
        ["make", "-n", "--no-print-directory", "VENV=/nonexistent/venv", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_make_demo_asks_for_the_runtime_venv_not_the_test_tools() -> None:
    commands = plan("demo")
    assert "pip install --quiet -e ." in commands
    assert "[dev]" not in commands


def test_make_lint_runs_lint_imports_as_test_architecture_does() -> None:
    # no --config, which is deprecated (and warned about on every run)
    assert "/nonexistent/venv/bin/lint-imports" in plan("lint").splitlines()


def test_make_dist_builds_with_the_build_package_of_the_dev_extra() -> None:
    commands = plan("dist").splitlines()
    assert "/nonexistent/venv/bin/python -m build --outdir dist ." in commands
    assert any("[dev]" in c for c in commands)  # where `build` comes from
