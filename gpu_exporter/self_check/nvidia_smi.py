"""Run `nvidia-smi` and read its answers: `--query-gpu` CSV and `-q -x` XML, by GPU UUID.

Every value is kept as nvidia-smi printed it (with `nounits`), or None where it printed
no value: "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]" or any other bracketed
note, such as "[Requested functionality has been deprecated]". An XML element that this
nvidia-smi does not write at all (e.g. the absolute temperature thresholds, which
Blackwell's drivers replaced with T.Limit ones) is `MISSING`: nvidia-smi cannot say.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_exporter.records import Record

MISSING = "(not reported)"  # the element is not in this nvidia-smi's output at all
ByUuid = dict[str, dict[str, str | None]]  # by UUID: field -> text (None: N/A)


class NvidiaSmiError(Exception):
    """nvidia-smi is missing, failed or timed out; the message is one line naming why."""


@dataclass(frozen=True, repr=False)
class Answers(Record):
    """nvidia-smi's values per GPU UUID: field (a --query-gpu name or an XML path) -> text.

    The text is None where nvidia-smi printed no value, `MISSING` where it printed
    nothing for the field at all.
    """

    by_uuid: Mapping[str, Mapping[str, str | None]]
    index: Mapping[str, int]  # nvidia-smi's index of each UUID


def find_executable(path: str | None) -> str:
    """The nvidia-smi to run: `path` (--self-check.nvidia-smi) or the first on PATH."""
    if path is not None:
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            raise NvidiaSmiError(f"--self-check.nvidia-smi {path}: not an executable file")
        return path
    for directory in os.get_exec_path():
        candidate = os.path.join(directory, "nvidia-smi")
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    raise NvidiaSmiError(
        "nvidia-smi not found on PATH (it comes with the NVIDIA driver; "
        "or name it with --self-check.nvidia-smi PATH)"
    )


OUTPUT_LIMIT_BYTES = 64 * 1024 * 1024  # far above a 16-GPU `-q -x` (about 50 KiB a GPU)
QUOTE_LIMIT = 160  # characters of nvidia-smi's own text quoted in a message


def run(executable: str, args: Sequence[str], timeout_seconds: float) -> str:
    """nvidia-smi's standard output; NvidiaSmiError when it fails, times out, prints
    more than `OUTPUT_LIMIT_BYTES` or prints bytes that are not UTF-8."""
    command = [executable, *args]
    shown = " ".join([executable, *(a if len(a) <= 40 else f"{a[:32]}..." for a in args)])
    code, stdout, stderr = _run_bounded(command, timeout_seconds, shown)
    if code != 0:
        said = _first_line(_decoded(stderr)) or _first_line(_decoded(stdout)) or "no message"
        raise NvidiaSmiError(f"{shown} failed (exit code {code}): {quoted(said)}")
    try:
        return stdout.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NvidiaSmiError(
            f"{shown} printed bytes that are not UTF-8 (at byte {error.start})"
        ) from None


def _run_bounded(
    command: Sequence[str], timeout_seconds: float, shown: str
) -> tuple[int, bytes, bytes]:
    """Run `command`; its exit code, standard output and standard error, read as they
    come, so that neither the time nor the memory it takes is left to the program."""
    import selectors  # only the self-check runs programs
    import subprocess
    import time

    try:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as error:
        raise NvidiaSmiError(f"{command[0]}: {error.strerror}") from None
    assert process.stdout is not None and process.stderr is not None
    out, err = process.stdout, process.stderr
    chunks: dict[int, list[bytes]] = {out.fileno(): [], err.fileno(): []}
    stdout, stderr = chunks[out.fileno()], chunks[err.fileno()]
    late = NvidiaSmiError(f"{shown}: no answer within {timeout_seconds:g}s (--collect.timeout)")
    deadline = time.monotonic() + timeout_seconds
    total = 0
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(out, selectors.EVENT_READ)
            selector.register(err, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise late
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        selector.unregister(key.fileobj)
                        continue
                    chunks[key.fd].append(data)
                    total += len(data)
                    if total > OUTPUT_LIMIT_BYTES:
                        raise NvidiaSmiError(
                            f"{shown} printed more than {OUTPUT_LIMIT_BYTES >> 20} MiB"
                        )
        code = process.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        raise late from None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        out.close()
        err.close()
    return code, b"".join(stdout), b"".join(stderr)


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def quoted(text: str) -> str:
    """nvidia-smi's own text for a one-line message: at most `QUOTE_LIMIT` characters,
    control characters escaped, and the length said where it was cut."""
    shown = text[:QUOTE_LIMIT].encode("unicode_escape").decode("ascii")
    return shown if len(text) <= QUOTE_LIMIT else f"{shown}... ({len(text)} characters in all)"


_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def query(executable: str, fields: Sequence[str], timeout_seconds: float) -> ByUuid:
    """`--query-gpu=FIELDS --format=csv,noheader,nounits`, by UUID (`uuid` must be one
    of `fields`). A field this nvidia-smi does not know is dropped (it is `MISSING`)."""
    wanted = list(fields)
    while True:
        try:
            text = run(
                executable,
                [f"--query-gpu={','.join(wanted)}", "--format=csv,noheader,nounits"],
                timeout_seconds,
            )
        except NvidiaSmiError as error:
            unknown = _INVALID_FIELD.search(str(error))
            if unknown is None or unknown.group(1) not in wanted or unknown.group(1) == "uuid":
                raise
            wanted.remove(unknown.group(1))
            continue
        return parse_csv(text, wanted, fields)


def parse_csv(text: str, columns: Sequence[str], fields: Sequence[str]) -> ByUuid:
    """One mapping per CSV line, by its `uuid` column; `fields` not in `columns` are
    `MISSING`."""
    out: ByUuid = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(columns):
            raise NvidiaSmiError(
                f"nvidia-smi --query-gpu printed {len(cells)} values where "
                f"{len(columns)} were asked for: {quoted(line.strip())}"
            )
        if any(len(cell) > QUOTE_LIMIT for cell in cells):
            raise NvidiaSmiError(
                f"nvidia-smi --query-gpu printed a value longer than {QUOTE_LIMIT} characters: "
                f"{quoted(max(cells, key=len))}"
            )
        row: dict[str, str | None] = dict.fromkeys(fields, MISSING)
        row.update({name: value_text(cell) for name, cell in zip(columns, cells, strict=True)})
        uuid = row["uuid"]
        if uuid is not None:
            out[uuid] = row
    return out


def parse_xml(text: str, paths: Sequence[str]) -> tuple[ByUuid, dict[str, int]]:
    """From `nvidia-smi -q -x`: each GPU's values at `paths` (under its <gpu>, units
    removed), by UUID, and the GPUs' order (nvidia-smi's index)."""
    from xml.etree import ElementTree  # only the self-check reads XML

    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise NvidiaSmiError(f"nvidia-smi -q -x printed XML that does not parse: {error}") from None
    values: ByUuid = {}
    order: dict[str, int] = {}
    for position, gpu in enumerate(root.findall("gpu")):
        uuid = (gpu.findtext("uuid") or "").strip()
        if not uuid:
            continue
        order[uuid] = position
        row: dict[str, str | None] = {}
        for path in paths:
            found = gpu.findtext(path)
            row[path] = MISSING if found is None else value_text(_without_unit(found))
        values[uuid] = row
    return values, order


_NUMBER = re.compile(r"[-+]?[0-9]+(\.[0-9]+)?")
MAX_NUMBER_CHARS = 64  # of a number nvidia-smi prints: a longer one is text


def _without_unit(text: str) -> str:
    """'90 C' -> '90', '1980 MHz' -> '1980'; other text unchanged."""
    number, _, unit = text.strip().partition(" ")
    numeric = len(number) <= MAX_NUMBER_CHARS and _NUMBER.fullmatch(number)
    return number if unit and numeric else text.strip()


def value_text(cell: str) -> str | None:
    """The text of one value, or None where nvidia-smi wrote that it has none."""
    text = cell.strip()
    if not text or text in ("N/A", "Not Supported") or text.startswith("["):
        return None
    return text


def read(
    executable: str, fields: Sequence[str], xml_paths: Sequence[str], timeout_seconds: float
) -> Answers:
    """Both answers of nvidia-smi, joined by GPU UUID."""
    by_uuid = query(executable, fields, timeout_seconds)
    xml, order = parse_xml(run(executable, ["-q", "-x"], timeout_seconds), xml_paths)
    for uuid, row in by_uuid.items():
        row.update(xml.get(uuid, dict.fromkeys(xml_paths, MISSING)))
    return Answers(by_uuid=by_uuid, index=order)
