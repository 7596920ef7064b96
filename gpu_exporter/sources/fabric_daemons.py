"""The NVLink fabric's own daemons: does the node need them, and do they run?

Some NVLink fabrics need a daemon on the node besides the driver:

- **NVIDIA Fabric Manager** (`nv-fabricmanager`) on NVSwitch systems whose switches sit on
  the node's own baseboard (HGX and DGX H100/H200/B200): it registers each GPU in the
  fabric. Without it the GPUs' fabric probe never completes and they cannot reach their
  peers over NVLink (NVIDIA/NVSentinel #891: down for 20 days, unnoticed).
- **the IMEX daemon** (`nvidia-imex`) on GB200 and GB300 NVL racks, whose NVLink domain
  spans the compute trays (multi-node NVLink): it exchanges the memory that jobs share
  across trays. The fabric itself is managed from the switch trays (NMX), not the node.

Which the node needs (`required`) is decided from the GPUs themselves, each interval: a
GPU whose driver reports a fabric state (`gpu_fabric_state`: any state; a GPU without an
NVSwitch fabric, a PCIe card or one with NVLink bridges only, answers NOT_SUPPORTED)
needs the IMEX daemon when its name says it is a Grace-Blackwell superchip (`GB200`,
`GB300`: multi-node NVLink), and Fabric Manager otherwise, but only where the NVSwitches
are on this node's own PCI bus (`nvswitches_present`: vendor 0x10de, class 0x0680 in
/sys/bus/pci/devices). Fabric Manager runs where the switches are: on bare metal and in a
VM given the whole board (full pass-through), the node itself; in a VM given one or a few
GPUs of an HGX board (shared NVSwitch virtualization), the hypervisor's service VM, while
the guest's GPUs still report their fabric registration as completed (the H100 and H200
SXM captures in tests/fixtures/nvidia-smi are such one-GPU pass-through VMs). Where the
PCI bus cannot be read, the GPUs alone decide. A node with no such GPU needs neither, and
the alert never fires there.

Whether it runs (`FabricDaemonWatch`, `host_processes`) is read from the host's /proc: a
process whose command name (`/proc/PID/comm`, the kernel's 15-byte cut of the program
name) and program (the last part of `argv[0]` in `/proc/PID/cmdline`) are the daemon's.
Both files are readable under the shipped privileges (uid 0 without capabilities). Where
/proc is not the host's PID namespace (a container without `hostPID: true` or
`--pid=host`) the daemon cannot be seen, and its series is left out rather than reported
down. /proc is walked only while a GPU needs a daemon, at most every `EVERY_SECONDS`.

Caveat: with NVIDIA's DRA driver the IMEX daemon runs in a ComputeDomain's pods only
while a ComputeDomain uses the node's GPUs; docs/alerts.md says what to do then.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpu_exporter.model import FABRIC_DAEMONS, DeviceSample, FabricDaemonState

EVERY_SECONDS = 15.0
"""How often /proc is walked while a GPU needs a daemon."""

COMM_BYTES = 16  # TASK_COMM_LEN: a command name and its newline fit in 16 bytes
CMDLINE_BYTES = 4096  # enough for argv[0]; the rest is not read
MULTI_NODE_CLASSES = ("GB200", "GB300")
"""Names of the GPUs whose NVLink domain spans the compute trays (multi-node NVLink)."""

FABRIC_MANAGER, IMEX = FABRIC_DAEMONS


NVIDIA_VENDOR = b"0x10de"
NVSWITCH_CLASS = b"0x0680"  # PCI class 06 (bridge), subclass 80 (other): an NVSwitch
SYSFS_ATTRIBUTE_BYTES = 16  # "0x10de\n", "0x068000\n"
PCI_DEVICES_LIMIT = 4096  # entries of /sys/bus/pci/devices looked at, at most
NVSWITCH_EVERY_SECONDS = 300.0
"""How often the PCI bus is looked at again for NVSwitches (hot-plug is rare)."""


def required(devices: Iterable[DeviceSample], nvswitches: bool | None = None) -> dict[str, bool]:
    """FABRIC_DAEMONS -> whether a GPU of `devices` needs it (see the module docstring).
    `nvswitches`: whether NVSwitches are on this node's PCI bus (`nvswitches_present`),
    None where that could not be read. A GPU that is down is not counted."""
    need = dict.fromkeys(FABRIC_DAEMONS, False)
    for d in devices:
        health = d.reading.health if d.reading is not None else None
        if health is None or health.fabric is None:
            continue  # no NVSwitch fabric (or not read)
        name = d.static.name if d.static is not None else ""
        if any(cls in name for cls in MULTI_NODE_CLASSES):
            need[IMEX] = True
        elif nvswitches is not False:
            need[FABRIC_MANAGER] = True
    return need


def nvswitches_present(sys_root: str = "/sys") -> bool | None:
    """Whether an NVIDIA NVSwitch is on this node's PCI bus (Fabric Manager runs beside
    it); None where the bus cannot be read. Reads two 16-byte sysfs attributes a device,
    of at most PCI_DEVICES_LIMIT devices; needs no privilege."""
    base = f"{sys_root}/bus/pci/devices"
    try:
        entries = os.listdir(base)
    except OSError:
        return None
    for entry in entries[:PCI_DEVICES_LIMIT]:
        if _read(f"{base}/{entry}/vendor", SYSFS_ATTRIBUTE_BYTES).strip() != NVIDIA_VENDOR:
            continue
        if _read(f"{base}/{entry}/class", SYSFS_ATTRIBUTE_BYTES).startswith(NVSWITCH_CLASS):
            return True
    return False


def running(proc_root: str, daemons: Iterable[str]) -> dict[str, bool]:
    """FABRIC_DAEMONS name -> whether a process of that program runs, for `daemons`."""
    wanted = {daemon[: COMM_BYTES - 1]: daemon for daemon in daemons}
    found = dict.fromkeys(wanted.values(), False)
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        comm = _read(f"{proc_root}/{entry}/comm", COMM_BYTES).rstrip(b"\n")
        daemon = wanted.get(comm.decode("utf-8", "replace"))
        if daemon is None or found[daemon]:
            continue
        argv0 = _read(f"{proc_root}/{entry}/cmdline", CMDLINE_BYTES).split(b"\0", 1)[0]
        if os.path.basename(argv0).decode("utf-8", "replace") == daemon:
            found[daemon] = True
    return found


def _read(path: str, limit: int) -> bytes:
    """At most `limit` bytes of a /proc file; b"" when it cannot be read (gone, denied)."""
    try:
        with open(path, "rb", buffering=0) as handle:
            return handle.read(limit)
    except OSError:
        return b""


Look = Callable[[Sequence[str]], Mapping[str, bool] | None]
"""Whether each of these daemons runs; None where that cannot be seen."""


def host_processes(proc_root: str, sees_host: Callable[[str], bool]) -> Look:
    """The real node's `Look`: `running` in /proc, where /proc is the host's PID namespace
    (`sees_host(proc_root)`, `attribution.namespace.sees_host_pid_namespace`)."""

    def look(daemons: Sequence[str]) -> Mapping[str, bool] | None:
        return running(proc_root, daemons) if sees_host(proc_root) else None

    return look


class FabricDaemonWatch:
    """Each sample's `FabricDaemonState`, from the devices and `look` (the host's /proc,
    or a simulated host's daemons)."""

    def __init__(
        self,
        look: Look,
        *,
        nvswitches: Callable[[], bool | None] = lambda: None,
        every_seconds: float = EVERY_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._look = look
        self._nvswitches = nvswitches
        self._switches: bool | None = None
        self._switches_at: float | None = None
        self._every = every_seconds
        self._monotonic = monotonic
        self._read_at: float | None = None
        self._wanted: list[str] = []
        self._running: dict[str, bool] = {}

    def __call__(self, devices: Iterable[DeviceSample]) -> FabricDaemonState:
        devices = list(devices)
        now = self._monotonic()
        need = required(devices, self._switches_seen(devices, now))
        wanted = [daemon for daemon in FABRIC_DAEMONS if need[daemon]]
        if not wanted:
            self._running, self._read_at = {}, None
        elif self._read_at is None or now - self._read_at >= self._every or self._wanted != wanted:
            self._read_at = now
            self._running = dict(self._look(wanted) or {})
        self._wanted = wanted
        return FabricDaemonState(required=need, running=dict(self._running))

    def _switches_seen(self, devices: Sequence[DeviceSample], now: float) -> bool | None:
        """`nvswitches`, asked only while a GPU reports a fabric, at most every
        NVSWITCH_EVERY_SECONDS."""
        if not any(
            d.reading is not None
            and d.reading.health is not None
            and d.reading.health.fabric is not None
            for d in devices
        ):
            return self._switches
        if self._switches_at is None or now - self._switches_at >= NVSWITCH_EVERY_SECONDS:
            self._switches_at = now
            self._switches = self._nvswitches()
        return self._switches
