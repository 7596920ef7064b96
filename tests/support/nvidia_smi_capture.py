"""Reading the real `nvidia-smi` captures in tests/fixtures/nvidia-smi (see NOTICE there).

A capture is one text file from utkuozdemir/nvidia_gpu_exporter's collector: a header, then
one section per command, each framed by lines of 80 `#`, its title (`idle :: query (-q)`)
and its command line. Per state (`idle`, `load`) it holds `nvidia-smi -q` (an indented
`Key : value` tree) and `nvidia-smi --query-gpu=... --format=csv` (a header naming each field
with its unit, `memory.total [MiB]`, and one row per GPU); `nvidia-smi -L` (MIG profiles and
UUIDs) is captured once.

This module only parses: it keeps nvidia-smi's text and units. What a value means to NVML
(tests/support/capture_hosts.py) and what the exporter must print for it
(tests/test_captures.py) are decided by the callers, each in its own direction.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
STATES = ("idle", "load")

_RULE = "#" * 80
_ENTRY = re.compile(r"^( *)(\S.*?)\s+:\s?(.*)$")  # "    Product Name      : NVIDIA H100"
_NUMBER = re.compile(r"^(-?[0-9]+(?:\.[0-9]+)?)(?: ?[A-Za-z%/]+)?$")  # "69.85 W", "16x", "0 %"
# What nvidia-smi prints where it has no value: the driver answered NOT_SUPPORTED, or
# the feature is off or retired on this board.
NOT_AVAILABLE = frozenset(
    {
        "N/A",
        "[N/A]",
        "[Not Supported]",
        "Not Supported",
        "Requested functionality has been deprecated",
    }
)


def capture_files() -> list[Path]:
    """Every capture in tests/fixtures/nvidia-smi, sorted by name."""
    return sorted(CAPTURES.glob("*.txt"))


def available(text: str | None) -> str | None:
    """`text`, or None where nvidia-smi printed N/A (or had nothing to print)."""
    if text is None:
        return None
    text = text.strip()
    return None if text in NOT_AVAILABLE or not text else text


def number(text: str | None) -> float | None:
    """The number in one nvidia-smi value, its unit dropped ("69.85 W" -> 69.85); None
    for N/A. A value that is neither is a capture this parser does not understand."""
    value = available(text)
    if value is None:
        return None
    match = _NUMBER.match(value)
    if match is None:
        raise ValueError(f"not a number: {text!r}")
    return float(match.group(1))


@dataclass
class QueryNode:
    """One line of `nvidia-smi -q`: `Key : value`, or a heading with indented children."""

    key: str
    value: str | None = None
    children: list[QueryNode] = field(default_factory=list)

    def all(self, key: str) -> list[QueryNode]:
        """The children named `key` (MIG Device repeats)."""
        return [child for child in self.children if child.key == key]

    def find(self, *path: str) -> QueryNode | None:
        node: QueryNode | None = self
        for key in path:
            matches = node.all(key) if node is not None else []
            node = matches[0] if matches else None
        return node

    def get(self, *path: str) -> str | None:
        """The value at `path` ("Temperature", "GPU Current Temp"), None where N/A or absent."""
        node = self.find(*path)
        return available(node.value) if node is not None else None


def parse_query(text: str) -> QueryNode:
    """The tree of `nvidia-smi -q`; indentation (4 spaces a level) gives the nesting."""
    root = QueryNode("")
    stack: list[tuple[int, QueryNode]] = [(-1, root)]
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        entry = _ENTRY.match(line)
        node = (
            QueryNode(entry.group(2).strip(), entry.group(3).strip())
            if entry
            else QueryNode(line.strip())
        )
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def parse_csv(text: str) -> list[dict[str, str]]:
    """The rows of `--query-gpu ... --format=csv`, keyed by the header as printed
    (`memory.total [MiB]`); values keep their units ("81559 MiB")."""
    rows = [row for row in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if row]
    header, body = rows[0], rows[1:]
    return [dict(zip(header, (value.strip() for value in row), strict=True)) for row in body]


def parse_sections(text: str) -> dict[str, str]:
    """Each section's body by its title ("idle :: query (-q)")."""
    sections: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i] == _RULE and i + 1 < len(lines) and " :: " in lines[i + 1]:
            title = lines[i + 1].removeprefix("# ").strip()
            i += 1
            while i < len(lines) and lines[i] != _RULE:
                i += 1
            start = i + 1
            i = start
            while i < len(lines) and lines[i] != _RULE:
                i += 1
            sections[title] = "\n".join(lines[start:i])
        else:
            i += 1
    return sections


@dataclass(frozen=True)
class CaptureState:
    """What nvidia-smi printed for one state (idle or load) of one capture."""

    name: str  # the capture's file name without .txt
    state: str
    query: QueryNode  # nvidia-smi -q
    rows: list[dict[str, str]]  # nvidia-smi --query-gpu, one row per GPU
    listing: str  # nvidia-smi -L

    def gpu(self, index: int) -> QueryNode:
        """GPU `index` of nvidia-smi -q (its heading is "GPU <PCI bus id>")."""
        return [node for node in self.query.children if node.key.startswith("GPU ")][index]

    @property
    def driver_version(self) -> str:
        version = self.query.get("Driver Version")
        assert version is not None, self.name
        return version

    @property
    def cuda_version(self) -> str | None:
        return self.query.get("CUDA Version")

    def mig_listing(self, index: int) -> list[tuple[str, str]]:
        """(profile, MIG UUID) of GPU `index`'s MIG devices, in device order (`-L`)."""
        devices: list[tuple[str, str]] = []
        current = -1
        for line in self.listing.splitlines():
            gpu = re.match(r"^GPU (\d+):", line)
            if gpu:
                current = int(gpu.group(1))
                continue
            mig = re.match(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)", line)
            if mig and current == index:
                devices.append((mig.group(1), mig.group(3)))
        return devices


@dataclass(frozen=True)
class Capture:
    path: Path

    @property
    def name(self) -> str:
        return self.path.stem

    @cached_property
    def sections(self) -> dict[str, str]:
        return parse_sections(self.path.read_text(encoding="utf-8"))

    def state(self, state: str) -> CaptureState:
        return CaptureState(
            name=self.name,
            state=state,
            query=parse_query(self.sections[f"{state} :: query (-q)"]),
            rows=parse_csv(self.sections[f"{state} :: query-gpu (csv, what the exporter parses)"]),
            listing=self.sections["capabilities :: list (-L)"],
        )
