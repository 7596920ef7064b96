"""deploy/systemd: the units pass `systemd-analyze verify` and keep their hardening."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.exporter import REPO, run_exporter

SYSTEMD = REPO / "deploy" / "systemd"
SERVICE = SYSTEMD / "gpu-exporter.service"
TEXTFILE_SERVICE = SYSTEMD / "gpu-exporter-textfile.service"
TEXTFILE_TIMER = SYSTEMD / "gpu-exporter-textfile.timer"
KMSG_SOCKET = SYSTEMD / "gpu-exporter-kmsg.socket"
TEXTFILE_KMSG_SOCKET = SYSTEMD / "gpu-exporter-textfile-kmsg.socket"
ENV_FILE = SYSTEMD / "gpu-exporter.env"
UNITS = (SERVICE, TEXTFILE_SERVICE, TEXTFILE_TIMER, KMSG_SOCKET, TEXTFILE_KMSG_SOCKET)
SHIPPED_BINARY = "/opt/gpu-exporter/bin/gpu-exporter"


def systemd_analyze() -> str:
    binary = shutil.which("systemd-analyze")
    assert binary, "systemd-analyze is not installed: run `make system-deps`"
    return binary


def verify(*units: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify`; --man=no: slim hosts and images have no man pages."""
    return subprocess.run(
        [systemd_analyze(), "verify", "--man=no", *(str(u) for u in units)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=units[0].parent,
    )


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values in order]}}; systemd allows a key more than once."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: setting outside a section: {line}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def installed_binary() -> Path:
    binary = Path(sys.executable).parent / "gpu-exporter"
    assert binary.exists(), f"{binary} missing: install the package (make test does)"
    return binary


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """Verified as installed, with ExecStart pointing at this machine's gpu-exporter."""
    binary = installed_binary()
    copies = []
    for unit in UNITS:
        text = unit.read_text()
        copy = tmp_path / unit.name
        copy.write_text(text.replace(SHIPPED_BINARY, str(binary)))
        copies.append(copy)
    result = verify(*copies)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, output
    assert output == "", f"systemd-analyze verify complained:\n{output}"


def test_the_shipped_binary_path_is_the_only_complaint_about_the_originals() -> None:
    result = verify(*UNITS)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    if Path(SHIPPED_BINARY).exists():
        assert result.returncode == 0 and lines == []
        return
    assert lines, "verify should report that the shipped ExecStart binary is missing here"
    for line in lines:
        assert f"Command {SHIPPED_BINARY} is not executable" in line, line


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a misspelt directive is reported."""
    broken = tmp_path / "gpu-exporter.service"
    broken.write_text(
        SERVICE.read_text()
        .replace(SHIPPED_BINARY, str(installed_binary()))
        .replace("DevicePolicy=closed", "DevicePolicy=closd")
    )
    result = verify(broken)
    assert "closd" in result.stdout + result.stderr


def test_service_is_a_hardened_notify_service() -> None:
    service = parse_unit(SERVICE)["Service"]
    assert service["Type"] == ["notify"]
    assert service.get("WatchdogSec"), "Type=notify without WatchdogSec"
    assert service["Restart"] == ["on-failure"]
    assert service["DynamicUser"] == ["yes"]
    assert service["EnvironmentFile"] == ["-/etc/default/gpu-exporter"]
    assert "$GPU_EXPORTER_ARGS" in service["ExecStart"][0]
    assert service["DevicePolicy"] == ["closed"]
    allowed = set(service["DeviceAllow"])
    assert {"char-nvidia* rw", "char-nvidia-frontend rw", "char-nvidia-caps rw"} <= allowed
    assert service["ProtectSystem"] == ["strict"]
    assert service["ProtectHome"] == ["yes"]
    assert service["NoNewPrivileges"] == ["yes"]
    families = " ".join(service["RestrictAddressFamilies"]).split()
    assert "AF_UNIX" in families and "AF_INET" in families
    assert "AF_PACKET" not in families
    # these would hide the GPUs or the processes we attribute
    assert service.get("PrivateDevices", ["no"]) == ["no"]
    assert "invisible" not in service.get("ProtectProc", [""])[0]


def test_timer_starts_the_textfile_service() -> None:
    timer = parse_unit(TEXTFILE_TIMER)
    unit = timer["Timer"].get("Unit", [TEXTFILE_TIMER.with_suffix(".service").name])[0]
    assert unit == TEXTFILE_SERVICE.name
    assert timer["Timer"]["OnUnitActiveSec"]
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    service = parse_unit(TEXTFILE_SERVICE)["Service"]
    assert service["Type"] == ["oneshot"]
    command = shlex.split(service["ExecStart"][0])
    output = command[command.index("--output") + 1]
    assert "--once" in command
    # the directory it writes into is the one hole in ProtectSystem=strict: a state
    # directory, which systemd gives to User= (Debian's package leaves it root's)
    assert "ReadWritePaths" not in service
    assert ["/var/lib/" + d for d in service["StateDirectory"]] == [str(Path(output).parent)]


def env_file_args() -> list[str]:
    for line in ENV_FILE.read_text().splitlines():
        if line.startswith("GPU_EXPORTER_ARGS="):
            return shlex.split(shlex.split(line)[0].partition("=")[2])
    raise AssertionError("GPU_EXPORTER_ARGS not set in the example environment file")


def test_example_environment_file_holds_flags_the_program_accepts() -> None:
    args = env_file_args()
    assert args, "empty GPU_EXPORTER_ARGS"
    result = run_exporter([*args, "--simulate", "1", "--once"])
    assert result.returncode == 0, result.stderr
    assert "gpu_up{" in result.stdout


def test_every_commented_example_holds_flags_the_program_accepts() -> None:
    examples = [
        shlex.split(shlex.split(line.removeprefix("# "), comments=True)[0].partition("=")[2])
        for line in ENV_FILE.read_text().splitlines()
        if line.startswith("# GPU_EXPORTER_ARGS=")
    ]
    assert any("--compat.dcgm" in args for args in examples)
    for args in examples:
        args = [a for a in args if not a.startswith("--web.config.file")]  # no such file here
        result = run_exporter([*args, "--simulate", "1", "--once"])
        assert result.returncode == 0, (args, result.stderr)


def test_textfile_service_command_writes_the_file(tmp_path: Path) -> None:
    command = shlex.split(parse_unit(TEXTFILE_SERVICE)["Service"]["ExecStart"][0])
    args = command[1:]
    output = tmp_path / "gpu-exporter.prom"
    args[args.index("--output") + 1] = str(output)
    result = run_exporter([*args, "--simulate", "2"])
    assert result.returncode == 0, result.stderr
    text = output.read_text()
    assert "gpu_busy_seconds_total{" in text
    assert list(tmp_path.iterdir()) == [output], "temporary files left behind"


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_units_use_the_shipped_install_path(unit: Path) -> None:
    """README's install steps put the program here; keep the units in step."""
    starts = [v for v in parse_unit(unit).get("Service", {}).get("ExecStart", [])]
    for start in starts:
        assert start.split()[0] == SHIPPED_BINARY


@pytest.mark.parametrize(
    ("service", "socket"), [(SERVICE, KMSG_SOCKET), (TEXTFILE_SERVICE, TEXTFILE_KMSG_SOCKET)]
)
def test_systemd_opens_the_kernel_log_for_a_service_without_privileges(
    service: Path, socket: Path
) -> None:
    """/dev/kmsg comes open from a socket unit bound to the service (never enabled on its
    own, so it cannot start a stopped service); the service keeps ProtectKernelLogs=yes
    and no capability."""
    unit = parse_unit(service)
    assert unit["Service"]["Sockets"] == [socket.name]
    assert socket.name in unit["Unit"]["Wants"] and socket.name in unit["Unit"]["After"]
    assert unit["Service"]["ProtectKernelLogs"] == ["yes"]
    assert unit["Service"]["CapabilityBoundingSet"] == [""]
    assert "AmbientCapabilities" not in unit["Service"]
    assert not any("kmsg" in device for device in unit["Service"]["DeviceAllow"])
    passed = parse_unit(socket)
    assert passed["Socket"]["ListenSpecial"] == ["/dev/kmsg"]
    assert passed["Socket"]["FileDescriptorName"] == ["kmsg"]
    assert passed["Socket"]["Service"] == [service.name]
    assert passed["Unit"]["BindsTo"] == [service.name]
    assert "Install" not in passed and "Accept" not in passed["Socket"]
