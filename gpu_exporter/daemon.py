"""The running exporter: builds backend, sampler, kernel-log reader, Xid listener and web
server, and runs them until a signal says stop. SIGHUP re-reads the config file and the
web config.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from types import FrameType
from typing import TYPE_CHECKING

from gpu_exporter import __version__, logs
from gpu_exporter.attribution.holders import HolderScanner
from gpu_exporter.attribution.namespace import sees_host_pid_namespace
from gpu_exporter.attribution.processes import ProcessAttributor
from gpu_exporter.config import (
    DEFAULT_KERNEL_LOG,
    EXIT_USAGE,
    ConfigError,
    Settings,
    describe_changes,
    kernel_log_path,
    load_settings,
    parse_listen_address,
)
from gpu_exporter.malloc_settings import tune_malloc
from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.metrics.self_process import ProcessMetrics
from gpu_exporter.metrics.specs import RenderOptions
from gpu_exporter.model import DeviceSample, HostSample, KubernetesState, Snapshot
from gpu_exporter.sampling import thresholds
from gpu_exporter.sampling.counter_reads import CounterReads
from gpu_exporter.sampling.health import Health
from gpu_exporter.sampling.history import HISTORY_CADENCES, History
from gpu_exporter.sampling.sampler import CountersDue, KernelLogView, Sampler, XidView
from gpu_exporter.serving.http import HttpServer, ListenError, bind
from gpu_exporter.serving.routes import Routes, ServingState
from gpu_exporter.serving.web_config import WebConfigError, load_web_config
from gpu_exporter.sources.backend import Backend
from gpu_exporter.sources.fabric_daemons import (
    FabricDaemonWatch,
    Look,
    host_processes,
    nvswitches_present,
)
from gpu_exporter.sources.host import HostReader
from gpu_exporter.sources.kernel_log import KernelLogReader
from gpu_exporter.sources.kernel_log_files import open_inherited_kernel_log
from gpu_exporter.sources.xid import XidListener
from gpu_exporter.systemd_fds import inherited_fds
from gpu_exporter.systemd_notify import Notifier, Watchdog

if TYPE_CHECKING:
    from gpu_exporter.attribution.kubernetes import KubernetesAttributor
    from gpu_exporter.sources.kubelet.watch import KubeletWatcher

log = logging.getLogger("gpu_exporter")

KMSG_FD_NAME = "kmsg"  # FileDescriptorName= of the socket units that pass /dev/kmsg

# How long a thread may hold the interpreter lock while another waits for it, in seconds.
# Python's default, 5 ms, was most of the scrape p99: a scrape arriving while the sampler
# and device threads run Python waited for it. At 1 ms the p99 on the benchmark host fell
# under 1 ms in 11 of 12 runs (7 of 12 before) for no measurable CPU (benchmarks/README.md).
SWITCH_INTERVAL_SECONDS = 0.001


def make_backend(settings: Settings) -> Backend:
    """The simulated host for --simulate, else the real driver. Logs nothing."""
    if settings.simulate is not None:
        from gpu_exporter.sources.simulated import SimulatedBackend

        # UUIDs unique per simulated host (hostname and port), stable across restarts
        host_id = f"{socket.gethostname()}:{settings.listen_address}"
        return SimulatedBackend(
            settings.simulate,
            scenario_path=settings.simulate_scenario,
            host_id=host_id,
            hardware=settings.simulate_hardware,
        )
    from gpu_exporter.sources.nvml import PynvmlBackend

    return PynvmlBackend()


def fabric_daemon_look(backend: Backend) -> Look:
    """Where the fabric's daemons are looked for: the host's /proc, or the simulated host's
    own daemons (`SimulatedBackend.daemons_running`)."""
    simulated = getattr(backend, "daemons_running", None)
    if simulated is not None:
        return simulated  # type: ignore[no-any-return]
    return host_processes("/proc", sees_host_pid_namespace)


def make_kernel_log(settings: Settings) -> KernelLogReader | None:
    """The kernel-log reader of `--collector.xid.kernel-log`; None for none.

    The one place that decides what it reads: the file systemd passed open under the name
    `kmsg` (deploy/systemd/gpu-exporter-kmsg.socket) where the flag names the default
    /dev/kmsg, else the path the flag names.
    """
    passed = inherited_fds()  # taken (and the variables unset) even when not read
    path = kernel_log_path(settings)
    if path is None:
        return None
    fd = passed.get(KMSG_FD_NAME) if path == DEFAULT_KERNEL_LOG else None
    if fd is None:
        return KernelLogReader(path)
    log.info("reading the kernel log from the file systemd opened", extra={"path": path, "fd": fd})
    return KernelLogReader(path, opener=lambda _path: open_inherited_kernel_log(fd))


def warn_if_simulated(settings: Settings) -> None:
    if settings.simulate is not None:
        log.warning(
            "serving SIMULATED GPUs: this data is made up (--simulate)",
            extra={"gpus": settings.simulate},
        )


def make_sampler(
    settings: Settings,
    backend: Backend,
    on_snapshot: Callable[[Snapshot], None] = lambda snapshot: None,
    xid: XidView | None = None,
    *,
    kernel_log: KernelLogView | None = None,
    counters_due: CountersDue | None = None,
    retries: bool = True,
    kubernetes: KubernetesSource | None = None,
    watched: Callable[[], bool] | None = None,
) -> Sampler:
    attributor = ProcessAttributor(
        limit=settings.process_limit,
        cmdline=settings.process_cmdline,
        lookup=backend.host_process,
        # a simulated GPU has no device file on this host to look for
        holders=HolderScanner() if backend.kind == "nvml" else None,
        scan_above_bytes=thresholds.LEAKED_MEMORY_BYTES,
    )
    host_reader = HostReader()

    def read_host() -> HostSample | None:
        return host_reader()

    return Sampler(
        backend,
        fabric_daemons=FabricDaemonWatch(
            fabric_daemon_look(backend),
            # the simulated host's HGX board holds its NVSwitches
            nvswitches=nvswitches_present if backend.kind == "nvml" else (lambda: True),
        ),
        interval_seconds=settings.interval_seconds,
        timeout_seconds=settings.timeout_seconds,
        collectors=settings.collectors,
        on_snapshot=on_snapshot,
        attribute_processes=attributor,
        read_host=read_host,
        xid=xid,
        kernel_log=kernel_log,
        attribute_kubernetes=kubernetes or KubernetesSource(settings),
        counters_due=counters_due,
        retries=retries,
        watched=watched,
    )


class KubernetesSource:
    """The kubelet watcher and the attributor.

    With `watch` (the daemon) a sample attributes the watcher thread's last reading and
    never waits on the kubelet: the first samples, and so the first readiness, come before
    the kubelet answers (`gpu_exporter_kubernetes_up 0`, "not read yet"), and its answer
    joins the sample after it arrives. The daemon starts and stops the thread with the
    collector (`start`, `stop`: at start, and on a SIGHUP that turns it on or off).
    Without `watch` (`--once`, `--self-check`) there is no thread: the first sample reads
    the kubelet itself, which waits at most the kubelet timeout (5 s,
    `watch.DEFAULT_TIMEOUT_SECONDS`).

    The watcher and the attributor, and their modules, are made when first needed (the
    collector on, at start or at a sample): an exporter without it never loads them.
    Made once under a lock: a SIGHUP that turns the collector on starts the watcher from
    the main thread while the sampler may already ask it.
    """

    def __init__(self, settings: Settings, *, watch: bool = False) -> None:
        self._settings = settings
        self._watch = watch
        self._parts: tuple[KubeletWatcher, KubernetesAttributor] | None = None
        self._making = threading.Lock()

    def _made(self) -> tuple[KubeletWatcher, KubernetesAttributor]:
        with self._making:
            return self._parts or self._make()

    def _make(self) -> tuple[KubeletWatcher, KubernetesAttributor]:
        from gpu_exporter.attribution import kubernetes
        from gpu_exporter.sources.kubelet import watch

        settings = self._settings
        watcher = watch.KubeletWatcher(
            settings.kubernetes_socket,
            log_root=settings.kubernetes_log_root,
            refresh_seconds=settings.kubernetes_refresh_seconds,
            hold_seconds=settings.kubernetes_hold_seconds,
        )
        attributor = kubernetes.KubernetesAttributor(
            re.compile(settings.kubernetes_expected_host_processes)
        )
        self._parts = (watcher, attributor)
        return self._parts

    @property
    def watcher(self) -> KubeletWatcher:
        return self._made()[0]

    def start(self) -> None:
        self.watcher.start()

    def stop(self) -> None:
        if self._parts is not None:
            self._parts[0].stop()

    def __call__(
        self, devices: tuple[DeviceSample, ...]
    ) -> tuple[tuple[DeviceSample, ...], KubernetesState]:
        watcher, attributor = self._made()
        if not self._watch and watcher.latest() is None:
            watcher.refresh()
        return attributor(devices, watcher.latest())


def node_name() -> str:
    """The DCGM `Hostname` label: NODE_NAME (Kubernetes' downward API), else the host name."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


def render_options(settings: Settings) -> RenderOptions:
    return RenderOptions(
        cmdline=settings.process_cmdline,
        dcgm=settings.compat_dcgm,
        hostname=node_name() if settings.compat_dcgm else "",
        kubernetes="kubernetes" in settings.collectors,
        nvlink_per_link=settings.nvlink_per_link,
    )


def render(snapshot: Snapshot, settings: Settings, *, self_metrics: bool = True) -> Exposition:
    """The exposition (written when first asked for): the snapshot, then the exporter's
    own process metrics (`process_*`, read then), which textfile output leaves out
    (node_exporter serves its own under those names)."""
    extra = _self_process().families if self_metrics else tuple
    return Exposition(snapshot, render_options(settings), extra=extra)


@functools.cache
def _self_process() -> ProcessMetrics:
    return ProcessMetrics()


# Settings a SIGHUP can change while running; the rest need a restart.
LIVE_SETTINGS: frozenset[str] = frozenset(
    {
        "interval_seconds",
        "timeout_seconds",
        "collectors",
        "log_level",
        "log_format",
        "telemetry_path",
        "web_config_file",
        "compat_dcgm",
    }
)


class Exporter:
    """The running daemon: sampler, Xid listener, web server and their settings."""

    def __init__(self, settings: Settings, args: Sequence[str]) -> None:
        self.settings = settings
        self.args = list(args)
        # the live page's history, kept only while the page is on (--web.ui)
        self.state = ServingState(history=History() if settings.web_ui else None)
        self.backend = make_backend(settings)
        self.kernel_log = make_kernel_log(settings)
        # NVML's events count only while the kernel log, which holds the same Xids, is not read
        self.xid = XidListener(self.backend, counting=lambda: not self.kernel_log_up)
        self.kubernetes = KubernetesSource(settings, watch=True)
        # the /proc counters are read for predicted scrapes and the page's history
        reads = CounterReads(
            lambda within: bool(self.state.scrapes.expected(within_seconds=within)),
            HISTORY_CADENCES if self.state.history is not None else {},
        )
        self.sampler = make_sampler(
            settings,
            self.backend,
            self.publish,
            xid=self.xid,
            kernel_log=self.kernel_log,
            counters_due=reads.due,
            kubernetes=self.kubernetes,
            watched=self.state.watched,
        )
        self.sampler.on_nvml_init.append(self.xid.rearm)
        self.health = Health(self.sampler)
        self.routes = Routes(
            self.state,
            self.health,
            telemetry_path=settings.telemetry_path,
            interval_seconds=settings.interval_seconds,
        )
        self.notifier = Notifier()
        self.watchdog = Watchdog(self.notifier, lambda: self.health.live().ok)
        self._ready = False
        self._shared_uuids: set[tuple[str, tuple[int, ...]]] = set()  # logged once each
        self.server: HttpServer | None = None  # set once the socket is bound

    @property
    def kernel_log_up(self) -> bool:
        return self.kernel_log is not None and self.kernel_log.up

    def publish(self, snapshot: Snapshot) -> None:
        """Keep the snapshot for the web side; render it now only if a scrape is expected
        before the next sample, in the format that scraper asks for (else the first
        scrape renders it, or nobody does)."""
        self._warn_shared_uuids(snapshot)
        exposition = render(snapshot, self.settings)
        exposition.render(
            self.state.scrapes.expected(within_seconds=self.settings.interval_seconds)
        )
        self.state.exposition = exposition
        # after the snapshot is served: the live page never shows a history point newer
        # than the snapshot it is drawn beside
        if self.state.history is not None:
            self.state.history.add(snapshot)
        if not self._ready:
            self._ready = True
            up = sum(1 for d in snapshot.devices if d.up)
            self.notifier.send(f"READY=1\nSTATUS=first sample done: {up} GPUs up")

    def _warn_shared_uuids(self, snapshot: Snapshot) -> None:
        """Log once each set of GPUs that report the same UUID. They stay apart (every
        series carries `gpu` with `uuid`; the page's history is kept by both), but joins
        on `uuid` alone and Xid events, which NVML names by UUID, mix them."""
        indices: dict[str, list[int]] = {}
        for device in snapshot.devices:
            if device.static is not None:
                indices.setdefault(device.uuid, []).append(device.index)
        for uuid, shared in indices.items():
            key = (uuid, tuple(shared))
            if len(shared) > 1 and key not in self._shared_uuids:
                self._shared_uuids.add(key)
                log.warning(
                    "GPUs report the same UUID; told apart by index",
                    extra={"uuid": uuid, "gpus": ",".join(map(str, shared))},
                )

    def start(self) -> None:
        """Start the threads (after the socket is bound)."""
        warn_if_simulated(self.settings)
        if "xid" in self.settings.collectors:
            self.start_xid(armed=False)
        if "kubernetes" in self.settings.collectors:
            self.kubernetes.start()
        self.sampler.start()
        self.watchdog.start()

    def stop(self) -> None:
        """Stop everything without waiting on the driver: an idle exporter exits at once.

        The Xid listener may be blocked in nvmlEventSetWait for up to `xid.WAIT_MS`; it
        is not waited for, and NVML is then not shut down under it (the process is ending).
        """
        self.notifier.send("STOPPING=1")
        self.watchdog.stop()
        if self.server is not None:
            self.server.stop()
        self.kubernetes.stop()  # not waited for: a call in flight has its deadline
        xid_done = self.xid.stop(timeout_seconds=0.05)
        if self.kernel_log is not None:
            self.kernel_log.stop(timeout_seconds=0)  # a daemon thread in select(2) at most
        self.sampler.stop(timeout_seconds=0.5, shutdown_nvml=xid_done)

    def start_xid(self, *, armed: bool) -> None:
        """The kernel log first: it is opened at once, so whether NVML's events count is
        settled before the listener delivers one."""
        if self.kernel_log is not None:
            self.kernel_log.start()
        self.xid.start(armed=armed)

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
        restart_only = {f.name for f in fields(Settings)} - LIVE_SETTINGS
        needs_restart = describe_changes(old, new, only=restart_only)
        if needs_restart:
            log.warning(
                "these settings change only on restart; keeping their running values",
                extra={"settings": ", ".join(needs_restart)},
            )
        changed = describe_changes(old, new, only=LIVE_SETTINGS)
        new = replace(new, **{name: getattr(old, name) for name in restart_only})
        logs.configure(new.log_level, new.log_format)
        # the listener stops before its series go, and starts before they come
        if "xid" in new.collectors:
            self.start_xid(armed=self.sampler.nvml_up)
        else:
            self.xid.stop()  # one wait of the driver's: its series go after it
            if self.kernel_log is not None:
                self.kernel_log.stop(timeout_seconds=1.1)
        self.sampler.interval_seconds = new.interval_seconds
        self.sampler.timeout_seconds = new.timeout_seconds
        self.sampler.collectors = new.collectors
        # the kubelet is asked while the collector is on, and only then
        if "kubernetes" in new.collectors:
            self.kubernetes.start()
        else:
            self.kubernetes.stop()
        self.routes.telemetry_path = new.telemetry_path
        self.routes.interval_seconds = new.interval_seconds
        if self.server is not None:
            if new.web_config_file is None and old.web_config_file is not None:
                log.warning("turning the web config off needs a restart; keeping it")
            elif new.web_config_file != old.web_config_file:
                self.server.reload_web_config(new.web_config_file)
            else:
                self.server.reload_web_config()
        self.settings = new
        if new.interval_seconds != old.interval_seconds:
            self.sampler.wake()  # the new interval applies now, not after the old one
        log.info("configuration reloaded", extra={"changed": ", ".join(changed) or "nothing"})
        self.notifier.send("READY=1")


def serve(settings: Settings, args: Sequence[str]) -> int:
    tune_malloc()  # before any thread starts
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    exporter = Exporter(settings, args)
    host, port = parse_listen_address(settings.listen_address)
    try:
        web_config = load_web_config(settings.web_config_file)
        server = bind(
            host,
            port,
            exporter.routes,
            settings.max_requests,
            web_config,
            max_connections=settings.max_connections,
        )
    except (ListenError, WebConfigError) as error:
        print(f"gpu-exporter: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    exporter.server = server

    stopping = threading.Event()
    reloading = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            reloading.set()
        else:
            log.info("shutting down", extra={"signal": signal.Signals(signum).name})
            stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    # The kernel hands a signal to any thread that does not block it, and Python runs the
    # handler on the main thread once that thread runs again: a signal another thread took
    # did not end the main thread's wait on an Event (SIGHUP or SIGTERM acted up to 5 s
    # late). Python writes each signal to this socket on whichever thread it lands, and the
    # main thread waits on the socket.
    wakeup, wakeup_writer = socket.socketpair()
    wakeup.setblocking(False)
    wakeup_writer.setblocking(False)
    signal.set_wakeup_fd(wakeup_writer.fileno(), warn_on_full_buffer=False)

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
    web_thread = threading.Thread(target=server.serve, name="http", daemon=True)
    web_thread.start()
    exporter.start()
    while not stopping.is_set():
        # No timeout: only a signal sets `stopping` or `reloading`, and every signal ends
        # the wait (the wake of a timed one costs ~0.15 ms of CPU on a virtual machine).
        # Python writes the wakeup byte after it marks the handler pending, and runs
        # pending handlers on this thread at its next call: they have run before the
        # checks below.
        select.select([wakeup], [], [])
        with contextlib.suppress(BlockingIOError):  # the handlers have run by now
            wakeup.recv(4096)
        if reloading.is_set() and not stopping.is_set():
            reloading.clear()
            exporter.reload()
    signal.set_wakeup_fd(-1)
    wakeup.close()
    wakeup_writer.close()
    exporter.stop()
    logging.shutdown()
    return 0
