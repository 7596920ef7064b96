"""The dcgm-exporter name table: `--compat.dcgm` serves the same Snapshot under DCGM's names.

Each entry is one row of dcgm-exporter's default counter set (`etc/default-counters.csv`)
plus the widely used `DCGM_FI_PROF_SM_ACTIVE` and `DCGM_FI_PROF_SM_OCCUPANCY`: DCGM's
name, the Prometheus type that file gives it, DCGM's unit, and where its value comes
from in the model. Rendered in the same single render per sample as the `gpu_` families
(`metrics.render`), never by a second sampler.

What is kept from dcgm-exporter, so that its dashboards and alert rules work unchanged:

- names exactly as it serves them in the text format: counters without `_total`;
- its labels: `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidiaN`), `modelName`,
  `Hostname` and `DCGM_FI_DRIVER_VERSION` on every series; on MIG GPU instances also
  `GPU_I_ID` and `GPU_I_PROFILE`, with `gpu`, `UUID` and `device` the parent's;
- with the kubernetes collector, `pod`, `namespace` and `container` of the container the
  kubelet allocated the GPU (or MIG GPU instance) to, empty when none. A time-sliced GPU
  allocated to several containers names the first (by namespace, pod, container);
  dcgm-exporter without `--kubernetes-virtual-gpus` names one too (the last the kubelet
  lists). `gpu_allocation_info` lists them all. A device of a DRA claim adds
  dcgm-exporter's `dra_claim_name`, `dra_claim_namespace`, `dra_driver_name`,
  `dra_pool_name`, `dra_device_name`, and on a MIG instance `dra_mig_profile` and
  `dra_mig_device_uuid` (dcgm-exporter puts a MIG claim's labels on the parent GPU's own
  series, by its UUID, not on the instance's; here they are on the instance's, as `pod`
  is).

What is not: a series the device cannot answer is absent, never blank or 0. In the
OpenMetrics format, where a counter's samples must end in `_total`, DCGM's counters are
typed `unknown`, so their names stay the same (`metrics.text.write_openmetrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpu_exporter.metrics.specs import (
    LabelValues,
    MetricSpec,
    MetricType,
    Number,
    RenderOptions,
    Series,
)
from gpu_exporter.model import (
    DeviceReading,
    DeviceSample,
    DraDevice,
    GpmReading,
    MigDevice,
    MigInstanceReading,
    Snapshot,
)

DCGM_LABELS: LabelValues = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
)
MIG_LABELS: LabelValues = ("GPU_I_ID", "GPU_I_PROFILE")
MIB = 2**20


DeviceValue = Callable[[Snapshot, DeviceSample], Number | None]
InstanceValue = Callable[[MigInstanceReading], Number | None]


@dataclass(frozen=True, kw_only=True, repr=False)
class DcgmMetric(MetricSpec):
    """One DCGM field as dcgm-exporter serves it: one series per GPU that is up, and one
    per MIG GPU instance where `instance` gives a value for it."""

    device: DeviceValue
    instance: InstanceValue | None = None
    equivalent: str  # the same value from the gpu_ metrics, in PromQL (the name map)
    exact: bool  # the equivalent gives the very same value at the same sample
    difference: str | None = None  # why `equivalent` is not one comparable value, if not

    def label_names(self, options: RenderOptions) -> LabelValues:
        names = DCGM_LABELS + (MIG_LABELS if self.instance is not None else ())
        return names + (_POD_LABELS + DRA_LABELS if options.kubernetes else ())

    def rows(self, snapshot: Snapshot, options: RenderOptions) -> Iterator[Series]:
        if options.kubernetes:
            owners = _owners(snapshot)
            for labels, value in self._rows(snapshot, options):
                # labels: DCGM_LABELS (gpu first), then GPU_I_ID where this family has it
                gpu_instance = labels[len(DCGM_LABELS)] if self.instance is not None else ""
                yield labels + owners.get((labels[0], labels[1], gpu_instance), _NO_OWNER), value
        else:
            yield from self._rows(snapshot, options)

    def _rows(self, snapshot: Snapshot, options: RenderOptions) -> Iterator[Series]:
        driver = snapshot.driver.driver_version if snapshot.driver else None
        for d in snapshot.devices:
            st = d.static
            if not d.up or d.reading is None or st is None:
                continue
            labels = (
                str(d.index),
                st.uuid,
                st.pci_bus_id or "",
                f"nvidia{st.minor_number}" if st.minor_number is not None else "",
                st.name,
                options.hostname,
                driver or "",
            )
            value = self.device(snapshot, d)
            if value is not None:
                yield (labels + ("", "") if self.instance else labels), value
            if self.instance is not None and d.reading.mig is not None:
                profiles = {m.gpu_instance: m.profile for m in d.reading.mig.devices}
                for gi, reading in sorted(d.reading.mig.instances.items()):
                    value = self.instance(reading)
                    if value is not None:
                        yield labels + (str(gi), profiles.get(gi, "")), value


_POD_LABELS: LabelValues = (
    "pod",
    "namespace",
    "container",
)  # specs.KUBERNETES_LABELS, in dcgm-exporter's order
DRA_LABELS: LabelValues = (
    "dra_claim_name",
    "dra_claim_namespace",
    "dra_driver_name",
    "dra_pool_name",
    "dra_device_name",
    "dra_mig_profile",
    "dra_mig_device_uuid",
)  # dcgm-exporter's (internal/pkg/transformation/const.go), on devices of DRA claims
_NO_OWNER: LabelValues = ("",) * (len(_POD_LABELS) + len(DRA_LABELS))


def _owners(snapshot: Snapshot) -> dict[tuple[str, str, str], LabelValues]:
    """(gpu, UUID, GPU instance or "") -> (pod, namespace, container) of its first
    allocation, and its DRA claim's DRA_LABELS (empty for a device plugin's)."""
    out: dict[tuple[str, str, str], LabelValues] = {}
    k = snapshot.kubernetes
    if k is None:
        return out
    migs = {
        (str(d.index), d.uuid, str(m.gpu_instance)): m
        for d in snapshot.devices
        if d.reading is not None and d.reading.mig is not None
        for m in d.reading.mig.devices
    }
    for a in sorted(k.allocations, key=lambda a: (a.namespace, a.pod, a.container)):
        key = (str(a.gpu), a.uuid, a.gpu_instance)
        if key not in out:
            out[key] = (a.pod, a.namespace, a.container) + _claim(a.dra, migs.get(key))
    return out


def _claim(dra: DraDevice | None, mig: MigDevice | None) -> LabelValues:
    """DRA_LABELS of a claim's device (a MIG device's profile and UUID where it is one)."""
    if dra is None:
        return ("",) * len(DRA_LABELS)
    profile, uuid = (mig.profile, mig.uuid) if mig is not None else ("", "")
    return (dra.claim, dra.claim_namespace, dra.driver, dra.pool, dra.device, profile, uuid)


def _reading(pick: Callable[[DeviceReading], Number | None]) -> DeviceValue:
    return lambda _s, d: pick(d.reading) if d.reading is not None else None


def _gpm(pick: Callable[[GpmReading], Number | None]) -> DeviceValue:
    def value(_s: Snapshot, d: DeviceSample) -> Number | None:
        gpm = d.reading.gpm if d.reading is not None else None
        return pick(gpm) if gpm is not None else None

    return value


def _instance_gpm(pick: Callable[[GpmReading], Number | None]) -> InstanceValue:
    return lambda i: pick(i.gpm) if i.gpm is not None else None


def _whole(value: Number | None, factor: float) -> int | None:
    """A value in DCGM's unit, as the whole number DCGM reports (its int64 fields:
    percent, MHz, mJ, MB/s). The driver counts these in whole units, so rounding gives
    back the driver's integer exactly; scaling a ratio back alone gives 7.000000000000001."""
    return None if value is None else round(float(value) * factor)


def _mib(value: int | None) -> int | None:
    """Bytes as whole MiB, as DCGM reports framebuffer memory."""
    return None if value is None else value // MIB


def _last_xid(s: Snapshot, d: DeviceSample) -> Number | None:
    state = s.xid.get(d.uuid)
    return state.last_xid if state is not None else None


def _nvlink_mb_per_second(g: GpmReading) -> Number | None:
    rates = g.nvlink_bytes_per_second
    if not {"tx", "rx"} <= set(rates):
        return None
    return _whole(rates["tx"] + rates["rx"], 1e-6)


def _d(
    name: str,
    type_: MetricType,
    help_: str,
    collector: str,
    device: DeviceValue,
    instance: InstanceValue | None = None,
    *,
    equivalent: str,
    exact: bool = True,
    difference: str | None = None,
) -> DcgmMetric:
    return DcgmMetric(
        name=name,
        type=type_,
        help=help_ + " dcgm-exporter compatibility (--compat.dcgm).",
        collector=collector,
        device=device,
        instance=instance,
        equivalent=equivalent,
        exact=exact,
        difference=difference,
    )


DCGM_METRICS: tuple[DcgmMetric, ...] = (
    # Clocks
    _d(
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "SM clock frequency in MHz.",
        "clocks",
        _reading(lambda r: _whole(r.clocks.hertz.get("sm") if r.clocks else None, 1e-6)),
        equivalent='gpu_clock_hertz{clock="sm"} / 1e6',
    ),
    _d(
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "Memory clock frequency in MHz.",
        "clocks",
        _reading(lambda r: _whole(r.clocks.hertz.get("memory") if r.clocks else None, 1e-6)),
        equivalent='gpu_clock_hertz{clock="memory"} / 1e6',
    ),
    # Temperature
    _d(
        "DCGM_FI_DEV_MEMORY_TEMP",
        "gauge",
        "Memory temperature in degrees C.",
        "temperature",
        _reading(lambda r: r.temperature.memory_celsius if r.temperature else None),
        equivalent="gpu_memory_temperature_celsius",
    ),
    _d(
        "DCGM_FI_DEV_GPU_TEMP",
        "gauge",
        "GPU temperature in degrees C.",
        "temperature",
        _reading(lambda r: r.temperature.gpu_celsius if r.temperature else None),
        equivalent="gpu_temperature_celsius",
    ),
    # Power
    _d(
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "Power draw in W.",
        "power",
        _reading(lambda r: r.power.watts if r.power else None),
        equivalent="gpu_power_watts",
    ),
    _d(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Energy consumed since the driver was loaded, in mJ.",
        "power",
        _reading(lambda r: _whole(r.power.energy_joules if r.power else None, 1000.0)),
        equivalent="gpu_energy_joules_total * 1000",
    ),
    # PCIe
    _d(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "PCIe replays since the driver was loaded.",
        "pcie",
        _reading(lambda r: r.pcie.replay_errors if r.pcie else None),
        equivalent="gpu_pcie_replay_errors_total",
    ),
    # Utilization
    _d(
        "DCGM_FI_DEV_GPU_UTIL",
        "gauge",
        "GPU utilization in percent (driver's latest sample period).",
        "utilization",
        _reading(lambda r: _whole(r.utilization.gpu_ratio if r.utilization else None, 100.0)),
        equivalent="gpu_utilization_ratio * 100",
    ),
    _d(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "Memory-controller utilization in percent.",
        "utilization",
        _reading(
            lambda r: _whole(
                r.utilization.memory_controller_ratio if r.utilization else None, 100.0
            )
        ),
        equivalent="gpu_memory_controller_utilization_ratio * 100",
    ),
    _d(
        "DCGM_FI_DEV_ENC_UTIL",
        "gauge",
        "Encoder utilization in percent.",
        "utilization",
        _reading(lambda r: _whole(r.utilization.encoder_ratio if r.utilization else None, 100.0)),
        equivalent="gpu_encoder_utilization_ratio * 100",
    ),
    _d(
        "DCGM_FI_DEV_DEC_UTIL",
        "gauge",
        "Decoder utilization in percent.",
        "utilization",
        _reading(lambda r: _whole(r.utilization.decoder_ratio if r.utilization else None, 100.0)),
        equivalent="gpu_decoder_utilization_ratio * 100",
    ),
    # Errors
    _d(
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "The code of the last Xid error since the exporter started; absent before the first.",
        "xid",
        _last_xid,
        equivalent="gpu_xid_errors_total",
        exact=False,
        difference="one counter per Xid code, where DCGM keeps only the last code",
    ),
    # Memory
    _d(
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "Free framebuffer memory in MiB.",
        "memory",
        _reading(lambda r: _mib(r.memory.free_bytes if r.memory else None)),
        lambda i: _mib(
            i.memory_total_bytes - i.memory_used_bytes
            if i.memory_total_bytes is not None and i.memory_used_bytes is not None
            else None
        ),
        equivalent="floor(gpu_memory_free_bytes / 2^20)",
    ),
    _d(
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "Used framebuffer memory in MiB.",
        "memory",
        _reading(lambda r: _mib(r.memory.used_bytes if r.memory else None)),
        lambda i: _mib(i.memory_used_bytes),
        equivalent="floor(gpu_memory_used_bytes / 2^20)",
    ),
    _d(
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved by the driver and firmware, in MiB.",
        "memory",
        _reading(lambda r: _mib(r.memory.reserved_bytes if r.memory else None)),
        equivalent="floor(gpu_memory_reserved_bytes / 2^20)",
    ),
    # NVLink
    _d(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "NVLink data rate over all links, sent plus received, in MB/s (10^6 bytes) over the "
        "last interval, as DCGM reports it (dcgm-exporter declares it a counter).",
        "nvlink",
        _gpm(_nvlink_mb_per_second),
        equivalent="sum without (direction) (rate(gpu_nvlink_bytes_total[1m])) / 1e6",
        exact=False,
    ),
    # Remapped rows
    _d(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Rows remapped for uncorrectable errors.",
        "ecc",
        _reading(lambda r: r.ecc.remapped_rows_uncorrectable if r.ecc else None),
        equivalent='gpu_remapped_rows{error_type="uncorrectable"}',
    ),
    _d(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Rows remapped for correctable errors.",
        "ecc",
        _reading(lambda r: r.ecc.remapped_rows_correctable if r.ecc else None),
        equivalent='gpu_remapped_rows{error_type="correctable"}',
    ),
    _d(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "1 when a row remapping has failed, else 0.",
        "ecc",
        _reading(lambda r: r.ecc.remapped_rows_failed if r.ecc else None),
        equivalent="gpu_remapped_rows_failed",
    ),
    # Profiling (GPM): ratios 0..1 averaged over the last interval
    _d(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Share of the last interval a graphics or compute engine was active (0..1).",
        "gpm",
        _gpm(lambda g: g.graphics_engine_ratio),
        _instance_gpm(lambda g: g.graphics_engine_ratio),
        equivalent="rate(gpu_graphics_engine_active_seconds_total[1m])",
        exact=False,
    ),
    _d(
        "DCGM_FI_PROF_SM_ACTIVE",
        "gauge",
        "Mean share of SMs with at least one warp assigned over the last interval (0..1).",
        "gpm",
        _gpm(lambda g: g.sm_ratio),
        _instance_gpm(lambda g: g.sm_ratio),
        equivalent="rate(gpu_sm_active_seconds_total[1m])",
        exact=False,
    ),
    _d(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gauge",
        "Mean resident warps over the theoretical maximum over the last interval (0..1).",
        "gpm",
        _gpm(lambda g: g.sm_occupancy_ratio),
        _instance_gpm(lambda g: g.sm_occupancy_ratio),
        equivalent="rate(gpu_sm_occupancy_seconds_total[1m])",
        exact=False,
    ),
    _d(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Share of the last interval the tensor pipe was active (0..1).",
        "gpm",
        _gpm(lambda g: g.pipe_ratios.get("tensor")),
        _instance_gpm(lambda g: g.pipe_ratios.get("tensor")),
        equivalent='rate(gpu_pipe_active_seconds_total{pipe="tensor"}[1m])',
        exact=False,
    ),
    _d(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Mean share of peak DRAM bandwidth used over the last interval (0..1).",
        "gpm",
        _gpm(lambda g: g.dram_ratio),
        _instance_gpm(lambda g: g.dram_ratio),
        equivalent="rate(gpu_dram_active_seconds_total[1m])",
        exact=False,
    ),
    _d(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "PCIe bytes per second sent by the GPU over the last interval.",
        "gpm",
        _gpm(lambda g: g.pcie_bytes_per_second.get("tx")),
        equivalent='rate(gpu_pcie_bytes_total{direction="tx"}[1m])',
        exact=False,
    ),
    _d(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "PCIe bytes per second received by the GPU over the last interval.",
        "gpm",
        _gpm(lambda g: g.pcie_bytes_per_second.get("rx")),
        equivalent='rate(gpu_pcie_bytes_total{direction="rx"}[1m])',
        exact=False,
    ),
)

DCGM_BY_NAME: dict[str, DcgmMetric] = {m.name: m for m in DCGM_METRICS}
