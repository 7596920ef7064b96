"""Every bad input an operator can give ends with exit code 2 and one clear line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.exporter import run_exporter


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert "Traceback" not in stderr
    assert lines[0].startswith("gpu-exporter: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--collect.interval", "fast"], "--collect.interval: not a duration: 'fast'"),
        (["--collect.interval", "50ms"], "must be at least 100ms"),
        (["--collect.timeout", "0s"], "--collect.timeout: must be positive"),
        (["--log.level", "loud"], "--log.level: 'loud' is not one of debug, info, warn, error"),
        (["--log.format", "xml"], "--log.format: 'xml' is not one of logfmt, json"),
        (["--web.listen-address", "nonsense"], "is not HOST:PORT, :PORT or [::]:PORT"),
        (["--web.listen-address", ":99999"], "port 99999 is out of range"),
        (["--web.listen-address", "::1:9872"], "write IPv6 addresses in brackets"),
        (["--web.telemetry-path", "metrics"], "must start with '/'"),
        (["--web.max-requests", "0"], "--web.max-requests: must be at least 1"),
        (["--collector.process.limit", "many"], "not an integer: 'many'"),
        (["--simulate", "-1"], "--simulate: must be between 0 and 1024"),
        (["--output", "/tmp/x.prom"], "--output: needs --once"),
        (["--config.file", "/nonexistent/gpu-exporter.yml"], "No such file or directory"),
    ],
)
def test_bad_flag_exits_2_with_one_line(args: list[str], expected: str) -> None:
    result = run_exporter(args)
    assert result.returncode == 2, result.stderr
    assert expected in one_error_line(result.stderr)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("collect.interval: 5s\nweb.listen-address: [oops\n", "line 3: invalid YAML"),
        ("collect.interval: 5s\n  bad indent: 1\n", "line 2: invalid YAML"),
        ("collect.intervall: 5s\n", "unknown key 'collect.intervall'"),
        ("collect: {interval: soon}\n", "collect.interval: not a duration: 'soon'"),
        ("collector.host: maybe\n", "collector.host: not a boolean: 'maybe'"),
        ("once: true\n", "unknown key 'once'"),
        ("- a list\n", "expected a mapping of settings"),
    ],
)
def test_bad_config_file_exits_2_naming_the_problem(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "config.yml"
    path.write_text(content)
    result = run_exporter(["--config.file", str(path)])
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr)
    assert str(path) in line
    assert expected in line


def test_port_in_use_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_exporter(["--simulate", "1", "--web.listen-address", f"127.0.0.1:{port}"])
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in one_error_line(
        result.stderr
    )


def test_address_that_cannot_be_bound_exits_2() -> None:
    # 192.0.2.1 (TEST-NET-1) is never assigned to this machine: bind fails, no traffic is sent
    result = run_exporter(["--simulate", "1", "--web.listen-address", "192.0.2.1:9872"])
    assert result.returncode == 2
    assert "cannot listen on 192.0.2.1:9872: Cannot assign requested address" in one_error_line(
        result.stderr
    )


def test_version_and_help() -> None:
    version = run_exporter(["--version"])
    assert version.returncode == 0
    assert version.stdout.startswith("gpu-exporter ")
    help_ = run_exporter(["--help"])
    assert help_.returncode == 0
    for flag in ("--web.listen-address", "--collect.interval", "--config.file", "--simulate"):
        assert flag in help_.stdout
    assert "pcie-throughput" in help_.stdout
