"""The simulated host's kind of GPU (`--simulate.hardware`): what differs between an HGX
H100 board and a GB200 NVL72 compute tray, as NVML answers it.

- `hgx-h100` (the default): H100 SXMs on an HGX board, 18 NVLink links each answering the
  legacy data-link error counters (replay, recovery, flit and data CRC), registered in the
  board's NVSwitch fabric (Fabric Manager's), no platform info (NOT_SUPPORTED before
  Blackwell).
- `gb200-nvl72`: the GB200s of NVL72 compute trays, 4 a tray (GPU 4 starts the next
  tray): 18 NVLink5 links each answering NVLink5's counters and not the legacy ones (nvml.h
  13: "unsupported for Blackwell+"), platform info (chassis serial, slot, tray, host,
  module), and a fabric (v3: clique, cluster UUID, health summary) that spans the rack, so
  the node needs the IMEX daemon, not Fabric Manager.

The NVLink5 counters move as a healthy link's do: corrected symbol errors trickle in (a
few a minute per link) at a symbol BER of 2e-15, no error survives forward error
correction (effective errors stay 0) and no link recovers. A scenario's
`nvlink_degrading: {GPU: LINK}` makes one link degrade from the
moment the fault is loaded: its successful recoveries (and all recoveries) climb by
`DEGRADING_RECOVERIES_PER_HOUR`, its effective errors with them, and its effective BER
rises a step an hour, as a link does for days before it fails (marin-community/marin
#9086: 505 recovery events before Xid 149).
"""

from __future__ import annotations

from gpu_exporter.digest import sha256_hex
from gpu_exporter.model import (
    NVLINK5_ERRORS,
    NVLINK_RECOVERY_RESULTS,
    NvLinkState,
    PlatformInfo,
)

HARDWARE = ("hgx-h100", "gb200-nvl72")
GB200 = "gb200-nvl72"
GPUS_PER_TRAY = 4
COMPUTE_TRAYS = 18  # an NVL72 rack: 18 compute trays of 4 GPUs
SWITCH_TRAYS = 9
GB200_NAME = "NVIDIA GB200"
GB200_COMPUTE_CAPABILITY = "10.0"
GB200_DRIVER = ("580.95.05", "13.0")  # (driver, CUDA) of the simulated tray
NVLINK_LINKS = 18
PEER_TYPE = 2  # the platform's NVLink peer type code (nvml.h gives no names for it)

SYMBOL_ERRORS_PER_SECOND = 0.05  # per link: corrected symbol errors of a healthy link
HEALTHY_SYMBOL_BER = (2, 15)  # (mantissa, exponent): 2e-15
DEGRADING_RECOVERIES_PER_HOUR = 4.0
DEGRADING_EFFECTIVE_ERRORS_PER_RECOVERY = 50


def _rack_of(host_id: str) -> int:
    """A number standing for the simulated host's place in the racks of a fleet: stable
    per host id, so that simulated hosts spread over racks and trays."""
    return int(sha256_hex(host_id.encode())[:8], 16)


def platform(index: int, host_id: str) -> PlatformInfo:
    """GPU `index`'s place: the host's first tray (from its host id), the next tray every
    GPUS_PER_TRAY GPUs. The simulated rack numbers its slots with the switch trays after
    the tenth compute tray."""
    rack, tray = divmod(_rack_of(host_id) + index // GPUS_PER_TRAY, COMPUTE_TRAYS)
    slot = tray + 1 if tray < 10 else tray + 1 + SWITCH_TRAYS
    return PlatformInfo(
        chassis_serial=f"1821{rack % 10**9:09d}",  # 13 characters, as a GB200's
        slot=slot,
        tray=tray,
        host_id=1,
        peer_type=PEER_TYPE,
        module_id=index % GPUS_PER_TRAY + 1,
    )


def _ber(mantissa: int, exponent: int) -> float:
    return mantissa * 10.0**-exponent


def nvlink5_links(elapsed: float) -> dict[int, NvLinkState]:
    """Every healthy link's NVLink5 counters `elapsed` seconds after driver load (or the
    GPU's reset)."""
    elapsed = max(0.0, elapsed)
    links: dict[int, NvLinkState] = {}
    for link in range(NVLINK_LINKS):
        errors = dict.fromkeys(NVLINK5_ERRORS, 0)
        # each link a little apart, as real links are
        errors["symbol"] = int(elapsed * SYMBOL_ERRORS_PER_SECOND * (1 + link % 3))
        links[link] = NvLinkState(
            up=True,
            errors=errors,
            recovery_events=dict.fromkeys(NVLINK_RECOVERY_RESULTS, 0),
            ber={"effective": 0.0, "symbol": _ber(*HEALTHY_SYMBOL_BER)},
        )
    return links


def degrade(state: NvLinkState, seconds: float) -> NvLinkState:
    """A link after `seconds` of degrading: its recoveries (all successful so far), the
    effective errors each brings, and an effective BER a step higher every hour."""
    hours = max(0.0, seconds) / 3600.0
    recoveries = int(hours * DEGRADING_RECOVERIES_PER_HOUR)
    errors = dict(state.errors)
    errors["effective"] += recoveries * DEGRADING_EFFECTIVE_ERRORS_PER_RECOVERY
    errors["local_link_integrity"] += recoveries
    mantissa = min(9, 1 + int(hours) % 9)
    exponent = max(6, 12 - int(hours) // 9)
    return NvLinkState(
        up=True,
        errors=errors,
        recovery_events={"successful": recoveries, "failed": 0, "all": recoveries},
        ber={"effective": _ber(mantissa, exponent), "symbol": state.ber["symbol"] * 10},
    )
