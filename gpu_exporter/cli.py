"""The `gpu-exporter` command: parse the settings, then serve or print one exposition."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gpu_exporter import logs
from gpu_exporter.config import EXIT_USAGE, ConfigError, Settings, load_settings

# The daemon, the data model and the catalogue are imported once the settings are good
# (in `main` and `run_once`): a refused flag, `--help` or `--version` answers without
# them, in about 0.12 s of CPU in place of 0.3 (tests/test_lean_imports.py).


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(args)
    except ConfigError as error:
        print(f"gpu-exporter: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if settings.print_config is not None:
        # imported here: the daemon never loads the shipped files' table
        from gpu_exporter.print_config import print_config

        return print_config(settings.print_config, settings.runbook_url)
    logs.configure(settings.log_level, settings.log_format)
    if settings.once:
        return run_once(settings)
    if settings.self_check:
        # imported here: the daemon never loads the self-check (subprocess, XML)
        from gpu_exporter.self_check.check import self_check

        return self_check(settings)
    from gpu_exporter.daemon import serve

    return serve(settings, args)


def run_once(settings: Settings) -> int:
    """Print (or atomically write) one exposition and exit.

    Without a driver the exposition says so (`gpu_exporter_nvml_up 0`) and the exit code
    is 0: the textfile stays current and the alert on nvml_up fires. The exporter's own
    `process_*` metrics are left out: node_exporter serves its own under those names. A
    web config is checked (a typo should not wait for the next daemon restart) but not used.
    """
    from gpu_exporter.daemon import (
        make_backend,
        make_kernel_log,
        make_sampler,
        render,
        warn_if_simulated,
    )
    from gpu_exporter.serving.web_config import WebConfigError, load_web_config

    try:
        load_web_config(settings.web_config_file)
    except WebConfigError as error:
        print(f"gpu-exporter: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    warn_if_simulated(settings)
    backend = make_backend(settings)
    kernel_log = make_kernel_log(settings) if "xid" in settings.collectors else None
    if kernel_log is not None:
        kernel_log.catch_up()  # every Xid since boot, for the textfile too
    sampler = make_sampler(settings, backend, retries=False, kernel_log=kernel_log)
    snapshot = sampler.sample_once()
    if snapshot.nvml_up and "utilization" in settings.collectors:
        # busy counters need two readings of the driver's buffer to integrate anything
        snapshot = sampler.sample_once()
    sampler.stop(timeout_seconds=0)
    body = render(snapshot, settings, self_metrics=False).body(openmetrics=False, compressed=False)
    if settings.output is None:
        sys.stdout.buffer.write(body)
        sys.stdout.flush()
        return 0
    try:
        write_atomically(settings.output, body)
    except OSError as error:
        print(f"gpu-exporter: error: --output {settings.output}: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def write_atomically(path: str, body: bytes) -> None:
    """Write to a temporary file in the same directory, then rename over `path`."""
    import tempfile  # only here: with shutil, random, bz2 and lzma it is 0.5 MiB resident

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".gpu-exporter-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
