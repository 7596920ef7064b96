"""The metric catalogue: every metric the exporter can emit, in one place.

Each entry names its metric, type, labels, collector and help text, and holds the
extractor that reads its value from the model (`metrics.specs`). The renderer is one
loop over this table (`metrics.render`); the metrics reference (docs/reference.md) is generated
from it (`python -m gpu_exporter.docs`); the dashboard and alert-rule tests
check that every metric they reference is listed here. No `gpu_` metric name is written
anywhere else in the package (a test checks that).

Adding a metric: one entry here, plus the reading that carries its value (`model`) and
the backend call that fills it (`sources`). See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gpu_exporter import __version__
from gpu_exporter.attribution.holders import MAX_HOLDERS, SCAN_BUDGET_SECONDS, SCAN_EVERY_SECONDS
from gpu_exporter.metrics.specs import (
    SAMPLED,
    DeviceMetric,
    ExporterMetric,
    HostMetric,
    LabelValues,
    LinkMetric,
    MetricSpec,
    MetricType,
    Number,
    ProcessMetric,
    Rows,
    device,
    labelled,
    one,
    reading,
)
from gpu_exporter.model import (
    CLOCK_EVENT_REASONS,
    CLOCK_NAMES,
    FABRIC_CONDITIONS,
    FABRIC_DAEMONS,
    NVLINK_BER_TYPES,
    NVLINK_ERRORS,
    NVLINK_RECOVERY_RESULTS,
    PCIE_ERRORS,
    STAGES,
    TLIMIT_THRESHOLDS,
    ActivityTotals,
    Attribution,
    ClocksReading,
    DeviceHolder,
    DeviceReading,
    DeviceSample,
    EccReading,
    FabricReading,
    GpuAllocation,
    HolderScanState,
    HostSample,
    KernelLogState,
    MemoryPattern,
    MemoryReading,
    MigInstanceReading,
    ModesReading,
    NvLinkReading,
    PcieReading,
    PcieThroughputReading,
    PowerReading,
    ProcessSample,
    Snapshot,
    TemperatureReading,
    UtilizationReading,
    recovery_action_name,
)
from gpu_exporter.sampling import actions
from gpu_exporter.sampling import thresholds as th
from gpu_exporter.sampling.buffer_reads import SAFETY
from gpu_exporter.sampling.counter_reads import MAX_AGE_SECONDS as COUNTER_READS_MAX_AGE
from gpu_exporter.sampling.memory_patterns import MAX_RECENT_EXITS
from gpu_exporter.sampling.thresholds import LEAKED_MEMORY_BYTES
from gpu_exporter.sources.backend import COUNTER_MAX_AGE_SECONDS, SLOW_REFRESH_SECONDS
from gpu_exporter.sources.kernel_log import MAX_BACKLOG_BYTES
from gpu_exporter.sources.kernel_log_counts import MAX_CODES_PER_KEY, MAX_KEYS, MAX_PAIRS

DeviceExtract = Callable[[Snapshot, DeviceSample], Rows]


# Which reading of a DeviceReading each collector fills.
def _utilization(r: DeviceReading) -> UtilizationReading | None:
    return r.utilization


def _memory(r: DeviceReading) -> MemoryReading | None:
    return r.memory


def _temperature(r: DeviceReading) -> TemperatureReading | None:
    return r.temperature


def _power(r: DeviceReading) -> PowerReading | None:
    return r.power


def _clocks(r: DeviceReading) -> ClocksReading | None:
    return r.clocks


def _pcie(r: DeviceReading) -> PcieReading | None:
    return r.pcie


def _pcie_throughput(r: DeviceReading) -> PcieThroughputReading | None:
    return r.pcie_throughput


def _ecc(r: DeviceReading) -> EccReading | None:
    return r.ecc


def _modes(r: DeviceReading) -> ModesReading | None:
    return r.modes


# Extractors that need more than one reading ------------------------------------------


def _info(snapshot: Snapshot, d: DeviceSample) -> Rows:
    st = d.static
    if st is None:
        return ()
    driver = snapshot.driver
    return (
        (
            (
                st.name,
                st.pci_bus_id or "",
                st.serial or "",
                st.vbios_version or "",
                (driver.driver_version if driver else None) or "",
                (driver.cuda_driver_version if driver else None) or "",
                st.compute_capability or "",
            ),
            1,
        ),
    )


def _xid_counts(snapshot: Snapshot, d: DeviceSample) -> Rows:
    state = snapshot.xid.get(d.uuid)
    if state is None:
        return ()
    return [((str(code),), count) for code, count in sorted(state.counts.items())]


def _xid_last(snapshot: Snapshot, d: DeviceSample) -> Rows:
    state = snapshot.xid.get(d.uuid)
    return one(state.last_timestamp_seconds) if state is not None else ()


def _xid_times(snapshot: Snapshot, d: DeviceSample) -> Rows:
    state = snapshot.xid.get(d.uuid)
    if state is None:
        return ()
    return [((str(code),), when) for code, when in sorted(state.last_timestamps.items())]


def _xid_unattributed(snapshot: Snapshot) -> Rows:
    return [
        ((bus_id, str(code)), count)
        for bus_id, state in sorted(snapshot.xid_unattributed.items())
        for code, count in sorted(state.counts.items())
    ]


def _sxids(snapshot: Snapshot) -> Rows:
    kernel_log = snapshot.kernel_log
    if kernel_log is None:
        return ()
    return [
        ((str(nvswitch), str(code)), count)
        for nvswitch, codes in sorted(kernel_log.sxids.items())
        for code, count in sorted(codes.items())
    ]


def _kernel_log(
    name: str, type_: MetricType, help_: str, value: Callable[[KernelLogState], float]
) -> ExporterMetric:
    """A metric of the kernel-log reader: absent while none is read."""

    def extract(snapshot: Snapshot) -> Rows:
        kernel_log = snapshot.kernel_log
        return one(value(kernel_log)) if kernel_log is not None else ()

    return ExporterMetric(name=name, type=type_, help=help_, collector="xid", extract=extract)


def _thresholds(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    st = d.static
    if st is None:
        return ()
    return (
        (("slowdown",), st.slowdown_temperature_celsius),
        (("shutdown",), st.shutdown_temperature_celsius),
    )


def _tlimit_thresholds(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    st = d.static
    if st is None:
        return ()
    return [((name,), st.tlimit_thresholds_celsius.get(name)) for name in TLIMIT_THRESHOLDS]


def _max_clocks(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    st = d.static
    if st is None:
        return ()
    return [((clock,), st.max_clocks_hertz.get(clock)) for clock in CLOCK_NAMES]


def _activity(pick: Callable[[ActivityTotals], Number | None]) -> DeviceExtract:
    """A device extractor of one GPM total."""

    def extract(_snapshot: Snapshot, d: DeviceSample) -> Rows:
        return one(pick(d.activity)) if d.activity is not None else ()

    return extract


def _activity_by(pick: Callable[[ActivityTotals], Mapping[str, float]]) -> DeviceExtract:
    """A device extractor of a labelled GPM total (pipe, direction)."""

    def extract(_snapshot: Snapshot, d: DeviceSample) -> Rows:
        if d.activity is None:
            return ()
        return [((name,), value) for name, value in sorted(pick(d.activity).items())]

    return extract


def _mig_activity(pick: Callable[[ActivityTotals], Number | None]) -> DeviceExtract:
    """A per-GPU-instance extractor of one GPM total."""

    def extract(_snapshot: Snapshot, d: DeviceSample) -> Rows:
        return [((str(gi),), pick(t)) for gi, t in sorted(d.mig_activity.items())]

    return extract


def _mig_pipes(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    return [
        ((str(gi), pipe), seconds)
        for gi, totals in sorted(d.mig_activity.items())
        for pipe, seconds in sorted(totals.pipe_seconds.items())
    ]


def _mig_info(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    mig = d.reading.mig if d.reading is not None else None
    if mig is None:
        return ()
    return [
        ((str(m.gpu_instance), str(m.compute_instance), m.profile, m.uuid), 1)
        for m in sorted(mig.devices, key=lambda m: (m.gpu_instance, m.compute_instance))
    ]


def _mig_memory(pick: Callable[[MigInstanceReading], int | None]) -> DeviceExtract:
    def extract(_snapshot: Snapshot, d: DeviceSample) -> Rows:
        mig = d.reading.mig if d.reading is not None else None
        if mig is None:
            return ()
        return [((str(gi),), pick(i)) for gi, i in sorted(mig.instances.items())]

    return extract


def _nvlink_up(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    nvlink = _nvlink(d)
    if nvlink is None:
        return ()
    return [((str(link),), state.up) for link, state in sorted(nvlink.links.items())]


def _nvlink_error_totals(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    nvlink = _nvlink(d)
    if nvlink is None:
        return ()
    return [((error,), total) for error, total in nvlink.error_totals.items()]


def _nvlink_errors_per_link(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    nvlink = _nvlink(d)
    if nvlink is None:
        return ()
    return [
        ((str(link), error), state.errors[error])
        for link, state in sorted(nvlink.links.items())
        for error in NVLINK_ERRORS
        if error in state.errors
    ]


def _nvlink_recovery_totals(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    nvlink = _nvlink(d)
    if nvlink is None:
        return ()
    return [((result,), total) for result, total in nvlink.recovery_totals.items()]


def _nvlink_recovery_per_link(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    nvlink = _nvlink(d)
    if nvlink is None:
        return ()
    return [
        ((str(link), result), state.recovery_events[result])
        for link, state in sorted(nvlink.links.items())
        for result in NVLINK_RECOVERY_RESULTS
        if result in state.recovery_events
    ]


def _nvlink_worst_ber(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    """Per BER type, the highest over the links that answered it."""
    nvlink = _nvlink(d)
    if nvlink is None:
        return ()
    return [
        ((ber_type,), max(rates))
        for ber_type in NVLINK_BER_TYPES
        if (rates := [s.ber[ber_type] for s in nvlink.links.values() if ber_type in s.ber])
    ]


def _nvlink_ber_per_link(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    nvlink = _nvlink(d)
    if nvlink is None:
        return ()
    return [
        ((str(link), ber_type), state.ber[ber_type])
        for link, state in sorted(nvlink.links.items())
        for ber_type in NVLINK_BER_TYPES
        if ber_type in state.ber
    ]


def _platform_info(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    platform = d.static.platform if d.static is not None else None
    if platform is None:
        return ()
    labels = (
        platform.chassis_serial,
        str(platform.slot),
        str(platform.tray),
        str(platform.host_id),
        str(platform.peer_type),
        str(platform.module_id),
    )
    return ((labels, 1),)


def _fabric_daemons_required(snapshot: Snapshot) -> Rows:
    state = snapshot.fabric_daemons
    if state is None:
        return ()
    return [((daemon,), state.required[daemon]) for daemon in FABRIC_DAEMONS]


def _fabric_daemons_up(snapshot: Snapshot) -> Rows:
    state = snapshot.fabric_daemons
    if state is None:
        return ()
    return [
        ((daemon,), running)
        for daemon in FABRIC_DAEMONS
        if (running := state.running.get(daemon)) is not None
    ]


def _nvlink(d: DeviceSample) -> NvLinkReading | None:
    return d.reading.nvlink if d.reading is not None else None


def _fabric(d: DeviceSample) -> FabricReading | None:
    health = d.reading.health if d.reading is not None else None
    return health.fabric if health is not None else None


def _recovery_action(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    health = d.reading.health if d.reading is not None else None
    if health is None or health.recovery_action is None:
        return ()
    return (((recovery_action_name(health.recovery_action),), 1),)


def _recommended_action(snapshot: Snapshot, d: DeviceSample) -> Rows:
    found = actions.recommend(snapshot, d)
    return (((found.action, found.reason), 1),) if found is not None else ()


def _fabric_state(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    fabric = _fabric(d)
    return (((fabric.state, fabric.status or ""), 1),) if fabric is not None else ()


def _fabric_info(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    fabric = _fabric(d)
    if fabric is None or not fabric.registered:
        return ()
    return (((str(fabric.clique_id), fabric.cluster_uuid or ""), 1),)


def _fabric_healthy(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    fabric = _fabric(d)
    if fabric is None or fabric.summary is None:
        return ()
    return (((fabric.summary,), fabric.healthy),)


def _fabric_conditions(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    fabric = _fabric(d)
    if fabric is None:
        return ()
    fault = fabric.configuration_fault or ""
    return [
        ((condition, fault if condition == "incorrect_configuration" else ""), holds)
        for condition in FABRIC_CONDITIONS
        if (holds := fabric.conditions.get(condition)) is not None
    ]


def _attribution_count(d: DeviceSample) -> Number | None:
    return d.attribution.process_count if d.attribution is not None else None


def _unattributed(d: DeviceSample) -> Number | None:
    return d.attribution.unattributed_memory_bytes if d.attribution is not None else None


def _dead_owners(_s: Snapshot, d: DeviceSample) -> Rows:
    a = d.attribution
    return [((str(o.pid), o.state), 1) for o in (a.dead_owners if a is not None else ())]


def _holder_rows(holders: Iterable[DeviceHolder]) -> Rows:
    return [
        (
            (str(h.pid), h.process, h.user, h.labels.container_id, h.labels.pod_uid)
            + (h.namespace, h.pod, h.container),
            1,
        )
        for h in holders
    ]


def _holders(_s: Snapshot, d: DeviceSample) -> Rows:
    a = d.attribution
    return _holder_rows(a.holders or () if a is not None else ())


def _holder_candidates(_s: Snapshot, d: DeviceSample) -> Rows:
    a = d.attribution
    return _holder_rows(a.holder_candidates if a is not None else ())


def _holder_count(pick: Callable[[Attribution], int]) -> DeviceExtract:
    """A count while the GPU was scanned for holders (its memory is held by no live process)."""
    return lambda _s, d: (
        one(pick(d.attribution))
        if d.attribution is not None and d.attribution.holders is not None
        else ()
    )


def _holder_scan_incomplete(s: Snapshot) -> Rows:
    if s.holder_scan is None:
        return ()
    reasons = s.holder_scan.incomplete_reasons
    return [((reason,), int(reason in reasons)) for reason in ("budget", "denied")]


def _holder_scan(pick: Callable[[HolderScanState], Number]) -> Callable[[Snapshot], Rows]:
    return lambda s: one(pick(s.holder_scan)) if s.holder_scan is not None else ()


def _allocations(s: Snapshot, d: DeviceSample) -> Rows:
    k = s.kubernetes
    if k is None:
        return ()
    return [
        (_allocation_labels(a), 1) for a in k.allocations if a.gpu == d.index and a.uuid == d.uuid
    ]


def _allocation_weights(s: Snapshot, d: DeviceSample) -> Rows:
    k = s.kubernetes
    if k is None:
        return ()
    return [
        (_allocation_labels(a), weight)
        for a in k.allocations
        if a.gpu == d.index and a.uuid == d.uuid and (weight := k.weights.get(a)) is not None
    ]


ALLOCATION_LABELS = ("gpu_instance", "namespace", "pod", "container", "dra_claim", "dra_device")
"""The labels of gpu_allocation_info and gpu_allocation_weight after gpu and uuid."""


def _allocation_labels(a: GpuAllocation) -> tuple[str, ...]:
    """The values of ALLOCATION_LABELS for one allocation."""
    return (a.gpu_instance, a.namespace, a.pod, a.container) + (
        (a.dra.claim, a.dra.device) if a.dra is not None else ("", "")
    )


def _unallocated_use(s: Snapshot, d: DeviceSample) -> Rows:
    k = s.kubernetes
    if k is None:
        return ()
    return [
        ((u.gpu_instance, u.namespace, u.pod, u.container), u.processes)
        for u in k.unallocated
        if u.gpu == d.index and u.uuid == d.uuid
    ]


def _stages_duration(s: Snapshot) -> Rows:
    return [((stage,), s.stages[stage].duration_seconds) for stage in STAGES if stage in s.stages]


def _stages_success(s: Snapshot) -> Rows:
    return [((stage,), s.stages[stage].success) for stage in STAGES if stage in s.stages]


def _nvml_errors(s: Snapshot) -> Rows:
    return [((f, e), count) for (f, e), count in sorted(s.nvml_errors.items())]


def _nvml_calls(s: Snapshot) -> Rows:
    return [((f,), totals.calls) for f, totals in sorted(s.nvml_calls.items())]


def _nvml_call_seconds(s: Snapshot) -> Rows:
    return [((f,), totals.seconds) for f, totals in sorted(s.nvml_calls.items())]


def _nvml_init_errors(s: Snapshot) -> Rows:
    return [((e,), count) for e, count in sorted(s.nvml_init_errors.items())]


def _throttle(c: ClocksReading) -> Iterable[tuple[str, Number | None]]:
    return (c.throttle_reasons or {}).items()


def _clock_values(c: ClocksReading) -> Iterable[tuple[str, Number | None]]:
    return [(clock, c.hertz.get(clock)) for clock in CLOCK_NAMES]


def _clock_events(c: ClocksReading) -> Iterable[tuple[str, Number | None]]:
    return [(reason, c.event_seconds.get(reason)) for reason in CLOCK_EVENT_REASONS]


def _pcie_errors(p: PcieReading) -> Iterable[tuple[str, Number | None]]:
    return [(error, p.errors.get(error)) for error in PCIE_ERRORS]


def _patterns(d: DeviceSample) -> list[tuple[str, MemoryPattern]]:
    """The device's memory patterns with their gpu_instance label: the whole GPU's ("")
    or, on a MIG GPU, each GPU instance's."""
    out = [("", d.memory_pattern)] if d.memory_pattern is not None else []
    return out + [(str(gi), p) for gi, p in sorted(d.mig_memory_patterns.items())]


def _gpu_pattern(pick: Callable[[MemoryPattern], Number | None]) -> DeviceExtract:
    def extract(_snapshot: Snapshot, d: DeviceSample) -> Rows:
        return [((), pick(d.memory_pattern))] if d.memory_pattern is not None else []

    return extract


def _mig_pattern(pick: Callable[[MemoryPattern], Number | None]) -> DeviceExtract:
    def extract(_snapshot: Snapshot, d: DeviceSample) -> Rows:
        return [((str(gi),), pick(p)) for gi, p in sorted(d.mig_memory_patterns.items())]

    return extract


def _gpu_pattern_state(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    p = d.memory_pattern
    return [((p.pattern,), 1)] if p is not None else []


def _mig_pattern_state(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    return [((str(gi), p.pattern), 1) for gi, p in sorted(d.mig_memory_patterns.items())]


def _oom_exits(_snapshot: Snapshot, d: DeviceSample) -> Rows:
    return [
        (
            (gi, e.holder.pid, e.holder.process, e.holder.user, e.holder.container_id)
            + (e.holder.pod_uid, e.holder.namespace, e.holder.pod, e.holder.container),
            1,
        )
        for gi, p in _patterns(d)
        for e in p.recent_exits
    ]


# Spec constructors in the catalogue's own shorthand -----------------------------------


def _d(
    name: str,
    type_: MetricType,
    help_: str,
    collector: str | None,
    extract: DeviceExtract,
    *labels: str,
    when_down: bool = False,
) -> DeviceMetric:
    return DeviceMetric(
        name=name,
        type=type_,
        help=help_ + SAMPLED,
        labels=labels,
        collector=collector,
        extract=extract,
        when_down=when_down,
    )


def _p(
    name: str, type_: MetricType, help_: str, extract: Callable[[ProcessSample], Number | None]
) -> ProcessMetric:
    return ProcessMetric(
        name=name, type=type_, help=help_ + SAMPLED, collector="process", extract=extract
    )


def _h(
    name: str, type_: MetricType, help_: str, extract: Callable[[HostSample], Number | None]
) -> HostMetric:
    return HostMetric(
        name=name, type=type_, help=help_ + SAMPLED, collector="host", extract=extract
    )


def _x(
    name: str, type_: MetricType, help_: str, extract: Callable[[Snapshot], Rows], *labels: str
) -> ExporterMetric:
    return ExporterMetric(name=name, type=type_, help=help_, labels=labels, extract=extract)


INFO_LABELS: LabelValues = (
    "name",
    "pci_bus_id",
    "serial",
    "vbios_version",
    "driver_version",
    "cuda_driver_version",
    "compute_capability",
)

METRICS: tuple[MetricSpec, ...] = (
    # Identity and liveness.
    DeviceMetric(
        name="gpu_info",
        type="gauge",
        help="GPU identity; always 1. Join with * on(uuid) group_left(name) gpu_info.",
        labels=INFO_LABELS,
        extract=_info,
        when_down=True,
    ),
    _d(
        "gpu_up",
        "gauge",
        "1 while the GPU answers NVML, 0 when it is lost or timed out.",
        None,
        device(lambda d: d.up),
        when_down=True,
    ),
    # Utilization.
    _d(
        "gpu_utilization_ratio",
        "gauge",
        "Driver's latest GPU utilization: share of the last sample period a kernel ran (0..1).",
        "utilization",
        reading(_utilization, lambda u: u.gpu_ratio),
    ),
    _d(
        "gpu_busy_seconds_total",
        "counter",
        "Seconds a kernel was running, integrated from the driver's utilization sample "
        "buffer; rate() is the true average utilization over any window the buffer covered "
        "(see gpu_busy_uncovered_seconds_total).",
        "utilization",
        device(lambda d: d.busy_seconds),
    ),
    _d(
        "gpu_busy_uncovered_seconds_total",
        "counter",
        "Seconds no entry of the driver's utilization sample buffer covered (the buffer "
        "ran dry while the GPU idled, or wrapped before it was read), counted neither busy "
        "nor idle; the true busy share of a window lies between rate(gpu_busy_seconds_total) "
        "and that plus rate(gpu_busy_uncovered_seconds_total).",
        "utilization",
        device(lambda d: d.busy_uncovered_seconds),
    ),
    _d(
        "gpu_memory_controller_utilization_ratio",
        "gauge",
        "Driver's latest memory-controller utilization: share of time memory was read or "
        "written (0..1).",
        "utilization",
        reading(_utilization, lambda u: u.memory_controller_ratio),
    ),
    _d(
        "gpu_memory_controller_busy_seconds_total",
        "counter",
        "Seconds the memory controller was busy, integrated from the driver's sample buffer.",
        "utilization",
        device(lambda d: d.memory_controller_busy_seconds),
    ),
    _d(
        "gpu_memory_controller_busy_uncovered_seconds_total",
        "counter",
        "Seconds no entry of the driver's memory-controller sample buffer covered, counted "
        "neither busy nor idle; the true busy share of a window lies between "
        "rate(gpu_memory_controller_busy_seconds_total) and that plus this counter's rate.",
        "utilization",
        device(lambda d: d.memory_controller_busy_uncovered_seconds),
    ),
    _d(
        "gpu_encoder_utilization_ratio",
        "gauge",
        "Video encoder utilization (0..1); while 0, re-read once a minute.",
        "utilization",
        reading(_utilization, lambda u: u.encoder_ratio),
    ),
    _d(
        "gpu_decoder_utilization_ratio",
        "gauge",
        "Video decoder utilization (0..1); while 0, re-read once a minute.",
        "utilization",
        reading(_utilization, lambda u: u.decoder_ratio),
    ),
    # GPM activity (Hopper and newer).
    _d(
        "gpu_graphics_engine_active_seconds_total",
        "counter",
        "Seconds a graphics or compute context was active, from GPM (GRAPHICS_UTIL) "
        "integrated over every interval; rate() is the share of time.",
        "gpm",
        _activity(lambda a: a.graphics_engine_seconds),
    ),
    _d(
        "gpu_sm_active_seconds_total",
        "counter",
        "SM-seconds of activity over SM count, from GPM (SM_UTIL) integrated over every "
        "interval; rate() is the mean share of SMs with at least one warp assigned.",
        "gpm",
        _activity(lambda a: a.sm_seconds),
    ),
    _d(
        "gpu_sm_occupancy_seconds_total",
        "counter",
        "GPM SM occupancy integrated over every interval; rate() is the mean of resident "
        "warps over the theoretical maximum.",
        "gpm",
        _activity(lambda a: a.sm_occupancy_seconds),
    ),
    _d(
        "gpu_dram_active_seconds_total",
        "counter",
        "GPM DRAM bandwidth utilization integrated over every interval; rate() is the mean "
        "share of peak DRAM bandwidth used.",
        "gpm",
        _activity(lambda a: a.dram_seconds),
    ),
    _d(
        "gpu_pipe_active_seconds_total",
        "counter",
        "Seconds the SM pipe was busy (tensor: any tensor op; fp64, fp32, fp16 and integer: "
        "non-tensor math), from GPM integrated over every interval; rate() is the share.",
        "gpm",
        _activity_by(lambda a: a.pipe_seconds),
        "pipe",
    ),
    # Memory.
    _d(
        "gpu_memory_total_bytes",
        "gauge",
        "Total framebuffer memory in bytes.",
        "memory",
        reading(_memory, lambda m: m.total_bytes),
    ),
    _d(
        "gpu_memory_used_bytes",
        "gauge",
        "Used framebuffer memory in bytes.",
        "memory",
        reading(_memory, lambda m: m.used_bytes),
    ),
    _d(
        "gpu_memory_free_bytes",
        "gauge",
        "Free framebuffer memory in bytes.",
        "memory",
        reading(_memory, lambda m: m.free_bytes),
    ),
    _d(
        "gpu_memory_reserved_bytes",
        "gauge",
        "Framebuffer memory reserved by the driver and firmware, in bytes.",
        "memory",
        reading(_memory, lambda m: m.reserved_bytes),
    ),
    _d(
        "gpu_memory_unattributed_bytes",
        "gauge",
        "Used memory that no live listed process accounts for (reservation excluded), in "
        "bytes: memory pinned by dead or invisible processes, a dead owner's included.",
        "process",
        device(_unattributed),
    ),
    _d(
        "gpu_memory_dead_owner_info",
        "gauge",
        "1 for each PID NVML lists on the GPU whose process is dead: state zombie (exited, "
        "not waited for) or gone (no longer in /proc, or its PID reused). The driver keeps "
        "listing it while a process it forked holds the device files; it has no "
        "gpu_process_* series, and its memory is in gpu_memory_unattributed_bytes.",
        "process",
        _dead_owners,
        "pid",
        "state",
    ),
    _d(
        "gpu_memory_holder_info",
        "gauge",
        "1 for each process that holds the GPU's device file /dev/nvidiaN open (what "
        "fuser -v finds, by the device the descriptor opens, char 195:N), scanned at most "
        f"once every {SCAN_EVERY_SECONDS:.0f} s while more "
        f"than {LEAKED_MEMORY_BYTES / 2**30:.0f} GiB of the GPU's "
        "memory has no live listed process; with the pod where Kubernetes attribution knows "
        f"it. At most {MAX_HOLDERS} per GPU, the oldest first (gpu_memory_holders counts "
        "them all). A process whose descriptors the exporter may not read is not here "
        "(gpu_exporter_holder_scan_denied_processes; gpu_memory_holder_candidate_info).",
        "process",
        _holders,
        "pid",
        "process",
        "user",
        "container_id",
        "pod_uid",
        "namespace",
        "pod",
        "container",
    ),
    _d(
        "gpu_memory_holders",
        "gauge",
        "Processes that hold the GPU's device file, all of them, at the last holder scan "
        f"(gpu_memory_holder_info names at most {MAX_HOLDERS}); present while the GPU is "
        "scanned for holders. 0 is no proof of none unless gpu_exporter_holder_scan_complete "
        "is 1.",
        "process",
        _holder_count(lambda a: a.holder_count),
    ),
    _d(
        "gpu_memory_holder_candidate_info",
        "gauge",
        "1 for each process that probably holds the GPU's device file: its descriptors "
        "could not be read (gpu_exporter_holder_scan_denied_processes), and it is in the "
        "process group or session of a dead owner NVML still lists (a crashed job's forked "
        f"workers keep them). A candidate, not a holder: check with fuser -v. At most "
        f"{MAX_HOLDERS} per GPU, the oldest first.",
        "process",
        _holder_candidates,
        "pid",
        "process",
        "user",
        "container_id",
        "pod_uid",
        "namespace",
        "pod",
        "container",
    ),
    _d(
        "gpu_memory_holder_candidates",
        "gauge",
        "Processes that probably hold the GPU's device file, all of them "
        f"(gpu_memory_holder_candidate_info names at most {MAX_HOLDERS}); present while the "
        "GPU is scanned for holders.",
        "process",
        _holder_count(lambda a: a.holder_candidate_count),
    ),
    _d(
        "gpu_memory_pattern",
        "gauge",
        "1 for what the GPU's memory is doing, judged every interval from its used memory "
        "and processes: not_full (its peak over "
        f"{th.MEMORY_PEAK_WINDOW_SECONDS:g} s at most {th.NEAR_OOM_MEMORY_RATIO:.0%} of the "
        "total); reserved (near full and held flat: a pool reserved up front, as TensorFlow, "
        "JAX and vLLM do; an out-of-memory inside it is invisible to the driver); pressure "
        f"(near the top and moving: {th.MEMORY_PRESSURE_DROPS} or more near-full drops, or "
        f"growth into the ceiling, within {th.MEMORY_PATTERN_WINDOW_SECONDS / 60:g} minutes); "
        f"sharing (two or more live processes holding {th.MEMORY_SHARE_RATIO:.0%} or more "
        "each, or a process that arrived while it was near full); unowned (near full with no "
        "live process: a dead owner's memory). Absent on a MIG GPU (its instances have "
        "gpu_mig_memory_pattern).",
        "memory",
        _gpu_pattern_state,
        "pattern",
    ),
    _d(
        "gpu_memory_near_full_drops_total",
        "counter",
        f"Drops of at least {th.MEMORY_DROP_RATIO:.0%} of the total from near full "
        f"(above {th.NEAR_OOM_MEMORY_RATIO:.0%}) that rose back near full within "
        f"{th.MEMORY_PEAK_WINDOW_SECONDS:g} s with the same processes, counted at the "
        "re-rise from every interval's reading (between scrapes too): a caching allocator "
        "that failed an allocation, freed its cache and retried.",
        "memory",
        _gpu_pattern(lambda p: p.near_full_drops),
    ),
    _d(
        "gpu_memory_flat_seconds",
        "gauge",
        "Seconds the GPU's used memory has stayed within "
        f"{th.MEMORY_FLAT_RATIO:.0%} of the total of where it settled.",
        "memory",
        _gpu_pattern(lambda p: p.flat_seconds),
    ),
    _d(
        "gpu_memory_likely_oom_exits_total",
        "counter",
        f"Processes holding at least {th.MEMORY_OOM_EXIT_RATIO:.0%} of the GPU's memory that "
        f"ended while it was more than {th.NEAR_OOM_MEMORY_RATIO:.0%} full, their memory "
        "freed: how a CUDA out-of-memory death looks from outside (the job's log says "
        "which). A dead owner whose memory stays held is not counted.",
        "memory",
        _gpu_pattern(lambda p: p.likely_oom_exits),
    ),
    _d(
        "gpu_memory_likely_oom_exit_info",
        "gauge",
        "1 for each process counted in gpu_memory_likely_oom_exits_total (or "
        "gpu_mig_memory_likely_oom_exits_total: gpu_instance set), for "
        f"{th.MEMORY_OOM_EXIT_HOLD_SECONDS / 60:g} minutes after it ended, at most "
        f"{MAX_RECENT_EXITS} per GPU or instance, named as its process series was.",
        "memory",
        _oom_exits,
        "gpu_instance",
        "pid",
        "process",
        "user",
        "container_id",
        "pod_uid",
        "namespace",
        "pod",
        "container",
    ),
    # Temperature and cooling.
    _d(
        "gpu_temperature_celsius",
        "gauge",
        "GPU core temperature in degrees Celsius.",
        "temperature",
        reading(_temperature, lambda t: t.gpu_celsius),
    ),
    _d(
        "gpu_memory_temperature_celsius",
        "gauge",
        "GPU memory (HBM) temperature in degrees Celsius.",
        "temperature",
        reading(_temperature, lambda t: t.memory_celsius),
    ),
    _d(
        "gpu_temperature_threshold_celsius",
        "gauge",
        "Temperature at which the GPU slows down or shuts down, in degrees Celsius.",
        "temperature",
        _thresholds,
        "threshold",
    ),
    _d(
        "gpu_temperature_tlimit_margin_celsius",
        "gauge",
        "Degrees Celsius the GPU is below its T.Limit, negative past it (nvidia-smi's "
        "GPU T.Limit Temp; Ada and later).",
        "temperature",
        reading(_temperature, lambda t: t.tlimit_margin_celsius),
    ),
    _d(
        "gpu_temperature_tlimit_threshold_celsius",
        "gauge",
        "T.Limit margin at which the GPU slows down, shuts down, or is held below its GPU or "
        "memory maximum operating temperature, in degrees Celsius relative to T.Limit "
        "(Ada and later; compare with gpu_temperature_tlimit_margin_celsius).",
        "temperature",
        _tlimit_thresholds,
        "threshold",
    ),
    _d(
        "gpu_fan_speed_ratio",
        "gauge",
        "Fan speed as a share of its maximum (0..1).",
        "temperature",
        reading(_temperature, lambda t: t.fan_speed_ratio),
    ),
    # Power.
    _d(
        "gpu_power_watts",
        "gauge",
        "Power draw in watts.",
        "power",
        reading(_power, lambda p: p.watts),
    ),
    _d(
        "gpu_power_limit_watts",
        "gauge",
        "Enforced power limit in watts, re-read once a minute.",
        "power",
        reading(_power, lambda p: p.limit_watts),
    ),
    _d(
        "gpu_energy_joules_total",
        "counter",
        "Energy consumed since the driver was loaded or the GPU last reset, in joules.",
        "power",
        reading(_power, lambda p: p.energy_joules),
    ),
    # Clocks.
    _d(
        "gpu_clock_hertz",
        "gauge",
        "Current clock frequency in hertz.",
        "clocks",
        labelled(_clocks, _clock_values),
        "clock",
    ),
    _d(
        "gpu_clock_max_hertz",
        "gauge",
        "Maximum clock frequency in hertz.",
        "clocks",
        _max_clocks,
        "clock",
    ),
    _d(
        "gpu_performance_state",
        "gauge",
        "Performance state (P-state) number, 0 is fastest.",
        "clocks",
        reading(_clocks, lambda c: c.performance_state),
    ),
    _d(
        "gpu_throttle_active",
        "gauge",
        "1 while the clocks-event (throttle) reason holds the clocks down, else 0.",
        "clocks",
        labelled(_clocks, _throttle),
        "reason",
    ),
    _d(
        "gpu_clock_event_seconds_total",
        "counter",
        "Seconds the clocks-event (throttle) reason held the clocks down since driver load "
        "or the last GPU reset, from the driver's own counters (R575 and later; nvidia-smi's "
        "Clocks Event Reasons Counters): a throttle shorter than the interval, which "
        "gpu_throttle_active may miss, is counted. A reason the driver does not count is "
        "absent.",
        "clocks",
        labelled(_clocks, _clock_events),
        "reason",
    ),
    # PCIe.
    _d(
        "gpu_pcie_link_generation",
        "gauge",
        "Current PCIe link generation; while at its maximum, re-read once a minute.",
        "pcie",
        reading(_pcie, lambda p: p.generation),
    ),
    _d(
        "gpu_pcie_link_max_generation",
        "gauge",
        "Maximum PCIe link generation.",
        "pcie",
        device(lambda d: d.static.pcie_max_generation if d.static else None),
    ),
    _d(
        "gpu_pcie_link_width",
        "gauge",
        "Current PCIe link width in lanes; while at its maximum, re-read once a minute.",
        "pcie",
        reading(_pcie, lambda p: p.width),
    ),
    _d(
        "gpu_pcie_link_max_width",
        "gauge",
        "Maximum PCIe link width in lanes.",
        "pcie",
        device(lambda d: d.static.pcie_max_width if d.static else None),
    ),
    _d(
        "gpu_pcie_replay_errors_total",
        "counter",
        "PCIe replay errors since driver load or the last GPU reset.",
        "pcie",
        reading(_pcie, lambda p: p.replay_errors),
    ),
    _d(
        "gpu_pcie_errors_total",
        "counter",
        "PCIe link errors the GPU counted since driver load or the last GPU reset, by type: "
        "correctable, nak_received, nak_sent, receiver_error, bad_tlp, bad_dllp, non_fatal, "
        "fatal, unsupported_request and lcrc. A type the driver does not count is absent.",
        "pcie",
        labelled(_pcie, _pcie_errors),
        "error_type",
    ),
    _d(
        "gpu_pcie_throughput_bytes_per_second",
        "gauge",
        "PCIe throughput over the driver's 20 ms window, in bytes per second.",
        "pcie-throughput",
        labelled(
            _pcie_throughput,
            lambda t: (("tx", t.tx_bytes_per_second), ("rx", t.rx_bytes_per_second)),
        ),
        "direction",
    ),
    _d(
        "gpu_pcie_bytes_total",
        "counter",
        "PCIe bytes moved (tx: from the GPU, rx: to it), from GPM's PCIe rates integrated "
        "over every interval.",
        "gpm",
        _activity_by(lambda a: a.pcie_bytes),
        "direction",
    ),
    # NVLink.
    _d(
        "gpu_nvlink_bytes_total",
        "counter",
        "NVLink data bytes moved over all links (tx: sent, rx: received), from GPM's NVLink "
        "rates integrated over every interval, or where GPM does not count them the "
        "driver's data counters summed over the active links, or where it has none "
        "NVLink5's byte counters (Blackwell and later) summed over the active links.",
        "nvlink",
        _activity_by(lambda a: a.nvlink_bytes),
        "direction",
    ),
    _d(
        "gpu_nvlink_link_up",
        "gauge",
        "1 while the NVLink link is active, else 0.",
        "nvlink",
        _nvlink_up,
        "link",
    ),
    LinkMetric(
        name="gpu_nvlink_errors_total",
        type="counter",
        help="NVLink errors since driver load or the last GPU reset, summed over the GPU's "
        "links (per link, with a `link` label, with --collector.nvlink.per-link). Before "
        "NVLink5: replay, recovery, crc_flit (flow control CRC) and crc_data (data CRC, "
        "re-read every minute). NVLink5 (Blackwell and later, where the driver answers "
        "these instead; nvml.h 13): malformed_packet (packets received malformed), "
        "buffer_overrun (received packets discarded on a buffer overrun), rx (packets "
        "received with errors), rx_remote (packets received with a stomp/EBP marker), "
        "rx_general (packets received with a header mismatch), local_link_integrity "
        "(times the local errors exceeded a threshold), tx_discard (error packets "
        "discarded on transmit), effective (errors summed over the packets) and symbol "
        "(errors in received symbols); these are read on the counters' cadence. A type "
        "is absent, never 0, where the driver counts it on no link; its sum is left out, "
        "never made smaller, while a link that counted it before does not answer (a "
        "failed read, a link down)." + SAMPLED,
        labels=("error_type",),
        collector="nvlink",
        extract=_nvlink_error_totals,
        per_link=_nvlink_errors_per_link,
    ),
    LinkMetric(
        name="gpu_nvlink_link_recovery_events_total",
        type="counter",
        help="NVLink5 link recoveries (a link that went from up to recovery) since driver "
        "load or the last GPU reset, summed over the GPU's links (per link, with a `link` "
        "label, with --collector.nvlink.per-link), by result: successful (the link came "
        "back up), failed (the link was declared down) and all (the driver's own count of "
        "every recovery, whatever its result: never sum over result). Blackwell and later "
        "(nvml.h 13's NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*); absent where the driver "
        "does not count them. Read on the counters' cadence." + SAMPLED,
        labels=("result",),
        collector="nvlink",
        extract=_nvlink_recovery_totals,
        per_link=_nvlink_recovery_per_link,
    ),
    LinkMetric(
        name="gpu_nvlink_ber",
        type="gauge",
        help="NVLink5 bit error rate (errors per bit) as the driver measures it, by "
        "ber_type: effective (of the effective errors) and symbol (of the symbol errors); "
        "per GPU the worst (highest) of its links, per link with a `link` label with "
        "--collector.nvlink.per-link. nvml.h 13 gives a mantissa and an exponent, read as "
        "mantissa x 10^-exponent. Blackwell and later; absent where the driver does not "
        "answer. Read on the counters' cadence." + SAMPLED,
        labels=("ber_type",),
        collector="nvlink",
        extract=_nvlink_worst_ber,
        per_link=_nvlink_ber_per_link,
    ),
    # ECC and memory health.
    _d(
        "gpu_ecc_errors_total",
        "counter",
        "ECC errors since driver load (volatile counters).",
        "ecc",
        labelled(
            _ecc,
            lambda e: (("corrected", e.corrected_errors), ("uncorrected", e.uncorrected_errors)),
        ),
        "error_type",
    ),
    _d(
        "gpu_retired_pages",
        "gauge",
        "Framebuffer pages retired, by cause.",
        "ecc",
        labelled(
            _ecc,
            lambda e: (
                ("single_bit", e.retired_pages_single_bit),
                ("double_bit", e.retired_pages_double_bit),
            ),
        ),
        "cause",
    ),
    _d(
        "gpu_retired_pages_pending",
        "gauge",
        "1 while a page retirement waits for the next driver reload, else 0.",
        "ecc",
        reading(_ecc, lambda e: e.retired_pages_pending),
    ),
    _d(
        "gpu_remapped_rows",
        "gauge",
        "Memory rows remapped, by error type.",
        "ecc",
        labelled(
            _ecc,
            lambda e: (
                ("correctable", e.remapped_rows_correctable),
                ("uncorrectable", e.remapped_rows_uncorrectable),
            ),
        ),
        "error_type",
    ),
    _d(
        "gpu_remapped_rows_pending",
        "gauge",
        "1 while a row remapping waits for a GPU reset, else 0.",
        "ecc",
        reading(_ecc, lambda e: e.remapped_rows_pending),
    ),
    _d(
        "gpu_remapped_rows_failed",
        "gauge",
        "1 when a row remapping has failed (the GPU needs service), else 0.",
        "ecc",
        reading(_ecc, lambda e: e.remapped_rows_failed),
    ),
    # The driver's verdicts, and the one recommendation drawn from every signal.
    _d(
        "gpu_recommended_action",
        "gauge",
        "1 for the one thing to do with the GPU now: none, restart_workload, reset_gpu, "
        "drain, reboot_node or inspect_hardware; reason names the signal that decided it "
        "(the driver's recovery action, an Xid of the last hour with NVIDIA's Xid catalog "
        "action, the row remapper, page retirement, uncorrectable ECC, the NVLink fabric, "
        "a lost GPU). The strongest action wins; docs/actions.md lists every rule and its "
        "source. Absent where none of these signals could be read.",
        "health",
        _recommended_action,
        "action",
        "reason",
        when_down=True,
    ),
    _d(
        "gpu_recovery_action",
        "gauge",
        "1 for the action the driver says the GPU needs now (nvml.h's "
        "nvmlDeviceGpuRecoveryAction_t): none, gpu_reset, node_reboot, drain_p2p, "
        "drain_and_reset, recover_imex_domain, bus_reset or system_reboot, or the code "
        "itself for one nvml.h does not name. Absent where the driver does not say "
        "(before R570, or not supported).",
        "health",
        _recovery_action,
        "action",
    ),
    _d(
        "gpu_fabric_state",
        "gauge",
        "1 for the state of the GPU's registration in the NVLink fabric (NVSwitch systems): "
        "not_started, in_progress or completed; status is the completed probe's result, "
        "success or the NVML error it ended with (then the GPU is not in the fabric), "
        "empty before completion. Absent where the GPU has no fabric. Re-read every minute.",
        "health",
        _fabric_state,
        "state",
        "status",
    ),
    _d(
        "gpu_fabric_info",
        "gauge",
        "The NVLink fabric clique and cluster the GPU registered in; 1, once its probe "
        "completed with success. Re-read every minute.",
        "health",
        _fabric_info,
        "clique_id",
        "cluster_uuid",
    ),
    _d(
        "gpu_platform_info",
        "gauge",
        "Where the GPU sits in its rack, from nvmlDeviceGetPlatformInfo (Blackwell and "
        "later, R570+): chassis_serial (the chassis, i.e. the rack), slot (in the chassis, "
        "switch trays counted), tray (among the compute trays), host_id (the node in the "
        "slot), peer_type (the platform's NVLink peer type code) and module_id (the GPU in "
        "the node); always 1. Join with * on(uuid) group_left(chassis_serial, tray) "
        "gpu_platform_info. Absent where the driver does not support it. Re-read every "
        "minute.",
        None,
        _platform_info,
        "chassis_serial",
        "slot",
        "tray",
        "host_id",
        "peer_type",
        "module_id",
        when_down=True,
    ),
    _d(
        "gpu_fabric_healthy",
        "gauge",
        "1 while the driver's NVLink fabric health summary is healthy, 0 while it is "
        "unhealthy or limited_capacity (summary says which). Absent where the driver gives "
        "no summary (before R580). Re-read every minute.",
        "health",
        _fabric_healthy,
        "summary",
    ),
    _d(
        "gpu_fabric_health_condition",
        "gauge",
        "1 while the NVLink fabric health condition holds, 0 while it does not: "
        "degraded_bandwidth, route_recovery (in progress), route_unhealthy, "
        "access_timeout_recovery (in progress) and incorrect_configuration, whose fault "
        "names the misconfiguration (insufficient_nvlinks, no_partition, ...). A condition "
        "the driver does not report is absent. Re-read every minute.",
        "health",
        _fabric_conditions,
        "condition",
        "fault",
    ),
    # Modes.
    _d(
        "gpu_persistence_mode",
        "gauge",
        "1 when persistence mode is on, re-read once a minute.",
        "modes",
        reading(_modes, lambda m: m.persistence),
    ),
    _d(
        "gpu_mig_mode",
        "gauge",
        "1 when MIG mode is on, re-read once a minute.",
        "modes",
        reading(_modes, lambda m: m.mig),
    ),
    _d(
        "gpu_ecc_mode",
        "gauge",
        "1 when ECC is on.",
        "modes",
        reading(_modes, lambda m: m.ecc),
    ),
    # MIG.
    _d(
        "gpu_mig_info",
        "gauge",
        "One per MIG device (a compute instance of a GPU instance); always 1. profile is "
        "the MIG profile, e.g. 3g.40gb. A MIG device destroyed and made again shows its "
        "new mig_uuid within one interval.",
        "mig",
        _mig_info,
        "gpu_instance",
        "compute_instance",
        "profile",
        "mig_uuid",
    ),
    _d(
        "gpu_mig_memory_total_bytes",
        "gauge",
        "Memory of the MIG GPU instance in bytes.",
        "mig",
        _mig_memory(lambda i: i.memory_total_bytes),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_memory_used_bytes",
        "gauge",
        "Used memory of the MIG GPU instance in bytes.",
        "mig",
        _mig_memory(lambda i: i.memory_used_bytes),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_memory_pattern",
        "gauge",
        "As gpu_memory_pattern, for the MIG GPU instance: 1 for not_full, reserved, "
        "pressure, sharing or unowned.",
        "mig",
        _mig_pattern_state,
        "gpu_instance",
        "pattern",
    ),
    _d(
        "gpu_mig_memory_near_full_drops_total",
        "counter",
        "As gpu_memory_near_full_drops_total, for the MIG GPU instance.",
        "mig",
        _mig_pattern(lambda p: p.near_full_drops),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_memory_flat_seconds",
        "gauge",
        "As gpu_memory_flat_seconds, for the MIG GPU instance.",
        "mig",
        _mig_pattern(lambda p: p.flat_seconds),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_memory_likely_oom_exits_total",
        "counter",
        "As gpu_memory_likely_oom_exits_total, for the MIG GPU instance.",
        "mig",
        _mig_pattern(lambda p: p.likely_oom_exits),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_graphics_engine_active_seconds_total",
        "counter",
        "As gpu_graphics_engine_active_seconds_total, for the MIG GPU instance (GPM).",
        "mig",
        _mig_activity(lambda a: a.graphics_engine_seconds),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_sm_active_seconds_total",
        "counter",
        "As gpu_sm_active_seconds_total, for the MIG GPU instance (GPM).",
        "mig",
        _mig_activity(lambda a: a.sm_seconds),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_sm_occupancy_seconds_total",
        "counter",
        "As gpu_sm_occupancy_seconds_total, for the MIG GPU instance (GPM).",
        "mig",
        _mig_activity(lambda a: a.sm_occupancy_seconds),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_dram_active_seconds_total",
        "counter",
        "As gpu_dram_active_seconds_total, for the MIG GPU instance (GPM).",
        "mig",
        _mig_activity(lambda a: a.dram_seconds),
        "gpu_instance",
    ),
    _d(
        "gpu_mig_pipe_active_seconds_total",
        "counter",
        "As gpu_pipe_active_seconds_total, for the MIG GPU instance (GPM).",
        "mig",
        _mig_pipes,
        "gpu_instance",
        "pipe",
    ),
    # Xid errors.
    DeviceMetric(
        name="gpu_xid_errors_total",
        type="counter",
        help="Xid errors since boot, read from the kernel log (--collector.xid.kernel-log); "
        "where it cannot be read (gpu_exporter_xid_kernel_log_up 0), those NVML's event "
        "API reported since the exporter started. Each Xid is counted once.",
        labels=("xid",),
        collector="xid",
        extract=_xid_counts,
        when_down=True,
    ),
    DeviceMetric(
        name="gpu_last_xid_timestamp_seconds",
        type="gauge",
        help="Unix time of the last Xid error on this GPU (from the kernel log: the time it "
        "was logged, within the kernel clock's drift for those logged before the exporter "
        "started).",
        collector="xid",
        extract=_xid_last,
        when_down=True,
    ),
    DeviceMetric(
        name="gpu_xid_error_timestamp_seconds",
        type="gauge",
        help="Unix time of the last Xid error of this code on this GPU, as "
        "gpu_last_xid_timestamp_seconds: alert on time() minus this, which an exporter "
        "restart that counts old Xids again does not change.",
        labels=("xid",),
        collector="xid",
        extract=_xid_times,
        when_down=True,
    ),
    ExporterMetric(
        name="gpu_xid_errors_unknown_gpu_total",
        type="counter",
        help="Xid errors since boot in the kernel log for a PCI bus id that no GPU NVML "
        "reports has (a GPU lost before the exporter enumerated it, or NVML down), by that "
        "bus id in NVML's form (gpu_info's pci_bus_id).",
        labels=("pci_bus_id", "xid"),
        collector="xid",
        extract=_xid_unattributed,
    ),
    ExporterMetric(
        name="gpu_nvswitch_sxid_errors_total",
        type="counter",
        help="NVSwitch SXid errors since boot in the kernel log, by switch (N of "
        "nvidia-nvswitchN) and SXid code.",
        labels=("nvswitch", "sxid"),
        collector="xid",
        extract=_sxids,
    ),
    # Processes.
    _d(
        "gpu_processes",
        "gauge",
        "Number of live processes holding a context on this GPU; a dead owner NVML still "
        "lists (gpu_memory_dead_owner_info) is not counted.",
        "process",
        device(_attribution_count),
    ),
    _d(
        "gpu_allocation_info",
        "gauge",
        "1 for each GPU (gpu_instance empty) or MIG GPU instance the kubelet allocated to a "
        "container, from its pod-resources socket: by a device plugin, or by a DRA claim of "
        "gpu.nvidia.com (dra_claim, in the pod's namespace, and the driver's dra_device "
        "name); time-sliced replicas of one GPU, or a claim shared by containers, count once "
        "per container.",
        "kubernetes",
        _allocations,
        *ALLOCATION_LABELS,
    ),
    _d(
        "gpu_allocation_weight",
        "gauge",
        "The share of the physical GPU each allocation of gpu_allocation_info holds (0..1; "
        "per GPU they add up to 1 at most): 1 for a whole GPU; for time-sliced replicas the "
        "replicas the container holds over those the device plugin advertises for the GPU "
        "(unheld ones are nobody's), or 1/n for each of n containers on it where the kubelet "
        "does not say (gpu_exporter_kubernetes_allocatable_up 0) or for a shared claim; for "
        "a MIG GPU instance the larger of its compute-slice and memory share "
        "(docs/chargeback.md). The chargeback rules charge allocated GPU-seconds by it.",
        "kubernetes",
        _allocation_weights,
        *ALLOCATION_LABELS,
    ),
    _d(
        "gpu_unallocated_processes",
        "gauge",
        "Processes of a container on a GPU (or MIG GPU instance) the kubelet did not allocate "
        "to it: NVIDIA_VISIBLE_DEVICES=all, a privileged container, or another pod's GPU; "
        "without namespace, pod and container, processes outside every pod (started on the "
        "node; those --kubernetes.expected-host-processes names are left out). The "
        "scheduler counts that GPU as free or as someone else's.",
        "kubernetes",
        _unallocated_use,
        "gpu_instance",
        "namespace",
        "pod",
        "container",
    ),
    _p(
        "gpu_process_memory_used_bytes",
        "gauge",
        "GPU memory used by the process, in bytes. One series per process, as nvidia-smi "
        "lists it: context is compute, graphics or compute+graphics (nvidia-smi's C, G, C+G), "
        "and a C+G process's memory is counted once.",
        lambda p: p.memory_used_bytes,
    ),
    _p(
        "gpu_process_utilization_ratio",
        "gauge",
        "Share of the GPU's SM time the process used in the driver's newest per-process "
        "entry, which averages it since the exporter's previous read (at least one driver "
        "sample period) (0..1); 0 when it ran no kernel.",
        lambda p: p.sm_ratio,
    ),
    _p(
        "gpu_process_sm_seconds_total",
        "counter",
        "SM seconds the process used since the exporter first saw it: each of the driver's "
        "per-process entries (its SM share since the previous read, with its own timestamp) "
        "times the time it covers, as gpu_busy_seconds_total integrates the GPU's buffer. "
        "Its rate over any window is the process's average share of the GPU's SM time. A "
        "reused PID starts again at 0; left out under MIG and for the other roll-up.",
        lambda p: p.sm_seconds,
    ),
    _p(
        "gpu_process_memory_controller_utilization_ratio",
        "gauge",
        "Share of the memory controller's time the process used in the driver's newest "
        "per-process entry, which averages it since the exporter's previous read (0..1).",
        lambda p: p.memory_controller_ratio,
    ),
    _p(
        "gpu_process_cpu_seconds_total",
        "counter",
        "CPU seconds (user + system) of the process and all its descendants, exited ones it "
        "waited for included, so DataLoader workers count; read before each scrape.",
        lambda p: p.cpu_seconds,
    ),
    _p(
        "gpu_process_workers",
        "gauge",
        "Number of live descendant processes (e.g. DataLoader).",
        lambda p: p.workers,
    ),
    _p(
        "gpu_process_resident_memory_bytes",
        "gauge",
        "Resident host memory of the process itself (not its descendants), in bytes.",
        lambda p: p.resident_memory_bytes,
    ),
    _p(
        "gpu_process_start_time_seconds",
        "gauge",
        "Start time of the process, Unix seconds.",
        lambda p: p.start_time_seconds,
    ),
    # Host context.
    _h(
        "gpu_host_cpu_busy_seconds_total",
        "counter",
        "Host CPU seconds not idle and not waiting on I/O, summed over all CPUs.",
        lambda h: h.cpu_busy_seconds,
    ),
    _h(
        "gpu_host_cpu_iowait_seconds_total",
        "counter",
        "Host CPU seconds idle while waiting on I/O, summed over all CPUs.",
        lambda h: h.cpu_iowait_seconds,
    ),
    _h("gpu_host_cpus", "gauge", "Number of logical CPUs on the host.", lambda h: h.cpus),
    _h(
        "gpu_host_memory_total_bytes",
        "gauge",
        "Host memory in bytes.",
        lambda h: h.memory_total_bytes,
    ),
    _h(
        "gpu_host_memory_available_bytes",
        "gauge",
        "Host memory available to new processes without swapping, in bytes.",
        lambda h: h.memory_available_bytes,
    ),
    _h("gpu_host_load1", "gauge", "Host 1-minute load average.", lambda h: h.load1),
    # The exporter itself.
    _x(
        "gpu_exporter_build_info",
        "gauge",
        "Build information; always 1. backend is nvml or simulated.",
        lambda s: (((__version__, s.backend), 1),),
        "version",
        "backend",
    ),
    _x(
        "gpu_exporter_nvml_up",
        "gauge",
        "1 while NVML is initialised and answering, else 0.",
        lambda s: one(s.nvml_up),
    ),
    _x(
        "gpu_exporter_gpus",
        "gauge",
        "Number of GPUs NVML reports.",
        lambda s: one(s.gpus if s.nvml_up else None),
    ),
    _x(
        "gpu_exporter_last_sample_timestamp_seconds",
        "gauge",
        "Unix time the last sample finished.",
        lambda s: one(s.timestamp_seconds),
    ),
    _x(
        "gpu_exporter_sample_duration_seconds",
        "gauge",
        "Seconds the last sample took.",
        lambda s: one(s.duration_seconds),
    ),
    _x(
        "gpu_exporter_samples_total",
        "counter",
        "Samples taken since the exporter started.",
        lambda s: one(s.samples_total),
    ),
    _x(
        "gpu_exporter_nvml_errors_total",
        "counter",
        "NVML calls that failed with an unexpected error, by function and error.",
        _nvml_errors,
        "function",
        "error",
    ),
    _x(
        "gpu_exporter_nvml_calls_total",
        "counter",
        "NVML calls the exporter made, by function: every entry point it calls, each time.",
        _nvml_calls,
        "function",
    ),
    _x(
        "gpu_exporter_nvml_call_seconds_total",
        "counter",
        "Seconds spent inside NVML calls, by function: wall time from entry to return, which "
        "a driver polling its firmware spends on the host's CPU (nvmlEventSetWait_v2 waits "
        "for events by design). rate() of it is what the driver costs the exporter.",
        _nvml_call_seconds,
        "function",
    ),
    _x(
        "gpu_exporter_nvml_init_errors_total",
        "counter",
        "Failed NVML initialisations, by error.",
        _nvml_init_errors,
        "error",
    ),
    ExporterMetric(
        name="gpu_fabric_daemon_required",
        type="gauge",
        help="1 where this node's GPUs need the fabric daemon, 0 where none does: "
        "nv-fabricmanager (NVIDIA Fabric Manager) for a GPU registered in an NVSwitch "
        "fabric whose switches are on this node's PCI bus (HGX and DGX boards, bare metal or "
        "full pass-through; not a VM given a few of a board's GPUs, whose Fabric Manager runs "
        "in the hypervisor's service VM), nvidia-imex (the IMEX daemon) for a "
        "GB200 or GB300 GPU registered in a multi-node NVLink fabric (NVL racks). Decided "
        "from each GPU's fabric state and name (docs/hardware-faults.md). Absent while NVML "
        "is down." + SAMPLED,
        labels=("daemon",),
        collector="health",
        extract=_fabric_daemons_required,
    ),
    ExporterMetric(
        name="gpu_fabric_daemon_up",
        type="gauge",
        help="1 while a process of the fabric daemon's program runs on the node, 0 while "
        "none does: looked for in the host's /proc (a process whose command name and "
        "program are nv-fabricmanager or nvidia-imex), only where the GPUs need it "
        "(gpu_fabric_daemon_required). Absent where /proc is not the host's PID namespace "
        "(a container without hostPID) or the GPUs do not need it. Read every 15 s.",
        labels=("daemon",),
        collector="health",
        extract=_fabric_daemons_up,
    ),
    ExporterMetric(
        name="gpu_exporter_host_pid_namespace",
        type="gauge",
        help="1 when /proc shows the host's PID namespace, whose PIDs NVML reports, so GPU "
        "processes get their names, users, containers and CPU; 0 when it does not (a "
        "container without --pid=host or hostPID: true, or /proc mounted with hidepid): "
        "they are exported with their PID and GPU memory only.",
        collector="process",
        extract=lambda s: one(s.host_pid_namespace),
    ),
    ExporterMetric(
        name="gpu_exporter_holder_scan_denied_processes",
        type="gauge",
        help="Processes whose descriptors the last scan for the holders of the GPUs' device "
        "files could not read (EACCES): another process's /proc/PID/fd needs its uid and "
        "all its capabilities, or CAP_SYS_PTRACE, so as shipped (uid 0 without "
        "capabilities) nearly every root process. Holders among them are not in "
        "gpu_memory_holder_info: run sudo fuser -v /dev/nvidia* instead.",
        collector="process",
        extract=_holder_scan(lambda h: h.denied_processes),
    ),
    ExporterMetric(
        name="gpu_exporter_holder_scan_complete",
        type="gauge",
        help="1 when the last scan for the holders of the GPUs' device files read every "
        "process's descriptors, within its budget and denied none: only then does no "
        "gpu_memory_holder_info series mean no process holds the device file; 0 otherwise "
        "(gpu_exporter_holder_scan_incomplete says why).",
        collector="process",
        extract=_holder_scan(lambda h: int(not h.incomplete_reasons)),
    ),
    ExporterMetric(
        name="gpu_exporter_holder_scan_incomplete",
        type="gauge",
        help="1 for each reason the last holder scan did not read every process: "
        f"reason budget (it stopped at its {SCAN_BUDGET_SECONDS:.0f} s budget), denied "
        "(some processes' descriptors were refused: another process's /proc/PID/fd needs "
        "its uid and all its capabilities, or CAP_SYS_PTRACE); 0 for a reason that does not "
        "apply.",
        collector="process",
        labels=("reason",),
        extract=_holder_scan_incomplete,
    ),
    ExporterMetric(
        name="gpu_exporter_holder_scan_duration_seconds",
        type="gauge",
        help="Wall time of the last scan for the holders of the GPUs' device files (its own "
        f"thread, never on the sampling path; it stops at a budget of {SCAN_BUDGET_SECONDS:.0f} "
        "s).",
        collector="process",
        extract=_holder_scan(lambda h: h.duration_seconds),
    ),
    ExporterMetric(
        name="gpu_exporter_kubernetes_up",
        type="gauge",
        help="1 when the kubelet's pod-resources socket answered and its NVIDIA device IDs "
        "(DRA device names included) match this node's GPUs; 0 when not, with the cause in the log "
        "and on the live page (socket not mounted, permission denied, API version unsupported, "
        "IDs matching no GPU). While it is 0 after a failed read, the allocation the kubelet "
        "last gave is still served, for up to --kubernetes.allocation-hold (5m): a kubelet "
        "restart is no change of owner.",
        collector="kubernetes",
        extract=lambda s: one(s.kubernetes.up if s.kubernetes is not None else None),
    ),
    ExporterMetric(
        name="gpu_exporter_kubernetes_allocatable_up",
        type="gauge",
        help="1 when the kubelet said which devices the device plugins advertise "
        "(GetAllocatableResources: Kubernetes 1.23 and later, or 1.21 with its feature "
        "gate), so a time-sliced GPU's gpu_allocation_weight is the replicas each container "
        "holds of those advertised; 0 when it did not (the cause in the log): each of the n "
        "containers on a time-sliced GPU then weighs 1/n. Absent while no allocation is known.",
        collector="kubernetes",
        extract=lambda s: one(s.kubernetes.allocatable_known if s.kubernetes is not None else None),
    ),
    _kernel_log(
        "gpu_exporter_xid_kernel_log_up",
        "gauge",
        "1 while the kernel log (--collector.xid.kernel-log) is read and has given a record "
        "in /dev/kmsg's format, so Xids count since boot; 0 when it could not be read "
        "(permission denied: CAP_SYSLOG where kernel.dmesg_restrict is 1; absent; a "
        "character device other than /dev/kmsg; lines in no record's format; the cause is "
        "in the log) or has given no record yet (an empty file, a FIFO no one writes): Xids "
        "are then counted from NVML's events. Absent when no kernel log is configured.",
        lambda k: k.up,
    ),
    _kernel_log(
        "gpu_exporter_xid_kernel_log_backlog_read",
        "gauge",
        "1 once the records logged before the exporter started have been read (to the "
        f"log's end, or {MAX_BACKLOG_BYTES >> 20} MiB of them): until then no Xid or SXid "
        "count from the kernel log is served, so the first count is the whole count since boot.",
        lambda k: k.backlog_read,
    ),
    _kernel_log(
        "gpu_exporter_xid_kernel_log_lost_records_total",
        "counter",
        "Kernel-log records overwritten before they were read (the ring wrapped, before "
        "the exporter started or while it read): Xids among them are not counted.",
        lambda k: k.lost_records,
    ),
    _kernel_log(
        "gpu_exporter_xid_kernel_log_malformed_records_total",
        "counter",
        "Kernel-log records that could not be read: a header not in /dev/kmsg's format "
        "(SEQ or USEC above 2^64-1 included), a line cut short at the end of a FIFO or "
        "truncated file, or an Xid or SXid line without its PCI address or code.",
        lambda k: k.malformed_records,
    ),
    _kernel_log(
        "gpu_exporter_xid_kernel_log_userspace_records_total",
        "counter",
        "Kernel-log records that read as an Xid or SXid line but were written by a "
        "program (syslog facility 1 or more: logger with journald's ForwardToKMsg, a "
        "unit's StandardOutput=kmsg, a container given /dev/kmsg read-write), not by the "
        "driver (facility 0): never counted as Xids. A rise is a program quoting the "
        "driver, or spoofing it.",
        lambda k: k.userspace_records,
    ),
    _kernel_log(
        "gpu_exporter_xid_kernel_log_seq_resets_total",
        "counter",
        "Times the kernel-log records' SEQ went back, or leapt further than a ring holds "
        "without records being overwritten (a file holding two boots, a record not the "
        "kernel's): reading went on from that record, and nothing was skipped.",
        lambda k: k.seq_resets,
    ),
    _kernel_log(
        "gpu_exporter_xid_kernel_log_capped_records_total",
        "counter",
        "Xid and SXid records from the kernel log not counted because they would pass a "
        f"cap on the labels: {MAX_KEYS} PCI bus ids and {MAX_KEYS} NVSwitches, "
        f"{MAX_CODES_PER_KEY} codes on one, {MAX_PAIRS:,} (bus id, code) and {MAX_PAIRS:,} "
        "(NVSwitch, code) series.",
        lambda k: k.capped_records,
    ),
    _x(
        "gpu_exporter_stage_duration_seconds",
        "gauge",
        "Seconds each stage of the last sample took: devices (NVML reads), processes "
        "(attribution), host, xid (merging the kernel log's and the listener's counts) and "
        "render (publishing the previous sample: its exposition is written then only when "
        "a scrape is expected before the next sample, else by the first scrape). Stages of "
        "collectors that are off are absent.",
        _stages_duration,
        "stage",
    ),
    _x(
        "gpu_exporter_stage_success",
        "gauge",
        "1 when the stage of the last sample succeeded, else 0: devices 0 while NVML or any "
        "GPU is down, host 0 when host readings failed, xid 0 while neither the kernel log is "
        "read nor an NVML event set listened to (NVML down, or events unsupported).",
        _stages_success,
        "stage",
    ),
)

METRICS_BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}


# How often each series is read ------------------------------------------------------
# The "read" column of docs/reference.md. The exporter samples every --collect.interval,
# but not every value is read from the driver (or /proc) at every sample: a value that
# cannot change is read once, a setting on the slow cadence, a dear counter as its cost
# allows (issue 42: the driver's calls have a price). A series whose value was not read
# in a sample serves the value last read, the source's own at that moment; one that
# failed to read is left out. A metric not named here is read at every sample.

EVERY_INTERVAL = "every interval"
_SLOW = f"every {SLOW_REFRESH_SECONDS:g} s"
_COUNTERS = (
    f"as their measured cost allows, at least every {COUNTER_MAX_AGE_SECONDS:g} s (every 30 s "
    "on an H200, every interval where the driver answers them in microseconds)"
)
_BUFFER = (
    f"the driver's sample buffer, read before it wraps ({SAFETY:g} of its measured span, "
    "~12 s on an H100) while the GPU holds a process or a context (used memory above its "
    "idle baseline), every interval while the live page is open, not while it holds neither "
    "and reads idle, nor while GPM saw its engine (graphics, DRAM) idle all interval and "
    "the reading agrees"
)
_PROC_COUNTERS = (
    f"when a scrape is expected and for the live page, at least every {COUNTER_READS_MAX_AGE:g} s"
)
_IDENTITY = "once per NVML initialisation"
_LIMITS = f"with the limits, {_SLOW}"

READ: dict[str, str] = {
    "gpu_info": _IDENTITY,
    "gpu_busy_seconds_total": _BUFFER,
    "gpu_busy_uncovered_seconds_total": _BUFFER,
    "gpu_memory_controller_busy_seconds_total": _BUFFER,
    "gpu_memory_controller_busy_uncovered_seconds_total": _BUFFER,
    "gpu_encoder_utilization_ratio": f"every interval while busy, {_SLOW} while 0",
    "gpu_decoder_utilization_ratio": f"every interval while busy, {_SLOW} while 0",
    "gpu_temperature_threshold_celsius": _LIMITS,
    "gpu_temperature_tlimit_threshold_celsius": _LIMITS,
    "gpu_temperature_tlimit_margin_celsius": (
        f"every interval the GPU temperature moves, else {_SLOW}"
    ),
    "gpu_power_limit_watts": _SLOW,
    "gpu_energy_joules_total": _COUNTERS,
    "gpu_clock_max_hertz": _LIMITS,
    "gpu_clock_event_seconds_total": _COUNTERS,
    "gpu_pcie_link_generation": f"every interval below its maximum, {_SLOW} at it",
    "gpu_pcie_link_width": f"every interval below its maximum, {_SLOW} at it",
    "gpu_pcie_link_max_generation": _LIMITS,
    "gpu_pcie_link_max_width": _LIMITS,
    "gpu_pcie_replay_errors_total": _COUNTERS,
    "gpu_pcie_errors_total": _COUNTERS,
    "gpu_nvlink_errors_total": (
        f"every interval from the link's fields; the data-CRC counter {_SLOW}; NVLink5's "
        f"error counters {_COUNTERS}"
    ),
    "gpu_ecc_errors_total": _COUNTERS,
    "gpu_retired_pages": _COUNTERS,
    "gpu_retired_pages_pending": _COUNTERS,
    "gpu_remapped_rows": _COUNTERS,
    "gpu_remapped_rows_pending": _COUNTERS,
    "gpu_remapped_rows_failed": _COUNTERS,
    "gpu_nvlink_link_recovery_events_total": _COUNTERS,
    "gpu_nvlink_ber": _COUNTERS,
    "gpu_platform_info": _LIMITS,
    "gpu_fabric_daemon_up": "every 15 s, from the host's /proc, while a GPU needs the daemon",
    "gpu_fabric_state": f"{_SLOW}, and at once after a failed read",
    "gpu_fabric_info": f"{_SLOW}, and at once after a failed read",
    "gpu_fabric_healthy": f"{_SLOW}, and at once after a failed read",
    "gpu_fabric_health_condition": f"{_SLOW}, and at once after a failed read",
    "gpu_persistence_mode": _SLOW,
    "gpu_mig_mode": _SLOW,
    "gpu_mig_info": f"{_SLOW}, and at the interval a change is seen",
    "gpu_xid_errors_total": "as the driver's events or kernel-log records come",
    "gpu_last_xid_timestamp_seconds": "as the driver's events or kernel-log records come",
    "gpu_xid_error_timestamp_seconds": "as the driver's events or kernel-log records come",
    "gpu_xid_errors_unknown_gpu_total": "as kernel-log records come",
    "gpu_nvswitch_sxid_errors_total": "as kernel-log records come",
    **{
        f"gpu_exporter_xid_kernel_log_{name}": "as kernel-log records come"
        for name in (
            "lost_records_total",
            "malformed_records_total",
            "userspace_records_total",
            "seq_resets_total",
            "capped_records_total",
        )
    },
    "gpu_memory_holder_info": (
        "a /proc scan on its own thread, at most once a minute while a GPU has more than "
        f"{LEAKED_MEMORY_BYTES / 2**30:g} GiB that no live process accounts for"
    ),
    "gpu_exporter_holder_scan_denied_processes": "with each holder scan (see above)",
    "gpu_exporter_holder_scan_complete": "with each holder scan (see above)",
    "gpu_exporter_holder_scan_incomplete": "with each holder scan (see above)",
    "gpu_memory_holders": "with each holder scan (see above)",
    "gpu_memory_holder_candidate_info": "with each holder scan (see above)",
    "gpu_memory_holder_candidates": "with each holder scan (see above)",
    "gpu_exporter_holder_scan_duration_seconds": "with each holder scan (see above)",
    "gpu_process_cpu_seconds_total": _PROC_COUNTERS,
    "gpu_host_cpu_busy_seconds_total": _PROC_COUNTERS,
    "gpu_host_cpu_iowait_seconds_total": _PROC_COUNTERS,
    "gpu_exporter_build_info": "at start",
}
"""Metric name -> how often its value is read, where that is not every interval."""


def read_cadence(name: str) -> str:
    """How often the series of metric `name` are read from their source."""
    return READ.get(name, EVERY_INTERVAL)
