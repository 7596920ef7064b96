"""The package's shape: the import layers, and the catalogue as the one home of metric names."""

from __future__ import annotations

import ast
import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

from gpu_exporter.metrics.catalogue import METRICS

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "gpu_exporter"
CATALOGUE = PACKAGE / "metrics" / "catalogue.py"
# the dcgm-exporter table names each DCGM field's gpu_ equivalent for the migration guide
CATALOGUE_MODULES = {CATALOGUE, PACKAGE / "metrics" / "dcgm.py"}
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def layered_modules() -> set[str]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    layers = config["importlinter:contract:flow"]["layers"]
    return {name.strip() for name in re.split(r"[|\n:]", layers) if name.strip()}


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports as `make lint` runs it: on the .importlinter of the folder it runs in."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )


def test_every_module_and_subpackage_is_in_a_layer() -> None:
    top = {
        f"gpu_exporter.{p.stem}"
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert top - layered_modules() == set(), "add the new module to a layer in .importlinter"
    assert layered_modules() - top == set()


def test_the_layers_contract_is_kept() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout
    assert "deprecated" not in (result.stdout + result.stderr).lower()


def test_an_import_against_the_flow_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(
        PACKAGE, tmp_path / "gpu_exporter", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    model = tmp_path / "gpu_exporter" / "model.py"
    model.write_text(model.read_text() + "\nfrom gpu_exporter.sampling import sampler  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "gpu_exporter.model -> gpu_exporter.sampling" in result.stdout


def string_literals(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_metric_names_are_written_only_in_the_catalogue() -> None:
    names = {m.name for m in METRICS} | {m.family_name for m in METRICS}
    found = {
        str(path.relative_to(REPO)): sorted(literals & names)
        for path in PACKAGE.rglob("*.py")
        if path not in CATALOGUE_MODULES and (literals := string_literals(path)) & names
    }
    assert found == {}


def test_the_literal_scan_sees_catalogue_names() -> None:
    assert "gpu_busy_seconds_total" in string_literals(CATALOGUE)
