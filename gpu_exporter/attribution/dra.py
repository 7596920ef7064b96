"""NVIDIA's DRA device names, resolved to this node's GPUs and MIG instances from NVML alone.

With Dynamic Resource Allocation the kubelet's pod-resources List names each device a
claim gave a container by its driver, pool and device name. NVIDIA's GPU driver
(`gpu.nvidia.com`, NVIDIA/k8s-dra-driver-gpu, `cmd/gpu-kubelet-plugin`, `CanonicalName`)
makes that name from what NVML says of the device, so it can be read back here without a
token or the API server:

- a whole GPU: `gpu-<minor>`, the minor being `nvmlDeviceGetMinorNumber` (the N of
  /dev/nvidiaN), which is not the NVML index;
- a MIG device, by its GPU instance's profile id and placement (`nvmlGpuInstanceGetInfo`,
  `model.MigPlacement`), in two formats:
  - driver v25.3 to v25.8: `gpu-<minor>-mig-<profile id>-<placement start>-<placement size>`
    (`gpu-1-mig-19-4-1`: a 1g.10gb at memory slice 4 of an H100 80GB);
  - v25.12 and later: `gpu-<minor>-mig-<profile name without dots>-<profile id>-<placement
    start>` (`gpu-6-mig-3g40gb-9-0`). The profile id says what the name's profile says; as
    the driver's own parser does, the name's profile is not compared;
- `gpu-vfio-<n>`: a GPU passed through to a virtual machine, which the host's NVML does
  not read: skipped.

Devices of other drivers (`compute-domain.nvidia.com` channels, other vendors) are not
GPUs: skipped without a word. The CDI device names are not read: they changed between
driver versions. A `gpu.nvidia.com` name that does not parse, or names no GPU of this
node, resolves to nothing, never to a guess; `unmatched_reason` explains it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gpu_exporter.model import DeviceSample, DraDevice
from gpu_exporter.records import Record

DRIVER = "gpu.nvidia.com"
SHOWN_NAMES = 3  # device names quoted in a reason

# A DRA device name is a DNS label (RFC 1123, Kubernetes' IsDNS1123Label): at most 63
# characters. A longer one is no name of the driver's and is not read further, so no
# name costs more than a split of 63 characters, whatever the kubelet sends.
MAX_NAME = 63
SHOWN_NAME = MAX_NAME  # characters of a name quoted in a reason
_DIGITS = frozenset("0123456789")  # ASCII only: str.isdigit() takes every Unicode digit
_PROFILE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")

Target = tuple[int, str, str]  # (index, GPU UUID, MIG GPU instance or "")


@dataclass(frozen=True, repr=False)
class DraName(Record):
    """What a `gpu.nvidia.com` device name says of the device."""

    minor: int  # of the GPU (or the MIG device's parent)
    profile_id: int | None = None  # the GPU instance's profile id; None: the whole GPU
    start: int | None = None  # the GPU instance's first memory slice
    size: int | None = None  # its memory slices; only names of driver v25.3 to v25.8 say


def _number(text: str) -> int | None:
    """A number as the driver writes one (`%d`): ASCII digits, no sign, no leading zero."""
    if not text or not _DIGITS.issuperset(text) or (text[0] == "0" and len(text) > 1):
        return None
    return int(text)  # at most 63 digits: far below int()'s limit


def _numbers(texts: list[str]) -> list[int] | None:
    numbers = [_number(t) for t in texts]
    return None if None in numbers else [n for n in numbers if n is not None]


def parse(name: str) -> DraName | None:
    """The device a `gpu.nvidia.com` name describes; None when it is no name of the form.

    Read without regular expressions: one split of at most 63 characters, so a hostile
    name costs no more than a valid one.
    """
    if len(name) > MAX_NAME:
        return None
    parts = name.split("-")
    if len(parts) < 2 or parts[0] != "gpu" or (minor := _number(parts[1])) is None:
        return None
    if len(parts) == 2:
        return DraName(minor)
    if len(parts) < 6 or parts[2] != "mig":
        return None
    if len(parts) == 6 and (by_size := _numbers(parts[3:])) is not None:  # v25.3 to v25.8
        profile_id, start, size = by_size
        return DraName(minor, profile_id, start, size)
    # v25.12 on; the profile name, made RFC 1123 (lower case, "+" as "-"), has a letter
    profile = "-".join(parts[3:-2])
    placement = _numbers(parts[-2:])
    if placement is None or not _PROFILE.issuperset(profile) or _LETTERS.isdisjoint(profile):
        return None
    return DraName(minor, placement[0], placement[1])


def is_host_gpu(device: DraDevice) -> bool:
    """Whether a claim's device is one for this module: a GPU or MIG device of NVIDIA's
    GPU driver that the host's NVML reads (not a passthrough GPU, not another driver's)."""
    return device.driver == DRIVER and not _is_passthrough(device.device)


def _is_passthrough(name: str) -> bool:
    """`gpu-vfio-<n>`: a GPU passed through to a virtual machine."""
    prefix = "gpu-vfio-"
    return (
        len(name) <= MAX_NAME
        and name.startswith(prefix)
        and _number(name[len(prefix) :]) is not None
    )


class DraGpus:
    """This node's GPUs and MIG instances, found by the names NVIDIA's DRA driver gives."""

    def __init__(self, devices: Collection[DeviceSample]) -> None:
        self._by_minor: dict[int, DeviceSample] = {
            d.static.minor_number: d
            for d in devices
            if d.static is not None and d.static.minor_number is not None
        }

    def target(self, name: str) -> Target | None:
        """The GPU (and MIG GPU instance) `name` names; None when it names none here."""
        parsed = parse(name)
        d = self._by_minor.get(parsed.minor) if parsed is not None else None
        if parsed is None or d is None or d.static is None:
            return None
        if parsed.profile_id is None:
            return (d.index, d.static.uuid, "")
        mig = d.reading.mig if d.reading is not None else None
        for m in mig.devices if mig is not None else ():
            p = m.placement
            if (
                p is not None
                and (p.profile_id, p.start) == (parsed.profile_id, parsed.start)
                and parsed.size in (None, p.size)
            ):
                return (d.index, d.static.uuid, str(m.gpu_instance))
        return None


def _quoted(name: str) -> str:
    """A name as a reason quotes it: cut to a DNS label's length, control characters escaped."""
    cut = ascii(name[:SHOWN_NAME])[1:-1]  # escapes control characters and non-ASCII
    return cut + ("..." if len(name) > SHOWN_NAME else "")


def unmatched_reason(names: Collection[str], devices: Collection[DeviceSample]) -> str | None:
    """Why `names` (of `gpu.nvidia.com` devices) name no GPU of this node, or None."""
    if not names:
        return None
    shown = [_quoted(n) for n in sorted(names)[:SHOWN_NAMES]]
    listed = ", ".join(shown) + (", ..." if len(names) > SHOWN_NAMES else "")
    statics = [d.static for d in devices if d.static is not None]
    minors = sorted(st.minor_number for st in statics if st.minor_number is not None)
    reason = (
        f"{len(names)} {DRIVER} devices of DRA claims match no GPU of this node ({listed}); "
        "expected gpu-<minor> or a MIG device named by its GPU instance's profile and "
        f"placement, with the minors of this node's GPUs ({', '.join(map(str, minors))})"
    )
    if len(minors) < len(statics):
        reason += "; NVML did not give the minor number of every GPU"
    if any(
        m.placement is None
        for d in devices
        if d.reading is not None and d.reading.mig is not None
        for m in d.reading.mig.devices
    ):
        reason += "; NVML did not give the MIG placement (it needs root)"
    return reason
