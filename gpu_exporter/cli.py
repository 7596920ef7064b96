"""The `gpu-exporter` command: wires settings, backend, sampler and web server."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

from prometheus_client import ProcessCollector

from gpu_exporter import __version__, logs
from gpu_exporter.backends.base import Backend
from gpu_exporter.config import ConfigError, Settings, load_settings, parse_listen_address
from gpu_exporter.exposition import Exposition
from gpu_exporter.host import HostReader
from gpu_exporter.processes import HostProcessSource, ProcessAttributor
from gpu_exporter.sampler import Sampler, XidSource
from gpu_exporter.snapshot import HostSample, Snapshot
from gpu_exporter.systemd_notify import Notifier, Watchdog
from gpu_exporter.web import (
    STALE_INTERVALS,
    HttpServer,
    ListenError,
    Routes,
    ServingState,
    bind,
)
from gpu_exporter.web_config import WebConfigError, load_web_config
from gpu_exporter.xid import XidListener

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
        # UUIDs unique per simulated host (hostname and port), stable across restarts
        host_id = f"{socket.gethostname()}:{settings.listen_address}"
        return SimulatedBackend(
            settings.simulate, scenario_path=settings.simulate_scenario, host_id=host_id
        )
    from gpu_exporter.backends.nvml import PynvmlBackend

    return PynvmlBackend()


def make_sampler(
    settings: Settings,
    backend: Backend,
    on_snapshot: Callable[[Snapshot], None] = lambda snapshot: None,
    xid_state: XidSource | None = None,
) -> Sampler:
    attributor = ProcessAttributor(
        limit=settings.process_limit,
        cmdline=settings.process_cmdline,
        lookup=backend.host_process if isinstance(backend, HostProcessSource) else None,
    )
    host_reader = HostReader()

    def read_host() -> HostSample | None:  # collectors can change on SIGHUP
        return host_reader() if "host" in sampler.collectors else None

    sampler = Sampler(
        backend,
        interval_seconds=settings.interval_seconds,
        timeout_seconds=settings.timeout_seconds,
        collectors=settings.collectors,
        on_snapshot=on_snapshot,
        attribute_processes=attributor,
        read_host=read_host,
        xid_state=xid_state,
    )
    return sampler


def render(snapshot: Snapshot, settings: Settings) -> Exposition:
    return Exposition(
        snapshot,
        cmdline=settings.process_cmdline,
        extra=[ProcessCollector(registry=None)],
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(args)
    except ConfigError as error:
        print(f"gpu-exporter: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    logs.configure(settings.log_level, settings.log_format)
    if settings.once:
        return run_once(settings)
    return serve(settings, args)


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


# Settings a SIGHUP can change while running; the rest need a restart.
LIVE_SETTINGS = frozenset(
    {
        "interval_seconds",
        "timeout_seconds",
        "collectors",
        "log_level",
        "log_format",
        "telemetry_path",
        "web_config_file",
    }
)


class Exporter:
    """The running daemon: sampler, Xid listener, web server and their settings."""

    def __init__(self, settings: Settings, args: Sequence[str]) -> None:
        self.settings = settings
        self.args = list(args)
        self.state = ServingState()
        self.routes = Routes(
            self.state,
            telemetry_path=settings.telemetry_path,
            interval_seconds=settings.interval_seconds,
        )
        self.notifier = Notifier()
        self._ready = False
        self.server: HttpServer | None = None  # set once the socket is bound

    def build(self) -> None:
        """Create the backend, sampler and listeners (after the socket is bound, so a
        bad listen address fails before anything else is logged)."""
        settings = self.settings
        self.backend = make_backend(settings)
        self.xid = XidListener(self.backend) if "xid" in settings.collectors else None
        self.sampler = make_sampler(
            settings,
            self.backend,
            self.publish,
            xid_state=self.xid.state if self.xid is not None else None,
        )
        if self.xid is not None:
            self.sampler.on_nvml_init.append(self.xid.rearm)
        self.watchdog = Watchdog(self.notifier, self.samples_completing)

    def publish(self, snapshot: Snapshot) -> None:
        self.state.exposition = render(snapshot, self.settings)
        if not self._ready:
            self._ready = True
            up = sum(1 for d in snapshot.devices if d.up)
            self.notifier.send(f"READY=1\nSTATUS=first sample done: {up} GPUs up")

    def samples_completing(self) -> bool:
        """True while the sampler finishes samples on schedule (the watchdog's test)."""
        latest = self.sampler.latest
        if latest is None:
            return False
        age = time.time() - latest.timestamp_seconds
        return age <= STALE_INTERVALS * self.sampler.interval_seconds + self.sampler.timeout_seconds

    def reload(self) -> None:
        """SIGHUP: re-read the config file; a bad file keeps the running settings."""
        self.notifier.send("RELOADING=1")
        try:
            new = load_settings(self.args)
        except ConfigError as error:
            log.error("reload failed, keeping the running settings", extra={"error": str(error)})
            self.notifier.send("READY=1")
            return
        old = self.settings
        changed = {k for k, v in vars(new).items() if getattr(old, k) != v}
        needs_restart = sorted(changed - LIVE_SETTINGS)
        if needs_restart:
            log.warning("these settings change only on restart", extra={"settings": needs_restart})
        logs.configure(new.log_level, new.log_format)
        self.sampler.interval_seconds = new.interval_seconds
        self.sampler.timeout_seconds = new.timeout_seconds
        self.sampler.collectors = new.collectors
        self.routes.interval_seconds = new.interval_seconds
        self.routes.telemetry_path = new.telemetry_path
        if self.server is not None:
            if new.web_config_file is None and old.web_config_file is not None:
                log.warning("turning the web config off needs a restart; keeping it")
            elif new.web_config_file != old.web_config_file:
                self.server.reload_web_config(new.web_config_file)
            else:
                self.server.reload_web_config()
        self.settings = new
        log.info("configuration reloaded", extra={"changed": sorted(changed & LIVE_SETTINGS)})
        self.notifier.send("READY=1")


def serve(settings: Settings, args: Sequence[str]) -> int:
    exporter = Exporter(settings, args)
    host, port = parse_listen_address(settings.listen_address)
    try:
        web_config = load_web_config(settings.web_config_file)
        server = bind(host, port, exporter.routes, settings.max_requests, web_config)
    except (ListenError, WebConfigError) as error:
        print(f"gpu-exporter: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    exporter.server = server
    exporter.build()

    stopping = threading.Event()
    reloading = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            reloading.set()
            return
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)

    log.info(
        "listening",
        extra={
            "address": settings.listen_address,
            "port": server.server_address[1],
            "telemetry_path": settings.telemetry_path,
            "version": __version__,
            "backend": exporter.backend.kind,
        },
    )
    web_thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    web_thread.start()
    if exporter.xid is not None:
        exporter.xid.start()
    exporter.sampler.start()
    exporter.watchdog.start()
    while not stopping.wait(0.2):
        if reloading.is_set():
            reloading.clear()
            exporter.reload()
    exporter.notifier.send("STOPPING=1")
    exporter.watchdog.stop()
    server.shutdown()
    server.server_close()
    if exporter.xid is not None:
        exporter.xid.stop(timeout_seconds=0.6)
    exporter.sampler.stop(timeout_seconds=0.6)
    logging.shutdown()
    return 0
