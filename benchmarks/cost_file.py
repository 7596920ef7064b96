"""NVML cost files (issue 42): what a driver charges per call, in microseconds of the
calling thread's CPU, as the bench's stand-in charges it (`standin_nvml.c`,
FAKE_NVML_COSTS) and as `real_gpu.py` measures it on a GPU.

One `NAME MICROSECONDS` a line; `#` starts a comment (a whole line or the rest of one):

    NAME = an NVML entry point (charged at each call),
           field.ID (charged per entry of nvmlDeviceGetFieldValues asking for ID),
           fieldgroup.A-B (charged once per nvmlDeviceGetFieldValues call asking for any
           ID in A..B).

The header comment says where the figures come from: a `Host: ...; measured DATE` line
(`origin`). `read` holds a file to the rules the stand-in's parser applies, so a file
this module accepts the stand-in charges whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 65536  # standin_nvml.c: COSTS_MAX_BYTES
MAX_LINE = 255  # characters, comment included (COSTS_MAX_LINE)
MAX_NAME = 47  # a counts slot holds 48 bytes with the NUL
MAX_MICROSECONDS = 10_000_000  # COST_MAX_US
FIELD_IDS = 1024  # field ids 0..1023 (FIELD_IDS)
MAX_GROUPS = 64  # FIELD_GROUPS
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


@dataclass(frozen=True)
class Cost:
    """One line: a name, what it charges (microseconds) and a note for the reader."""

    name: str
    microseconds: float
    note: str = ""


class CostFileError(ValueError):
    """A cost file the stand-in would refuse; the message names the line."""


def field_name(field_id: int) -> str:
    return f"field.{field_id}"


def group_name(first: int, last: int) -> str:
    return f"fieldgroup.{first}-{last}"


def format_microseconds(microseconds: float) -> str:
    """At most 3 decimals (the stand-in charges nanoseconds), no trailing zeros."""
    text = f"{microseconds:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def write(path: Path, header: Sequence[str], costs: Sequence[Cost]) -> None:
    """The cost file: `header` as comment lines, then one line per cost."""
    lines = [f"# {line}".rstrip() for line in header]
    for cost in costs:
        line = f"{cost.name} {format_microseconds(cost.microseconds)}"
        if cost.note:
            line = f"{line:<48} # {cost.note}"
        lines.append(line[:MAX_LINE])
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > MAX_BYTES:
        raise CostFileError(f"{path}: more than {MAX_BYTES} bytes")
    path.write_text(text)


def _field_id(text: str) -> int | None:
    if not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value < FIELD_IDS else None


def _microseconds(text: str) -> float | None:
    whole, dot, fraction = text.partition(".")
    if not whole.isascii() or not whole.isdigit():
        return None
    if dot and (not fraction.isascii() or not fraction.isdigit() or len(fraction) > 3):
        return None
    value = float(text)
    return value if value <= MAX_MICROSECONDS else None


def _check_name(name: str) -> str | None:
    """Why `name` is not a cost's name, or None."""
    if name.startswith("fieldgroup."):
        first, dash, last = name[len("fieldgroup.") :].partition("-")
        a, b = _field_id(first), _field_id(last)
        if not dash or a is None or b is None or b < a:
            return f"a field group is fieldgroup.A-B, A <= B < {FIELD_IDS}"
        return None
    if name.startswith("field."):
        if _field_id(name[len("field.") :]) is None:
            return f"a field is field.ID, ID < {FIELD_IDS}"
        return None
    if not name.startswith("nvml"):
        return "a name is an nvml entry point, field.ID or fieldgroup.A-B"
    if not set(name) <= _NAME_CHARACTERS:
        return "an entry point's name is letters, digits and _"
    return None


def read(path: Path) -> dict[str, float]:
    """name -> microseconds of every line; CostFileError naming the line the stand-in
    would refuse."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise CostFileError(f"{path}: larger than 64 KiB: not a cost file")
    text = data.decode("utf-8", errors="replace")
    costs: dict[str, float] = {}
    groups = 0
    for number, line in enumerate(text.split("\n"), 1):
        if len(line) > MAX_LINE:
            raise CostFileError(f"{path} line {number}: longer than {MAX_LINE} characters")
        words = line.partition("#")[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise CostFileError(f"{path} line {number}: a line is NAME MICROSECONDS")
        name, value = words
        if len(name) > MAX_NAME:
            raise CostFileError(f"{path} line {number}: a name is at most {MAX_NAME} characters")
        microseconds = _microseconds(value)
        if microseconds is None:
            raise CostFileError(
                f"{path} line {number}: MICROSECONDS is a number from 0 to "
                f"{MAX_MICROSECONDS}, at most 3 decimals"
            )
        why = _check_name(name)
        if why is not None:
            raise CostFileError(f"{path} line {number}: {why}")
        if name in costs:
            raise CostFileError(f"{path} line {number}: this cost was given before")
        if name.startswith("fieldgroup."):
            groups += 1
            if groups > MAX_GROUPS:
                raise CostFileError(f"{path} line {number}: more than {MAX_GROUPS} field groups")
        costs[name] = microseconds
    return costs


def origin(path: Path) -> str:
    """Where the figures come from, by the header comment: "HOST; measured DATE" (its
    `Host: ...; measured DATE` lines), else its first comment line."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read(MAX_BYTES)
    comments = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comments.append(line[1:].strip())
    header = " ".join(comments)
    _, found, host = header.partition("Host: ")
    host, measured, rest = host.partition("; measured ")
    if found and measured:
        return f"{host.strip()}; measured {rest.split(' ', 1)[0]}"
    return comments[0] if comments else "no header"
