"""`python -m build` makes an sdist and, from it, a wheel that a user installs with pip
into a clean venv: the command runs (`--version`, `--once --simulate 1`), and the files
shipped beside the code (systemd units, rules, Alertmanager example, dashboards,
runbooks) come out of `--print-config` and /runbooks exactly as the repository holds them.

The venv gets the wheel's dependencies from PyPI, as a user's would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_exporter import __version__
from gpu_exporter.print_config import CONFIGS
from tests.support.exporter import REPO, free_port, http_get
from tests.support.packaging import copy_source

pytestmark = pytest.mark.e2e


@dataclass
class Installed:
    sdist: Path
    wheel: Path
    venv: Path
    workdir: Path  # outside the checkout: nothing of it can be imported from here

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(self.venv / "bin" / "gpu-exporter"), *args],
            capture_output=True,
            timeout=timeout,
            cwd=self.workdir,
            env=clean_env(),
        )


def clean_env() -> dict[str, str]:
    """The environment without the tests' PYTHONPATH, which points at the checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("packaging")
    source = copy_source(root / "source")
    dist = root / "dist"
    # the default: an sdist, then the wheel built from that sdist; no isolation, so the
    # build uses the dev extra's setuptools instead of downloading one
    build = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (sdist,) = dist.glob("gpu_exporter-*.tar.gz")
    (wheel,) = dist.glob("gpu_exporter-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    workdir = root / "elsewhere"
    workdir.mkdir()
    yield Installed(sdist, wheel, venv, workdir)


def test_build_makes_an_sdist_and_a_wheel_of_this_version(installed: Installed) -> None:
    assert installed.sdist.name == f"gpu_exporter-{__version__}.tar.gz"
    assert installed.wheel.name == f"gpu_exporter-{__version__}-py3-none-any.whl"


def test_the_sdist_holds_the_shipped_files_at_their_repository_paths(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"setup.py", "pyproject.toml", "gpu_exporter/cli.py"} <= names
    assert set(CONFIGS.values()) <= names
    assert not any(name.startswith(("tests/", "build/")) for name in names)


def test_the_wheel_and_the_sdist_carry_the_apache_license(installed: Installed) -> None:
    text = (REPO / "LICENSE").read_bytes()
    assert b"Apache License\n                           Version 2.0, January 2004" in text
    assert b"END OF TERMS AND CONDITIONS" in text  # the full text, not a notice
    with tarfile.open(installed.sdist) as archive:
        (member,) = [m for m in archive.getmembers() if m.name.endswith("/LICENSE")]
        assert member.name == f"gpu_exporter-{__version__}/LICENSE"
        extracted = archive.extractfile(member)
        assert extracted is not None and extracted.read() == text
    with zipfile.ZipFile(installed.wheel) as wheel:
        info = f"gpu_exporter-{__version__}.dist-info"
        assert wheel.read(f"{info}/licenses/LICENSE") == text
        metadata = wheel.read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()


def test_the_wheel_carries_one_copy_of_each_shipped_file(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        for path in CONFIGS.values():
            assert wheel.read(f"gpu_exporter/shipped/{path}") == (REPO / path).read_bytes()
    assert "gpu_exporter/serving/static/page.js" in names
    # data, not importable code: no tests, no stray modules beside the package
    assert all(name.startswith(("gpu_exporter/", "gpu_exporter-")) for name in names), names


def test_the_installed_command_runs(installed: Installed) -> None:
    version = installed.run("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.decode().strip() == f"gpu-exporter {__version__}"
    once = installed.run("--once", "--simulate", "1")
    assert once.returncode == 0, once.stderr
    assert b'gpu_exporter_build_info{backend="simulated"' in once.stdout
    assert b'gpu_up{gpu="0"' in once.stdout
    # the venv's package, not the checkout's
    where = subprocess.run(
        [
            str(installed.venv / "bin" / "python"),
            "-c",
            "import gpu_exporter; print(gpu_exporter.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=installed.workdir,
        env=clean_env(),
        check=True,
    )
    assert where.stdout.startswith(str(installed.venv)), where.stdout


@pytest.mark.parametrize("words", sorted(CONFIGS), ids=" ".join)
def test_print_config_of_the_installed_wheel_is_the_repository_s_file(
    installed: Installed, words: tuple[str, ...]
) -> None:
    result = installed.run("--print-config", *words)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (REPO / CONFIGS[words]).read_bytes()


def test_print_config_without_a_name_lists_them_in_one_line(installed: Installed) -> None:
    result = installed.run("--print-config")
    assert result.returncode == 2
    (line,) = result.stderr.decode().splitlines()
    assert "systemd" in line and "rules alerts" in line and "dashboard fleet" in line


def test_the_installed_exporter_serves_its_runbooks(installed: Installed) -> None:
    port = free_port()
    process = subprocess.Popen(
        [str(installed.venv / "bin" / "gpu-exporter"), "--simulate", "1"]
        + ["--web.listen-address", f"127.0.0.1:{port}"],
        cwd=installed.workdir,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                result = http_get(f"http://127.0.0.1:{port}/runbooks")
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        assert result.status == 200
        assert b'<h2 id="gpulost">GPULost</h2>' in result.body
    finally:
        process.terminate()
        process.wait(10)
