"""The collectors: the named groups of metrics `--[no-]collector.NAME` switches on or off.

Apart from the catalogue (`catalogue.py`, whose specs name their collector) so that the
flags are parsed, and a bad one refused, before the data model and the catalogue are
loaded: `gpu-exporter --help` or a mistyped flag answers in a third of the time.
"""

from __future__ import annotations

from typing import NamedTuple


class Collector(NamedTuple):
    """A named group of metrics that `--[no-]collector.NAME` switches on or off."""

    name: str
    default_enabled: bool
    description: str


COLLECTORS: tuple[Collector, ...] = (
    Collector("utilization", True, "GPU, memory-controller, encoder and decoder utilization"),
    Collector("memory", True, "framebuffer memory"),
    Collector("temperature", True, "temperatures, thresholds and fan speed"),
    Collector("power", True, "power draw, limit and energy"),
    Collector("clocks", True, "clocks, P-state and clocks-event (throttle) reasons"),
    Collector("pcie", True, "PCIe link generation, width and replay errors"),
    Collector(
        "pcie-throughput",
        False,
        "PCIe throughput (costs about 20 ms per direction per GPU in the driver)",
    ),
    Collector("ecc", True, "ECC errors, retired pages and remapped rows"),
    Collector("modes", True, "persistence, MIG and ECC modes"),
    Collector(
        "gpm",
        True,
        "GPM activity on Hopper and newer: SM, occupancy, tensor and other pipes, DRAM, "
        "PCIe and NVLink bytes",
    ),
    Collector(
        "nvlink",
        True,
        "NVLink link state per link, errors per GPU (per link with "
        "--collector.nvlink.per-link) and (without GPM) bytes",
    ),
    Collector("mig", True, "MIG devices and GPU instances: memory and GPM activity"),
    Collector("process", True, "per-process GPU memory, utilization and CPU"),
    Collector("host", True, "host CPU, memory and load (off where node_exporter runs)"),
    Collector(
        "xid",
        True,
        "Xid errors since boot from the kernel log (--collector.xid.kernel-log), else from "
        "NVML's event API",
    ),
    Collector(
        "health",
        True,
        "the driver's recovery action, and the NVLink fabric's registration and health "
        "(re-read every minute)",
    ),
    Collector(
        "kubernetes",
        False,
        "pods: GPU allocation from the kubelet's pod-resources socket, pod names on "
        "processes, GPUs used without allocation (needs gpu-exporter[kubernetes])",
    ),
)
