"""What the HTTP server costs, and what hostile clients cost it (issue 21).

Runs the real program (`--simulate 8`, 1 s interval) from the checkout given by `--repo`
(default: this one), so the code before a change and after it are measured by the same
script on the same machine:

- scrape latency p50/p99 over SCRAPES scrapes on one keep-alive connection, asking as
  Prometheus does (OpenMetrics, gzip) and with no headers (text), and over
  NEW_CONNECTIONS scrapes on a fresh connection each;
- the exporter's CPU per scrape (user + system, over the keep-alive scrapes);
- resident memory after warm-up and after the scrapes;
- a header flood: FLOOD_CONNECTIONS clients each send a request line and then up to 100
  header lines of 64 KiB and stall before the empty line; the peak resident memory while
  they are connected, a scrape's status and latency meanwhile, and the resident memory
  once they are gone;
- slow readers: SLOW_READERS clients with a 4 KiB receive buffer pipeline 150 scrapes
  each and never read; the statuses of 20 scrapes made meanwhile;
- never-reading clients (issue 28): NEVER_READING clients with a 1 KiB receive buffer
  pipeline 50 scrapes each and never read; the statuses of 40 GETs each of /livez and
  /metrics from another loopback address (127.0.0.2) meanwhile, and the peak resident
  memory.

Prints one JSON object. Measured, never asserted: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from bench import free_port, wait_ready

HERE = Path(__file__).resolve().parents[1]
SCRAPES = 2000
NEW_CONNECTIONS = 500
FLOOD_CONNECTIONS = 40
SLOW_READERS = 45
NEVER_READING = 300
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "Accept-Encoding": "gzip",
}


def rss_mib(proc: psutil.Process) -> float:
    return float(proc.memory_info().rss) / 2**20


def percentiles(latencies: list[float]) -> dict[str, float]:
    latencies.sort()
    return {
        "p50_ms": round(statistics.median(latencies), 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 3),
    }


def keep_alive(port: int, headers: dict[str, str]) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    for _ in range(SCRAPES):
        t0 = time.perf_counter()
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        response.read()
        out.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return out


def new_connections(port: int) -> list[float]:
    out = []
    for _ in range(NEW_CONNECTIONS):
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics", headers=PROMETHEUS_HEADERS)
        conn.getresponse().read()
        conn.close()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def scrape(
    port: int, timeout: float = 10.0, path: str = "/metrics", source: str | None = None
) -> tuple[int, float]:
    t0 = time.perf_counter()
    bound = (source, 0) if source is not None else None
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=bound)
        conn.request("GET", path)
        status = conn.getresponse().status
        conn.close()
    except (OSError, http.client.HTTPException):
        status = 0
    return status, round((time.perf_counter() - t0) * 1000, 1)


def header_flood(port: int, proc: psutil.Process, connections: int) -> dict[str, object]:
    line = b"X-Pad: " + b"a" * (64 * 1024 - 9) + b"\r\n"
    socks: list[socket.socket] = []

    def flood() -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        socks.append(sock)
        try:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            for _ in range(100):
                sock.sendall(line)
        except OSError:
            pass  # answered and closed early

    threads = [threading.Thread(target=flood) for _ in range(connections)]
    for thread in threads:
        thread.start()
    peak = rss_mib(proc)
    deadline = time.monotonic() + 20
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        peak = max(peak, rss_mib(proc))
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    peak = max(peak, rss_mib(proc))
    during = scrape(port, timeout=5)
    for sock in socks:
        sock.close()
    time.sleep(2.0)
    return {
        "connections": connections,
        "rss_peak_mib": round(peak, 1),
        "scrape_during": during,
        "rss_after_mib": round(rss_mib(proc), 1),
    }


def slow_readers(port: int) -> dict[str, object]:
    socks = []
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    for _ in range(SLOW_READERS):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(request * 150)
        socks.append(sock)
    time.sleep(1.0)
    statuses = [scrape(port, timeout=5)[0] for _ in range(20)]
    for sock in socks:
        sock.close()
    return {"clients": SLOW_READERS, "statuses": {s: statuses.count(s) for s in set(statuses)}}


def never_reading(port: int, proc: psutil.Process) -> dict[str, object]:
    socks = []
    requests = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 50
    for _ in range(NEVER_READING):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(requests)
        except OSError:
            pass  # refused
        socks.append(sock)
    time.sleep(1.5)
    peak = rss_mib(proc)
    out: dict[str, object] = {"clients": NEVER_READING}
    for path in ("/livez", "/metrics"):
        statuses = []
        for _ in range(40):
            statuses.append(scrape(port, timeout=10, path=path, source="127.0.0.2")[0])
            peak = max(peak, rss_mib(proc))
        out[path] = {s: statuses.count(s) for s in set(statuses)}
    out["rss_peak_mib"] = round(peak, 1)
    for sock in socks:
        sock.close()
    return out


def measure(repo: Path, flood_connections: int) -> dict[str, object]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(repo)}
    command = [sys.executable, "-m", "gpu_exporter", "--simulate", "8"]
    command += ["--collect.interval", "1s", "--log.level", "error"]
    command += ["--web.listen-address", f"127.0.0.1:{port}"]
    program = subprocess.Popen(command, cwd=repo, env=env)
    proc = psutil.Process(program.pid)
    try:
        wait_ready(port, timeout=30, path="/metrics")
        time.sleep(2.0)
        out: dict[str, object] = {"repo": str(repo), "rss_warm_mib": round(rss_mib(proc), 1)}
        cpu0 = proc.cpu_times()
        om = keep_alive(port, PROMETHEUS_HEADERS)
        cpu1 = proc.cpu_times()
        out["keep_alive_openmetrics_gzip"] = percentiles(om)
        out["cpu_ms_per_scrape"] = round(
            ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) * 1000 / SCRAPES, 3
        )
        out["keep_alive_text"] = percentiles(keep_alive(port, {}))
        out["new_connection_openmetrics_gzip"] = percentiles(new_connections(port))
        out["rss_after_scrapes_mib"] = round(rss_mib(proc), 1)
        out["header_flood"] = header_flood(port, proc, flood_connections)
        out["slow_readers"] = slow_readers(port)
        out["never_reading"] = never_reading(port, proc)
        return out
    finally:
        program.terminate()
        program.wait(20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=HERE, help="the checkout to run")
    parser.add_argument("--flood", type=int, default=FLOOD_CONNECTIONS, help="flooding clients")
    args = parser.parse_args()
    print(json.dumps(measure(args.repo.resolve(), args.flood), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
