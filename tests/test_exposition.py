"""The text writer against prometheus_client's own, and content negotiation."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.metrics import specs as specs_module
from gpu_exporter.metrics import text as text_module
from gpu_exporter.metrics.exposition import Exposition
from gpu_exporter.metrics.render import families, text
from gpu_exporter.metrics.specs import RenderOptions
from gpu_exporter.metrics.text import Family, write_openmetrics, write_text
from gpu_exporter.model import Attribution, GpuAllocation, KubernetesState, ProcessSample
from tests.support.client_families import from_client, to_client
from tests.support.snapshots import fixed_snapshot

REPO = Path(__file__).resolve().parents[1]


class Awkward:
    """A collector with label values that need escaping."""

    def collect(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        gauge = GaugeMetricFamily("odd_gauge", 'help with \\ and\nnewline "quoted"', labels=["v"])
        for value in ['a"b', "back\\slash", "new\nline", "ünïcödé", ""]:
            gauge.add_metric([value], 1.5)
        counter = CounterMetricFamily("odd_events", "counts", labels=["k"])
        counter.add_metric(["x"], 12345678901234.0)
        counter.add_metric(["y"], 1e-7)
        return [gauge, counter]


class Fixed:
    def __init__(self, fixed: list[Family]) -> None:
        self._fixed = fixed

    def collect(self) -> list[Metric]:
        return [to_client(f) for f in self._fixed]


def test_text_writer_is_byte_identical_to_prometheus_client() -> None:
    snapshot_families = families(fixed_snapshot(4))
    odd = [from_client(m) for m in Awkward().collect()]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(snapshot_families + odd))  # type: ignore[arg-type]
    assert write_text(snapshot_families + odd).encode() == generate_latest(registry)


def test_snapshot_text_is_byte_identical_to_prometheus_client_with_awkward_labels() -> None:
    snapshot = fixed_snapshot(2)
    odd = ProcessSample(
        pid="4242",
        process='py"thon\\3',
        user="ünïcödé",
        context="compute",
        container_id="abc",
        cmdline="train.py --note 'a\nb'",
        memory_used_bytes=2**30,
        sm_ratio=0.25,
        cpu_seconds=12.5,
        workers=4,
    )
    device = dataclasses.replace(
        snapshot.devices[0],
        attribution=Attribution(processes=(odd,), unattributed_memory_bytes=0, process_count=1),
    )
    snapshot = dataclasses.replace(
        snapshot, devices=(device, *snapshot.devices[1:]), collectors=frozenset({"process"})
    )
    options = RenderOptions(cmdline=True)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families(snapshot, options)))  # type: ignore[arg-type]
    assert text(snapshot, options).encode() == generate_latest(registry)
    assert 'process="py\\"thon\\\\3"' in text(snapshot, options)
    assert "cmdline=\"train.py --note 'a\\nb'\"" in text(snapshot, options)


def _client_text(fixed: list[Family]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(fixed))  # type: ignore[arg-type]
    return generate_latest(registry)


def test_a_family_whose_rows_changed_is_written_afresh_and_the_rest_reused() -> None:
    first = [
        Family("kept", "gauge", "unchanged", ("gpu",), [(("0",), 1.0), (("1",), 2.0)]),
        Family("moved", "gauge", "one value moves", ("gpu",), [(("0",), 1.0), (("1",), 2.0)]),
        Family("nan", "gauge", "never equal to itself", (), [((), float("nan"))]),
        Family("signed", "gauge", "plain", (), [((), 3.0)]),
    ]
    assert write_text(first).encode() == _client_text(first)
    second = [
        first[0],
        Family("moved", "gauge", "one value moves", ("gpu",), [(("0",), 1.0), (("1",), 2.5)]),
        first[2],
        Family("signed", "gauge", "plain", (), [((), 3.0)]),
    ]
    written = write_text(second)
    assert written.encode() == _client_text(second)
    assert 'moved{gpu="1"} 2.5\n' in written and 'moved{gpu="1"} 2.0\n' not in written
    # the same name and rows under other label names or another help: written afresh
    relabelled = [Family("kept", "gauge", "unchanged", ("card",), first[0].rows)]
    assert 'kept{card="0"} 1.0' in write_text(relabelled)
    assert write_text(relabelled).encode() == _client_text(relabelled)
    rehelped = [Family("kept", "gauge", "new help", ("gpu",), first[0].rows)]
    assert "# HELP kept new help\n" in write_text(rehelped)


def test_a_process_s_families_share_one_label_tuple_and_nothing_is_kept_after() -> None:
    snapshot = fixed_snapshot(2)
    devices = tuple(
        dataclasses.replace(
            device,
            attribution=Attribution(
                processes=tuple(
                    ProcessSample(
                        str(pid),
                        "python",
                        "alice",
                        "compute",
                        memory_used_bytes=2**30,
                        sm_ratio=0.5,
                        workers=2,
                        resident_memory_bytes=2**20,
                    )
                    for pid in (10, 11)
                ),
                unattributed_memory_bytes=0,
                process_count=2,
            ),
        )
        for device in snapshot.devices
    )
    snapshot = dataclasses.replace(
        snapshot, devices=devices, collectors=snapshot.collectors | {"process"}
    )
    fixed = families(snapshot, RenderOptions(cmdline=True))
    process = [f for f in fixed if f.label_names[:3] == ("gpu", "uuid", "pid")]
    assert len(process) >= 3 and all(len(f.rows) == 4 for f in process)
    first = {labels: labels for labels, _value in process[0].rows}
    assert first
    for family in process[1:]:
        for labels, _value in family.rows:
            assert labels is first.get(labels, labels)  # equal values: the same object
    assert specs_module._PROCESS_ROW_LABELS._kept == {}


def test_a_label_value_that_cannot_be_utf8_costs_one_character_not_the_scrape() -> None:
    odd = Family("odd_label", "gauge", "h", ("user",), [(("caf\udce9",), 1.0)])
    exposition = Exposition(fixed_snapshot(1), extra=lambda: [odd])
    body = exposition.body(openmetrics=False, compressed=False)
    assert b'odd_label{user="caf?"} 1.0\n' in body
    body.decode("utf-8")


def test_the_reuse_cache_holds_the_newest_rows_so_older_equal_ones_are_freed() -> None:
    older = Family("held", "gauge", "h", ("gpu",), [(("0",), 1.0)])
    newer = Family("held", "gauge", "h", ("gpu",), [(("0",), 1.0)])
    assert write_text([older]) == write_text([newer])
    kept_rows, _text = text_module._TEXTS._texts[("held", ("gpu",))]
    assert kept_rows is newer.rows and kept_rows is not older.rows


def test_openmetrics_writer_is_byte_identical_to_prometheus_client_s() -> None:
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

    snapshot = fixed_snapshot(4)
    fixed = families(snapshot, RenderOptions(dcgm=True)) + [
        from_client(m) for m in Awkward().collect()
    ]
    fixed.append(Family("DCGM_FI_DEV_X", "counter", 'a "quoted" help', ("gpu",), [(("0",), 7.0)]))
    assert any(f.type == "counter" and f.name.endswith("_total") for f in fixed)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(fixed))  # type: ignore[arg-type]
    ours = write_openmetrics(fixed)
    assert ours.encode() == openmetrics_latest(registry)
    assert ours.endswith("# EOF\n") and "# TYPE DCGM_FI_DEV_X unknown\n" in ours
    assert write_openmetrics(fixed) == ours  # written again from the kept sample lines


def test_a_scrape_for_openmetrics_does_not_load_prometheus_client() -> None:
    import subprocess
    import sys

    program = (
        "import sys\n"
        "from gpu_exporter.metrics.exposition import Exposition\n"
        "from tests.support.snapshots import fixed_snapshot\n"
        "body = Exposition(fixed_snapshot(2)).body(openmetrics=True, compressed=True)\n"
        "assert body, 'empty'\n"
        "print(sorted(m for m in sys.modules if m.startswith('prometheus_client')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


def _label_values(body: str) -> list[tuple[str, str]]:
    """Every (label name, value) of an exposition, as Prometheus reads it (unescaped)."""
    return [
        (name, value)
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        for name, value in sample.labels.items()
    ]


def test_every_label_value_is_cut_to_its_byte_limit_with_a_marker() -> None:
    """Anyone who runs a GPU process picks its name (argv[0], up to 64 KiB), its cgroup and
    its command line; one value over Prometheus' label_value_length_limit fails the whole
    scrape. Prometheus counts UTF-8 bytes of the unescaped value."""
    snapshot = fixed_snapshot(1)
    hostile = ProcessSample(
        pid="4242",
        process="trainer" + "x" * 65_000,
        user="é" * 100,  # 200 bytes: cut between characters, never inside one
        context="compute",
        container_id="\\" * 300,  # written escaped as 600 characters; Prometheus reads 300
        pod_uid="p" * 128,  # exactly the limit: kept whole
        systemd_unit="u" * 129,
        slurm_job_id="🚀" * 40,  # 4 bytes each
        cmdline="python train.py " + "--arg=ü " * 200,
        memory_used_bytes=2**30,
    )
    device = dataclasses.replace(
        snapshot.devices[0],
        attribution=Attribution(processes=(hostile,), unattributed_memory_bytes=0, process_count=1),
    )
    snapshot = dataclasses.replace(snapshot, devices=(device,), collectors=frozenset({"process"}))
    options = RenderOptions(cmdline=True)
    expected = {
        "process": "trainer" + "x" * 86 + "…" + _digest(hostile.process),
        "user": "é" * 46 + "…" + _digest(hostile.user),  # 92 + 35 bytes: a 47th é would pass 128
        "container_id": "\\" * 93 + "…" + _digest(hostile.container_id),
        "pod_uid": "p" * 128,
        "systemd_unit": "u" * 93 + "…" + _digest(hostile.systemd_unit),
        "slurm_job_id": "🚀" * 23 + "…" + _digest(hostile.slurm_job_id),
        # 221 bytes would end inside a "ü": 220 are kept
        "cmdline": (hostile.cmdline or "").encode()[:220].decode() + "…" + _digest(hostile.cmdline),
    }
    exposition = Exposition(snapshot, options)
    for openmetrics in (False, True):
        body = exposition.body(openmetrics=openmetrics, compressed=False).decode()
        seen = dict(_label_values(body.replace("# EOF\n", "")))
        assert {k: seen[k] for k in expected} == expected
        assert all(len(v.encode()) <= (256 if k == "cmdline" else 128) for k, v in seen.items())
    assert len(expected["cmdline"].encode()) == 255


def _digest(value: str | None) -> str:
    """The 32 hex digits that end a cut value: the start of the SHA-256 of all of it."""
    return hashlib.sha256((value or "").encode()).hexdigest()[:32]


def test_values_cut_to_the_same_start_stay_distinct_in_every_writer() -> None:
    """Two time-sliced pods on one GPU whose 193-character names differ only at the end,
    two processes of such a pod: after the cut each label still tells them apart, so no
    family holds one label set twice (Prometheus would keep one series of the two). The
    writers: process labels (process, user, cmdline, namespace, pod, container),
    gpu_allocation_info, and the DCGM compat series' labels."""
    snapshot = fixed_snapshot(1)
    long = "train-" + "x" * 185  # 191 characters before the tail that tells them apart
    kinds = ("-a", "-b")
    processes = tuple(
        ProcessSample(
            pid=str(4242 + i),
            process=long + tail,
            user=long + tail,
            context="compute",
            namespace=long + tail,
            pod=long + tail,
            container=long + tail,
            cmdline=long * 2 + tail,
            memory_used_bytes=2**30,
        )
        for i, tail in enumerate(kinds)
    )
    # a name that is already what the first one is cut to is not written as it
    lookalike = ProcessSample(
        pid="4244", process=_cut(long + "-a"), user="", context="compute", memory_used_bytes=1
    )
    device = dataclasses.replace(
        snapshot.devices[0],
        attribution=Attribution(
            processes=(*processes, lookalike), unattributed_memory_bytes=0, process_count=3
        ),
    )
    uuid = device.uuid
    allocations = tuple(
        GpuAllocation(0, uuid, "", long + tail, long + tail, long + tail) for tail in kinds
    )
    snapshot = dataclasses.replace(
        snapshot,
        devices=(device,),
        collectors=snapshot.collectors | {"process", "kubernetes"},
        kubernetes=KubernetesState(up=True, reason=None, allocations=allocations),
    )
    options = RenderOptions(cmdline=True, dcgm=True, kubernetes=True, hostname="h" * 300)
    for openmetrics in (False, True):
        body = Exposition(snapshot, options).body(openmetrics=openmetrics, compressed=False)
        written = list(text_string_to_metric_families(body.decode().replace("# EOF\n", "")))
        for family in written:
            label_sets = [tuple(sorted(s.labels.items())) for s in family.samples]
            assert len(label_sets) == len(set(label_sets)), family.name
            for labels in label_sets:
                for name, value in labels:
                    assert len(value.encode()) <= (256 if name == "cmdline" else 128)
        rows = {f.name: [s.labels for s in f.samples] for f in written}
        pods = [(r["namespace"], r["pod"], r["container"]) for r in rows["gpu_allocation_info"]]
        assert sorted(pods) == sorted((_cut(long + t),) * 3 for t in kinds)
        by_pid = {r["pid"]: r for r in rows["gpu_process_memory_used_bytes"]}
        for i, tail in enumerate(kinds):
            labels = by_pid[str(4242 + i)]
            for name in ("process", "user", "namespace", "pod", "container"):
                assert labels[name] == _cut(long + tail)
            assert labels["cmdline"] == _cut(long * 2 + tail, 256)
        assert by_pid["4244"]["process"] == _cut(_cut(long + "-a"))
        (power,) = rows["DCGM_FI_DEV_POWER_USAGE"]  # the GPU's first owner, by name
        assert (power["pod"], power["Hostname"]) == (_cut(long + "-a"), _cut("h" * 300))


def _cut(value: str, limit: int = 128) -> str:
    """`value` as the exporter writes it when it passes `limit` bytes (ASCII here)."""
    return value[: limit - 35] + "…" + _digest(value)


def test_host_and_device_label_values_are_capped_too() -> None:
    """The cap is in the one writer, so it holds for every family: device identity (a
    name, serial or MIG profile from the driver) as much as a process's labels."""
    long_name = Family("x_info", "gauge", "h", ("gpu", "name"), [(("0", "N" * 500), 1.0)])
    cut = "N" * 93 + "…" + _digest("N" * 500)
    assert write_text([long_name]) == (
        '# HELP x_info h\n# TYPE x_info gauge\nx_info{gpu="0",name="' + cut + '"} 1.0\n'
    )
    assert write_openmetrics([long_name]).count(cut) == 1
