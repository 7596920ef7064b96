"""NVIDIA's own `nvml.h` is the contract for what the exporter hands the driver.

The fake libnvidia-ml of the other contract tests was written here, from the same reading
of the documentation as the code, so it cannot catch a wrong layout or constant. These
tests compile a small C probe against the header NVIDIA ships (PyPI `nvidia-nvml-dev`,
pinned below: NVML API version 13) with the system's C compiler, and compare what the
probe prints with the code's:

- `sizeof` and `offsetof` (and each member's size) of every C structure the code lays out
  in ctypes itself or reads through pynvml's structures, and the struct formats that
  decode them;
- the value of every `NVML_*` / `nvml*` constant the package uses, found by reading the
  package's source, so a constant added tomorrow is checked too;
- the bit of every clocks-event reason the exporter names;
- that every C function the code looks up by name is declared in the header.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.metadata
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpu_exporter.model import THROTTLE_REASONS
from gpu_exporter.sources.nvml import buffers, fabric, fields, gpm, nvml_h, platform, structs

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "gpu_exporter"

HEADER_PACKAGE = "nvidia-nvml-dev"
HEADER_PACKAGE_VERSION = "13.5.37"  # pinned in pyproject.toml's dev extra
NVML_API_VERSION = 13  # what that header declares as NVML_API_VERSION

# C type in nvml.h -> the ctypes class the code lays it out with (ours or pynvml's)
STRUCTURES: dict[str, Any] = {
    # the code's own mirrors, in arrays it keeps between intervals
    "nvmlFieldValue_t": fields.FieldValue,
    "nvmlSample_t": buffers.SampleEntry,
    "nvmlProcessInfo_v2_t": buffers.ProcessInfo,  # what the _v2/_v3 process lists fill
    "nvmlProcessUtilizationSample_t": buffers.ProcessUtilization,
    "nvmlGpmMetric_t": gpm.Metric,
    "nvmlGpmMetricsGet_t": gpm.MetricsRequest,
    "nvmlGpuFabricInfo_t": fabric.FabricInfo,
    "nvmlGpuFabricInfo_v2_t": fabric.FabricInfoV2,
    "nvmlGpuFabricInfo_v3_t": fabric.FabricInfoV3,
    "nvmlPlatformInfo_v2_t": platform.PlatformInfoV2,
    "nvmlMemory_v2_t": structs.MemoryV2,  # read every interval (structs.py)
    "nvmlTemperature_v1_t": structs.TemperatureV1,
    "nvmlUtilization_t": structs.Utilization,
    # pynvml's, which the code reads fields of or builds its mirrors from
    "nvmlValue_t": pynvml.c_nvmlValue_t,
    "nvmlMemory_t": pynvml.c_nvmlMemory_t,
    "nvmlPciInfo_t": pynvml.nvmlPciInfo_t,
    "nvmlEventData_t": pynvml.c_nvmlEventData_t,
    "nvmlGpmSupport_t": pynvml.c_nvmlGpmSupport_t,
    "nvmlGpuInstancePlacement_t": pynvml.c_nvmlGpuInstancePlacement_t,
    "nvmlGpuInstanceInfo_t": pynvml.c_nvmlGpuInstanceInfo_t,
}

# the version words the code writes into versioned structures -> the header's macro
VERSIONS: dict[str, int] = {
    "nvmlMemory_v2": structs.MEMORY_V2_VERSION,
    "nvmlTemperature_v1": structs.TEMPERATURE_V1_VERSION,
}

# struct formats that decode a C structure in one pass: their size is the structure's
FORMATS: dict[str, tuple[str, int]] = {
    "buffers.SAMPLE_FORMAT": ("nvmlSample_t", buffers.SAMPLE_FORMAT.size),
    "buffers.PROCESS_FORMAT": ("nvmlProcessInfo_v2_t", buffers.PROCESS_FORMAT.size),
    "buffers.PROCESS_UTILIZATION_FORMAT": (
        "nvmlProcessUtilizationSample_t",
        buffers.PROCESS_UTILIZATION_FORMAT.size,
    ),
    "gpm.METRIC_ANSWER": ("nvmlGpmMetric_t", gpm.METRIC_ANSWER.size),
    "fields._ENTRY": ("nvmlFieldValue_t", fields._ENTRY.size),
}

# THROTTLE_REASONS (bit order of the mask) -> the header's macro for that bit
CLOCKS_EVENT_MACROS: dict[str, str] = {
    "gpu_idle": "nvmlClocksEventReasonGpuIdle",
    "applications_clocks_setting": "nvmlClocksEventReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksEventReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksThrottleReasonHwSlowdown",
    "sync_boost": "nvmlClocksEventReasonSyncBoost",
    "sw_thermal_slowdown": "nvmlClocksEventReasonSwThermalSlowdown",
    "hw_thermal_slowdown": "nvmlClocksThrottleReasonHwThermalSlowdown",
    "hw_power_brake_slowdown": "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
    "display_clock_setting": "nvmlClocksEventReasonDisplayClockSetting",
}

_CONSTANT = re.compile(r"^(NVML_[A-Z0-9_]+|nvml[A-Z][A-Za-z0-9]*(_v\d+)?)$")
_FUNCTION = re.compile(r"^nvml(Device|System|Gpm|GpuInstance|Event|Init|Shutdown)[A-Za-z0-9_]*$")


# The header ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def include_dir() -> Path:
    """The folder holding NVIDIA's nvml.h from the pinned `nvidia-nvml-dev`."""
    try:
        version = importlib.metadata.version(HEADER_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"{HEADER_PACKAGE} is not installed: it is in the dev extra (make test)")
    assert version == HEADER_PACKAGE_VERSION, (
        f"{HEADER_PACKAGE} {version} is installed, the tests are written for "
        f"{HEADER_PACKAGE_VERSION}: re-pin both together"
    )
    files = importlib.metadata.files(HEADER_PACKAGE) or []
    headers = [f for f in files if f.name == "nvml.h"]
    assert len(headers) == 1, f"{HEADER_PACKAGE} ships {len(headers)} nvml.h files"
    return Path(str(headers[0].locate())).parent


@pytest.fixture(scope="module")
def header_text(include_dir: Path) -> str:
    return (include_dir / "nvml.h").read_text()


@pytest.fixture(scope="module")
def probe(include_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """What the C probe prints: name -> value, for every question below."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler: make system-deps installs gcc"
    work = tmp_path_factory.mktemp("nvml_probe")
    source = work / "probe.c"
    source.write_text(_probe_source())
    binary = work / "probe"
    built = subprocess.run(
        [compiler, "-std=gnu11", "-Werror", f"-I{include_dir}", str(source), "-o", str(binary)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, "the probe does not compile against nvml.h:\n" + built.stderr
    ran = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
    out: dict[str, int] = {}
    for line in ran.stdout.splitlines():
        name, value = line.rsplit(" ", 1)
        out[name] = int(value)
    return out


def _probe_source() -> str:
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        "#include <nvml.h>",
        '#define Q(name, expr) printf("%s %lld\\n", name, (long long)(expr))',
        "int main(void) {",
        'Q("NVML_API_VERSION", NVML_API_VERSION);',
    ]
    for c_type, cls in STRUCTURES.items():
        lines.append(f'Q("sizeof {c_type}", sizeof({c_type}));')
        for path, _offset, _size in _members(cls):
            lines.append(f'Q("offsetof {c_type}.{path}", offsetof({c_type}, {path}));')
            lines.append(f'Q("sizeof {c_type}.{path}", sizeof((({c_type} *)0)->{path}));')
    for name in sorted(_used_constants() | set(_own_constants())):
        lines.append(f'Q("{name}", {name});')
    for macro in CLOCKS_EVENT_MACROS.values():
        lines.append(f'Q("{macro}", {macro});')
    for macro in VERSIONS:
        lines.append(f'Q("{macro}", {macro});')
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


# The code --------------------------------------------------------------------------


def _members(cls: Any, prefix: str = "", base: int = 0) -> Iterator[tuple[str, int, int]]:
    """(C member path, offset, size) of every member of a ctypes structure, nested
    structures and unions walked (an array's elements are not)."""
    for name, ctype, *_bits in cls._fields_:
        descriptor = getattr(cls, name)
        path, offset = f"{prefix}{name}", base + descriptor.offset
        yield path, offset, descriptor.size
        if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure | ctypes.Union):
            yield from _members(ctype, f"{path}.", offset)


def _sources() -> Iterator[ast.AST]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield ast.parse(path.read_text(), str(path))


def _used_constants() -> set[str]:
    """Every integer constant of pynvml that the package names: `pynvml.NAME`, and the
    family of names a `getattr(pynvml, f"PREFIX{...}")` can reach."""
    names: set[str] = set()
    for tree in _sources():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "pynvml"
                and _CONSTANT.match(node.attr)
            ):
                names.add(node.attr)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "pynvml"
                and isinstance(node.args[1], ast.JoinedStr)
                and node.args[1].values
                and isinstance(node.args[1].values[0], ast.Constant)
            ):
                prefix = str(node.args[1].values[0].value)
                names |= {n for n in vars(pynvml) if n.startswith(prefix)}
    return {n for n in names if type(getattr(pynvml, n, None)) is int}


def _own_constants() -> dict[str, int]:
    """The constants the package defines itself in `nvml_h`, under nvml.h's names (the
    `R575_` ones are another branch's, and not in this header)."""
    return {
        name: value
        for name, value in vars(nvml_h).items()
        if _CONSTANT.match(name) and type(value) is int
    }


def _looked_up_functions() -> set[str]:
    """C functions the nvml package names as strings (looked up through
    `_nvmlGetFunctionPointer`, or listed as versions to try)."""
    names: set[str] = set()
    for tree in _sources():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _FUNCTION.match(node.value)
            ):
                names.add(node.value)
    return names


# The contract ----------------------------------------------------------------------


def test_the_pinned_header_is_nvml_api_version_13(probe: dict[str, int]) -> None:
    assert probe["NVML_API_VERSION"] == NVML_API_VERSION


@pytest.mark.parametrize("c_type", list(STRUCTURES))
def test_each_structure_is_laid_out_as_the_header_says(c_type: str, probe: dict[str, int]) -> None:
    cls = STRUCTURES[c_type]
    assert ctypes.sizeof(cls) == probe[f"sizeof {c_type}"], f"sizeof({c_type})"
    for path, offset, size in _members(cls):
        assert offset == probe[f"offsetof {c_type}.{path}"], f"offsetof({c_type}, {path})"
        assert size == probe[f"sizeof {c_type}.{path}"], f"sizeof({c_type}.{path})"


@pytest.mark.parametrize("macro", list(VERSIONS))
def test_each_version_word_is_the_header_s(macro: str, probe: dict[str, int]) -> None:
    assert VERSIONS[macro] == probe[macro], macro


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_struct_format_reads_one_whole_entry(name: str, probe: dict[str, int]) -> None:
    c_type, size = FORMATS[name]
    assert size == probe[f"sizeof {c_type}"], f"{name} reads {size} bytes of a {c_type}"


def test_the_package_names_the_constants_this_test_checks() -> None:
    used = _used_constants()
    # a few the code cannot work without: if the scan misses these, it misses others
    assert {
        "NVML_ERROR_GPU_IS_LOST",
        "NVML_FI_DEV_ECC_SBE_VOL_TOTAL",
        "NVML_GPM_METRIC_SM_UTIL",
        "nvmlEventTypeXidCriticalError",
        "NVML_TEMPERATURE_GPU",
        "NVML_GPM_METRICS_GET_VERSION",
    } <= used
    assert len(used) >= 70


def test_every_constant_the_code_uses_has_the_headers_value(probe: dict[str, int]) -> None:
    wrong = {
        name: (getattr(pynvml, name), probe[name])
        for name in sorted(_used_constants())
        if getattr(pynvml, name) != probe[name]
    }
    assert not wrong, f"(pynvml, nvml.h) differ: {wrong}"


def test_every_constant_the_package_defines_itself_has_the_headers_value(
    probe: dict[str, int],
) -> None:
    own = _own_constants()
    assert {"NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", "nvmlGpuFabricInfo_v3"} <= set(own)
    assert len(own) >= 40
    wrong = {name: (value, probe[name]) for name, value in own.items() if value != probe[name]}
    assert not wrong, f"(nvml_h, nvml.h) differ: {wrong}"


def test_the_fabric_structures_carry_the_headers_version_words(probe: dict[str, int]) -> None:
    """NVML_STRUCT_VERSION(GpuFabricInfo, N) is the structure's size with N in the top byte."""
    for version, cls in ((2, fabric.FabricInfoV2), (3, fabric.FabricInfoV3)):
        assert probe[f"nvmlGpuFabricInfo_v{version}"] == ctypes.sizeof(cls) | version << 24


def test_the_platform_structure_carries_the_headers_version_word(probe: dict[str, int]) -> None:
    size = ctypes.sizeof(platform.PlatformInfoV2)
    assert probe["nvmlPlatformInfo_v2"] == size | 2 << 24 == nvml_h.nvmlPlatformInfo_v2


def test_every_clocks_event_reason_is_the_headers_bit(probe: dict[str, int]) -> None:
    assert set(CLOCKS_EVENT_MACROS) == set(THROTTLE_REASONS)
    for bit, reason in enumerate(THROTTLE_REASONS):
        assert probe[CLOCKS_EVENT_MACROS[reason]] == 1 << bit, reason


def test_every_function_the_code_looks_up_is_declared(header_text: str) -> None:
    functions = _looked_up_functions()
    assert {"nvmlDeviceGetFieldValues", "nvmlDeviceGetSamples", "nvmlGpmMetricsGet"} <= functions
    assert {"nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetInfo"} <= functions
    declared = set(re.findall(r"DECLDIR\s+(nvml\w+)\s*\(", header_text))
    assert not functions - declared, f"not in nvml.h: {sorted(functions - declared)}"
