"""An Xid storm through the real program's kernel-log reader (issue 44, items 2 and 5).

The real program (`--simulate 2`, sampling every 1 s) follows a file of /dev/kmsg
records. Two storms are appended to it, each `--rate` Xids a second for `--seconds`:

1. **Known codes**: Xid 13 on the simulated GPU 0, the storm of item 5;
2. **New labels**: every record names a new bus id and code, the storm of item 2.

Each storm is followed by one Xid 79 whose record is dated when it is written. Measured
from outside, per storm: the program's CPU (utime + stime from /proc, so every thread,
the sampler's and the server's included) per Xid, what it wrote to its own log per Xid,
how long after the storm's last record the Xid 79 was counted in a scrape and how far
its date is from when it was logged, the slowest scrape, and the series the storm left.
`make bench-xid-storm` writes the table to benchmarks/README.md (`make bench` runs it too).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import date
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_exporter.docs import write_section
from tests.support.exporter import Exporter, start_exporter, values

GPU0, GPU1 = "0000:18:00", "0000:28:00"  # the simulated GPUs' bus ids
CHUNK_SECONDS = 0.05  # the writer appends one chunk of records this often
SCRAPE_SECONDS = 1.0  # how often the storm is scraped


def record(seq: int, usec: int, message: str) -> str:
    return f"4,{seq},{usec},-;{message}\n"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def storm(
    exporter: Exporter, kmsg: Path, log: Path, seq: int, rate: int, seconds: float, labels: bool
) -> tuple[dict[str, float], int]:
    """Append `rate` Xids a second for `seconds`, then one Xid 79; the figures, and the
    next SEQ."""
    pid = exporter.process.pid
    total = int(rate * seconds)
    before = values(exporter.scrape(), "gpu_xid_errors_total", gpu="1", xid="79")
    baseline = before[0] if before else 0.0
    cpu0, log0 = cpu_seconds(pid), log.stat().st_size
    per_chunk = max(1, int(rate * CHUNK_SECONDS))
    started = time.monotonic()
    next_scrape = started
    slowest_scrape = 0.0
    written = 0
    with kmsg.open("a") as out:
        while written < total:
            usec = int(time.monotonic() * 1e6)
            lines = []
            for n in range(written, min(total, written + per_chunk)):
                if labels:
                    bus = f"{0x1000 + n:04x}:{n % 256:02x}:00"
                    lines.append(record(seq, usec, f"NVRM: Xid (PCI:{bus}): {n % 100_000}, x"))
                else:
                    lines.append(record(seq, usec, f"NVRM: Xid (PCI:{GPU0}): 13, pid=7, x"))
                seq += 1
            out.write("".join(lines))
            out.flush()
            written += len(lines)
            if time.monotonic() >= next_scrape:  # as Prometheus would, every second
                next_scrape += SCRAPE_SECONDS
                t0 = time.monotonic()
                exporter.scrape()
                slowest_scrape = max(slowest_scrape, time.monotonic() - t0)
            time.sleep(max(0.0, started + written / rate - time.monotonic()))
        logged_wall, logged_mono = time.time(), time.monotonic()
        out.write(record(seq, int(logged_mono * 1e6), f"NVRM: Xid (PCI:{GPU1}): 79, pid=7"))
        seq += 1
    counted = dated = None
    while counted is None and time.monotonic() - logged_mono < 120:
        t0 = time.monotonic()
        samples = exporter.scrape()
        slowest_scrape = max(slowest_scrape, time.monotonic() - t0)
        xid79 = values(samples, "gpu_xid_errors_total", gpu="1", xid="79")
        if xid79 and xid79[0] > baseline:
            counted = time.monotonic() - logged_mono
            dated = values(samples, "gpu_xid_error_timestamp_seconds", gpu="1", xid="79")[0]
        else:
            time.sleep(0.05)
    if counted is None or dated is None:
        raise SystemExit("the Xid after the storm was never counted")
    cpu = cpu_seconds(pid) - cpu0
    log_bytes = log.stat().st_size - log0
    series = sum(1 for name, _labels in samples if name.startswith("gpu_xid_errors"))
    capped = values(samples, "gpu_exporter_xid_kernel_log_capped_records_total")
    return {
        "xids": total,
        "cpu_us_per_xid": cpu / total * 1e6,
        "log_bytes": log_bytes,
        "log_bytes_per_xid": log_bytes / total,
        "counted_after_s": counted,
        "date_error_s": dated - logged_wall,
        "slowest_scrape_s": slowest_scrape,
        "xid_series": series,
        "capped": capped[0] if capped else 0.0,
    }, seq


def idle(exporter: Exporter, seconds: float) -> float:
    """The program's CPU seconds a second with no record to read (sampling, scraped)."""
    pid = exporter.process.pid
    cpu0, started = cpu_seconds(pid), time.monotonic()
    while time.monotonic() - started < seconds:
        exporter.scrape()
        time.sleep(SCRAPE_SECONDS)
    return (cpu_seconds(pid) - cpu0) / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=50_000, help="Xids a second")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each storm lasts")
    parser.add_argument("--write", metavar="README", help="write the table between markers")
    args = parser.parse_args()
    rows = []
    with TemporaryDirectory(prefix="xid-storm-") as tmp:
        directory = Path(tmp)
        kmsg = directory / "kmsg"
        kmsg.write_text(record(0, 1, "Linux version 6.8"))
        exporter = start_exporter(
            ["--simulate", "2", "--collect.interval", "1s"]
            + ["--collector.xid.kernel-log", str(kmsg)],
            directory,
        )
        log = exporter.log_path
        try:
            exporter.wait_for(lambda s: values(s, "gpu_exporter_xid_kernel_log_backlog_read"))
            idle_cpu = idle(exporter, args.seconds)
            seq = 1
            for name, labels in (("known codes", False), ("new labels", True)):
                figures, seq = storm(exporter, kmsg, log, seq, args.rate, args.seconds, labels)
                rows.append((name, figures))
        finally:
            exporter.stop()
    lines = [
        f"Xid storms ({date.today().isoformat()}), {os.cpu_count()} CPUs: the real program "
        f"(`--simulate 2`, 1 s interval) following a file, {args.rate:,} Xids/s for "
        f"{args.seconds:g} s each, then one Xid 79:",
        "",
        "| storm | Xids | CPU µs/Xid | own log bytes (per Xid) | Xid 79 counted after | "
        "its date off by | slowest scrape | Xid series | capped |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {name} | {f['xids']:,.0f} | {f['cpu_us_per_xid']:.1f} | "
            f"{f['log_bytes']:,.0f} ({f['log_bytes_per_xid']:.3f}) | "
            f"{f['counted_after_s']:.2f} s | {f['date_error_s']:+.3f} s | "
            f"{f['slowest_scrape_s'] * 1000:.0f} ms | {f['xid_series']:.0f} | {f['capped']:,.0f} |"
            for name, f in rows
        ),
        "",
        f"CPU is the whole program's, every thread; with no record to read it used "
        f"{idle_cpu * 1000:.0f} ms a second (sampling 2 simulated GPUs, scraped every "
        f"{SCRAPE_SECONDS:g} s), {idle_cpu / args.rate * 1e6:.2f} µs per Xid of the storm's rate.",
    ]
    print("\n".join(lines))
    if args.write:
        write_section(args.write, "xid-storm", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
