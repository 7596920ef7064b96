"""Simulated hosts replayed from real `nvidia-smi` captures (tests/fixtures/nvidia-smi).

`capture_host(capture, state)` builds the fake libnvidia-ml (`FakeNvmlLib` of `FakeGpu`s,
tests/support/fake_nvml.py) that answers, call by call, what the captured board's driver
answered nvidia-smi: names, memory, clocks, power, thresholds (absolute, or relative to
T.Limit, and the current T.Limit margin), PCIe link, modes, MIG devices and their
profiles. nvidia-smi's units become NVML's (MiB -> bytes, W -> mW, "P0" -> 0, "Enabled" ->
1); a value nvidia-smi printed as N/A is left unset, so the fake answers NOT_SUPPORTED for
it, as the driver did. The processes of `nvidia-smi -q` are replayed as the driver lists
them: a C process in the compute list, a G one in the graphics list, a C+G one in both with
the same memory, and under MIG in the compute list of its MIG device. Nothing the capture
lacks is made up: no sample buffers, GPM, NVLink, energy or events.

`board_support(capture)` is a board's support table: which of the values the exporter reads
the board leaves N/A, by the names of `NOT_AVAILABLE_VALUES`. `conform(gpu, support)` makes a
hand-written fake (`h100()`) answer as that board does: what the board leaves N/A becomes
NOT_SUPPORTED, and the average power field (NVML_FI_DEV_POWER_AVERAGE) answers where the
board has it.

Two facts the captures do not give, and the fake therefore does not invent:

- Absolute slowdown and shutdown temperatures on boards whose driver prints them relative
  to T.Limit ("GPU Slowdown T.Limit Temp : -2 C": Hopper, L40S on R590/R595): the fake
  answers NOT_SUPPORTED for `nvmlDeviceGetTemperatureThreshold`.
- The sample buffers behind utilization: the fake answers the instantaneous
  `nvmlDeviceGetUtilizationRates` only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pynvml

from gpu_exporter.sources.nvml import nvml_h
from tests.support.fake_nvml import FakeFabric, FakeGpu, FakeMigDevice, FakeNvmlLib
from tests.support.nvidia_smi_capture import Capture, CaptureState, QueryNode, available, number

MIB = 1024 * 1024

# The values the exporter reads that a board may leave N/A, and the NVML fields behind each.
NOT_AVAILABLE_VALUES: dict[str, tuple[int, ...]] = {
    "retired_pages": (
        pynvml.NVML_FI_DEV_RETIRED_SBE,
        pynvml.NVML_FI_DEV_RETIRED_DBE,
        pynvml.NVML_FI_DEV_RETIRED_PENDING,
    ),
    "remapped_rows": (
        pynvml.NVML_FI_DEV_REMAPPED_COR,
        pynvml.NVML_FI_DEV_REMAPPED_UNC,
        pynvml.NVML_FI_DEV_REMAPPED_PENDING,
        pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
    ),
    "ecc_errors": (pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL),
    "ecc_mode": (pynvml.NVML_FI_DEV_ECC_CURRENT,),
    "memory_temperature": (pynvml.NVML_FI_DEV_MEMORY_TEMP,),
    "power_average": (pynvml.NVML_FI_DEV_POWER_AVERAGE,),
    "tlimit_thresholds": (
        pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT,
        pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT,
        pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT,
        pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT,
    ),
    "tlimit_margin": (),
    "utilization": (),
    "encoder": (),
    "decoder": (),
    "fan_speed": (),
    "mig_mode": (),
}

# clock: (NVML_CLOCK_*, its heading in nvidia-smi -q)
_CLOCKS = {
    "graphics": (pynvml.NVML_CLOCK_GRAPHICS, "Graphics"),
    "sm": (pynvml.NVML_CLOCK_SM, "SM"),
    "memory": (pynvml.NVML_CLOCK_MEM, "Memory"),
    "video": (pynvml.NVML_CLOCK_VIDEO, "Video"),
}
_FLAGS = {"Enabled": 1, "Disabled": 0, "Yes": 1, "No": 0}


def _int(text: str | None) -> int | None:
    value = number(text)
    return int(value) if value is not None else None


def _milli(text: str | None) -> int | None:
    """W -> mW (nvidia-smi prints two decimals of the driver's milliwatts)."""
    value = number(text)
    return round(value * 1000) if value is not None else None


def _mib(text: str | None) -> int | None:
    value = number(text)
    return int(value) * MIB if value is not None else None


def _flag(text: str | None) -> int | None:
    value = available(text)
    return _FLAGS[value] if value is not None else None


def _pair(first: int | None, second: int | None) -> tuple[int, int] | None:
    return (first, second) if first is not None and second is not None else None


def _first_word(text: str | None) -> str | None:
    """ "610.57.04 [Deprecated; ...]" -> "610.57.04" (R610 annotates deprecated values)."""
    value = available(text)
    return value.split()[0] if value else None


def _thresholds(gpu: QueryNode) -> dict[int, int]:
    """Absolute thresholds where nvidia-smi prints them ("GPU Slowdown Temp : 97 C")."""
    out: dict[int, int] = {}
    for key, threshold in (
        ("GPU Slowdown Temp", pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        ("GPU Shutdown Temp", pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
    ):
        celsius = _int(gpu.get("Temperature", key))
        if celsius is not None:
            out[threshold] = celsius
    return out


# T.Limit threshold field -> its line in nvidia-smi -q's Temperature section (R590, R595)
TLIMIT_LINES = {
    pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT: "GPU Shutdown T.Limit Temp",
    pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT: "GPU Slowdown T.Limit Temp",
    pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: "GPU Max Operating T.Limit Temp",
    pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT: "Memory Max Operating T.Limit Temp",
}


# clocks-event reason -> (its R580 field, --query-gpu column in microseconds)
CLOCK_EVENT_COLUMNS = {
    "sw_power_cap": (
        nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
        "clocks_event_reasons_counters.sw_power_cap [us]",
    ),
    "sync_boost": (
        nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
        "clocks_event_reasons_counters.sync_boost [us]",
    ),
    "sw_thermal_slowdown": (
        nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
        "clocks_event_reasons_counters.sw_thermal_slowdown [us]",
    ),
    "hw_thermal_slowdown": (
        nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
        "clocks_event_reasons_counters.hw_thermal_slowdown [us]",
    ),
    "hw_power_brake_slowdown": (
        nvml_h.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
        "clocks_event_reasons_counters.hw_power_brake_slowdown [us]",
    ),
}
# nvidia-smi's words for nvmlDeviceGpuRecoveryAction_t (gpu_recovery_action)
RECOVERY_ACTION_WORDS = {
    "None": 0,
    "GPU Reset": 1,
    "Node Reboot": 2,
    "Drain P2P": 3,
    "Drain and Reset": 4,
}
FABRIC_STATE_WORDS = {"Not Started": 1, "In Progress": 2, "Completed": 3}


def _row(row: dict[str, str], column: str) -> str | None:
    """A --query-gpu column that older nvidia-smi does not have is N/A."""
    return available(row.get(column))


def _recovery_action(row: dict[str, str]) -> int | None:
    word = _row(row, "gpu_recovery_action")
    if word is None:
        return None
    assert word in RECOVERY_ACTION_WORDS, f"teach RECOVERY_ACTION_WORDS {word!r}"
    return RECOVERY_ACTION_WORDS[word]


def _microseconds_as_ns(text: str | None) -> int | None:
    value = number(text)
    return int(value) * 1000 if value is not None else None


def capture_fabric(row: dict[str, str]) -> FakeFabric | None:
    """The fabric the driver answered nvidia-smi: None where it printed N/A. Health it
    printed N/A is NOT_SUPPORTED (0) in the mask and the summary; a capture that shows a
    health value needs its words taught here."""
    state = _row(row, "fabric.state")
    if state is None:
        return None
    for column in ("fabric.health.summary", "fabric.health.bandwidth"):
        assert _row(row, column) is None, f"teach capture_fabric {column}: {row[column]!r}"
    status = _row(row, "fabric.status")
    assert status in (None, "Success"), f"teach capture_fabric status {status!r}"
    uuid = (_row(row, "fabric.clusterUuid") or "").replace("-", "")
    return FakeFabric(
        state=FABRIC_STATE_WORDS[state],
        status=pynvml.NVML_SUCCESS,
        clique_id=int(_row(row, "fabric.cliqueId") or 0),
        cluster_uuid=bytes.fromhex(uuid) if uuid else bytes(16),
    )


def _fields(row: dict[str, str], gpu: QueryNode) -> dict[int | tuple[int, int], int | float]:
    """The field values the driver answered nvidia-smi (N/A: left out, NOT_SUPPORTED)."""
    answers: dict[int, int | None] = {
        pynvml.NVML_FI_DEV_ECC_CURRENT: _flag(row["ecc.mode.current"]),
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: _int(row["ecc.errors.corrected.volatile.total"]),
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: _int(row["ecc.errors.uncorrected.volatile.total"]),
        pynvml.NVML_FI_DEV_RETIRED_SBE: _int(row["retired_pages.single_bit_ecc.count"]),
        pynvml.NVML_FI_DEV_RETIRED_DBE: _int(row["retired_pages.double_bit.count"]),
        pynvml.NVML_FI_DEV_RETIRED_PENDING: _flag(row["retired_pages.pending"]),
        pynvml.NVML_FI_DEV_REMAPPED_COR: _int(row["remapped_rows.correctable"]),
        pynvml.NVML_FI_DEV_REMAPPED_UNC: _int(row["remapped_rows.uncorrectable"]),
        pynvml.NVML_FI_DEV_REMAPPED_PENDING: _flag(row["remapped_rows.pending"]),
        pynvml.NVML_FI_DEV_REMAPPED_FAILURE: _flag(row["remapped_rows.failure"]),
        pynvml.NVML_FI_DEV_MEMORY_TEMP: _int(row["temperature.memory"]),
        pynvml.NVML_FI_DEV_POWER_AVERAGE: _milli(row["power.draw.average [W]"]),
        pynvml.NVML_FI_DEV_POWER_INSTANT: _milli(row["power.draw.instant [W]"]),
        pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: _int(gpu.get("PCI", "Replays Since Reset")),
        **{field: _int(gpu.get("Temperature", line)) for field, line in TLIMIT_LINES.items()},
        nvml_h.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: _recovery_action(row),
        **{
            field: _microseconds_as_ns(row.get(column))
            for field, column in CLOCK_EVENT_COLUMNS.values()
        },
    }
    return {field: value for field, value in answers.items() if value is not None}


@dataclass(frozen=True)
class CapturedProcess:
    """One process of `nvidia-smi -q` (Processes): where it runs, its type, its memory."""

    pid: int
    kind: str  # nvidia-smi's Type: "C", "G" or "C+G"
    memory_bytes: int
    gpu_instance: int | None  # MIG only
    compute_instance: int | None


def captured_processes(gpu: QueryNode) -> list[CapturedProcess]:
    """The processes nvidia-smi listed for a GPU: the instance ids come as the two lines
    before each "Process ID"."""
    node = gpu.find("Processes")
    out: list[CapturedProcess] = []
    instances: dict[str, int | None] = {}
    for child in node.children if node is not None else []:
        if child.key in ("GPU instance ID", "Compute instance ID"):
            instances[child.key] = _int(child.value)
        elif child.key == "Process ID":
            pid, kind = _int(child.value), child.get("Type")
            memory = _mib(child.get("Used GPU Memory"))
            assert pid is not None and kind is not None and memory is not None, child
            out.append(
                CapturedProcess(
                    pid,
                    kind,
                    memory,
                    instances.get("GPU instance ID"),
                    instances.get("Compute instance ID"),
                )
            )
    return out


def _process_lists(
    processes: list[CapturedProcess],
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(compute list, graphics list) as the driver answers them: a C+G process in both."""
    compute = [(p.pid, p.memory_bytes) for p in processes if "C" in p.kind]
    graphics = [(p.pid, p.memory_bytes) for p in processes if "G" in p.kind]
    return compute, graphics


def _mig_devices(state: CaptureState, index: int, name: str) -> list[FakeMigDevice]:
    """MIG devices of `nvidia-smi -q`, with the profiles and UUIDs of `nvidia-smi -L`."""
    listing = state.mig_listing(index)
    processes = captured_processes(state.gpu(index))
    devices: list[FakeMigDevice] = []
    for node in state.gpu(index).all("MIG Device"):
        slot = _int(node.get("Index"))
        gpu_instance = _int(node.get("GPU Instance ID"))
        compute_instance = _int(node.get("Compute Instance ID"))
        total = _mib(node.get("Shared FB Memory Usage", "Total"))
        used = _mib(node.get("Shared FB Memory Usage", "Used"))
        assert slot is not None and gpu_instance is not None and compute_instance is not None
        assert total is not None and used is not None
        profile, uuid = listing[slot]
        devices.append(
            FakeMigDevice(
                slot=slot,
                gpu_instance=gpu_instance,
                compute_instance=compute_instance,
                uuid=uuid,
                name=f"{name} MIG {profile}",  # how the driver names a MIG device
                memory_bytes=(total, used),
                processes=_process_lists(
                    [
                        p
                        for p in processes
                        if (p.gpu_instance, p.compute_instance) == (gpu_instance, compute_instance)
                    ]
                )[0],
            )
        )
    return devices


def capture_gpu(state: CaptureState, index: int = 0) -> FakeGpu:
    """GPU `index` of a capture state, as a fake device that answers what it answered."""
    row, gpu = state.rows[index], state.gpu(index)
    major, minor = row["compute_cap"].split(".")
    total, reserved, used, free = (
        _mib(row[f"memory.{part} [MiB]"]) for part in ("total", "reserved", "used", "free")
    )
    pstate = available(row["pstate"])
    mask = available(row["clocks_event_reasons.active"])
    mig = _flag(row["mig.mode.current"]), _flag(row["mig.mode.pending"])
    clocks = {c: _int(row[f"clocks.current.{name} [MHz]"]) for name, (c, _) in _CLOCKS.items()}
    max_clocks = {c: _int(gpu.get("Max Clocks", heading)) for c, heading in _CLOCKS.values()}
    devices = _mig_devices(state, index, row["name"])
    compute, graphics = _process_lists(
        [p for p in captured_processes(gpu) if p.gpu_instance is None]
    )
    return FakeGpu(
        uuid=row["uuid"],
        name=row["name"],
        pci_bus_id=row["pci.bus_id"],
        serial=row["serial"],
        vbios=row["vbios_version"],
        compute_capability=(int(major), int(minor)),
        max_clocks_mhz={clock: mhz for clock, mhz in max_clocks.items() if mhz is not None},
        clocks_mhz={clock: mhz for clock, mhz in clocks.items() if mhz is not None},
        thresholds_celsius=_thresholds(gpu),
        pcie_max=_pair(_int(row["pcie.link.gen.max"]), _int(row["pcie.link.width.max"])),
        pcie_current=_pair(
            _int(row["pcie.link.gen.current"]), _int(row["pcie.link.width.current"])
        ),
        pcie_throughput_kb=_pair(
            _int(gpu.get("PCI", "Tx Throughput")), _int(gpu.get("PCI", "Rx Throughput"))
        ),
        utilization_percent=_pair(
            _int(row["utilization.gpu [%]"]), _int(row["utilization.memory [%]"])
        ),
        encoder_percent=_int(row["utilization.encoder [%]"]),
        decoder_percent=_int(row["utilization.decoder [%]"]),
        memory_bytes=(
            (total, reserved, used, free)
            if total is not None and reserved is not None and used is not None and free is not None
            else None
        ),
        temperature_celsius=_int(row["temperature.gpu"]),
        tlimit_margin_celsius=_int(row["temperature.gpu.tlimit"]),
        fan_percent=_int(row["fan.speed [%]"]),
        power_milliwatts=_milli(row["power.draw [W]"]),
        power_limit_milliwatts=_milli(row["enforced.power.limit [W]"]),
        pstate=int(pstate.removeprefix("P")) if pstate else None,
        clocks_event_reasons=int(mask, 16) if mask else None,
        persistence=_flag(row["persistence_mode"]),
        mig=_pair(*mig),
        fields=_fields(row, gpu),
        mig_devices=devices,
        mig_slots=max((d.slot for d in devices), default=-1) + 1,
        compute_processes=compute,
        graphics_processes=graphics,
        fabric=capture_fabric(row),
    )


def capture_host(capture: Capture, state: str) -> FakeNvmlLib:
    """The fake libnvidia-ml of a captured host in `state` ("idle" or "load")."""
    captured = capture.state(state)
    driver = _first_word(captured.rows[0]["driver_version"])
    cuda = _first_word(captured.cuda_version)
    assert driver is not None and cuda is not None, capture.name
    major, minor = cuda.split(".")
    return FakeNvmlLib(
        [capture_gpu(captured, index) for index in range(len(captured.rows))],
        driver_version=driver,
        cuda_version=int(major) * 1000 + int(minor) * 10,  # as nvmlSystemGetCudaDriverVersion
    )


@dataclass(frozen=True)
class BoardSupport:
    """What one board leaves N/A, as one capture of it shows (names of NOT_AVAILABLE_VALUES)."""

    capture: str
    model: str
    not_available: frozenset[str]


def board_support(capture: Capture, state: str = "idle") -> BoardSupport:
    """The support table of GPU 0 of a capture, read from the fake built from it."""
    gpu = capture_gpu(capture.state(state))
    missing = {
        name
        for name, field_ids in NOT_AVAILABLE_VALUES.items()
        if field_ids and not any(field_id in gpu.fields for field_id in field_ids)
    }
    for name, value in (
        ("utilization", gpu.utilization_percent),
        ("encoder", gpu.encoder_percent),
        ("decoder", gpu.decoder_percent),
        ("fan_speed", gpu.fan_percent),
        ("mig_mode", gpu.mig),
        ("tlimit_margin", gpu.tlimit_margin_celsius),
    ):
        if value is None:
            missing.add(name)
    return BoardSupport(capture.name, gpu.name, frozenset(missing))


def conform(gpu: FakeGpu, support: BoardSupport) -> FakeGpu:
    """A copy of a hand-written fake that answers as `support`'s board does: what the board
    leaves N/A answers NOT_SUPPORTED; the average power field answers where it has one
    (with the draw `nvmlDeviceGetPowerUsage` reports, which is that average)."""
    fields = dict(gpu.fields)
    for name in support.not_available:
        for field_id in NOT_AVAILABLE_VALUES[name]:
            fields.pop(field_id, None)
    if "power_average" not in support.not_available and gpu.power_milliwatts is not None:
        fields.setdefault(pynvml.NVML_FI_DEV_POWER_AVERAGE, gpu.power_milliwatts)
    gone = support.not_available
    return dataclasses.replace(
        gpu,
        fields=fields,
        utilization_percent=None if "utilization" in gone else gpu.utilization_percent,
        samples={} if "utilization" in gone else dict(gpu.samples),
        encoder_percent=None if "encoder" in gone else gpu.encoder_percent,
        decoder_percent=None if "decoder" in gone else gpu.decoder_percent,
        fan_percent=None if "fan_speed" in gone else gpu.fan_percent,
        mig=None if "mig_mode" in gone else gpu.mig,
        tlimit_margin_celsius=None if "tlimit_margin" in gone else gpu.tlimit_margin_celsius,
    )
