"""The kinds of metric spec the catalogue is made of, and how each walks a Snapshot.

A spec names its metric, type, help text, labels and collector, and holds an extractor
that reads its value from the model. Each kind of spec has a scope, which decides the
labels every series carries and which records of the Snapshot are visited:

| spec | visits | leading labels |
|---|---|---|
| `ExporterMetric` | the Snapshot once | none |
| `DeviceMetric` | every GPU that is up (every GPU with `when_down=True`) | `gpu`, `uuid` |
| `LinkMetric` | every GPU that is up | `gpu`, `uuid` (and `link` with `nvlink_per_link`) |
| `ProcessMetric` | every process series of every GPU that is up | `PROCESS_LABELS` |
| `HostMetric` | the host sample | none |

An extractor returns rows of (extra label values, value); a value of None is left out,
never written as 0 or NaN. `rows()` prepends the scope's label values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

from gpu_exporter.model import (
    DeviceReading,
    DeviceSample,
    HostSample,
    ProcessSample,
    Snapshot,
)
from gpu_exporter.records import Record

MetricType = Literal["gauge", "counter"]
Number = float | int | bool
LabelValues = tuple[str, ...]
Rows = Iterable[tuple[LabelValues, Number | None]]
"""What an extractor returns: (extra label values, value) per series."""
Series = tuple[LabelValues, Number]
"""One series of a family: (every label value, value)."""

SAMPLED = " Sampled every --collect.interval."
DEVICE_LABELS: LabelValues = ("gpu", "uuid")
PROCESS_LABELS: LabelValues = (
    "gpu",
    "uuid",
    "pid",
    "process",
    "user",
    "context",
    "gpu_instance",
    "compute_instance",
    "container_id",
    "pod_uid",
    "systemd_unit",
    "slurm_job_id",
)
KUBERNETES_LABELS: LabelValues = ("namespace", "pod", "container")
"""With the kubernetes collector: on process series, and on the DCGM series (dcgm-exporter's
own names for them)."""
CMDLINE_LABEL = "cmdline"
LINK_LABEL = "link"
NO_LABELS: LabelValues = ()

P = TypeVar("P")


@dataclass(frozen=True, repr=False)
class RenderOptions(Record):
    """How a Snapshot is turned into series (from the command line)."""

    cmdline: bool = False  # --collector.process.cmdline: processes carry `cmdline`
    dcgm: bool = False  # --compat.dcgm: also dcgm-exporter's names (`metrics.dcgm`)
    hostname: str = ""  # the `Hostname` label of the DCGM series
    kubernetes: bool = False  # --collector.kubernetes: KUBERNETES_LABELS on processes, DCGM
    nvlink_per_link: bool = False  # --collector.nvlink.per-link: LinkMetric per link


DEFAULT_OPTIONS = RenderOptions()


@dataclass(frozen=True, kw_only=True, repr=False)
class MetricSpec(Record):
    """One metric family: its exposition name, type, labels, collector and help text."""

    name: str
    type: MetricType
    help: str
    labels: LabelValues = NO_LABELS  # beyond the scope's leading labels
    collector: str | None = None  # None: always emitted (identity and self-metrics)

    @property
    def family_name(self) -> str:
        """The name prometheus_client's families take (counters without `_total`)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        return self.name

    def label_names(self, options: RenderOptions) -> LabelValues:
        """Every label of the family's series, scope labels first."""
        return self.labels

    def rows(
        self, snapshot: Snapshot, options: RenderOptions
    ) -> Iterator[tuple[LabelValues, Number]]:
        """Every series of this metric in `snapshot`: (label values, value)."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True, repr=False)
class ExporterMetric(MetricSpec):
    """The exporter about itself: one visit of the Snapshot."""

    extract: Callable[[Snapshot], Rows]

    def rows(
        self, snapshot: Snapshot, options: RenderOptions
    ) -> Iterator[tuple[LabelValues, Number]]:
        for labels, value in self.extract(snapshot):
            if value is not None:
                yield labels, value


@dataclass(frozen=True, kw_only=True, repr=False)
class DeviceMetric(MetricSpec):
    """Per GPU: leading labels `gpu` and `uuid`.

    Only GPUs that are up are visited, unless `when_down`: a GPU that is down keeps its
    identity, `gpu_up 0` and its Xid history, nothing that would have to be made up.
    """

    extract: Callable[[Snapshot, DeviceSample], Rows]
    when_down: bool = False

    def label_names(self, options: RenderOptions) -> LabelValues:
        return DEVICE_LABELS + self.labels

    def rows(
        self, snapshot: Snapshot, options: RenderOptions
    ) -> Iterator[tuple[LabelValues, Number]]:
        extract = self.extractor(options)
        for device in snapshot.devices:
            if not self.when_down and (not device.up or device.reading is None):
                continue
            gpu = (str(device.index), device.uuid)
            for labels, value in extract(snapshot, device):
                if value is not None:
                    yield gpu + labels, value

    def extractor(self, options: RenderOptions) -> Callable[[Snapshot, DeviceSample], Rows]:
        """The extractor the options call for."""
        return self.extract


@dataclass(frozen=True, kw_only=True, repr=False)
class LinkMetric(DeviceMetric):
    """Per GPU, summed over its NVLink links (`extract`); with `--collector.nvlink.per-link`
    per GPU and link instead (`per_link`, whose rows lead with the `link` label value)."""

    per_link: Callable[[Snapshot, DeviceSample], Rows]

    def label_names(self, options: RenderOptions) -> LabelValues:
        if options.nvlink_per_link:
            return DEVICE_LABELS + (LINK_LABEL,) + self.labels
        return DEVICE_LABELS + self.labels

    def extractor(self, options: RenderOptions) -> Callable[[Snapshot, DeviceSample], Rows]:
        return self.per_link if options.nvlink_per_link else self.extract


@dataclass(frozen=True, kw_only=True, repr=False)
class ProcessMetric(MetricSpec):
    """Per process series (capped, with the `other` roll-up) of every GPU that is up."""

    extract: Callable[[ProcessSample], Number | None]

    def label_names(self, options: RenderOptions) -> LabelValues:
        names = PROCESS_LABELS + self.labels
        if options.kubernetes:
            names += KUBERNETES_LABELS
        return names + (CMDLINE_LABEL,) if options.cmdline else names

    def rows(
        self, snapshot: Snapshot, options: RenderOptions
    ) -> Iterator[tuple[LabelValues, Number]]:
        for device in snapshot.devices:
            attribution = device.attribution
            if not device.up or attribution is None:
                continue
            for p in attribution.processes:
                value = self.extract(p)
                if value is not None:
                    yield _PROCESS_ROW_LABELS.of(device, p, options), value


class _ProcessRowLabels:
    """The label values of one process series, made once per process and shared by all
    its families (a dozen families of a hundred processes would otherwise each hold their
    own copy). Kept during one render (`render.families` forgets them at its end); an
    entry holds its process, so its id is not reused while it is kept."""

    MAX_ENTRIES = 8192

    def __init__(self) -> None:
        self._kept: dict[tuple[int, bool, bool], tuple[ProcessSample, LabelValues]] = {}

    def of(self, device: DeviceSample, p: ProcessSample, options: RenderOptions) -> LabelValues:
        key = (id(p), options.cmdline, options.kubernetes)
        kept = self._kept.get(key)
        if kept is not None and kept[0] is p:
            return kept[1]
        labels = (str(device.index), device.uuid) + process_label_values(p)
        if options.kubernetes:
            labels += (p.namespace, p.pod, p.container)
        if options.cmdline:
            labels += (p.cmdline or "",)
        if len(self._kept) >= self.MAX_ENTRIES:
            self._kept.clear()
        self._kept[key] = (p, labels)
        return labels

    def forget(self) -> None:
        self._kept.clear()


_PROCESS_ROW_LABELS = _ProcessRowLabels()


def end_of_render() -> None:
    """Forget the label values shared within one render."""
    _PROCESS_ROW_LABELS.forget()


def process_label_values(p: ProcessSample) -> LabelValues:
    """The values of PROCESS_LABELS after `gpu` and `uuid`."""
    return (
        p.pid,
        p.process,
        p.user,
        p.context,
        p.gpu_instance,
        p.compute_instance,
        p.container_id,
        p.pod_uid,
        p.systemd_unit,
        p.slurm_job_id,
    )


@dataclass(frozen=True, kw_only=True, repr=False)
class HostMetric(MetricSpec):
    """The host next to the GPUs: no labels."""

    extract: Callable[[HostSample], Number | None]

    def rows(
        self, snapshot: Snapshot, options: RenderOptions
    ) -> Iterator[tuple[LabelValues, Number]]:
        if snapshot.host is not None:
            value = self.extract(snapshot.host)
            if value is not None:
                yield NO_LABELS, value


# Extractor helpers --------------------------------------------------------------------


def one(value: Number | None) -> Rows:
    """One unlabelled row, or none when the value is unknown."""
    return () if value is None else ((NO_LABELS, value),)


def reading(
    part: Callable[[DeviceReading], P | None], pick: Callable[[P], Number | None]
) -> Callable[[Snapshot, DeviceSample], Rows]:
    """A device extractor of one value of one reading (`part` picks the reading)."""

    def extract(_snapshot: Snapshot, device: DeviceSample) -> Rows:
        record = part(device.reading) if device.reading is not None else None
        return one(pick(record)) if record is not None else ()

    return extract


def labelled(
    part: Callable[[DeviceReading], P | None],
    pick: Callable[[P], Iterable[tuple[str, Number | None]]],
) -> Callable[[Snapshot, DeviceSample], Rows]:
    """A device extractor of one labelled value per (label value, value) of a reading."""

    def extract(_snapshot: Snapshot, device: DeviceSample) -> Rows:
        record = part(device.reading) if device.reading is not None else None
        if record is None:
            return ()
        return [((label,), value) for label, value in pick(record)]

    return extract


def device(
    pick: Callable[[DeviceSample], Number | None],
) -> Callable[[Snapshot, DeviceSample], Rows]:
    """A device extractor of one value of the device sample itself."""
    return lambda _snapshot, d: one(pick(d))
