"""Start the real `gpu-exporter` program on loopback and talk to it over HTTP."""

from __future__ import annotations

import gzip
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class HttpResult:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> HttpResult:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return HttpResult(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return HttpResult(error.code, dict(error.headers), error.read())


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_samples(text: str) -> Samples:
    """{(name, sorted labels): value} of a Prometheus text exposition."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def values(samples: Samples, name: str, **labels: str) -> list[float]:
    """Values of every series of `name` whose labels include `labels`; as in PromQL,
    `label=""` matches a series without that label (the exporter writes no empty value)."""
    want = labels.items()
    return [
        v
        for (n, ls), v in samples.items()
        if n == name and all(dict(ls).get(k, "") == value for k, value in want)
    ]


class Labels(dict[str, str]):
    """A series' labels; a label the series lacks reads as "" (as in PromQL)."""

    def __missing__(self, key: str) -> str:
        return ""


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    """The label sets of `name`'s series."""
    return [Labels(ls) for (n, ls) in samples if n == name]


@dataclass
class Exporter:
    """A running gpu-exporter process."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str = "/metrics", headers: dict[str, str] | None = None) -> HttpResult:
        return http_get(self.url + path, headers)

    def scrape(self) -> Samples:
        result = self.get("/metrics")
        assert result.status == 200, result.text
        return parse_samples(result.text)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, predicate: object, timeout: float = 10.0, interval: float = 0.1) -> Samples:
        """Scrape until `predicate(samples)` is true; returns those samples."""
        deadline = time.monotonic() + timeout
        last: Samples = {}
        while time.monotonic() < deadline:
            try:
                last = self.scrape()
                if predicate(last):  # type: ignore[operator]
                    return last
            except (OSError, AssertionError):
                pass
            time.sleep(interval)
        raise AssertionError(f"condition not met within {timeout}s; log:\n{self.log()}")

    def wait_log(self, text: str, count: int = 1, timeout: float = 10.0) -> str:
        """Read the log until `text` is in it `count` times (what a reload or a rewritten
        file led to), or `timeout` seconds have passed; returns the log, for the caller to
        assert on."""
        deadline = time.monotonic() + timeout
        log = self.log()
        while log.count(text) < count and time.monotonic() < deadline:
            time.sleep(0.05)
            log = self.log()
        return log

    def wait_health(self, status: int, timeout: float = 15.0) -> HttpResult:
        """Poll /healthz until it answers `status` (a loaded machine delays samples)."""
        deadline = time.monotonic() + timeout
        result = self.get("/healthz")
        while result.status != status and time.monotonic() < deadline:
            time.sleep(0.1)
            result = self.get("/healthz")
        assert result.status == status, f"/healthz {result.status}: {result.text}"
        return result

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self, timeout: float = 5.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise
        return int(self.process.returncode)


def fake_library_env(gpus: int) -> dict[str, str]:
    """The environment of a program that runs on the fake libnvidia-ml (`gpus` busy
    H100s, `benchmarks/fake_nvml_site`) instead of any Python settings of this one."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "benchmarks/fake_nvml_site")]),
        "FAKE_NVML_GPUS": str(gpus),
        "FAKE_NVML_REPO": str(REPO),
    }


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpu_exporter", *args]


def start_exporter(
    args: Sequence[str],
    tmp_path: Path,
    *,
    port: int | None = None,
    ready: bool = True,
    env: dict[str, str] | None = None,
    wrapper: Sequence[str] = (),
) -> Exporter:
    """Start the program listening on 127.0.0.1, with `env` added to the environment
    (under `wrapper`, a command such as setpriv's that runs it), and wait until /metrics
    answers."""
    port = port or free_port()
    log_path = tmp_path / f"exporter-{port}.log"
    full = [*args, "--web.listen-address", f"127.0.0.1:{port}"]
    environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*wrapper, *command(*full)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=environment,
        )
    exporter = Exporter(process, port, log_path, full)
    return serving(exporter, timeout=30.0, interval=0.05) if ready else exporter


def serving(exporter: Exporter, *, timeout: float, interval: float) -> Exporter:
    """`exporter` once its /metrics answers 200; an AssertionError with its log if it
    exits first or does not answer within `timeout` seconds (then it is stopped)."""
    process = exporter.process
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"exporter exited {process.returncode}:\n{exporter.log()}")
        try:
            if exporter.get("/metrics").status == 200:
                return exporter
        except OSError:
            pass
        time.sleep(interval)
    exporter.stop()
    raise AssertionError(f"exporter did not start:\n{exporter.log()}")


def run_exporter(
    args: Sequence[str], timeout: float = 20.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the program to completion (bad flags, --once), with `env` added to the
    environment; returns its output."""
    return subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **env} if env else None,
    )


def one_error_line(stderr: str) -> str:
    """The single line a refused input must print: no traceback, no second line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert "Traceback" not in stderr
    assert lines[0].startswith("gpu-exporter: error: ")
    return lines[0]


def refused(args: Sequence[str], timeout: float = 20.0) -> str:
    """Run the program with a bad input: exit code 2 and one line, which is returned."""
    result = run_exporter(args, timeout=timeout)
    assert result.returncode == 2, result.stderr
    return one_error_line(result.stderr)


def gunzip(body: bytes) -> bytes:
    return gzip.decompress(body)
