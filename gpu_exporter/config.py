"""Settings from flags and `--config.file`, validated in one place.

The YAML file mirrors the flags: each key is a flag name without its dashes
(`web.listen-address: ":9872"`, `collector.host: false`); nested mappings are joined
with dots, so `collect: {interval: 2s}` means `collect.interval: 2s`. Flags override
the file, the file overrides the defaults. Every problem is a `ConfigError` whose
message is one line naming it; the command line turns that into exit code 2.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NoReturn

from gpu_exporter import __version__
from gpu_exporter.attribution.expected import EXPECTED_HOST_PROCESSES
from gpu_exporter.config_keys import flatten, unknown_key
from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.records import Record
from gpu_exporter.serving.paths import built_in_route
from gpu_exporter.yamlfile import YamlFileError, read_yaml

DEFAULT_PORT = 9872
DEFAULT_LISTEN_ADDRESS = f":{DEFAULT_PORT}"
DEFAULT_KERNEL_LOG = "/dev/kmsg"
EXIT_USAGE = 2  # the exit code of a setting that cannot be used, as argparse's own


class ConfigError(Exception):
    """A setting that cannot be used; the message names it."""


@dataclass(frozen=True, repr=False)
class Settings(Record):
    """Everything the program was told, validated and in base units."""

    listen_address: str = DEFAULT_LISTEN_ADDRESS
    telemetry_path: str = "/metrics"
    web_config_file: str | None = None
    max_requests: int = 40
    max_connections: int = 256
    interval_seconds: float = 5.0
    timeout_seconds: float = 10.0
    collectors: frozenset[str] = frozenset(c.name for c in COLLECTORS if c.default_enabled)
    process_limit: int = 32
    process_cmdline: bool = False
    nvlink_per_link: bool = False  # NVLink error counters per link, not per GPU
    compat_dcgm: bool = False
    # the kernel log the xid collector reads; "" reads none; None: /dev/kmsg, or none with
    # --simulate (`kernel_log_path`)
    xid_kernel_log: str | None = None
    kubernetes_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    kubernetes_log_root: str = "/var/log"
    kubernetes_refresh_seconds: float = 5.0
    kubernetes_hold_seconds: float = 300.0  # the last allocation kept through failed reads
    kubernetes_expected_host_processes: str = EXPECTED_HOST_PROCESSES  # a regular expression
    web_ui: bool = True
    log_level: str = "info"
    log_format: str = "logfmt"
    simulate: int | None = None
    simulate_scenario: str | None = None
    simulate_hardware: str = "hgx-h100"  # or "gb200-nvl72" (sources/simulated_hardware.py)
    once: bool = False
    output: str | None = None
    config_file: str | None = None
    self_check: bool = False
    self_check_nvidia_smi: str | None = None
    print_config: tuple[str, ...] | None = None
    runbook_url: str | None = None


MAX_DURATION_CHARS = 32  # of a duration as written: "1.5m" needs 4
_DURATION = re.compile(r"([-+]?[0-9]+(?:\.[0-9]+)?) *(ms|s|m|h)?")  # fullmatch, stripped
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """'500ms', '5s', '1m', '1h' or a number of seconds -> seconds; always finite."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip()
        match = _DURATION.fullmatch(text) if len(text) <= MAX_DURATION_CHARS else None
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 500ms, 5s, 1m)")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    return seconds


def duration(minimum: float, maximum: float) -> Callable[[Any], float]:
    """A duration parser that also checks its range, in seconds."""

    def parse(value: Any) -> float:
        seconds = parse_duration(value)
        if not minimum <= seconds <= maximum:
            raise ValueError(
                f"must be between {_show_seconds(minimum)} and {_show_seconds(maximum)}, "
                f"got {value!r}"
            )
        return seconds

    return parse


def _show_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m" if seconds < 3600 else f"{seconds / 3600:g}h"
    return f"{seconds:g}s"


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _int(value: Any) -> int:
    """A whole number: an int, or text of digits; never a float (1.5 is not 1)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"not an integer: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"not an integer: {value!r}") from None


def integer(minimum: int, maximum: int) -> Callable[[Any], int]:
    """An integer parser that also checks its range."""

    def parse(value: Any) -> int:
        number = _int(value)
        if not minimum <= number <= maximum:
            raise ValueError(f"must be between {minimum} and {maximum}, got {number}")
        return number

    return parse


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).lower()
        if text == "warning":
            text = "warn"
        if text not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return text

    return parse


def _text(value: Any) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError(f"not a string: {value!r}")
    return str(value)


_PATH = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@/-]*")  # RFC 3986 path characters, unescaped


def _regex(value: Any) -> str:
    text = _text(value)
    try:
        re.compile(text)
    except re.error as error:
        raise ValueError(f"not a regular expression: {text!r} ({error})") from None
    return text


def _words(value: Any) -> tuple[str, ...]:
    return tuple(str(word) for word in value)


def _http_url(value: Any) -> str:
    text = _text(value)
    if not text.startswith(("http://", "https://")):
        raise ValueError(f"not an http:// or https:// URL: {text!r}")
    return text


def _telemetry_path(value: Any) -> str:
    """A path a scrape can ask for, exactly as the server compares it (no decoding), and
    none the exporter serves itself."""
    text = _text(value)
    if not text.startswith("/"):
        raise ValueError(f"must start with '/': {value!r}")
    if not _PATH.fullmatch(text):
        raise ValueError(
            f"{text!r} cannot be scraped: use letters, digits and -._~!$&'()*+,;=:@/ only "
            "(no query '?', fragment '#', '%'-escapes, spaces or other characters)"
        )
    segments = text.split("/")[1:]
    if "" in segments[:-1]:
        raise ValueError(f"{text!r} cannot be scraped: clients and proxies merge '//' into '/'")
    if "." in segments or ".." in segments:
        raise ValueError(f"{text!r} cannot be scraped: clients remove '.' and '..' segments")
    route = built_in_route(text)
    if route is not None:
        raise ValueError(f"{text!r} is taken by the exporter's {route}: choose another path")
    return text


@dataclass(frozen=True, repr=False)
class Option(Record):
    """One flag (and the config-file key of the same name)."""

    key: str  # flag name without dashes, e.g. "web.listen-address"
    field: str  # Settings field it sets
    parse: Callable[[Any], Any]
    help: str
    metavar: str | None = None
    flag_only: bool = False  # not allowed in the config file
    nargs: str | None = None  # argparse's, for a flag of several words


OPTIONS: tuple[Option, ...] = (
    Option(
        "web.listen-address",
        "listen_address",
        _text,
        f"address to listen on: :PORT, HOST:PORT or [::]:PORT (default {DEFAULT_LISTEN_ADDRESS})",
        "ADDR",
    ),
    Option(
        "web.telemetry-path",
        "telemetry_path",
        _telemetry_path,
        "path of the metrics (default /metrics); not a path the exporter serves itself "
        "(/, /healthz, /livez, /runbooks, /api/..., /static/...)",
        "PATH",
    ),
    Option(
        "web.config.file",
        "web_config_file",
        _text,
        "exporter-toolkit web config: TLS and basic auth",
        "FILE",
    ),
    Option(
        "web.max-requests",
        "max_requests",
        integer(1, 10_000),
        "concurrent requests served, 1 to 10000, probes not counted; more get 503 (default 40)",
        "N",
    ),
    Option(
        "web.max-connections",
        "max_connections",
        integer(1, 10_000),
        "open connections, 1 to 10000; beyond, an idle one or one sending a response for"
        " over 1s makes room, first from the address holding the most (default 256)",
        "N",
    ),
    Option(
        "collect.interval",
        "interval_seconds",
        duration(0.1, 3600.0),
        "how often to sample the GPUs, 100ms to 1h (default 5s)",
        "DURATION",
    ),
    Option(
        "collect.timeout",
        "timeout_seconds",
        duration(0.1, 600.0),
        "deadline for one GPU's reads, 100ms to 10m; a GPU that misses it is reported down "
        "(default 10s)",
        "DURATION",
    ),
    Option(
        "collector.process.limit",
        "process_limit",
        integer(1, 10_000),
        "processes exported per GPU (1 to 10000), largest by GPU memory; the rest are summed "
        'as process="other" (default 32)',
        "N",
    ),
    Option(
        "collector.process.cmdline",
        "process_cmdline",
        _bool,
        "export each process's command line (cut to 256 bytes, ending in '…' and a digest; "
        "may hold secrets)",
    ),
    Option(
        "collector.nvlink.per-link",
        "nvlink_per_link",
        _bool,
        "export NVLink error counters per link (a `link` label: 72 series per H100 instead "
        "of 4) rather than summed per GPU",
    ),
    Option(
        "collector.xid.kernel-log",
        "xid_kernel_log",
        _text,
        "the kernel log the xid collector reads every Xid since boot from (records in "
        "/dev/kmsg's format: the device, a file or a FIFO); needs CAP_SYSLOG where "
        "kernel.dmesg_restrict is 1, except for the default /dev/kmsg when systemd passes it "
        "open (a file named kmsg by sd_listen_fds, as deploy/systemd's socket units do): "
        "that file is read instead; '' reads none; where it cannot be read, Xids come from "
        "NVML's events alone, since the exporter started (default /dev/kmsg; none with "
        "--simulate)",
        "PATH",
    ),
    Option(
        "compat.dcgm",
        "compat_dcgm",
        _bool,
        "also serve dcgm-exporter's default metrics under its names, units and labels "
        "(DCGM_FI_*), beside the gpu_ ones; see docs/migrating-from-dcgm-exporter.md",
    ),
    Option(
        "kubernetes.pod-resources-socket",
        "kubernetes_socket",
        _text,
        "with --collector.kubernetes: the kubelet's pod-resources socket (default "
        "/var/lib/kubelet/pod-resources/kubelet.sock)",
        "PATH",
    ),
    Option(
        "kubernetes.log-directory",
        "kubernetes_log_root",
        _text,
        "with --collector.kubernetes: the directory holding the kubelet's containers/ and pods/ "
        "log layout, which names each container (default /var/log)",
        "DIR",
    ),
    Option(
        "kubernetes.refresh-interval",
        "kubernetes_refresh_seconds",
        duration(1.0, 600.0),
        "with --collector.kubernetes: how often to ask the kubelet, 1s to 10m, on a thread of "
        "its own (default 5s)",
        "DURATION",
    ),
    Option(
        "kubernetes.allocation-hold",
        "kubernetes_hold_seconds",
        duration(0.0, 3600.0),
        "with --collector.kubernetes: how long the allocation the kubelet last gave is still "
        "served when it stops answering (a restart), 0s to 1h, with "
        "gpu_exporter_kubernetes_up 0 meanwhile; 0s drops it at the first failed read "
        "(default 5m)",
        "DURATION",
    ),
    Option(
        "kubernetes.expected-host-processes",
        "kubernetes_expected_host_processes",
        _regex,
        "with --collector.kubernetes: processes outside every pod that are expected on a GPU, "
        "a regular expression matching the whole process name and the whole file name of its "
        "executable (/proc/PID/exe, where the exporter may read it); the others are counted in "
        "gpu_unallocated_processes with no pod labels; '' expects none (default "
        f"{EXPECTED_HOST_PROCESSES}: display servers)",
        "REGEX",
    ),
    Option(
        "web.ui",
        "web_ui",
        _bool,
        "serve the live page at / (GPU cards, charts, verdicts, processes) and /api/overview, "
        "keeping their history in memory; --web.ui=false leaves the link page (default true)",
    ),
    Option(
        "log.level",
        "log_level",
        _choice("debug", "info", "warn", "error"),
        "debug, info, warn or error (default info)",
        "LEVEL",
    ),
    Option(
        "log.format",
        "log_format",
        _choice("logfmt", "json"),
        "logfmt or json (default logfmt)",
        "FORMAT",
    ),
    Option(
        "simulate",
        "simulate",
        integer(0, 1024),
        "serve a simulated host of N GPUs (0 to 1024) instead of the real driver (demos, tests)",
        "N",
    ),
    Option(
        "simulate.scenario",
        "simulate_scenario",
        _text,
        "scenario file of faults, processes and Xid events for --simulate (re-read when it "
        "changes; see docs/simulated-host.md)",
        "FILE",
    ),
    Option(
        "simulate.hardware",
        "simulate_hardware",
        _choice("hgx-h100", "gb200-nvl72"),
        "the simulated GPUs: hgx-h100 (default: H100s on an HGX board) or gb200-nvl72 (the "
        "GB200s of NVL72 compute trays, 4 a tray: NVLink5, platform info)",
        "KIND",
    ),
    Option(
        "once",
        "once",
        _bool,
        "print one exposition to stdout (or --output) and exit",
        flag_only=True,
    ),
    Option(
        "output",
        "output",
        _text,
        "with --once: write atomically to FILE (node_exporter textfile collector)",
        "FILE",
        flag_only=True,
    ),
    Option(
        "config.file",
        "config_file",
        _text,
        "YAML file mirroring these flags",
        "FILE",
        flag_only=True,
    ),
    Option(
        "self-check",
        "self_check",
        _bool,
        "sample for about 4 seconds, ask nvidia-smi (--query-gpu and -q -x, GPUs matched by "
        "UUID) in the middle, print one table of every value on both sides and exit: 0 when "
        "all agree, 1 on a difference beyond tolerance or a value only one side has, 2 when "
        "nvidia-smi is missing, fails or outlasts --collect.timeout, or NVML cannot be read. "
        "A value agrees within the range the exporter read, widened by: nothing (equal at "
        "nvidia-smi's precision) for identity, memory.total, power limit, max clocks, "
        "thresholds, PCIe generation and width, pstate, modes and ECC counts; 3 C for "
        "temperature.gpu and temperature.gpu.tlimit; 10 W or 10% for power.draw; 5% for "
        "clocks; 10 points for utilization; 5 points for fan.speed; 64 MiB for memory.used "
        "and memory.free",
        flag_only=True,
    ),
    Option(
        "self-check.nvidia-smi",
        "self_check_nvidia_smi",
        _text,
        "with --self-check: the nvidia-smi to run (default: the first on PATH)",
        "PATH",
        flag_only=True,
    ),
    Option(
        "print-config",
        "print_config",
        _words,
        "print a file shipped with the exporter and exit: a systemd unit, the Prometheus, "
        "rule and Alertmanager files, a Grafana dashboard, the runbooks (e.g. systemd, rules "
        "alerts, dashboard fleet); without WHAT, or with an unknown one, list them (exit 2)",
        "WHAT",
        flag_only=True,
        nargs="*",
    ),
    Option(
        "runbook-url",
        "runbook_url",
        _http_url,
        "with --print-config rules alerts|kubernetes: the runbook links' base instead of "
        "the exporter's own http://INSTANCE/runbooks (each link adds #alertname)",
        "URL",
        flag_only=True,
    ),
)
_BOOL_FIELDS = frozenset(
    {"process_cmdline", "nvlink_per_link", "compat_dcgm", "web_ui", "once", "self_check"}
)
_BY_KEY: dict[str, Option] = {o.key: o for o in OPTIONS}
_COLLECTOR_KEYS: dict[str, str] = {f"collector.{c.name}": c.name for c in COLLECTORS}
# the keys a config file may hold: every flag's but those that only mean something on the
# command line
_FILE_KEYS = frozenset([*(o.key for o in OPTIONS if not o.flag_only), *_COLLECTOR_KEYS])


class _BooleanFlag(argparse.Action):
    """`--NAME`, `--NAME=true|false` and `--no-NAME`, as node_exporter's flags take them."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        default: Any = None,
        help: str | None = None,
        **_: Any,
    ) -> None:
        names = [n for o in option_strings for n in (o, "--no-" + o.removeprefix("--"))]
        super().__init__(names, dest, nargs="?", default=default, metavar="true|false", help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        negative = bool(option_string and option_string.startswith("--no-"))
        if negative and values is not None:
            parser.error(f"argument {option_string}: takes no value")
        try:
            value = not negative if values is None else _bool(values)
        except ValueError as error:
            parser.error(f"argument {option_string}: {error}")
        setattr(namespace, self.dest, value)

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


def _terminal_columns() -> int:
    """The terminal's width in columns as `shutil.get_terminal_size` reads it (COLUMNS,
    else the terminal on standard output, else 80), without importing `shutil`: argparse
    does at every `add_argument`, and with it `bz2` and `lzma`, 1.2 MiB resident in a
    daemon that never prints its help (benchmarks/README.md, "the judge's resident
    memory")."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    if sys.__stdout__ is None:
        return 80
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    except (ValueError, OSError):  # not a terminal, or closed
        return 80


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Writes a boolean flag as `--NAME[=true|false], --no-NAME`: the negative form
    takes no value. Its width is the terminal's (`_terminal_columns`)."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = _terminal_columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if isinstance(action, _BooleanFlag):
            positive, negative = action.option_strings[0], action.option_strings[1]
            return f"{positive}[={action.metavar}], {negative}"
        return super()._format_action_invocation(action)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    collectors = "\n".join(
        f"  {c.name:<17} {'on ' if c.default_enabled else 'off'}  {c.description}"
        for c in COLLECTORS
    )
    parser = _Parser(
        prog="gpu-exporter",
        description="Prometheus exporter for NVIDIA GPUs, sampled through NVML.",
        epilog=f"collectors (--collector.NAME / --no-collector.NAME):\n{collectors}",
        formatter_class=_HelpFormatter,
        argument_default=argparse.SUPPRESS,
        allow_abbrev=False,
    )
    for option in OPTIONS:
        text = option.help.replace("%", "%%")  # argparse formats help with %
        if option.field in _BOOL_FIELDS:
            kind: Any = _BooleanFlag if not option.flag_only else "store_true"
            parser.add_argument(f"--{option.key}", dest=option.key, action=kind, help=text)
        else:
            extra: dict[str, Any] = {"nargs": option.nargs} if option.nargs else {}
            parser.add_argument(
                f"--{option.key}", dest=option.key, metavar=option.metavar, help=text, **extra
            )
    for key in _COLLECTOR_KEYS:
        parser.add_argument(f"--{key}", dest=key, action=_BooleanFlag, help=argparse.SUPPRESS)
    parser.add_argument("--version", action="version", version=f"gpu-exporter {__version__}")
    return parser


def read_config_file(path: str) -> dict[str, Any]:
    """The file's settings as flat keys; raises ConfigError naming the file and problem."""
    try:
        data = read_yaml(path)
    except YamlFileError as error:
        raise ConfigError(f"config file {path}: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config file {path}: expected a mapping of settings, got {type(data).__name__}"
        )
    try:
        flat = flatten(data)
    except ValueError as error:
        raise ConfigError(f"config file {path}: {error}") from None
    for key in flat:
        if key not in _FILE_KEYS:
            raise ConfigError(f"config file {path}: {unknown_key(key, _FILE_KEYS)}")
    return flat


def _apply(values: dict[str, Any], raw: Mapping[str, Any], source: str) -> None:
    for key, value in raw.items():
        try:
            if key in _COLLECTOR_KEYS:
                enabled = _bool(value)
                collectors = set(values["collectors"])
                name = _COLLECTOR_KEYS[key]
                (collectors.add if enabled else collectors.discard)(name)
                values["collectors"] = frozenset(collectors)
            else:
                option = _BY_KEY[key]
                values[option.field] = option.parse(value)
        except ValueError as error:
            raise ConfigError(f"{source}{key}: {error}") from None


_VALUE_FLAGS = frozenset(f"--{o.key}" for o in OPTIONS if o.field not in _BOOL_FIELDS)
_NEGATIVE = re.compile(r"^-[0-9.]")


def _join_negative_values(argv: Sequence[str]) -> list[str]:
    """`--flag -5s` as `--flag=-5s`: argparse takes "-5s" for an option otherwise."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _VALUE_FLAGS and i + 1 < len(args) and _NEGATIVE.match(args[i + 1]):
            out.append(f"{arg}={args[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def load_settings(argv: Sequence[str]) -> Settings:
    """Parse flags, read the config file they name, validate; raises ConfigError."""
    flags = vars(build_parser().parse_args(_join_negative_values(argv)))
    values: dict[str, Any] = dict(vars(Settings()))
    config_file = flags.get("config.file")
    if config_file is not None:
        _apply(values, read_config_file(config_file), f"config file {config_file}: ")
    _apply(values, flags, "--")
    settings = Settings(**values)
    validate(settings)
    return settings


def validate(s: Settings) -> None:
    """Cross-field checks, and the files the settings name (ranges are checked by the
    option parsers)."""
    if s.simulate_scenario is not None and s.simulate is None:
        raise ConfigError("--simulate.scenario: needs --simulate N")
    if s.simulate_scenario is not None and s.simulate is not None:
        # imported here: only a simulated host with a scenario needs its parser
        from gpu_exporter.sources.scenario import ScenarioError, load_scenario

        try:
            load_scenario(s.simulate_scenario, s.simulate)
        except ScenarioError as error:
            raise ConfigError(f"--simulate.scenario: {error}") from None
    if s.output is not None and not s.once:
        raise ConfigError("--output: needs --once")
    if s.output is not None:
        _check_output(s.output)
    if s.self_check_nvidia_smi is not None and not s.self_check:
        raise ConfigError("--self-check.nvidia-smi: needs --self-check")
    if s.runbook_url is not None and s.print_config is None:
        raise ConfigError("--runbook-url: needs --print-config rules alerts|kubernetes")
    if s.self_check and s.once:
        raise ConfigError("--self-check: cannot be combined with --once")
    parse_listen_address(s.listen_address)


def kernel_log_path(s: Settings) -> str | None:
    """The kernel log to read, or None for none: a simulated host reads the real host's
    log only when told (its GPUs' bus ids could be the real ones')."""
    if s.xid_kernel_log is None:
        return None if s.simulate is not None else DEFAULT_KERNEL_LOG
    return s.xid_kernel_log or None


def _check_output(path: str) -> None:
    """`--output` must be writable before a sample is taken: the error comes first and
    alone, not after the start-up log lines."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ConfigError(f"--output {path}: is a directory")
    if not os.path.isdir(directory):
        raise ConfigError(f"--output {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"--output {path}: directory {directory} is not writable")


_FIELD_FLAGS: dict[str, str] = {o.field: o.key for o in OPTIONS}


def describe_changes(
    old: Settings, new: Settings, only: Collection[str] | None = None
) -> list[str]:
    """The flag names (as an operator writes them) of the settings that differ, among the
    Settings fields `only` when given."""
    names: list[str] = []
    for member in fields(Settings):
        if only is not None and member.name not in only:
            continue
        before, after = getattr(old, member.name), getattr(new, member.name)
        if before == after:
            continue
        if member.name == "collectors":
            names += [f"collector.{c}" for c in sorted(before ^ after)]
        else:
            names.append(_FIELD_FLAGS.get(member.name, member.name))
    return names


def parse_listen_address(address: str) -> tuple[str, int]:
    """':PORT' (all interfaces), 'HOST:PORT' or '[V6]:PORT' -> (host, port)."""
    if "://" in address:
        raise ConfigError(
            f"--web.listen-address: {address!r}: write HOST:PORT without a scheme "
            "(no http:// or https://; TLS comes from --web.config.file)"
        )
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ConfigError(f"--web.listen-address: {address!r} is not HOST:PORT, :PORT or [::]:PORT")
    port = int(port_text)
    if port > 65535:
        raise ConfigError(f"--web.listen-address: port {port} is out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(
            f"--web.listen-address: write IPv6 addresses in brackets, e.g. [{host}]:{port}"
        )
    return host, port
