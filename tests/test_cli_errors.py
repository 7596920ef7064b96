"""Every bad input an operator can give ends with exit code 2 and one clear line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.support.exporter import one_error_line, run_exporter


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--collect.interval", "fast"], "--collect.interval: not a duration: 'fast'"),
        (["--collect.interval", "50ms"], "must be between 100ms and 1h, got '50ms'"),
        (["--collect.timeout", "0s"], "--collect.timeout: must be between 100ms and 10m"),
        # a negative value after a space is a value, not an unknown option
        (["--collect.interval", "-5s"], "--collect.interval: must be between 100ms and 1h"),
        (["--collect.interval=-5s"], "--collect.interval: must be between 100ms and 1h"),
        (["--collect.timeout", "-1"], "--collect.timeout: must be between 100ms and 10m"),
        (
            ["--collect.interval", "99999999999999999999999999h"],
            "--collect.interval: must be between 100ms and 1h",
        ),
        (["--collect.interval", "2h"], "must be between 100ms and 1h, got '2h'"),
        (["--collect.interval", "inf"], "--collect.interval: not a duration: 'inf'"),
        (["--collect.interval", "nan"], "--collect.interval: not a duration: 'nan'"),
        (["--web.max-requests", "1.5"], "--web.max-requests: not an integer: '1.5'"),
        (["--web.max-requests", "100000"], "--web.max-requests: must be between 1 and 10000"),
        (["--collector.process.limit", "0"], "--collector.process.limit: must be between 1"),
        (["--log.level", "loud"], "--log.level: 'loud' is not one of debug, info, warn, error"),
        (["--log.format", "xml"], "--log.format: 'xml' is not one of logfmt, json"),
        (["--web.listen-address", "nonsense"], "is not HOST:PORT, :PORT or [::]:PORT"),
        (["--web.listen-address", ":99999"], "port 99999 is out of range"),
        (["--web.listen-address", "::1:9872"], "write IPv6 addresses in brackets"),
        (
            ["--web.listen-address", "http://127.0.0.1:19893"],
            "'http://127.0.0.1:19893': write HOST:PORT without a scheme (no http:// or https://",
        ),
        (["--web.listen-address", "https://localhost"], "write HOST:PORT without a scheme"),
        (["--web.telemetry-path", "metrics"], "must start with '/'"),
        (["--web.max-requests", "0"], "--web.max-requests: must be between 1 and 10000, got 0"),
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
        (
            "collect.interval: 5s\nweb.listen-address: [oops\n",
            "invalid YAML: line 3 column 1: while parsing a flow sequence, expected ',' or ']'",
        ),
        (
            "collect.interval: 5s\n  bad indent: 1\n",
            "invalid YAML: line 2 column 13: mapping values",
        ),
        (
            "collect.intervall: 5s\n",
            "unknown key 'collect.intervall'; did you mean 'collect.interval'?",
        ),
        (
            "collector.proces: false\n",
            "unknown key 'collector.proces'; did you mean 'collector.process'?",
        ),
        (
            'web.listen_address: ":1"\n',
            "unknown key 'web.listen_address': keys use hyphens, as the flags do "
            "('web.listen-address')",
        ),
        (
            "collect:\n  interval: 5s\ncollect.interval: 2s\n",
            "key 'collect.interval' is given twice, once dotted and once nested: keep one",
        ),
        ("web.listen-address: ':1'\nweb: {listen-address: ':2'}\n", "given twice, once dotted"),
        ("zzz: 1\n", "unknown key 'zzz'"),
        ("collect: {interval: soon}\n", "collect.interval: not a duration: 'soon'"),
        ("collector.host: maybe\n", "collector.host: not a boolean: 'maybe'"),
        ("once: true\n", "unknown key 'once'"),
        ("- a list\n", "expected a mapping of settings"),
        ("collect.interval: .inf\n", "collect.interval: not a finite duration: inf"),
        ("collect.interval: 1.0e+999\n", "collect.interval: not a finite duration: inf"),
        ("collect.interval: .nan\n", "collect.interval: not a finite duration: nan"),
        ("collect.timeout: .nan\n", "collect.timeout: not a finite duration: nan"),
        ("collect.timeout: -.inf\n", "collect.timeout: not a finite duration: -inf"),
        ("web.max-requests: 1.5\n", "web.max-requests: not an integer: 1.5"),
        ("web.max-requests: .inf\n", "web.max-requests: not an integer: inf"),
        ("collector.process.limit: true\n", "collector.process.limit: not an integer: True"),
        ("simulate: 100000\n", "simulate: must be between 0 and 1024, got 100000"),
        ("a: &a\n  b: *a\n", "aliases (*name) are not allowed"),
        ("? [a, b]\n: 1\n", "found unhashable key"),
        ("1: 2\n", "config keys must be text"),
        ("collect.interval: !!python/object:os.system echo\n", "invalid YAML"),
        ("[" * 200 + "]" * 200 + "\n", "nested more than 32 levels"),
        ("log.level: \t\x07\n", "invalid YAML"),
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


UNSCRAPABLE_PATHS = {
    # each started, logged nothing, and every scrape got 404
    "//metrics": "clients and proxies merge '//' into '/'",
    "/gpu//metrics": "clients and proxies merge '//' into '/'",
    "/metrics?x=1": "cannot be scraped: use letters, digits and",
    "/metrics#a": "cannot be scraped: use letters, digits and",
    "/gpu metrics": "cannot be scraped: use letters, digits and",
    "/m%65trics": "cannot be scraped: use letters, digits and",
    "/gpu/../metrics": "clients remove '.' and '..' segments",
    # each silently took the place of a route the exporter serves itself
    "/healthz": "'/healthz' is taken by the exporter's probe",
    "/livez": "'/livez' is taken by the exporter's probe",
    "/": "'/' is taken by the exporter's live page",
    "/api/overview": "'/api/overview' is taken by the exporter's live page API",
    "/api/metrics": "'/api/metrics' is taken by the exporter's live page API",
    "/static/page.js": "'/static/page.js' is taken by the exporter's live page assets",
}


@pytest.mark.parametrize("path", sorted(UNSCRAPABLE_PATHS))
def test_a_telemetry_path_that_cannot_be_scraped_exits_2(tmp_path: Path, path: str) -> None:
    flag = run_exporter(["--simulate", "1", "--web.telemetry-path", path])
    assert flag.returncode == 2, flag.stderr
    line = one_error_line(flag.stderr)
    assert line.startswith("gpu-exporter: error: --web.telemetry-path: ")
    assert UNSCRAPABLE_PATHS[path] in line
    config = tmp_path / "config.yml"
    config.write_text(f"web:\n  telemetry-path: {json.dumps(path)}\n")
    from_file = run_exporter(["--simulate", "1", "--config.file", str(config)])
    assert from_file.returncode == 2, from_file.stderr
    line = one_error_line(from_file.stderr)
    assert f"config file {config}: web.telemetry-path: " in line
    assert UNSCRAPABLE_PATHS[path] in line


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
