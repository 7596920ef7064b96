"""A fuzz corpus of hostile config and scenario files: at start, and sent to a running
exporter with SIGHUP. Each ends in one clear line; none crashes or hangs the exporter."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support.exporter import refused, start_exporter, values


def billion_laughs(levels: int = 9, width: int = 9) -> bytes:
    lines = ['l0: &l0 "lol"']
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


CORPUS: dict[str, tuple[bytes, str]] = {
    "latin-1 byte": (b"log.level: \xe9\n", "not utf-8 text: byte 0xe9 at offset 11"),
    "utf-16 without bom": ("log.level: x\n".encode("utf-16-le"), "character 0x0000 at offset"),
    "binary garbage": (bytes(range(256)) * 4, "not utf-8 text"),
    "nul bytes": (b"log.level: info\x00\x00\n", "invalid YAML"),
    "self-referencing alias": (b"a: &a\n  b: *a\n", "aliases (*name) are not allowed"),
    "billion laughs": (billion_laughs(), "aliases (*name) are not allowed"),
    "deep nesting": (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested more than 32 levels"),
    "huge file": (b"# " + b"x" * (128 * 1024) + b"\n", "larger than 65536 bytes"),
    "infinite interval": (b"collect.interval: .inf\n", "not a finite duration: inf"),
    "overflowing interval": (b"collect.interval: 1.0e+999\n", "not a finite duration: inf"),
    "huge interval": (b"collect.interval: 99999999999999999999999999h\n", "must be between"),
    "nan interval": (b"collect.interval: .nan\n", "not a finite duration: nan"),
    "nan timeout": (b"collect.timeout: .nan\n", "not a finite duration: nan"),
    "fractional max-requests": (b"web.max-requests: 1.5\n", "not an integer: 1.5"),
    "python object tag": (b"collect.interval: !!python/object/apply:os.getpid []\n", "YAML"),
    "a list of settings": (b"- collect.interval: 1s\n", "expected a mapping of settings"),
    "number as key": (b"5: 1s\n", "config keys must be text"),
    "key given twice": (b"collect.interval: 1s\ncollect.interval: 2s\n", "given twice"),
    "5000-digit integer": (
        b"web.max-requests: " + b"9" * 5000 + b"\n",
        "line 1 column 19: an integer of 5000 characters is too long",
    ),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hostile_config_file_at_start_exits_2_with_one_line(tmp_path: Path, name: str) -> None:
    content, expected = CORPUS[name]
    path = tmp_path / "config.yml"
    path.write_bytes(content)
    line = refused(["--simulate", "1", "--config.file", str(path)])  # no hang: 20 s at most
    assert line.startswith(f"gpu-exporter: error: config file {path}: ")
    assert expected in line


def test_hostile_config_files_sent_with_sighup_keep_the_exporter_running(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yml"
    good = b"collect.interval: 0.2s\n"
    config.write_bytes(good)
    exporter = start_exporter(["--simulate", "1", "--config.file", str(config)], tmp_path)
    try:
        for n, name in enumerate(sorted(CORPUS), start=1):
            content, expected = CORPUS[name]
            config.write_bytes(content)
            exporter.signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while exporter.log().count("reload failed") < n and time.monotonic() < deadline:
                assert exporter.process.poll() is None, f"{name}: exited\n{exporter.log()}"
                time.sleep(0.05)
            assert exporter.log().count("reload failed") == n, f"{name}\n{exporter.log()}"
            failures = [line for line in exporter.log().splitlines() if "reload failed" in line]
            assert expected in failures[-1], failures[-1]
        # still sampling at the running interval, still ready
        t0 = values(exporter.scrape(), "gpu_exporter_last_sample_timestamp_seconds")[0]
        time.sleep(0.8)
        t1 = values(exporter.scrape(), "gpu_exporter_last_sample_timestamp_seconds")[0]
        assert t1 > t0
        exporter.wait_health(200)
        assert "Traceback" not in exporter.log()
        assert all(line.count("\n") == 0 for line in exporter.log().splitlines())
    finally:
        assert exporter.stop() == 0


SCENARIOS: dict[str, tuple[str, str]] = {
    "misspelled top key": ("fault: {lost: [1]}\n", "unknown scenario keys: ['fault']"),
    "misspelled fault": ("faults: {lots: [1]}\n", "unknown faults keys: ['lots']"),
    "unknown reading": (
        "faults: {unsupported: [fan_speed]}\n",
        "faults.unsupported: unknown readings ['fan_speed']",
    ),
    "lost is not a list": ("faults: {lost: 1}\n", "faults.lost must be a list"),
    "process without pid": ("processes: [{gpu: 0}]\n", "processes[0]: pid is missing"),
    "ratio out of range": (
        "processes: [{gpu: 0, pid: 5, sm_ratio: 7}]\n",
        "processes[0].sm_ratio must be between 0 and 1",
    ),
    "xid event without code": ("events: [{gpu: 0}]\n", "events[0]: an xid event needs"),
    "unknown process context": (
        "processes: [{gpu: 0, pid: 5, context: C+G}]\n",
        "processes[0].context must be compute, graphics or compute+graphics, not 'C+G'",
    ),
    "instance on a GPU without MIG": (
        "processes: [{gpu: 0, pid: 5, gpu_instance: 2}]\n",
        "processes[0].gpu_instance: GPU 0 is not MIG-partitioned, not instance 2",
    ),
    "instance the MIG GPU lacks": (
        "processes: [{gpu: 3, pid: 5, gpu_instance: 4}]\n",
        "processes[0].gpu_instance: GPU 3 has instances 2, 3, 9, not instance 4",
    ),
    "short container id": (
        "processes: [{gpu: 0, pid: 5, container_id: abc123}]\n",
        "processes[0].container_id must be 64 lowercase hex digits, not 'abc123'",
    ),
    "pod uid of the wrong shape": (
        "processes: [{gpu: 0, pid: 5, pod_uid: 1234-5678}]\n",
        "processes[0].pod_uid must be a pod UID (8-4-4-4-12 lowercase hex digits), not '1234-5678'",
    ),
    "user with a newline": (
        'processes: [{gpu: 0, pid: 5, user: "bob\\nroot"}]\n',
        "processes[0].user must be a user name (a-z, 0-9, _ and -, at most 32), not 'bob\\nroot'",
    ),
    "user that is a number": (
        "processes: [{gpu: 0, pid: 5, user: 1000}]\n",
        "processes[0].user must be a user name (a-z, 0-9, _ and -, at most 32), not 1000",
    ),
    "alias": ("a: &a [1]\nb: *a\n", "aliases (*name) are not allowed"),
    # every number is bounded by what a real host can have: a 300-digit memory size once
    # passed and broke every scrape with OverflowError
    "300-digit memory": (
        "processes: [{gpu: 0, pid: 5, memory_bytes: " + "9" * 300 + "}]\n",
        "an integer of 300 characters is too long",
    ),
    "memory above a pebibyte": (
        f"processes: [{{gpu: 0, pid: 5, memory_bytes: {2**50 + 1}}}]\n",
        "processes[0].memory_bytes must be between 0 and 1125899906842624, not 1125899906842625",
    ),
    "pid at PID_MAX_LIMIT": (
        "processes: [{gpu: 0, pid: 4194304}]\n",
        "processes[0].pid must be between 1 and 4194303, not 4194304",
    ),
    "gpu index beyond --simulate's range": (
        "processes: [{gpu: 1024, pid: 5}]\n",
        "processes[0].gpu must be between 0 and 1023, not 1024",
    ),
    "huge gpu instance": (
        "processes: [{gpu: 3, pid: 5, gpu_instance: " + "9" * 40 + "}]\n",
        "processes[0].gpu_instance must be between 0 and 64, not a 40-digit number",
    ),
    "huge integer ratio": (
        "processes: [{gpu: 0, pid: 5, sm_ratio: " + "9" * 60 + "}]\n",
        "processes[0].sm_ratio must be between 0 and 1, not a 60-digit number",
    ),
    "lost index beyond range": ("faults: {lost: [5000]}\n", "faults.lost[] must be between 0 and"),
    "hang index beyond range": ("faults: {hang: [5000]}\n", "faults.hang[] must be between 0 and"),
    "visible gpus beyond range": ("faults: {gpus: 1025}\n", "faults.gpus must be between 0 and"),
    # under --simulate 2, GPU 7 was once taken without a word, and the fault never happened
    "a GPU the host does not have": (
        "faults: {lost: [7]}\n",
        "faults.lost: GPU 7 does not exist: the simulated host has GPUs 0 to 1",
    ),
    "a process on a GPU the host does not have": (
        "processes: [{gpu: 2, pid: 5}]\n",
        "processes[0].gpu: GPU 2 does not exist",
    ),
    "an event on a GPU the host does not have": (
        "events: [{gpu: 0, xid: 79}, {gpu: 5, xid: 79}]\n",
        "events[1].gpu: GPU 5 does not exist",
    ),
    "huge xid": ("events: [{gpu: 0, xid: 70000}]\n", "events[0].xid must be between 0 and 65535"),
    "event gpu beyond range": (
        "events: [{gpu: 2000, xid: 79}]\n",
        "events[0].gpu must be between 0 and 1023",
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_bad_scenario_file_at_start_exits_2_with_one_line(tmp_path: Path, name: str) -> None:
    content, expected = SCENARIOS[name]
    path = tmp_path / "scenario.yml"
    path.write_text(content)
    line = refused(["--simulate", "2", "--simulate.scenario", str(path)])
    assert line.startswith(f"gpu-exporter: error: --simulate.scenario: {path}: ")
    assert expected in line


def test_a_bad_scenario_rewrite_keeps_the_old_scenario_with_one_error_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "scenario.yml"
    path.write_text("faults: {lost: [1]}\n")
    args = ["--simulate", "2", "--simulate.scenario", str(path), "--collect.interval", "0.2s"]
    exporter = start_exporter(args, tmp_path)
    try:
        exporter.wait_for(lambda s: values(s, "gpu_up", gpu="1") == [0.0])
        path.write_text("faults: {lots: [0]}\n")  # misspelled: must not clear the fault
        log = exporter.wait_log("scenario file not reloaded", 1)
        s = exporter.scrape()
        assert values(s, "gpu_up", gpu="1") == [0.0] and values(s, "gpu_up", gpu="0") == [1.0]
        assert log.count("scenario file not reloaded") == 1
        assert "unknown faults keys: ['lots']" in exporter.log()
        path.write_text("faults: {lost: [0, 7]}\n")  # no GPU 7: nothing of it applies
        log = exporter.wait_log("scenario file not reloaded", 2)
        s = exporter.scrape()
        assert values(s, "gpu_up", gpu="1") == [0.0] and values(s, "gpu_up", gpu="0") == [1.0]
        assert log.count("scenario file not reloaded") == 2
        assert "faults.lost: GPU 7 does not exist" in exporter.log()
        path.write_text("faults: {}\n")
        exporter.wait_for(lambda s: values(s, "gpu_up", gpu="1") == [1.0])
    finally:
        exporter.stop()


def test_every_operator_file_is_read_by_one_loader_with_one_set_of_limits() -> None:
    """Config, scenario and web config files share the reader, so they share its limits."""
    from gpu_exporter.yamlfile import Scalar, parse_yaml

    assert parse_yaml("collect.interval: 1s\n".encode("utf-16")) == {"collect.interval": "1s"}
    plain, as_written = parse_yaml(b"a: 1\n"), parse_yaml(b"a: 1\n", keep_text=True)
    assert plain == {"a": 1} and type(plain["a"]) is int
    assert isinstance(as_written["a"], Scalar) and as_written["a"] == "1"
    assert as_written["a"].value == 1
    for module in ("config", "sources/scenario", "serving/web_config"):
        source = (Path(__file__).parent.parent / "gpu_exporter" / f"{module}.py").read_text()
        assert "read_yaml(" in source and "yaml.load" not in source and "safe_load" not in source
