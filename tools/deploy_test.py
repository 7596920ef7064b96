"""`make test-deploy`: the container image and the systemd units, built and run for real.

On a Debian host, as root, with no container registry needed:

1. installs podman, runc, debootstrap and systemd-container from Debian where missing;
2. builds the image from the Dockerfile as it is, with podman (`--format docker`, which
   keeps the HEALTHCHECK), on the real base image where a registry answers, otherwise
   on a debootstrapped Debian imported under the base image's name; the host's CA
   bundle and a pip.conf are mounted into the build's RUN steps only;
3. runs it: `/metrics` of `--simulate`, the HEALTHCHECK with `http_proxy` set, the uid,
   the documented kernel-log grant, SIGTERM, `--read-only --cap-drop=all` without a
   GPU (its message, `/livez` 200, `/healthz` 503), and with the DaemonSet's settings
   (`--pid=host`, uid 0, every capability dropped but SYSLOG, a read-only root) on the
   stand-in driver beside a crashed root job's worker that holds its GPU's device: the
   scan says it was denied, names the worker a candidate, and never says reset;
4. boots systemd in a debootstrapped Debian (`systemd-nspawn -b`), installs the wheel and
   the units with the README's own commands, and checks readiness, the watchdog,
   restarts, stop time, that a stopped service stays stopped, the textfile timer's file
   as node_exporter serves it, the kernel log read from the file systemd opens for a
   sandbox that cannot open it (on every start), and `systemd-analyze security`;
5. removes every container, image, mount and temporary file it made.

A step that cannot run fails the whole test, naming the step and why; nothing is skipped.
The debootstrap trees are kept in `.deploy-cache/` (git-ignored) for the next run;
`DEPLOY_MIRROR` picks the Debian mirror. All traffic stays on loopback, except the
package downloads (apt, debootstrap, pip in the image build).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from gpu_exporter import __version__

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".deploy-cache"
SUITE = "bookworm"
MIRROR = os.environ.get("DEPLOY_MIRROR", "http://deb.debian.org/debian")
TOOLS = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}
TOOLS_SYSTEMD = {"systemd-nspawn": "systemd-container"}
# the stand-in for python:*-slim: Debian's Python with venv (and its CA certificates)
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
# a booted Debian with node_exporter as Debian ships it (its textfile directory)
SYSTEMD_PACKAGES = (
    *("systemd", "systemd-sysv", "dbus", "python3", "python3-venv"),
    "prometheus-node-exporter",
)
TAG = f"gpu-exporter:{__version__}"
PREFIX = "gpu-exporter-deploy"
# the unit scored 1.8 (systemd 252) before the kernel-log reader; it still does, as
# systemd opens /dev/kmsg for it (gpu-exporter-kmsg.socket): no capability, and
# ProtectKernelLogs=yes (granting CAP_SYSLOG instead cost 0.3)
SECURITY_MAX = 1.8
STOPPED_SECONDS = 5.0  # how long a stopped service is watched for a restart
STOP_SECONDS = 2.0
TEXTFILE = "/var/lib/prometheus/node-exporter/gpu-exporter.prom"


class StepFailed(Exception):
    """A step could not be done or found something wrong; the message says which."""


def say(text: str) -> None:
    print(text, flush=True)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    say(f"== {name}")
    started = time.monotonic()
    try:
        yield
    except StepFailed:
        raise
    except Exception as error:  # any failure names its step
        raise StepFailed(f"{name}: {type(error).__name__}: {error}") from None
    say(f"   ok ({time.monotonic() - started:.1f} s)")


def run(
    command: Sequence[str], *, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(command), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and result.returncode != 0:
        tail = (result.stdout + result.stderr).strip()[-1500:]
        raise RuntimeError(f"`{shlex.join(command)}` exited {result.returncode}:\n{tail}")
    return result


def require(condition: bool, why: str) -> None:
    if not condition:
        raise AssertionError(why)


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    """(status, body) without any proxy; (0, reason) when nothing answered."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as answer:
            return answer.status, answer.read(4_000_000).decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read(4096).decode("utf-8", "replace")
    except OSError as error:
        return 0, str(error)


def wait_for(what: str, probe: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if probe():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.25)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------- host preparation


def install_tools(systemd_too: bool) -> None:
    wanted = dict(TOOLS, **(TOOLS_SYSTEMD if systemd_too else {}))
    missing = sorted({package for tool, package in wanted.items() if not shutil.which(tool)})
    if not missing:
        return
    say(f"   apt-get install {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        subprocess.run(command, check=True, env=env, capture_output=True, timeout=600)


def debootstrap_tree(name: str, packages: Sequence[str]) -> Path:
    """A minbase Debian with `packages`, cached in .deploy-cache/NAME (rebuilt if stale)."""
    tree = CACHE / name
    stamp = f"{SUITE} {MIRROR} {' '.join(packages)}\n"
    stamp_file = CACHE / f"{name}.stamp"
    if tree.is_dir() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        say(f"   {tree.relative_to(REPO)} (cached)")
        return tree
    CACHE.mkdir(exist_ok=True)
    partial = CACHE / f"{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(tree, ignore_errors=True)
    include = ",".join(packages)
    command = ["debootstrap", "--variant=minbase", f"--include={include}", SUITE]
    run([*command, str(partial), MIRROR], timeout=900)
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (partial / leftover).glob("*"):
            if path.is_file():
                path.unlink()
    partial.rename(tree)
    stamp_file.write_text(stamp)
    return tree


# ---------------------------------------------------------------- the image


class Podman:
    """podman on a private store under `root`: nothing it makes outlives the test."""

    def __init__(self, root: Path) -> None:
        self.base = [
            "podman",
            "--root",
            str(root / "storage"),
            "--runroot",
            str(root / "run"),
            "--runtime",
            "runc",  # crun refuses hybrid cgroup hierarchies
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "file",
        ]
        self.root = root

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        return run([*self.base, *args], timeout=timeout, check=check).stdout.strip()

    def ok(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run([*self.base, *args], timeout=timeout, check=False)

    def cleanup(self) -> None:
        self.ok("rm", "--all", "--force", "--time", "0")
        self.ok("rmi", "--all", "--force")
        self.ok("system", "reset", "--force", timeout=120)


def ulimits() -> list[str]:
    """Within the host's hard limits: podman's defaults exceed them on some hosts."""
    import resource

    out = []
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        _, hard = resource.getrlimit(limit)
        value = 4096 if hard == resource.RLIM_INFINITY else min(hard - 1, 4096)
        out += ["--ulimit", f"{name}={value}:{value}"]
    return out


def dockerfile_base() -> str:
    """The image every FROM names (a stage's name has no tag)."""
    lines = (REPO / "Dockerfile").read_text().splitlines()
    bases = {line.split()[1] for line in lines if line.startswith("FROM ")}
    bases = {base for base in bases if ":" in base}
    require(len(bases) == 1, f"expected one base image in the Dockerfile, found {bases}")
    (base,) = bases
    return base if "/" in base else f"docker.io/library/{base}"


def host_ca_bundle() -> Path:
    import ssl

    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise AssertionError("no CA bundle on this host")


def build_pip_conf(path: Path, ca: Path) -> None:
    """What pip in the build needs from the host: its CA bundle and its index."""
    lines = ["[global]", f"cert = {ca}"]
    index = os.environ.get("PIP_INDEX_URL")
    if not index:
        listed = run([sys.executable, "-m", "pip", "config", "list"], check=False).stdout
        for line in listed.splitlines():
            if line.split("=", 1)[0] in ("global.index-url", ":env:.index-url"):
                index = line.split("=", 1)[1].strip().strip("'")
    if index and not index.startswith("file:"):
        lines.append(f"index-url = {index}")
    path.write_text("\n".join(lines) + "\n")


def file_digest(podman: Podman, image: str, path: str) -> str:
    script = (
        f"if [ -e {shlex.quote(path)} ]; then sha256sum < {shlex.quote(path)}; else echo absent; fi"
    )
    return podman(
        "run", "--rm", *ulimits(), "--network", "none", "--entrypoint", "sh", image, "-c", script
    ).split()[0]


def test_image(work: Path) -> dict[str, str]:
    """Builds and runs the image; returns the sizes measured."""
    podman = Podman(work / "podman")
    figures: dict[str, str] = {}
    try:
        base = dockerfile_base()
        with step(f"base image {base}"):
            pulled = podman.ok("pull", "--quiet", base, timeout=90)
            if pulled.returncode == 0:
                say("   pulled from its registry")
                figures["base"] = "real"
            else:
                say(f"   no registry answered ({pulled.stderr.strip().splitlines()[-1:]});")
                tree = debootstrap_tree("base-" + SUITE, BASE_PACKAGES)
                say(f"   importing a debootstrapped {SUITE} as {base}")
                tar = subprocess.Popen(["tar", "-C", str(tree), "-c", "."], stdout=subprocess.PIPE)
                imported = subprocess.run(
                    [*podman.base, "import", "--change", 'CMD ["python3"]', "-", base],
                    stdin=tar.stdout,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                tar.wait()
                require(imported.returncode == 0, f"podman import: {imported.stderr}")
                figures["base"] = f"debootstrapped {SUITE}"
        with step("podman build --format docker (the Dockerfile as it is)"):
            ca = host_ca_bundle()
            pip_conf = work / "pip.conf"
            build_pip_conf(pip_conf, ca)
            started = time.monotonic()
            podman(
                "build", "--quiet", "--format", "docker", "--network", "host",
                "--volume", f"{ca}:{ca}:ro", "--volume", f"{pip_conf}:/etc/pip.conf:ro",
                "--tag", TAG, str(REPO), timeout=600,
            )  # fmt: skip
            figures["build_seconds"] = f"{time.monotonic() - started:.0f}"
        with step("the image: HEALTHCHECK kept, no pip or setuptools, no build-time file left"):
            health = podman("image", "inspect", "--format", "{{json .HealthCheck}}", TAG)
            require("gpu_exporter.healthcheck" in health, f"no HEALTHCHECK in the image: {health}")
            for path in ("/etc/pip.conf", str(ca)):
                require(
                    file_digest(podman, TAG, path) == file_digest(podman, base, path),
                    f"{path} differs from the base image's: a build-time mount was left behind",
                )
            leftovers = podman(
                "run", "--rm", *ulimits(), "--network", "none", "--entrypoint", "sh", TAG, "-c",
                "ls /opt/gpu-exporter/bin /opt/gpu-exporter/lib/python3*/site-packages",
            )  # fmt: skip
            for tool in ("pip", "setuptools", "wheel"):
                require(
                    not re.search(rf"^{tool}([-_.].*)?$", leftovers, re.MULTILINE),
                    f"{tool} in the image's venv",
                )
            figures["image_bytes"] = podman("image", "inspect", "--format", "{{.Size}}", TAG)
            figures["base_bytes"] = podman("image", "inspect", "--format", "{{.Size}}", base)
            figures["venv"] = podman(
                "run", "--rm", *ulimits(), "--network", "none", "--entrypoint", "du", TAG,
                "-sh", "/opt/gpu-exporter",
            ).split()[0]  # fmt: skip
            say(
                f"   image {int(figures['image_bytes']) / 1e6:.0f} MB, base"
                f" {int(figures['base_bytes']) / 1e6:.0f} MB, venv {figures['venv']}"
            )
        run_simulated(podman)
        run_without_gpu(podman)
        run_as_daemonset(podman)
    finally:
        with step("clean up podman"):
            podman.cleanup()
    return figures


def container_run(podman: Podman, name: str, port: int, *extra: str) -> None:
    """podman run -d on the host's network (no rules to add), on loopback `port`."""
    args = extra[: extra.index("--")] if "--" in extra else extra
    program = extra[extra.index("--") + 1 :] if "--" in extra else ()
    podman(
        "run", "--detach", "--name", name, "--network", "host", *ulimits(),
        "--env", f"GPU_EXPORTER_HEALTHCHECK_URL=http://127.0.0.1:{port}/livez",
        *args, TAG, f"--web.listen-address=127.0.0.1:{port}", *program,
    )  # fmt: skip


def run_simulated(podman: Podman) -> None:
    name, port = f"{PREFIX}-simulated", free_port()
    nowhere = f"http://127.0.0.1:{free_port()}"
    with step("podman run --simulate 4, with the documented kernel-log grant and http_proxy"):
        container_run(
            podman, name, port,
            "--device", "/dev/kmsg", "--cap-add", "SYSLOG",
            "--env", f"http_proxy={nowhere}", "--env", f"HTTP_PROXY={nowhere}",
            "--", "--simulate", "4", "--collect.interval", "1s",
            # --simulate reads no kernel log unless told: the grant is checked on the real one
            "--collector.xid.kernel-log", "/dev/kmsg",
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_for(
            "/metrics with four GPUs",
            lambda: http_get(f"{url}/metrics")[1].count("gpu_up{") == 4,
            30,
        )
        body = http_get(f"{url}/metrics")[1]
        require('backend="simulated"' in body, "build_info does not say simulated")
    with step("the HEALTHCHECK through podman, with http_proxy pointing nowhere"):
        result = podman.ok("healthcheck", "run", name)
        require(result.returncode == 0, f"unhealthy: {result.stdout}{result.stderr}")
    with step("runs as uid 10001"):
        pid = podman("inspect", "--format", "{{.State.Pid}}", name)
        status = Path(f"/proc/{pid}/status").read_text()
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        require(set(uids) == {"10001"}, f"uids {uids}")
    with step("--device /dev/kmsg --cap-add SYSLOG: the exporter's user can open /dev/kmsg"):
        probe = "import os; os.close(os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK))"
        result = podman.ok("exec", name, "python", "-c", probe)
        require(result.returncode == 0, f"open(/dev/kmsg) in the container: {result.stderr}")
        check_kernel_log_up(lambda: http_get(f"{url}/metrics")[1])
    with step(f"SIGTERM stops it within {STOP_SECONDS:.0f} s, exit status 0"):
        started = time.monotonic()
        podman("stop", "--time", "10", name)
        took = time.monotonic() - started
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name)
        require(took < STOP_SECONDS, f"podman stop took {took:.2f} s")
        require(code == "0", f"exit status {code}")
        say(f"   stopped in {took:.2f} s")
        podman("rm", name)


def check_kernel_log_up(metrics: Callable[[], str]) -> None:
    """`gpu_exporter_xid_kernel_log_up 1` from the running exporter, within 20 s."""
    wait_for("gpu_exporter_xid_kernel_log_up 1", lambda: kernel_log_up(metrics()), 20)


def kernel_log_up(exposition: str) -> bool:
    """`gpu_exporter_xid_kernel_log_up 1` in a text exposition."""
    found = re.search(
        r"^gpu_exporter_xid_kernel_log_up(\{[^}\n]*\})? 1(\.0)?$", exposition, re.MULTILINE
    )
    return found is not None


def run_without_gpu(podman: Podman) -> None:
    name, port = f"{PREFIX}-no-gpu", free_port()
    url = f"http://127.0.0.1:{port}"
    with step("podman run --read-only --cap-drop=all without a GPU: alive, not ready"):
        container_run(podman, name, port, "--read-only", "--cap-drop=all")
        wait_for("/livez 200", lambda: http_get(f"{url}/livez")[0] == 200, 30)
        status, body = http_get(f"{url}/healthz")
        require(status == 503, f"/healthz answered {status}: {body}")
        metrics = http_get(f"{url}/metrics")[1]
        require("gpu_exporter_nvml_up 0" in metrics, "gpu_exporter_nvml_up 0 not served")
        logs = podman("logs", name) + podman.ok("logs", name).stderr
        require("libnvidia-ml.so.1 not found" in logs, f"no message saying why: {logs[-500:]}")
        result = podman.ok("healthcheck", "run", name)
        require(result.returncode == 0, f"the liveness HEALTHCHECK failed: {result.stdout}")
        podman("rm", "--force", "--time", "5", name)


FORK_AND_DIE = (
    "import os, sys, time\n"
    "held = open(sys.argv[1], 'rb')  # its GPU's device file\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    time.sleep(600)  # a DataLoader worker that never touches CUDA\n"
    "    os._exit(0)\n"
    "print(child, flush=True)\n"
)
STAND_IN_DEVICE = "/dev/random"  # char 1:8: the stand-in driver's GPU 0, no service holds it


def run_as_daemonset(podman: Podman) -> None:
    """The image as deploy/kubernetes/daemonset.yaml runs it, on the stand-in driver
    (benchmarks/fake_nvml_site, mounted read-only: the real NVML backend, so the real
    holder scan), beside a crashed job's worker that runs as root with root's
    capabilities, as on a node: its descriptors are refused to uid 0 without them."""
    name, port = f"{PREFIX}-daemonset", free_port()
    url = f"http://127.0.0.1:{port}"
    job = subprocess.Popen(
        [sys.executable, "-c", FORK_AND_DIE, STAND_IN_DEVICE],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert job.stdout is not None
    worker = int(job.stdout.readline())
    job.wait(30)
    job.stdout.close()
    try:
        with step(
            "podman run as the DaemonSet (--pid=host, uid 0, --cap-drop=all --cap-add SYSLOG, "
            "--read-only) beside a crashed root job's worker"
        ):
            container_run(
                podman, name, port,
                "--pid", "host", "--user", "0:0", "--cap-drop", "all", "--cap-add", "SYSLOG",
                "--read-only", "--security-opt", "no-new-privileges",
                "--volume", f"{REPO}:/repo:ro",
                "--env", "PYTHONPATH=/repo/benchmarks/fake_nvml_site",
                "--env", "FAKE_NVML_REPO=/repo", "--env", "FAKE_NVML_GPUS=1",
                "--env", f"FAKE_NVML_PIDS={job.pid}", "--env", "FAKE_NVML_DEVICES=1:8",
            )  # fmt: skip
            wait_for(
                "a holder scan's answer",
                lambda: "gpu_memory_holder_candidates{" in http_get(f"{url}/metrics")[1],
                60,
            )
        with step("it says the scan was denied, names the worker a candidate, never reset"):
            body = http_get(f"{url}/metrics")[1]
            lines = body.splitlines()
            scan = {
                series: float(value)
                for series, _, value in (ln.rpartition(" ") for ln in lines)
                if series.startswith("gpu_exporter_holder_scan")
            }
            require(scan.get("gpu_exporter_holder_scan_complete") == 0, f"not incomplete: {scan}")
            require(
                scan.get('gpu_exporter_holder_scan_incomplete{reason="denied"}') == 1,
                f"the refusal is not said: {scan}",
            )
            require(
                not any(line.startswith("gpu_memory_holder_info{") for line in lines),
                "a holder named where its descriptors were refused",
            )
            candidates = [ln for ln in lines if ln.startswith("gpu_memory_holder_candidate_info{")]
            require(
                any(f'pid="{worker}"' in ln for ln in candidates),
                f"the worker {worker} is not a candidate: {candidates}",
            )
            page = json.loads(http_get(f"{url}/api/overview")[1])
            said = [
                v["summary"]
                for gpu in page["gpus"]
                for v in gpu["verdicts"]
                if v["name"] == "memory-leaked"
            ]
            require(
                len(said) == 1 and "probably holds /dev/nvidia8" in said[0],
                f"the page's memory-leaked verdict: {said}",
            )
            require("reset" not in said[0], f"the page says reset: {said[0]}")
    finally:
        os.kill(worker, signal.SIGKILL)
        podman.ok("rm", "--force", "--time", "5", name)


# ---------------------------------------------------------------- systemd


def shell_lines(page: str, heading: str) -> list[str]:
    """The shell lines of one section of a page, as a user would type them."""
    text = (REPO / page).read_text()
    require(f"\n{heading}\n" in text, f"{page}: no section {heading!r}")
    section = text.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    lines: list[str] = []
    for block in section.split("```sh\n")[1:]:
        joined = block.split("```", 1)[0].replace("\\\n", " ")
        lines += [line.strip() for line in joined.splitlines() if line.strip()]
    require(bool(lines), f"{page}: no shell block under {heading!r}")
    return lines


def install_commands() -> list[str]:
    """The README's systemd steps, then the textfile units' from docs/operations.md."""
    textfile = shell_lines("docs/operations.md", "## One-shot and textfile mode (`--once`)")
    return shell_lines("README.md", "### systemd") + [
        line for line in textfile if "textfile" in line
    ]


class Machine:
    """A Debian booted by systemd-nspawn on an overlay of the cached tree."""

    def __init__(self, tree: Path, work: Path) -> None:
        self.work = work
        self.root = work / "root"
        for sub in ("upper", "overlay-work", "root"):
            (work / sub).mkdir(parents=True)
        run([
            "mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir={tree},upperdir={work / 'upper'},workdir={work / 'overlay-work'}",
            str(self.root),
        ])  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.leader = 0

    def nspawn_args(self) -> list[str]:
        args = ["systemd-nspawn", "--quiet", "--directory", str(self.root), "--register=no"]
        if Path("/proc/1/comm").read_text().strip() != "systemd":
            args.append("--keep-unit")
        return args

    def install(self, commands: Sequence[str], binds: Sequence[str]) -> None:
        """Runs `commands` in the tree before it boots, on the host's network."""
        script = "set -e\n" + "\n".join(commands)
        args = [*self.nspawn_args(), *(f"--bind-ro={b}" for b in binds), "--pipe"]
        run([*args, "/bin/sh", "-c", script], timeout=300)

    def boot(self) -> None:
        log = (self.work / "console.log").open("wb")
        self.process = subprocess.Popen(
            [
                *self.nspawn_args(), "--boot", "--private-network", "--machine", PREFIX,
                # the host's kernel log, which nspawn otherwise replaces (see below)
                "--bind-ro=/dev/kmsg", "--capability=CAP_SYSLOG",
            ],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

        def leader() -> bool:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")  # type: ignore[union-attr]
            for pid in children.read_text().split() if children.exists() else ():
                if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                    self.leader = int(pid)
                    return True
            return False

        wait_for("systemd in the container", leader, 30)
        # systemctl answers nothing (stderr: no bus) while systemd has not yet made its
        # private socket: asked again until it names a state, as --wait then waits
        deadline = time.monotonic() + 90
        state = self.sh("systemctl is-system-running --wait", check=False, timeout=90)
        while not state.stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.5)
            state = self.sh("systemctl is-system-running --wait", check=False, timeout=90)
        require(
            state.stdout.strip() in ("running", "degraded"),
            f"boot: {state.stdout}{state.stderr}",
        )

    def sh(
        self, script: str, *, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        enter = ["nsenter", "--target", str(self.leader), "--all", "/bin/sh", "-c", script]
        return run(enter, check=check, timeout=timeout)

    def get(self, url: str) -> tuple[int, str]:
        """An HTTP GET from the container's own network (loopback only)."""
        code = (
            "import sys,urllib.request as u,urllib.error as e\n"
            "o=u.build_opener(u.ProxyHandler({}))\n"
            "try:\n r=o.open(sys.argv[1],timeout=3);print(r.status);print(r.read().decode())\n"
            "except e.HTTPError as x:print(x.code);print(x.read().decode())\n"
            "except OSError as x:print(0);print(x)\n"
        )
        enter = ["nsenter", "--target", str(self.leader), "--net", sys.executable, "-c", code, url]
        out = run(enter, timeout=20).stdout
        status, _, body = out.partition("\n")
        return int(status), body

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        out = self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in properties)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # nspawn halts the container
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        run(["umount", str(self.root)], check=False)


def test_systemd(work: Path) -> dict[str, str]:
    figures: dict[str, str] = {}
    with step(f"debootstrap {SUITE} with systemd and prometheus-node-exporter"):
        tree = debootstrap_tree("systemd-" + SUITE, SYSTEMD_PACKAGES)
    with step("the wheel"):
        dist = work / "dist"
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "-w",
                str(dist),
                str(REPO),
            ],
            timeout=300,
        )
        (wheel,) = dist.glob("gpu_exporter-*.whl")
    machine = Machine(tree, work / "machine")
    try:
        commands = install_commands()
        install = [
            c.replace("sudo ", "") for c in commands if not c.startswith(("sudo systemctl", "curl"))
        ]
        install = [c.replace("pip install .", f"pip install /dist/{wheel.name}") for c in install]
        starts = [c.replace("sudo ", "") for c in commands if c.startswith("sudo systemctl")]
        with step("install the wheel and the units with the README's commands"):
            require(any("/dist/" in c for c in install), "no `pip install .` in the README")
            ca = host_ca_bundle()
            machine.install(install, [f"{dist}:/dist", f"{ca}:/etc/ssl/certs/ca-certificates.crt"])
        with step("boot with systemd-nspawn -b"):
            machine.boot()
            kmsg = machine.sh("ls -l /dev/kmsg; cat /proc/sys/kernel/dmesg_restrict").stdout
            say(f"   /dev/kmsg in the container (the host's, bound): {' '.join(kmsg.split())}")
        with step("systemctl enable --now (README): active through Type=notify, answering"):
            for command in starts:
                machine.sh(command, timeout=60)
            shown = machine.show("gpu-exporter", "Type", "ActiveState", "SubState")
            require(
                shown == {"Type": "notify", "ActiveState": "active", "SubState": "running"},
                str(shown),
            )
            # Type=notify: `enable --now` returned after READY=1, so it listens already
            status, body = machine.get("http://127.0.0.1:9872/livez")
            require(status == 200, f"/livez right after start: {status} {body}")
            status, body = machine.get("http://127.0.0.1:9872/healthz")
            require(status == 503, f"/healthz without a GPU: {status} {body}")
        kernel_log_in_sandbox(machine)
        with step("the watchdog timestamp advances"):
            first = machine.show("gpu-exporter", "WatchdogTimestampMonotonic")
            wait_for(
                "a newer WATCHDOG=1",
                lambda: machine.show("gpu-exporter", "WatchdogTimestampMonotonic") != first,
                40,
            )
        with step("Restart= after a SIGKILL, the kernel log passed again"):
            restarted(machine, "SIGKILL", 30)
            check_kernel_log_up(lambda: machine.get("http://127.0.0.1:9872/metrics")[1])
        with step("a 2 s watchdog drop-in: SIGSTOP is caught and the service restarted"):
            machine.sh(
                "mkdir -p /etc/systemd/system/gpu-exporter.service.d && printf "
                "'[Service]\\nWatchdogSec=2s\\nRestartSec=1s\\n' > "
                "/etc/systemd/system/gpu-exporter.service.d/short-watchdog.conf && "
                "systemctl daemon-reload && systemctl restart gpu-exporter"
            )
            restarted(machine, "SIGSTOP", 30, result="watchdog")
            check_kernel_log_up(lambda: machine.get("http://127.0.0.1:9872/metrics")[1])
            machine.sh(
                "rm -r /etc/systemd/system/gpu-exporter.service.d && systemctl daemon-reload"
                " && systemctl restart gpu-exporter"
            )
        with step(f"systemctl stop within {STOP_SECONDS:.0f} s"):
            state = machine.show("gpu-exporter", "SubState")["SubState"]
            require(state == "running", f"not running before the stop: {state}")
            started = time.monotonic()
            machine.sh("systemctl stop gpu-exporter")
            took = time.monotonic() - started
            require(took < STOP_SECONDS, f"systemctl stop took {took:.2f} s")
            result = machine.show("gpu-exporter", "Result")["Result"]
            require(result == "success", f"Result={result}")
            say(f"   stopped in {took:.2f} s")
        with step(f"stopped stays stopped: a kernel-log line, {STOPPED_SECONDS:.0f} s"):
            with open("/dev/kmsg", "w") as ring:  # the host's ring is the container's
                ring.write(f"{PREFIX}: a kernel-log line while gpu-exporter is stopped\n")
            deadline = time.monotonic() + STOPPED_SECONDS
            while time.monotonic() < deadline:
                shown = machine.show("gpu-exporter", "ActiveState", "NRestarts")
                socket = machine.show("gpu-exporter-kmsg.socket", "ActiveState")
                require(
                    shown["ActiveState"] == "inactive" and socket["ActiveState"] == "inactive",
                    f"after systemctl stop: the service {shown}, its socket {socket}",
                )
                time.sleep(0.5)
        with step("the textfile timer, as installed, writes its file; node_exporter serves it"):
            timer = "gpu-exporter-textfile.timer"
            machine.sh(f"systemctl is-enabled {timer} && systemctl is-active {timer}")
            # OnBootSec=30s: the container booted about that long ago
            wait_for(
                "a run of gpu-exporter-textfile.service started by its timer",
                lambda: (
                    machine.show("gpu-exporter-textfile", "ExecMainExitTimestampMonotonic")
                    != {"ExecMainExitTimestampMonotonic": "0"}
                ),
                45,
            )
            ran = machine.show("gpu-exporter-textfile", "Result", "ExecMainStatus")
            require(ran == {"Result": "success", "ExecMainStatus": "0"}, f"its run: {ran}")
            text = machine.sh(f"cat {TEXTFILE}").stdout
            require("gpu_exporter_nvml_up 0" in text, f"{TEXTFILE}: {text[:300]}")
            require(
                kernel_log_up(text),
                f"the textfile run did not read the kernel log passed to it: {text[-600:]}",
            )
            socket = machine.show("gpu-exporter-textfile-kmsg.socket", "ActiveState")
            require(socket["ActiveState"] == "inactive", f"its socket after the run: {socket}")
            status, body = machine.get("http://127.0.0.1:9100/metrics")
            require(
                f'node_textfile_mtime_seconds{{file="{TEXTFILE}"}}' in body
                or 'file="gpu-exporter.prom"' in body,
                "node_exporter does not read the file",
            )
            require(
                "gpu_exporter_nvml_up 0" in body, "node_exporter does not serve the file's series"
            )
        with step(f"systemd-analyze security <= {SECURITY_MAX}, verify --man=no is quiet"):
            out = machine.sh("systemd-analyze security --no-pager gpu-exporter.service").stdout
            found = re.search(
                r"Overall exposure level for gpu-exporter\.service: ([0-9]+\.[0-9])", out
            )
            require(found is not None, f"no score in: {out[-300:]}")
            score = float(found.group(1))  # type: ignore[union-attr]
            figures["security"] = str(score)
            require(score <= SECURITY_MAX, f"exposure {score} > {SECURITY_MAX}")
            say(f"   exposure {score}")
            units = " ".join(
                f"/etc/systemd/system/{u}"
                for u in (
                    "gpu-exporter.service",
                    "gpu-exporter-kmsg.socket",
                    "gpu-exporter-textfile.service",
                    "gpu-exporter-textfile-kmsg.socket",
                    "gpu-exporter-textfile.timer",
                )
            )
            verified = machine.sh(f"systemd-analyze verify --man=no {units} 2>&1", check=False)
            require(verified.returncode == 0 and not verified.stdout.strip(), verified.stdout)
    finally:
        with step("shut the container down, unmount"):
            machine.close()
            mounted = Path("/proc/mounts").read_text()
            require(str(work) not in mounted, "a mount under the work directory is left")
    return figures


def restarted(machine: Machine, signal_name: str, timeout: float, result: str = "signal") -> None:
    before = machine.show("gpu-exporter", "MainPID", "NRestarts")
    machine.sh(f"kill -s {signal_name.removeprefix('SIG')} {before['MainPID']}")

    def again() -> bool:
        now = machine.show("gpu-exporter", "MainPID", "NRestarts", "ActiveState", "SubState")
        return (
            int(now["NRestarts"]) > int(before["NRestarts"])
            and now["MainPID"] not in ("0", before["MainPID"])
            and now["SubState"] == "running"
        )

    wait_for(f"a restart after {signal_name}", again, timeout)
    journal = machine.sh("journalctl -u gpu-exporter --no-pager -n 60", check=False).stdout
    if result == "watchdog":
        require(
            "Watchdog timeout" in journal, f"no watchdog timeout in the journal: {journal[-800:]}"
        )


def kernel_log_in_sandbox(machine: Machine) -> None:
    """The service reads the kernel log from the file systemd opened, in a sandbox that
    cannot open /dev/kmsg itself.

    systemd-run with every sandbox setting of the installed unit (a probe instead of the
    exporter) shows that open(2) fails there (ProtectKernelLogs=yes, no capability); the
    running service serves `gpu_exporter_xid_kernel_log_up 1` all the same, and says
    where it reads from.
    """
    unit = machine.sh("cat /etc/systemd/system/gpu-exporter.service").stdout
    service = unit.split("[Service]", 1)[1].split("\n[", 1)[0]
    skip = (
        "Type",
        "NotifyAccess",
        "WatchdogSec",
        "Restart",
        "RestartSec",
        "TimeoutStopSec",
        "ExecStart",
        "EnvironmentFile",
        "Sockets",
    )
    properties = []
    for line in service.splitlines():
        key = line.split("=", 1)[0].strip()
        if line.strip() and not line.startswith("#") and key not in skip:
            properties.append("-p " + shlex.quote(line.strip()))
    probe = (
        "import os; os.close(os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK)); print('opened')"
    )
    base = "systemd-run --wait --pipe --quiet " + " ".join(properties)
    with step("the kernel log, from the file systemd opens, in a sandbox that cannot open it"):
        result = machine.sh(f"{base} /usr/bin/python3 -c {shlex.quote(probe)} 2>&1", check=False)
        require(
            result.returncode != 0 and "opened" not in result.stdout,
            f"the service's sandbox opened /dev/kmsg itself: {result.stdout}",
        )
        require(
            machine.show("gpu-exporter-kmsg.socket", "ActiveState")["ActiveState"] == "active",
            "gpu-exporter-kmsg.socket is not active beside the service",
        )
        check_kernel_log_up(lambda: machine.get("http://127.0.0.1:9872/metrics")[1])
        journal = machine.sh("journalctl -u gpu-exporter --no-pager -o cat", check=False).stdout
        require(
            "reading the kernel log from the file systemd opened" in journal,
            f"the service does not say it reads the file systemd opened: {journal[-800:]}",
        )


def main() -> int:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-"))
    figures: dict[str, str] = {}
    try:
        with step("root, and the tools from Debian"):
            require(os.geteuid() == 0, "podman and systemd-nspawn need root here: run as root")
            require(
                Path("/etc/debian_version").exists(),
                "a Debian host is needed (apt-get, debootstrap)",
            )
            install_tools(systemd_too=True)
        figures |= test_image(work)
        figures |= test_systemd(work)
    except StepFailed as failure:
        say(f"test-deploy FAILED at step {failure}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"test-deploy passed in {time.monotonic() - started:.0f} s: {figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
