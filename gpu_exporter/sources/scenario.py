"""The scenario file of a simulated host (`--simulate.scenario FILE`, YAML or JSON).

It injects faults, replaces the built-in tenant processes and raises Xid events, for
tests and demos that drive the real program. It is re-read when it changes; see
`SimulatedBackend`. Every key is validated: a misspelled one is an error, never ignored,
and every number is bounded by what a real host can have (`MAX_*` below).

    faults:
      init_error: driver_not_loaded   # NVML fails to initialise with this error
      lost: [1]                       # GPU_IS_LOST on these indices
      hang: [2]                       # reads block until the fault is removed
      same_uuid: [0, 1]               # these GPUs all report the first one's UUID
      unsupported:                    # these readings answer NOT_SUPPORTED
        - temperature.fan_speed_ratio #   READING.FIELD of a DeviceReading
        - utilization.samples         #   the driver's utilization sample buffer
        - process.list                #   the process lists
      gpus: 3                         # how many GPUs are visible (default N)
      library_hang: true              # nvmlDeviceGetCount blocks (NVML itself stuck)
      reset: [0]                      # reset (nvidia-smi -r) as the file is loaded: the
                                      #   driver's counters (energy...) restart from 0
      events_unsupported: true        # the event API answers NOT_SUPPORTED
      recovery_action: {1: node_reboot}  # the driver asks for this action on a GPU: a
                                      #   name of RECOVERY_ACTIONS (none, gpu_reset,
                                      #   node_reboot, drain_p2p, drain_and_reset,
                                      #   recover_imex_domain, ...) or a code
      fabric: {0: unhealthy}          # a GPU's NVLink fabric is unhealthy,
                                      #   limited_capacity, not_registered (its probe
                                      #   never started), in_progress or probe_failed
      nvlink_degrading: {0: 7}        # a GPU's NVLink5 link degrades from the load on:
                                      #   recoveries, effective errors and BER climb
                                      #   (--simulate.hardware gb200-nvl72)
      fabric_daemons_down: [nvidia-imex]  # these fabric daemons do not run on the host
                                      #   (nv-fabricmanager, nvidia-imex)
    events:                           # Xid events, delivered once each, in order
      - {gpu: 1, xid: 79}
    processes:                        # replace the built-in processes (real PIDs allowed)
      - {gpu: 0, pid: 1234, memory_bytes: 1073741824, sm_ratio: 0.5}
      - {gpu: 3, pid: 1235, memory_bytes: 1073741824, gpu_instance: 3}  # on a MIG instance
      # a process of a container (a Kubernetes pod's where pod_uid is given): the host
      # side comes from here, not /proc, as for the built-in tenants
      - {gpu: 1, pid: 4000, sm_ratio: 0.6, user: alice,
         container_id: <64 hex digits>, pod_uid: <the pod's metadata.uid>}
      # a framework's memory trace (`simulated_memory.TRACES`: tensorflow, jax, vllm,
      # pytorch-pressure, pytorch-growing, flat) at a level (a share of its GPU's or MIG
      # instance's total), listed from start_seconds to end_seconds after the file was
      # loaded; a GPU or instance with a traced process uses what its processes hold
      - {gpu: 2, pid: 4242, memory_trace: tensorflow, memory_ratio: 0.99, end_seconds: 600}
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from gpu_exporter.model import FABRIC_DAEMONS, RECOVERY_ACTIONS, DeviceReading
from gpu_exporter.records import Record
from gpu_exporter.sources.simulated_layout import mig_instances
from gpu_exporter.sources.simulated_memory import TRACES
from gpu_exporter.yamlfile import YamlFileError, one_line, read_yaml

SAMPLES = "utilization.samples"
PROCESS_LIST = "process.list"
EVENT_KINDS = ("xid", "ecc_single_bit", "ecc_double_bit", "other")
FABRIC_FAULTS = ("unhealthy", "limited_capacity", "not_registered", "in_progress", "probe_failed")
MAX_RECOVERY_ACTION = 255  # nvml.h names 0 to 7

# Bounds of the numbers a scenario may hold: what a real host can have, so a value the
# simulated driver hands on (a 300-digit memory size) can never overflow a float later.
MAX_GPUS = 1024  # as --simulate N
MAX_PID = 2**22 - 1  # below PID_MAX_LIMIT (2**22 on 64-bit Linux)
MAX_MEMORY_BYTES = 2**50  # 1 PiB, far above any GPU's memory
MAX_XID = 65535  # NVIDIA's Xid codes are below 200 today
MAX_GPU_INSTANCE = 64  # MIG GPU instance ids are small (at most 7 instances per GPU)
MAX_NVLINK = 17  # NVLink links are numbered from 0; 18 on an H100 or a B200
MAX_SECONDS = 366 * 86400  # a trace's start and end: within a year of the file's loading


def reading_fields() -> frozenset[str]:
    """Every `READING.FIELD` of a `DeviceReading` a fault can make unsupported."""
    names: set[str] = {SAMPLES, PROCESS_LIST}
    for name, hint in typing.get_type_hints(DeviceReading).items():
        for record in typing.get_args(hint):
            if record is not type(None):
                names.update(f"{name}.{f.name}" for f in fields(record))
    return frozenset(names)


UNSUPPORTABLE = reading_fields()


@dataclass(frozen=True, repr=False)
class SimulatedProcess(Record):
    """A process the scenario places on a GPU (its PID may be a real one)."""

    gpu: int
    pid: int
    memory_bytes: int | None = None
    sm_ratio: float | None = None
    memory_controller_ratio: float | None = None
    context: str = "compute"  # or "graphics", or "compute+graphics": in both NVML lists
    gpu_instance: int | None = None  # a MIG GPU instance of its GPU (`simulated_layout`)
    # its host side, where given (else /proc's): a container's process, a pod's with pod_uid
    user: str | None = None
    container_id: str | None = None  # 64 lowercase hex digits
    pod_uid: str | None = None  # 8-4-4-4-12 lowercase hex digits
    memory_trace: str | None = None  # a `simulated_memory.TRACES` name
    memory_ratio: float | None = None  # the trace's level, a share of the total (0..1)
    start_seconds: float = 0.0  # listed from this long after the file was loaded ...
    end_seconds: float | None = None  # ... until this long after (None: for ever)

    @property
    def has_host_side(self) -> bool:
        return any(v is not None for v in (self.user, self.container_id, self.pod_uid))

    def listed(self, seconds: float) -> bool:
        """Whether the process is on its GPU `seconds` after the scenario was loaded."""
        return self.start_seconds <= seconds and (
            self.end_seconds is None or seconds < self.end_seconds
        )


@dataclass(frozen=True, repr=False)
class SimulatedEvent(Record):
    """An Xid (or ECC) event the scenario raises on a GPU."""

    gpu: int
    xid: int | None = None
    kind: str = "xid"


@dataclass(frozen=True, repr=False)
class Faults(Record):
    """Faults to inject; the default injects none."""

    init_error: str | None = None  # e.g. "driver_not_loaded"
    lost: frozenset[int] = frozenset()
    hang: frozenset[int] = frozenset()
    same_uuid: frozenset[int] = frozenset()  # report the UUID of the lowest of them
    unsupported: frozenset[str] = frozenset()  # UNSUPPORTABLE names
    gpus: int | None = None
    events_unsupported: bool = False  # NVML's event API answers NOT_SUPPORTED
    library_hang: bool = False  # nvmlDeviceGetCount blocks: NVML itself is stuck
    reset: frozenset[int] = frozenset()  # reset when the faults are loaded (nvidia-smi -r)
    recovery_action: Mapping[int, int] = field(default_factory=dict)  # GPU -> action code
    fabric: Mapping[int, str] = field(default_factory=dict)  # GPU -> FABRIC_FAULTS name
    nvlink_degrading: Mapping[int, int] = field(default_factory=dict)  # GPU -> its link
    fabric_daemons_down: frozenset[str] = frozenset()  # FABRIC_DAEMONS not running


@dataclass(frozen=True, repr=False)
class Scenario(Record):
    """What a scenario file holds."""

    faults: Faults = field(default_factory=Faults)
    processes: tuple[SimulatedProcess, ...] | None = None  # None: the built-in processes
    events: tuple[SimulatedEvent, ...] = ()  # delivered once each, in order


class ScenarioError(ValueError):
    """A scenario file that cannot be read, or holds something unknown or malformed."""


def _mapping(value: Any, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where} must be a mapping, not {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise ScenarioError(f"unknown {where} keys: {unknown} (known: {', '.join(allowed)})")
    return value


def _shown(value: Any) -> str:
    """`value` for a message: a number of hundreds of digits is named by its length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"a {len(str(abs(value)))}-digit number"
    return repr(value)


def _int(value: Any, where: str, *, minimum: int = 0, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{where} must be an integer, not {_shown(value)}")
    if not minimum <= value <= maximum:
        raise ScenarioError(f"{where} must be between {minimum} and {maximum}, not {_shown(value)}")
    return value


def _gpu(value: Any, where: str) -> int:
    return _int(value, where, maximum=MAX_GPUS - 1)


def _ratio(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(f"{where} must be a number between 0 and 1, not {_shown(value)}")
    if not 0 <= value <= 1:  # compared before float(): a huge integer would overflow it
        raise ScenarioError(f"{where} must be between 0 and 1, not {_shown(value)}")
    return float(value)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ScenarioError(f"{where} must be true or false, not {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScenarioError(f"{where} must be a list, not {type(value).__name__}")
    return value


def _by_gpu(value: Any, where: str) -> dict[int, Any]:
    """A mapping of GPU index to a value ({1: node_reboot}); in JSON, whose keys are all
    strings, the index is written in ASCII digits ({"1": "node_reboot"})."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where} must map GPU indices to values, not {type(value).__name__}")
    return {_gpu(_index_key(gpu), f"{where} key"): v for gpu, v in value.items()}


def _index_key(key: Any) -> Any:
    """A JSON key of ASCII digits as its number (at most 4: no host has more GPUs)."""
    digits = isinstance(key, str) and 0 < len(key) <= 4 and key.isascii() and key.isdigit()
    return int(key) if digits else key


def _recovery_action(value: Any, where: str) -> int:
    names = {name: code for code, name in RECOVERY_ACTIONS.items()}
    if isinstance(value, str):
        if value not in names:
            raise ScenarioError(
                f"{where} must be one of {', '.join(names)} or a code, not {value!r}"
            )
        return names[value]
    return _int(value, where, maximum=MAX_RECOVERY_ACTION)


def _fabric_fault(value: Any, where: str) -> str:
    if value not in FABRIC_FAULTS:
        raise ScenarioError(f"{where} must be one of {', '.join(FABRIC_FAULTS)}, not {value!r}")
    return str(value)


def _faults(data: Any) -> Faults:
    raw = _mapping(data, "faults", tuple(f.name for f in fields(Faults)))
    unsupported = frozenset(str(x) for x in _list(raw.get("unsupported"), "faults.unsupported"))
    unknown = sorted(unsupported - UNSUPPORTABLE)
    if unknown:
        raise ScenarioError(
            f"faults.unsupported: unknown readings {unknown} "
            "(use READING.FIELD, e.g. temperature.fan_speed_ratio, utilization.samples)"
        )
    init_error = raw.get("init_error")
    if init_error is not None and not isinstance(init_error, str):
        raise ScenarioError(f"faults.init_error must be an error name, not {init_error!r}")
    gpus = raw.get("gpus")
    daemons_down = frozenset(
        str(x) for x in _list(raw.get("fabric_daemons_down"), "faults.fabric_daemons_down")
    )
    unknown_daemons = sorted(daemons_down - set(FABRIC_DAEMONS))
    if unknown_daemons:
        raise ScenarioError(
            f"faults.fabric_daemons_down: unknown daemons {unknown_daemons} "
            f"(known: {', '.join(FABRIC_DAEMONS)})"
        )
    return Faults(
        init_error=init_error or None,
        lost=frozenset(_gpu(x, "faults.lost[]") for x in _list(raw.get("lost"), "faults.lost")),
        hang=frozenset(_gpu(x, "faults.hang[]") for x in _list(raw.get("hang"), "faults.hang")),
        same_uuid=frozenset(
            _gpu(x, "faults.same_uuid[]") for x in _list(raw.get("same_uuid"), "faults.same_uuid")
        ),
        unsupported=unsupported,
        gpus=_int(gpus, "faults.gpus", maximum=MAX_GPUS) if gpus is not None else None,
        events_unsupported=_bool(raw.get("events_unsupported", False), "faults.events_unsupported"),
        library_hang=_bool(raw.get("library_hang", False), "faults.library_hang"),
        reset=frozenset(_gpu(x, "faults.reset[]") for x in _list(raw.get("reset"), "faults.reset")),
        recovery_action={
            gpu: _recovery_action(action, f"faults.recovery_action[{gpu}]")
            for gpu, action in _by_gpu(raw.get("recovery_action"), "faults.recovery_action").items()
        },
        fabric={
            gpu: _fabric_fault(fault, f"faults.fabric[{gpu}]")
            for gpu, fault in _by_gpu(raw.get("fabric"), "faults.fabric").items()
        },
        nvlink_degrading={
            gpu: _int(link, f"faults.nvlink_degrading[{gpu}]", maximum=MAX_NVLINK)
            for gpu, link in _by_gpu(raw.get("nvlink_degrading"), "faults.nvlink_degrading").items()
        },
        fabric_daemons_down=daemons_down,
    )


def _process(data: Any, n: int) -> SimulatedProcess:
    where = f"processes[{n}]"
    raw = _mapping(data, where, tuple(f.name for f in fields(SimulatedProcess)))
    for required in ("gpu", "pid"):
        if required not in raw:
            raise ScenarioError(f"{where}: {required} is missing")
    context = raw.get("context", "compute")
    if context not in ("compute", "graphics", "compute+graphics"):
        raise ScenarioError(
            f"{where}.context must be compute, graphics or compute+graphics, not {context!r}"
        )
    memory = raw.get("memory_bytes")
    gpu = _gpu(raw["gpu"], f"{where}.gpu")
    gpu_instance = raw.get("gpu_instance")
    if gpu_instance is not None:
        gpu_instance = _int(gpu_instance, f"{where}.gpu_instance", maximum=MAX_GPU_INSTANCE)
        ids = [i.gpu_instance for i in mig_instances(gpu)]
        if gpu_instance not in ids:
            have = f"has instances {', '.join(map(str, ids))}" if ids else "is not MIG-partitioned"
            raise ScenarioError(
                f"{where}.gpu_instance: GPU {gpu} {have}, not instance {gpu_instance}"
            )
    trace = raw.get("memory_trace")
    if trace is not None and trace not in TRACES:
        raise ScenarioError(f"{where}.memory_trace must be one of {', '.join(TRACES)}")
    level = _ratio(raw.get("memory_ratio"), f"{where}.memory_ratio")
    if trace is not None and level is None:
        raise ScenarioError(f"{where}: a memory_trace needs its memory_ratio")
    if trace is not None and memory is not None:
        raise ScenarioError(f"{where}: memory_bytes or a memory_trace, not both")
    start = _seconds(raw.get("start_seconds", 0), f"{where}.start_seconds")
    end = raw.get("end_seconds")
    end = _seconds(end, f"{where}.end_seconds") if end is not None else None
    if end is not None and end <= start:
        raise ScenarioError(f"{where}.end_seconds must be after start_seconds")
    return SimulatedProcess(
        memory_trace=trace,
        memory_ratio=level,
        start_seconds=start,
        end_seconds=end,
        gpu=gpu,
        pid=_int(raw["pid"], f"{where}.pid", minimum=1, maximum=MAX_PID),
        memory_bytes=(
            _int(memory, f"{where}.memory_bytes", maximum=MAX_MEMORY_BYTES)
            if memory is not None
            else None
        ),
        sm_ratio=_ratio(raw.get("sm_ratio"), f"{where}.sm_ratio"),
        memory_controller_ratio=_ratio(
            raw.get("memory_controller_ratio"), f"{where}.memory_controller_ratio"
        ),
        context=context,
        gpu_instance=gpu_instance,
        **{key: _host_label(raw.get(key), where, key) for key in HOST_LABELS},
    )


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(f"{where} must be a number of seconds, not {_shown(value)}")
    if not 0 <= value <= MAX_SECONDS:  # compared before float(): a huge integer overflows
        raise ScenarioError(f"{where} must be between 0 and {MAX_SECONDS}, not {_shown(value)}")
    return float(value)


def _is_user(value: str) -> bool:
    return 0 < len(value) <= 32 and set(value) <= _USER_CHARS and not value[0].isdigit()


def _is_container_id(value: str) -> bool:
    return len(value) == 64 and set(value) <= _HEX


def _is_pod_uid(value: str) -> bool:
    parts = value.split("-", 5)
    return [len(part) for part in parts] == [8, 4, 4, 4, 12] and set("".join(parts)) <= _HEX


# A scenario process's host side: each label's shape, checked without a pattern.
_HEX = frozenset("0123456789abcdef")
_USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
HOST_LABELS: dict[str, tuple[str, typing.Callable[[str], bool]]] = {
    "user": ("a user name (a-z, 0-9, _ and -, at most 32)", _is_user),
    "container_id": ("64 lowercase hex digits", _is_container_id),
    "pod_uid": ("a pod UID (8-4-4-4-12 lowercase hex digits)", _is_pod_uid),
}


def _host_label(value: Any, where: str, key: str) -> str | None:
    if value is None:
        return None
    shape, valid = HOST_LABELS[key]
    if not isinstance(value, str) or not valid(value):
        raise ScenarioError(f"{where}.{key} must be {shape}, not {one_line(repr(value))[:80]}")
    return value


def _event(data: Any, n: int) -> SimulatedEvent:
    where = f"events[{n}]"
    raw = _mapping(data, where, tuple(f.name for f in fields(SimulatedEvent)))
    if "gpu" not in raw:
        raise ScenarioError(f"{where}: gpu is missing")
    kind = raw.get("kind", "xid")
    if kind not in EVENT_KINDS:
        raise ScenarioError(f"{where}.kind must be one of {', '.join(EVENT_KINDS)}, not {kind!r}")
    xid = raw.get("xid")
    if kind == "xid" and xid is None:
        raise ScenarioError(f"{where}: an xid event needs its xid code")
    return SimulatedEvent(
        gpu=_gpu(raw["gpu"], f"{where}.gpu"),
        xid=_int(xid, f"{where}.xid", maximum=MAX_XID) if xid is not None else None,
        kind=kind,
    )


def parse_scenario(data: Any) -> Scenario:
    """Build a Scenario from parsed JSON/YAML; raises ScenarioError."""
    top = _mapping(data, "scenario", ("faults", "processes", "events"))
    raw_processes = top.get("processes")
    return Scenario(
        faults=_faults(top.get("faults")),
        processes=(
            None
            if raw_processes is None
            else tuple(_process(p, n) for n, p in enumerate(_list(raw_processes, "processes")))
        ),
        events=tuple(_event(e, n) for n, e in enumerate(_list(top.get("events"), "events"))),
    )


def _named_gpus(scenario: Scenario) -> list[tuple[str, int]]:
    """(where, GPU index) of every GPU the scenario names."""
    faults = scenario.faults
    named = [
        (f"faults.{name}", index)
        for name, indices in (
            ("lost", faults.lost),
            ("hang", faults.hang),
            ("same_uuid", faults.same_uuid),
            ("reset", faults.reset),
            ("recovery_action", faults.recovery_action),
            ("fabric", faults.fabric),
            ("nvlink_degrading", faults.nvlink_degrading),
        )
        for index in sorted(indices)
    ]
    named += [(f"processes[{n}].gpu", p.gpu) for n, p in enumerate(scenario.processes or ())]
    named += [(f"events[{n}].gpu", e.gpu) for n, e in enumerate(scenario.events)]
    return named


def check_gpus(scenario: Scenario, gpus: int) -> None:
    """Refuse a scenario that names a GPU a simulated host of `gpus` GPUs does not have
    (more are there when the scenario's `faults.gpus` makes more visible)."""
    present = max(gpus, scenario.faults.gpus or 0)
    for where, index in _named_gpus(scenario):
        if index >= present:
            has = f"GPUs 0 to {present - 1}" if present > 1 else "GPU 0 only"
            raise ScenarioError(
                f"{where}: GPU {index} does not exist: the simulated host has "
                f"{has if present else 'no GPUs'}"
            )


def load_scenario(path: str, gpus: int) -> Scenario:
    """Read a scenario file (JSON is YAML too) for a simulated host of `gpus` GPUs; raises
    ScenarioError naming the file."""
    try:
        scenario = parse_scenario(read_yaml(path))
        check_gpus(scenario, gpus)
        return scenario
    except (YamlFileError, ScenarioError) as error:
        raise ScenarioError(f"{path}: {one_line(str(error))}") from None
