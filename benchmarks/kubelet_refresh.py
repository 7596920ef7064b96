"""The Kubernetes collector's cost: importing gRPC, one kubelet refresh, one attribution.

1. Import cost: a fresh interpreter imports the daemon (what every exporter loads), then
   grpc and the messages generated from the kubelet's api.proto (what only
   `--collector.kubernetes` loads); resident memory and wall time of the second step.
2. Refresh cost: the tests' kubelet stand-in (tests/support/kubelet.py, grpcio on a Unix
   socket) runs in a separate process and serves N pods, 8 of them with a GPU each; this
   process times the watcher's refresh (List over gRPC, decoding, and listing a log tree
   of N containers), median of 20, and the attributor's pass over an 8-GPU sample.
3. Resident memory of this process after those refreshes with 10,000 pods.

`python benchmarks/kubelet_refresh.py --write benchmarks/README.md` writes the table
between the `kubelet` markers. Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpu_exporter.attribution.kubernetes import KubernetesAttributor  # noqa: E402
from gpu_exporter.docs import write_section  # noqa: E402
from gpu_exporter.model import DeviceSample  # noqa: E402
from gpu_exporter.sources.kubelet.watch import KubeletWatcher  # noqa: E402
from gpu_exporter.sources.simulated import SimulatedBackend  # noqa: E402

SIZES = (100, 1_000, 10_000)
GPUS = 8
REPEAT = 20

_IMPORT_PROBE = """
import json, os, time
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
import gpu_exporter.daemon
before, t = rss(), time.perf_counter()
import grpc
from gpu_exporter.sources.kubelet import api_pb2
print(json.dumps({"seconds": time.perf_counter() - t, "bytes": rss() - before, "base": before}))
"""

_SERVER = """
import sys, time
from pathlib import Path
from tests.support.kubelet import Container, FakeKubelet, Pod
n, path = int(sys.argv[1]), Path(sys.argv[2])
pods = [Pod("batch", f"job-{i}", [Container("main")]) for i in range(n - 8)]
pods += [Pod("ml", f"train-{g}", [Container("trainer", {"nvidia.com/gpu": [str(g)]})])
         for g in range(8)]
FakeKubelet(path, pods).start()
print("ready", flush=True)
time.sleep(3600)
"""


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def import_cost() -> dict[str, float]:
    import json

    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", _IMPORT_PROBE],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for _ in range(5)
    ]
    return {
        "ms": statistics.median(r["seconds"] for r in runs) * 1000,
        "mib": statistics.median(r["bytes"] for r in runs) / 2**20,
        "base_mib": statistics.median(r["base"] for r in runs) / 2**20,
    }


def log_tree(root: Path, n: int) -> None:
    (root / "containers").mkdir(parents=True)
    (root / "pods").mkdir()
    for i in range(n):
        uid = f"{i:08x}-0000-4000-8000-000000000000"
        (root / "pods" / f"batch_job-{i}_{uid}").mkdir()
        (root / "containers" / f"job-{i}_batch_main-{i:064x}.log").touch()


def devices() -> tuple[DeviceSample, ...]:
    """An 8-GPU sample of the simulated host (identity only: allocation is by index)."""
    backend = SimulatedBackend(GPUS)
    backend.init()
    return tuple(
        DeviceSample(index=g, static=backend.device_static(g), up=True) for g in range(GPUS)
    )


def refresh_cost(n: int, work: Path) -> dict[str, float]:
    socket_path = work / f"kubelet-{n}.sock"
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(n), str(socket_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "GRPC_VERBOSITY": "ERROR"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        logs = work / f"log-{n}"
        log_tree(logs, n)
        watcher = KubeletWatcher(str(socket_path), log_root=str(logs), timeout_seconds=30)
        watcher.refresh()  # connect
        times = []
        for _ in range(REPEAT):
            t = time.perf_counter()
            reading = watcher.refresh()
            times.append(time.perf_counter() - t)
        assert reading.error is None and reading.pods == n, reading.error
        attributor, sample = KubernetesAttributor(), devices()
        attribution = []
        for _ in range(REPEAT):
            t = time.perf_counter()
            _, state = attributor(sample, reading)
            attribution.append(time.perf_counter() - t)
        assert len(state.allocations) == GPUS
        return {
            "refresh_ms": statistics.median(times) * 1000,
            "attribute_ms": statistics.median(attribution) * 1000,
            "rss_mib": rss_mib(),
        }
    finally:
        server.kill()
        server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="README", help="write the table between markers")
    args = parser.parse_args()
    imported = import_cost()
    rows = []
    with tempfile.TemporaryDirectory(dir="/tmp") as work:
        for n in SIZES:
            rows.append((n, refresh_cost(n, Path(work))))
    lines = [
        f"Kubernetes collector ({date.today().isoformat()}, {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}): importing grpc and the api.proto messages costs "
        f"{imported['ms']:.0f} ms and {imported['mib']:.1f} MiB resident (on top of the "
        f"daemon's {imported['base_mib']:.1f} MiB), paid only with --collector.kubernetes.",
        "",
        "| pods on the node (8 with a GPU) | refresh: List + log tree (ms, median of 20) "
        "| attribution per sample (ms) | resident memory after (MiB) |",
        "|---|---|---|---|",
    ]
    for n, r in rows:
        lines.append(
            f"| {n:,} | {r['refresh_ms']:.1f} | {r['attribute_ms']:.3f} | {r['rss_mib']:.1f} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, "kubelet", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
