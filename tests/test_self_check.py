"""`gpu-exporter --self-check` against the simulated host and a stand-in nvidia-smi
(`tests/support/fake_nvidia_smi.py`, put first on PATH): the table, the verdicts, the
tolerances and the exit codes an operator sees.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_exporter.config import DEFAULT_LISTEN_ADDRESS, build_parser
from gpu_exporter.self_check.compare import QUANTITIES, Quantity, judge
from gpu_exporter.self_check.nvidia_smi import MISSING, parse_csv, parse_xml, value_text
from tests.support.exporter import REPO
from tests.support.fake_nvidia_smi import install

GUIDE = REPO / "docs" / "self-check.md"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def rows(self) -> dict[tuple[str, str], list[str]]:
        """(gpu, quantity) -> [exporter, nvidia-smi, verdict] from the printed table."""
        lines = self.stdout.splitlines()
        header = lines[0]
        starts = [header.index(h) for h in ("QUANTITY", "EXPORTER", "NVIDIA-SMI", "VERDICT")]
        out: dict[tuple[str, str], list[str]] = {}
        for line in lines[1:]:
            if line.startswith("self-check "):
                break
            cells = [line[: starts[0]]] + [
                line[a:b] for a, b in zip(starts, [*starts[1:], len(line)], strict=True)
            ]
            gpu, quantity, *rest = (c.strip() for c in cells)
            out[(gpu, quantity)] = rest
        return out


def self_check(
    tmp_path: Path,
    *args: str,
    gpus: int = 2,
    changes: Mapping[int, Mapping[str, str]] | None = None,
    unknown: str = "",
    path: str | None = None,
) -> Run:
    """Run `gpu-exporter --simulate GPUS --self-check ARGS` with the stand-in first on PATH
    (or PATH as given), answering for the same simulated host with `changes` applied."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    install(bin_dir)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(REPO),
        PATH=f"{bin_dir}{os.pathsep}{env['PATH']}" if path is None else path,
        FAKE_SMI_GPUS=str(gpus),
        # the simulated host's UUIDs follow its host name and listen address
        FAKE_SMI_HOST_ID=f"{socket.gethostname()}:{DEFAULT_LISTEN_ADDRESS}",
        FAKE_SMI_SET=json.dumps({str(k): v for k, v in (changes or {}).items()}),
        FAKE_SMI_UNKNOWN=unknown,
    )
    done = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "--simulate", str(gpus), "--self-check", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def test_all_agree_exits_0_with_a_row_per_gpu_and_quantity(tmp_path: Path) -> None:
    run = self_check(tmp_path, gpus=4)
    assert run.code == 0, run.stdout + run.stderr
    rows = run.rows()
    assert set(rows) == {(str(g), q.field) for g in range(4) for q in QUANTITIES}
    assert {verdict for _, _, verdict in rows.values()} == {"agree", "agree (N/A on both sides)"}
    # the stand-in lists the GPUs in reverse order: they are matched by UUID
    assert rows[("0", "pci.bus_id")][:2] == ["00000000:18:00.0"] * 2
    assert rows[("3", "pci.bus_id")][:2] == ["00000000:48:00.0"] * 2
    # nvidia-smi's units and forms: MiB, watts, P-states, modes
    assert rows[("1", "memory.total")][:2] == ["81559", "81559"]
    assert rows[("1", "enforced.power.limit")][:2] == ["700.00", "700.00"]
    assert rows[("1", "pstate")][1] == "P8"
    assert rows[("3", "mig.mode.current")][:2] == ["Enabled", "Enabled"]
    # GPU 3 is MIG-partitioned: no utilization on either side, which agrees
    assert rows[("3", "utilization.gpu")] == ["N/A", "N/A", "agree (N/A on both sides)"]
    # the thresholds and the max video clock come from -q -x
    assert rows[("2", "temperature/gpu_temp_slow_threshold")] == ["90", "90", "agree"]
    assert rows[("2", "max_clocks/video_clock")] == ["1545", "1545", "agree"]
    assert run.stdout.splitlines()[-1] == (
        f"self-check passed: {4 * len(QUANTITIES)} values, {4 * len(QUANTITIES)} agree, "
        "0 differ, 0 absent on one side, 0 skipped"
    )


def test_a_value_beyond_its_tolerance_differs_and_exits_1(tmp_path: Path) -> None:
    # GPU 1 idles at 33 C and 72 W; memory.total is exact
    changes = {
        1: {"temperature.gpu": "40", "memory.total": "81000", "power.draw": "80.00"},
        0: {"temperature/gpu_temp_max_threshold": "95 C", "name": "NVIDIA A100-SXM4-80GB"},
    }
    run = self_check(tmp_path, changes=changes)
    assert run.code == 1, run.stdout + run.stderr
    rows = run.rows()
    assert rows[("1", "temperature.gpu")] == ["33", "40", "differ by 7 C (tolerance 3 C)"]
    assert rows[("1", "memory.total")] == ["81559", "81000", "differ by 559 MiB (exact)"]
    assert rows[("0", "temperature/gpu_temp_max_threshold")] == [
        "92",
        "95",
        "differ by 3 C (exact)",
    ]
    assert rows[("0", "name")][2] == "differ"
    # 8 W from 72 W is within power.draw's 10 W
    assert rows[("1", "power.draw")] == ["72.00", "80.00", "agree"]
    assert run.stdout.splitlines()[-1].startswith("self-check FAILED:")
    assert ", 4 differ, 0 absent on one side," in run.stdout


def test_a_value_only_one_side_has_is_absent_and_exits_1(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("faults:\n  unsupported: [temperature.gpu_celsius]\n")
    changes = {0: {"power.draw": "[N/A]", "ecc.errors.corrected.volatile.total": "[N/A]"}}
    run = self_check(tmp_path, "--simulate.scenario", str(scenario), changes=changes)
    assert run.code == 1, run.stdout + run.stderr
    rows = run.rows()
    assert rows[("0", "power.draw")][1:] == ["N/A", "absent in nvidia-smi"]
    assert rows[("0", "ecc.errors.corrected.volatile.total")] == [
        "0",
        "N/A",
        "absent in nvidia-smi",
    ]
    # the exporter reads no temperature (NOT_SUPPORTED) where nvidia-smi shows one
    assert rows[("1", "temperature.gpu")] == ["absent", "33", "absent in the exporter"]


def test_the_t_limit_margin_is_held_to_nvidia_smis_temperature_gpu_tlimit(tmp_path: Path) -> None:
    # GPU 0 runs at 52..58 C, 30..36 C below the simulated H100's T.Limit
    run = self_check(tmp_path, gpus=1, changes={0: {"temperature.gpu.tlimit": "45"}})
    assert run.code == 1, run.stdout + run.stderr
    exporter, smi, verdict = run.rows()[("0", "temperature.gpu.tlimit")]
    assert smi == "45" and verdict.startswith("differ by ") and "(tolerance 3 C)" in verdict
    low, _, high = exporter.partition("..")
    assert 30 <= float(low) <= float(high or low) <= 36
    # an nvidia-smi without the field (before T.Limit) skips it, not a finding
    older = self_check(tmp_path, gpus=1, unknown="temperature.gpu.tlimit")
    assert older.code == 0, older.stdout + older.stderr
    assert older.rows()[("0", "temperature.gpu.tlimit")][1:] == [
        MISSING,
        "skipped (this nvidia-smi does not report it)",
    ]


def test_what_nvidia_smi_cannot_say_or_a_collector_off_is_skipped_not_a_finding(
    tmp_path: Path,
) -> None:
    changes = {0: {"temperature/gpu_temp_slow_threshold": "(absent)"}}
    run = self_check(
        tmp_path, "--no-collector.pcie", gpus=1, changes=changes, unknown="clocks.video"
    )
    assert run.code == 0, run.stdout + run.stderr
    rows = run.rows()
    cannot = "skipped (this nvidia-smi does not report it)"
    assert rows[("0", "temperature/gpu_temp_slow_threshold")] == ["90", MISSING, cannot]
    assert rows[("0", "clocks.video")][1:] == [MISSING, cannot]
    assert rows[("0", "pcie.link.gen.current")][0::2] == [
        "not read",
        "skipped (--no-collector.pcie)",
    ]
    assert rows[("0", "clocks.gr")][2] == "agree"  # the query went on without the field
    assert ", 4 skipped" in run.stdout  # two PCIe links, the threshold, the clock


def test_thresholds_printed_as_t_limit_offsets_are_compared_through_the_margin(
    tmp_path: Path,
) -> None:
    """R580's nvidia-smi prints the slowdown and maximum temperatures only as offsets from
    T.Limit (gpu_temp_slow_tlimit_threshold -2 C): the absolute threshold is the temperature
    plus the T.Limit margin (T.Limit, 88 C on the simulated H100) minus the offset."""
    r580 = {
        "temperature/gpu_temp_slow_threshold": "(absent)",
        "temperature/gpu_temp_max_threshold": "(absent)",
        "temperature/gpu_temp_slow_tlimit_threshold": "-2 C",
    }
    changes = {
        0: {**r580, "temperature/gpu_temp_max_tlimit_threshold": "-4 C"},
        1: {**r580, "temperature/gpu_temp_max_tlimit_threshold": "-8 C"},
    }
    run = self_check(tmp_path, gpus=2, changes=changes)
    rows = run.rows()
    slow = "temperature/gpu_temp_slow_threshold"
    assert rows[("0", slow)] == ["90", "90 (T.Limit 88 +2 C)", "agree"]
    assert rows[("0", "temperature/gpu_temp_max_threshold")] == [
        "92",
        "92 (T.Limit 88 +4 C)",
        "agree",
    ]
    assert rows[("1", "temperature/gpu_temp_max_threshold")] == [
        "92",
        "96 (T.Limit 88 +8 C)",
        "differ by 4 C (tolerance 1 C)",
    ]
    assert run.code == 1 and ", 0 skipped" in run.stdout  # compared, not skipped


def test_nvidia_smi_missing_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = self_check(tmp_path, path=str(tmp_path / "empty"))
    assert run.code == 2
    assert run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        "gpu-exporter: self-check: nvidia-smi not found on PATH (it comes with the NVIDIA "
        "driver; or name it with --self-check.nvidia-smi PATH)"
    ]
    named = self_check(tmp_path, "--self-check.nvidia-smi", str(tmp_path / "nope"))
    assert named.code == 2
    assert named.stderr.strip().endswith(
        f"--self-check.nvidia-smi {tmp_path / 'nope'}: not an executable file"
    )


def _script(tmp_path: Path, body: str) -> Path:
    program = tmp_path / "broken-nvidia-smi"
    program.write_text(f"#!/bin/sh\n{body}\n")
    program.chmod(0o755)
    return program


def test_nvidia_smi_failing_or_hanging_is_one_line_and_exit_2(tmp_path: Path) -> None:
    failing = _script(
        tmp_path,
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\n'
        "exit 9",
    )
    run = self_check(tmp_path, "--self-check.nvidia-smi", str(failing), gpus=1)
    assert run.code == 2
    assert run.stdout == ""
    (line,) = [x for x in run.stderr.splitlines() if "self-check" in x]
    assert line.startswith(f"gpu-exporter: self-check: {failing} --query-gpu=name,uuid,")
    assert line.endswith(
        "failed (exit code 9): NVIDIA-SMI has failed because it couldn't communicate with "
        "the NVIDIA driver."
    )

    hanging = _script(tmp_path, "exec sleep 30")
    run = self_check(
        tmp_path, "--self-check.nvidia-smi", str(hanging), "--collect.timeout", "500ms", gpus=1
    )
    assert run.code == 2
    (line,) = [x for x in run.stderr.splitlines() if "self-check" in x]
    assert line.endswith("no answer within 0.5s (--collect.timeout)")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        # bytes that are not UTF-8 in the answer, and in the error text of a failure
        (r"printf 'GPU \377\376 name, GPU-0\n'", "printed bytes that are not UTF-8 (at byte 4)"),
        (r"printf 'NVIDIA-SMI \377 has failed\n' >&2; exit 1", "NVIDIA-SMI \\ufffd has failed"),
        # one 50 MB line, answered and failing: quoted in part, with its length
        ("head -c 50000000 /dev/zero | tr '\\0' x", "(50000000 characters in all)"),
        ("head -c 50000000 /dev/zero | tr '\\0' x >&2; exit 1", "(50000000 characters in all)"),
        # a value that does not end: cut off at the output limit, not held in memory
        ("exec yes", "printed more than 64 MiB"),
    ],
)
def test_whatever_nvidia_smi_prints_is_one_short_line_and_exit_2(
    tmp_path: Path, body: str, says: str
) -> None:
    program = _script(tmp_path, body)
    run = self_check(tmp_path, "--self-check.nvidia-smi", str(program), gpus=1)
    assert run.code == 2, run.stderr[-500:]
    assert run.stdout == ""
    (line,) = [x for x in run.stderr.splitlines() if "self-check" in x]
    assert says in line
    # a few hundred bytes besides the path the operator gave
    assert len(line.replace(str(program), "PROGRAM").encode()) < 400, line
    assert "Traceback" not in run.stderr


def test_nvml_the_exporter_cannot_read_is_one_line_and_exit_2(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("faults:\n  init_error: driver_not_loaded\n")
    run = self_check(tmp_path, "--simulate.scenario", str(scenario), gpus=1)
    assert run.code == 2
    assert run.stdout == ""
    (line,) = [x for x in run.stderr.splitlines() if "self-check" in x]
    assert line == (
        "gpu-exporter: self-check: the exporter could not read NVML "
        "(simulated NVML failure: driver_not_loaded)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--self-check.nvidia-smi", "/usr/bin/nvidia-smi"], "needs --self-check"),
        (["--self-check", "--once"], "--self-check: cannot be combined with --once"),
    ],
)
def test_self_check_flags_that_do_not_fit_exit_2(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_nvidia_smi_texts_without_a_value_are_none_and_units_are_dropped() -> None:
    for text in (
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "[Requested functionality has been deprecated]",
    ):
        assert value_text(text) is None
    assert value_text(" 700.00 ") == "700.00"
    rows = parse_csv(
        "GPU-a, [N/A], P0\n", ["uuid", "fan.speed", "pstate"], ["uuid", "fan.speed", "pstate", "x"]
    )
    assert rows == {"GPU-a": {"uuid": "GPU-a", "fan.speed": None, "pstate": "P0", "x": MISSING}}
    xml = (
        "<nvidia_smi_log><gpu id='1'><uuid>GPU-b</uuid><temperature>"
        "<gpu_temp_slow_threshold>87 C</gpu_temp_slow_threshold>"
        "<gpu_temp_max_threshold>N/A</gpu_temp_max_threshold></temperature></gpu></nvidia_smi_log>"
    )
    values, order = parse_xml(
        xml,
        [
            "temperature/gpu_temp_slow_threshold",
            "temperature/gpu_temp_max_threshold",
            "max_clocks/video_clock",
        ],
    )
    assert values == {
        "GPU-b": {
            "temperature/gpu_temp_slow_threshold": "87",
            "temperature/gpu_temp_max_threshold": None,
            "max_clocks/video_clock": MISSING,
        }
    }
    assert order == {"GPU-b": 0}


# The tolerances as docs/self-check.md and --help write them, per field (exact ones have none).
DOCUMENTED = {
    "temperature.gpu": "3 C",
    "temperature.gpu.tlimit": "3 C",
    "power.draw": "10 W or 10%",
    "clocks.gr": "5%",
    "utilization.gpu": "10 points",
    "fan.speed": "5 points",
    "memory.used": "64 MiB",
}


def test_help_and_guide_document_the_tolerances_the_check_uses() -> None:
    tolerant = {q.field: q for q in QUANTITIES if q.tolerance or q.relative}
    assert set(tolerant) >= set(DOCUMENTED)
    for field, text in DOCUMENTED.items():
        q = tolerant[field]
        numbers = [float(n) for n in re.findall(r"\d+", text)]
        assert numbers == [x for x in (q.tolerance, q.relative * 100) if x], field
    help_text = " ".join(build_parser().format_help().split())
    guide = GUIDE.read_text()
    for text in DOCUMENTED.values():
        assert text in help_text
        assert text in guide
    for q in QUANTITIES:
        assert f"`{q.field}`" in guide, q.field
    assert "gpu-exporter --self-check" in guide


def test_the_daemon_does_not_load_the_self_check(tmp_path: Path) -> None:
    probe = (
        "import sys\nfrom gpu_exporter.cli import main\n"
        f"main(['--once', '--simulate', '1', '--output', {str(tmp_path / 'out.prom')!r}])\n"
        "print(sorted(m for m in ('gpu_exporter.self_check', 'subprocess', 'xml.etree.ElementTree')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def _quantity(field: str) -> Quantity:
    return next(q for q in QUANTITIES if q.field == field)


def test_a_reading_agrees_within_the_range_the_exporter_read_widened_by_the_tolerance() -> None:
    temperature, total = _quantity("temperature.gpu"), _quantity("memory.total")
    # the exporter read 52 and 58 C around nvidia-smi's call: anything between agrees
    assert judge("0", temperature, [52.0, 58.0], "55").verdict == "agree"
    assert judge("0", temperature, [52.0, 58.0], "61").verdict == "agree"  # 3 C above
    assert judge("0", temperature, [52.0, 58.0], "62").says == "differ by 4 C (tolerance 3 C)"
    # exact: equal at nvidia-smi's precision (it truncates to whole MiB)
    assert judge("0", total, [81559.9], "81559").verdict == "agree"
    assert judge("0", total, [81561.0], "81559").says == "differ by 2 MiB (exact)"
    power = _quantity("power.draw")  # 10 W or 10%, whichever is larger
    assert judge("0", power, [600.0], "655.00").verdict == "agree"
    assert judge("0", power, [600.0], "670.00").says == (
        "differ by 70.00 W (tolerance 10 W or 10%, whichever is larger)"
    )
    mode = _quantity("persistence_mode")
    assert judge("0", mode, ["Enabled"], "Disabled").verdict == "differ"
    assert judge("0", mode, [], None).says == "agree (N/A on both sides)"


def test_make_self_check_demo_prints_what_the_readme_shows() -> None:
    """The README's excerpt is reproducible without a GPU: `make self-check-demo` runs
    tools/self_check_demo.py, which sets up the stand-in nvidia-smi this file uses."""
    done = subprocess.run(
        [sys.executable, "-m", "tools.self_check_demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    readme = (REPO / "README.md").read_text()
    assert "make self-check-demo" in readme
    excerpt = readme.split("```console\n", 1)[1].split("```", 1)[0].splitlines()
    printed = done.stdout.splitlines()
    assert printed[0] == excerpt[0]  # the header
    assert printed[-1] == excerpt[-1]  # self-check passed: 34 values, ...
    rows = {tuple(line.split()[:2]) for line in printed[1:-1]}
    assert {tuple(line.split()[:2]) for line in excerpt[1:-1]} <= rows
