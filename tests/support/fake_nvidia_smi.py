"""A stand-in `nvidia-smi` for the simulated host: `--query-gpu` CSV and `-q -x` XML.

Run as a program (`install` writes an `nvidia-smi` that runs it). It answers what the
real nvidia-smi would on the host `gpu-exporter --simulate N` serves, read from the
simulated backend at the moment it is called, in nvidia-smi's formats: MiB, MHz, watts
with two decimals, "P0", "Enabled", "[N/A]". GPUs are listed in reverse order, so a
check that matched them by index instead of UUID would fail.

Settings, from the environment:
  FAKE_SMI_GPUS      N of --simulate N
  FAKE_SMI_HOST_ID   the simulated host's id (host name and listen address)
  FAKE_SMI_SET       JSON {"GPU index": {"field or XML path": "text nvidia-smi prints"}};
                     the text "(absent)" leaves an XML element out
  FAKE_SMI_UNKNOWN   comma-separated --query-gpu fields this nvidia-smi does not know
                     (it then fails the query, as an older one does)
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from gpu_exporter.model import DeviceReading, DeviceStatic
from gpu_exporter.sources.simulated import SimulatedBackend

MIB = 1024**2
NA = "[N/A]"
ABSENT = "(absent)"  # FAKE_SMI_SET text that leaves an XML element out
COLLECTORS = frozenset(
    {"utilization", "memory", "temperature", "power", "clocks", "pcie", "ecc", "modes"}
)


def _n(value: float | None, fmt: str = "{:.0f}") -> str:
    return NA if value is None else fmt.format(value)


def _mode(value: bool | None) -> str:
    return NA if value is None else ("Enabled" if value else "Disabled")


def _mib(value: int | None) -> str:
    return _n(None if value is None else value // MIB)


def _mhz(value: float | None) -> str:
    return _n(None if value is None else value / 1e6)


Field = Callable[[DeviceStatic, DeviceReading], str]
QUERY: dict[str, Field] = {
    "name": lambda st, r: st.name,
    "uuid": lambda st, r: st.uuid,
    "pci.bus_id": lambda st, r: st.pci_bus_id or NA,
    "memory.total": lambda st, r: _mib(r.memory.total_bytes),
    "memory.used": lambda st, r: _mib(r.memory.used_bytes),
    "memory.free": lambda st, r: _mib(r.memory.free_bytes),
    "temperature.gpu": lambda st, r: _n(r.temperature.gpu_celsius),
    "temperature.gpu.tlimit": lambda st, r: _n(r.temperature.tlimit_margin_celsius),
    "fan.speed": lambda st, r: _n(
        None if r.temperature.fan_speed_ratio is None else r.temperature.fan_speed_ratio * 100
    ),
    "power.draw": lambda st, r: _n(r.power.watts, "{:.2f}"),
    "enforced.power.limit": lambda st, r: _n(r.power.limit_watts, "{:.2f}"),
    "clocks.gr": lambda st, r: _mhz(r.clocks.hertz.get("graphics")),
    "clocks.sm": lambda st, r: _mhz(r.clocks.hertz.get("sm")),
    "clocks.mem": lambda st, r: _mhz(r.clocks.hertz.get("memory")),
    "clocks.video": lambda st, r: _mhz(r.clocks.hertz.get("video")),
    "clocks.max.gr": lambda st, r: _mhz(st.max_clocks_hertz.get("graphics")),
    "clocks.max.sm": lambda st, r: _mhz(st.max_clocks_hertz.get("sm")),
    "clocks.max.mem": lambda st, r: _mhz(st.max_clocks_hertz.get("memory")),
    "pstate": lambda st, r: _n(r.clocks.performance_state, "P{}"),
    "utilization.gpu": lambda st, r: _n(
        None if r.utilization.gpu_ratio is None else r.utilization.gpu_ratio * 100
    ),
    "utilization.memory": lambda st, r: _n(
        None
        if r.utilization.memory_controller_ratio is None
        else r.utilization.memory_controller_ratio * 100
    ),
    "pcie.link.gen.current": lambda st, r: _n(r.pcie.generation),
    "pcie.link.gen.max": lambda st, r: _n(st.pcie_max_generation),
    "pcie.link.width.current": lambda st, r: _n(r.pcie.width),
    "pcie.link.width.max": lambda st, r: _n(st.pcie_max_width),
    "ecc.mode.current": lambda st, r: _mode(r.modes.ecc),
    "persistence_mode": lambda st, r: _mode(r.modes.persistence),
    "mig.mode.current": lambda st, r: _mode(r.modes.mig),
    "ecc.errors.corrected.volatile.total": lambda st, r: _n(r.ecc.corrected_errors),
    "ecc.errors.uncorrected.volatile.total": lambda st, r: _n(r.ecc.uncorrected_errors),
}
XML: dict[str, Field] = {
    "temperature/gpu_temp_slow_threshold": lambda st, r: _n(st.slowdown_temperature_celsius) + " C",
    "temperature/gpu_temp_max_threshold": lambda st, r: _n(st.shutdown_temperature_celsius) + " C",
    "max_clocks/graphics_clock": lambda st, r: _mhz(st.max_clocks_hertz.get("graphics")) + " MHz",
    "max_clocks/video_clock": lambda st, r: _mhz(st.max_clocks_hertz.get("video")) + " MHz",
}


def gpus() -> list[dict[str, str]]:
    """Every simulated GPU's values as nvidia-smi prints them, in reverse index order."""
    backend = SimulatedBackend(
        int(os.environ["FAKE_SMI_GPUS"]), host_id=os.environ.get("FAKE_SMI_HOST_ID", "")
    )
    backend.init()
    changes: Mapping[str, Mapping[str, str]] = json.loads(os.environ.get("FAKE_SMI_SET", "{}"))
    driver = backend.driver_info().driver_version or NA
    out = []
    for index in reversed(range(backend.device_count())):
        static = backend.device_static(index)
        reading = backend.device_reading(index, COLLECTORS)
        values = {name: field(static, reading) for name, field in (QUERY | XML).items()}
        values["driver_version"] = driver
        values.update(changes.get(str(index), {}))
        out.append(values)
    return out


def query(fields: list[str]) -> int:
    known = set(QUERY) - set(os.environ.get("FAKE_SMI_UNKNOWN", "").split(","))
    for values in gpus():
        unknown = [f for f in fields if f not in known and f != "driver_version"]
        if unknown:
            print(f'Field "{unknown[0]}" is not a valid field to query.\n')
            return 2
        print(", ".join(values[f] for f in fields))
    return 0


def print_xml() -> int:
    from xml.sax.saxutils import escape

    lines = ['<?xml version="1.0" ?>', "<nvidia_smi_log>"]
    for values in gpus():
        lines.append(f'  <gpu id="{escape(values["pci.bus_id"])}">')
        lines.append(f"    <uuid>{escape(values['uuid'])}</uuid>")
        for group in ("temperature", "max_clocks"):
            lines.append(f"    <{group}>")
            for path, text in values.items():
                parent, _, tag = path.partition("/")
                if parent == group and text != ABSENT:
                    lines.append(f"      <{tag}>{escape(text)}</{tag}>")
            lines.append(f"    </{group}>")
        lines.append("  </gpu>")
    lines.append("</nvidia_smi_log>")
    print("\n".join(lines))
    return 0


def main(args: list[str]) -> int:
    if args[:2] == ["-q", "-x"]:
        return print_xml()
    fields = [
        a.removeprefix("--query-gpu=").split(",") for a in args if a.startswith("--query-gpu=")
    ]
    if fields and "--format=csv,noheader,nounits" in args:
        return query(fields[0])
    print(f"stand-in nvidia-smi: unexpected arguments {args}", file=sys.stderr)
    return 9


def install(directory: Path) -> Path:
    """Write an `nvidia-smi` into `directory` that runs this stand-in; returns its path."""
    program = directory / "nvidia-smi"
    repo = Path(__file__).resolve().parents[2]
    run = f'PYTHONPATH="{repo}" exec "{sys.executable}" -m tests.support.fake_nvidia_smi "$@"'
    program.write_text(f"#!/bin/sh\n{run}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
