"""The declared minimum versions are honest: the exporter runs on exactly them.

pyproject.toml says `nvidia-ml-py>=X`; pip will happily install X for a user whose other
packages hold it back. Everything else in the suite runs on the newest releases, so an
attribute that only newer releases have (`NVML_VALUE_TYPE_UNSIGNED_SHORT` arrived in
12.560, `NVMLLibraryMismatchError` in 12.550) would pass here and fail at import there.
This test installs every runtime dependency at exactly its declared floor into a
throwaway venv (from PyPI, or pip's cache) and runs `gpu-exporter --once` against the
fake libnvidia-ml (`benchmarks/fake_nvml_site`), through the real pynvml of that floor.
"""

from __future__ import annotations

import re
import subprocess
import venv
from pathlib import Path

import pytest

from tests.support.exporter import fake_library_env, parse_samples, values

REPO = Path(__file__).resolve().parents[1]
_FLOOR = re.compile(r"^([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)\s*$")


def declared_floors() -> dict[str, str]:
    """Runtime dependency -> the version its `>=` names, from pyproject.toml."""
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert block, "pyproject.toml: no [project] dependencies list"
    floors: dict[str, str] = {}
    for requirement in re.findall(r'"([^"]+)"', block.group(1)):
        match = _FLOOR.match(requirement)
        assert match, f"{requirement!r}: every runtime dependency declares a plain >= floor"
        floors[match.group(1)] = match.group(2)
    return floors


def test_every_runtime_dependency_declares_a_floor() -> None:
    assert set(declared_floors()) == {"nvidia-ml-py", "pyyaml", "bcrypt", "h11"}


@pytest.mark.e2e
def test_the_exporter_runs_on_the_declared_floor_of_every_dependency(tmp_path: Path) -> None:
    floors = declared_floors()
    env_dir = tmp_path / "floor-venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    pins = [f"{name}=={version}" for name, version in floors.items()]
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pins],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, f"pip install {' '.join(pins)}:\n{installed.stderr}"

    ran = subprocess.run(
        [str(python), "-m", "gpu_exporter", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=fake_library_env(2),
    )
    assert ran.returncode == 0, f"--once on {pins} failed:\n{ran.stderr[-3000:]}"
    samples = parse_samples(ran.stdout)
    assert values(samples, "gpu_exporter_nvml_up") == [1.0]
    assert values(samples, "gpu_exporter_build_info", backend="nvml") == [1.0]
    assert values(samples, "gpu_up") == [1.0, 1.0]
    assert values(samples, "gpu_memory_total_bytes", gpu="0")  # a device reading came through
    # the venv's pynvml really is the floor, not the suite's own
    shown = subprocess.run(
        [str(python), "-m", "pip", "show", "nvidia-ml-py"], capture_output=True, text=True
    )
    assert f"Version: {floors['nvidia-ml-py']}" in shown.stdout

    # --once serves no request: the request parser on h11's floor, a head it reads and
    # the 5000-digit Content-Length that its floor refuses
    parsed = subprocess.run(
        [str(python), "-c", _PARSE_ON_THE_FLOOR],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO)},
    )
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    assert parsed.stdout.split() == ["/metrics", "400"]


_PARSE_ON_THE_FLOOR = """
from gpu_exporter.serving.request_head import BadRequest, parse_head
print(parse_head(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n").target)
try:
    parse_head(b"GET / HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: " + b"9" * 5000 + b"\\r\\n\\r\\n")
except BadRequest as error:
    print(int(error.status))
"""
