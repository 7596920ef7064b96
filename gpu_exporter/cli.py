"""The `gpu-exporter` command: wires settings, backend, sampler and web server."""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from prometheus_client import ProcessCollector

from gpu_exporter import __version__, logs
from gpu_exporter.backends.base import Backend
from gpu_exporter.config import ConfigError, Settings, load_settings, parse_listen_address
from gpu_exporter.exposition import Exposition
from gpu_exporter.sampler import Sampler
from gpu_exporter.snapshot import Snapshot
from gpu_exporter.web import ListenError, Routes, ServingState, bind

log = logging.getLogger("gpu_exporter")

EXIT_USAGE = 2


def make_backend(settings: Settings) -> Backend:
    """The simulated host for --simulate, else the real driver."""
    if settings.simulate is not None:
        from gpu_exporter.backends.simulated import SimulatedBackend

        log.warning(
            "serving SIMULATED GPUs: this data is made up (--simulate)",
            extra={"gpus": settings.simulate},
        )
        return SimulatedBackend(settings.simulate, scenario_path=settings.simulate_scenario)
    from gpu_exporter.backends.nvml import PynvmlBackend

    return PynvmlBackend()


def make_sampler(
    settings: Settings,
    backend: Backend,
    on_snapshot: Callable[[Snapshot], None] = lambda snapshot: None,
) -> Sampler:
    return Sampler(
        backend,
        interval_seconds=settings.interval_seconds,
        timeout_seconds=settings.timeout_seconds,
        collectors=settings.collectors,
        on_snapshot=on_snapshot,
    )


def render(snapshot: Snapshot, settings: Settings) -> Exposition:
    return Exposition(
        snapshot,
        cmdline=settings.process_cmdline,
        extra=[ProcessCollector(registry=None)],
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = load_settings(sys.argv[1:] if argv is None else argv)
    except ConfigError as error:
        print(f"gpu-exporter: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    logs.configure(settings.log_level, settings.log_format)
    if settings.once:
        return run_once(settings)
    return serve(settings)


def run_once(settings: Settings) -> int:
    """Print (or atomically write) one exposition and exit."""
    backend = make_backend(settings)
    sampler = make_sampler(settings, backend)
    snapshot = sampler.sample_once()
    if snapshot.nvml_up and "utilization" in settings.collectors:
        # busy counters need two readings of the driver's buffer to integrate anything
        snapshot = sampler.sample_once()
    sampler.stop(timeout_seconds=0)
    body = render(snapshot, settings).body(openmetrics=False, compressed=False)
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


def serve(settings: Settings) -> int:
    host, port = parse_listen_address(settings.listen_address)
    state = ServingState()
    routes = Routes(
        state, telemetry_path=settings.telemetry_path, interval_seconds=settings.interval_seconds
    )
    try:
        server = bind(host, port, routes, settings.max_requests)
    except ListenError as error:
        print(f"gpu-exporter: error: {error}", file=sys.stderr)
        return EXIT_USAGE

    backend = make_backend(settings)

    def publish(snapshot: Snapshot) -> None:
        state.exposition = render(snapshot, settings)

    sampler = make_sampler(settings, backend, publish)
    state.devices_stuck = sampler.any_device_stuck

    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    address = server.server_address
    log.info(
        "listening",
        extra={
            "address": settings.listen_address,
            "port": address[1],
            "telemetry_path": settings.telemetry_path,
            "version": __version__,
            "backend": backend.kind,
        },
    )
    web_thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    web_thread.start()
    sampler.start()
    while not stopping.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    sampler.stop(timeout_seconds=1.0)
    logging.shutdown()
    return 0
