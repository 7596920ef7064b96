"""The real program against a socket that is not the kubelet's: connections and CPU.

The socket (tests/support/kubelet.py's `JunkSocket`) answers every connection with a
valid HTTP/2 SETTINGS frame and then junk. The program runs with `--simulate 1
--collector.kubernetes --kubernetes.refresh-interval 1s`; after 5 s of start-up, this
counts the connections the socket accepts and the CPU time the program uses for
SECONDS (default 60), and what its log says.

`python benchmarks/kubelet_junk_socket.py [REPO] [SECONDS]` runs the program of REPO (default
this checkout), to compare with an older checkout. Figures only: nothing is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from tests.support.kubelet import JunkSocket  # noqa: E402


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    repo = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    with tempfile.TemporaryDirectory(prefix="junk-", dir="/tmp") as directory:
        junk = JunkSocket(Path(directory) / "kubelet.sock").start()
        program = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpu_exporter",
                "--simulate",
                "1",
                "--collector.kubernetes",
                "--kubernetes.refresh-interval",
                "1s",
                "--kubernetes.pod-resources-socket",
                str(junk.socket_path),
                "--kubernetes.log-directory",
                directory,
                "--web.listen-address",
                "127.0.0.1:0",
            ],
            env={**os.environ, "PYTHONPATH": str(repo)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(5.0)  # start-up
        cpu, connections, started = cpu_seconds(program.pid), junk.connections, time.monotonic()
        time.sleep(seconds)
        cpu = cpu_seconds(program.pid) - cpu
        connections = junk.connections - connections
        elapsed = time.monotonic() - started
        program.terminate()
        log = program.communicate(timeout=10)[1].decode(errors="replace")
        junk.stop()
    print(
        f"{repo}: {connections} connections in {elapsed:.0f} s ({connections / elapsed:.1f}/s), "
        f"CPU {100 * cpu / elapsed:.2f}% of a core; causes logged: "
        f"{log.count('kubernetes attribution unavailable')}, tracebacks: {log.count('Traceback')}"
    )


if __name__ == "__main__":
    main()
