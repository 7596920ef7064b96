"""Every parser of input from outside the exporter, with a 100,000-character input shaped
to make it work hardest: the cases `tests/test_parser_bounds.py` checks and
`benchmarks/parsers.py` times.

Each case's `run` takes the text and returns what the parser made of it; `refused` says
whether that is a refusal (a parser must refuse such an input, never take it as data).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SIZE = 100_000  # characters of each hostile input


@dataclass(frozen=True)
class Case:
    name: str  # the parser, and where its input comes from
    text: str  # SIZE characters
    run: Callable[[str], Any]
    refused: Callable[[Any], bool]


def _raises(call: Callable[[str], Any], *errors: type[BaseException]) -> Callable[[str], Any]:
    def run(text: str) -> Any:
        try:
            return call(text)
        except errors as error:
            return error

    return run


def _is_error(result: Any) -> bool:
    return isinstance(result, BaseException)


def _none(result: Any) -> bool:
    return result is None


def _fill(head: str, unit: str, tail: str = "") -> str:
    """`head`, `unit` repeated, then `tail`: SIZE characters in all."""
    middle = SIZE - len(head) - len(tail)
    return head + (unit * (middle // len(unit) + 1))[:middle] + tail


def cases() -> list[Case]:
    """The parsers, imported when asked (the kubelet's needs grpcio)."""
    from gpu_exporter import systemd_fds
    from gpu_exporter.attribution import cgroups, dra
    from gpu_exporter.attribution.expected import EXPECTED_HOST_PROCESSES
    from gpu_exporter.attribution.kubernetes import (
        is_expected,
        split_replica,
    )
    from gpu_exporter.config import parse_duration
    from gpu_exporter.self_check import nvidia_smi
    from gpu_exporter.serving import basic_auth, negotiation, request_framing, request_head
    from gpu_exporter.serving.rate_limit import parse_go_duration
    from gpu_exporter.sources import kernel_log_records
    from gpu_exporter.yamlfile import YamlFileError, parse_yaml
    from tools import webhook_receiver

    expected = re.compile(EXPECTED_HOST_PROCESSES)
    return [
        # the kubelet's pod-resources answer: device plugins' device IDs (List and
        # GetAllocatableResources), DRA device names
        Case("device ID, a replica", _fill("GPU-", "0", "::3"), split_replica, _none),
        Case("device ID, GKE's shared", _fill("nvidia0", "/vgpu"), split_replica, _none),
        Case("DRA device name, a long minor", _fill("gpu-", "9"), dra.parse, _none),
        Case("DRA device name, MIG profile", _fill("gpu-0-mig-", "a-", "9-0"), dra.parse, _none),
        Case("DRA passthrough name", _fill("gpu-vfio-", "1"), dra._is_passthrough, lambda r: not r),
        # the config file and flags
        Case(
            "duration (config)",
            _fill("1", " ", "x"),
            _raises(parse_duration, ValueError),
            _is_error,
        ),
        Case("Go duration (web config)", _fill("", "1"), parse_go_duration, _none),
        Case(
            "YAML file",
            _fill("a: ", "[" * 1 + "1, "),
            _raises(lambda t: parse_yaml(t.encode()), YamlFileError),
            _is_error,
        ),
        # the kernel log: any driver, and any local user with /dev/kmsg writable, adds lines
        Case(
            "kernel log record",
            _fill("4,1,1,-;", "9"),
            lambda t: kernel_log_records.parse_record(t.encode()),
            lambda r: r is None or len(r.message) <= kernel_log_records.MAX_RECORD_BYTES,
        ),
        Case(
            "kernel log Xid line",
            _fill("NVRM: Xid (PCI:0000:3b:00): ", "7"),
            kernel_log_records.parse_driver_error,
            lambda r: not isinstance(r, kernel_log_records.DriverError),
        ),
        # systemd's sd_listen_fds variables, from the environment
        Case(
            "LISTEN_FDNAMES",
            _fill("", "kmsg:"),
            _raises(lambda t: systemd_fds.parse_listen_fds("1", "1", t, 1), ValueError),
            _is_error,
        ),
        # /proc, written by any process on the host
        Case(
            "cgroup file",
            _fill("0::/", "pod-", "/x"),
            cgroups.parse_cgroup,
            lambda labels: labels == cgroups.CgroupLabels(),
        ),
        Case(
            "host process name (expected-host-processes)",
            _fill("Xorg", "g"),
            lambda t: is_expected(expected, t, t),
            lambda r: not r,
        ),
        # HTTP requests
        Case(
            "request head",
            _fill("GET / HTTP/1.1\r\nX: ", "a", "\r\n\r\n"),
            _raises(lambda t: request_head.parse_head(t.encode()), request_head.BadRequest),
            _is_error,
        ),
        Case(
            "Accept header",
            _fill("application/openmetrics-text;q=0.", "0"),
            negotiation.wants_openmetrics,
            lambda r: not r,
        ),
        Case(
            "Accept-Encoding header", _fill("gzip;q=", "0"), negotiation.wants_gzip, lambda r: not r
        ),
        Case("Authorization header", _fill("Basic ", "QUFB", "!"), basic_auth.parse_basic, _none),
        Case("request target", _fill("a", "a", ":/"), request_framing.origin_form, _none),
        # make demo-alerts: what any local user posts to its webhook receiver
        Case(
            "webhook body (demo receiver)",
            _fill('{"alerts": [', "["),
            _raises(lambda t: webhook_receiver.alerts_in(t.encode()), webhook_receiver.NotAWebhook),
            _is_error,
        ),
        Case(
            "webhook field (demo receiver)",
            _fill("", "\x1b[2J"),
            webhook_receiver.printable,
            lambda r: "\x1b" not in r and len(r) < 2000,
        ),
        # nvidia-smi's output (--self-check)
        Case(
            "nvidia-smi value",
            _fill("1", "1", ".x C"),
            nvidia_smi._without_unit,
            lambda r: r.endswith("C"),
        ),
    ]
