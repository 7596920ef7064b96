"""Each shipped rule's own evaluation time on a synthetic fleet: where the rules' CPU goes.

`benchmarks/fleet.py` reports rule groups; this reports rules. It serves `--nodes`
synthetic nodes (fleet.py's: the exporter's own simulated exposition, values varied per
node and GPU; `--hardware gb200-nvl72` for 4-GPU GB200 trays with rack labels), lets
Debian's Prometheus scrape them with deploy/prometheus/rules/*.yml for `--seconds`, then
prints each group's and the slowest rules' last `evaluationTime` (Prometheus's
/api/v1/rules). Loopback only. Quick (about 4 minutes at 250 nodes); compare figures
from one machine and one sitting. `--expressions FILE` also times each PromQL expression
of FILE (one per paragraph, blank lines between) as an instant query against the same
Prometheus, median of 5: a rewrite of a rule priced beside the rule it replaces.

    .venv/bin/python benchmarks/rule_costs.py --nodes 250 --seconds 200
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet


def prometheus_rules(url: str) -> list[dict[str, Any]]:
    """The rule groups as Prometheus's /api/v1/rules reports them."""
    with urllib.request.urlopen(url + "/api/v1/rules", timeout=30) as answer:
        groups: list[dict[str, Any]] = json.load(answer)["data"]["groups"]
    return groups


def query_seconds(url: str, expression: str, rounds: int = 5) -> tuple[float, int]:
    """The median wall time of `expression` as an instant query (seconds), and its rows."""
    target = url + "/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    times, rows = [], 0
    for _ in range(rounds):
        start = time.perf_counter()
        with urllib.request.urlopen(target, timeout=120) as answer:
            rows = len(json.load(answer)["data"]["result"])
        times.append(time.perf_counter() - start)
    return statistics.median(times), rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=250, help="synthetic nodes")
    parser.add_argument("--seconds", type=float, default=200.0, help="scraping before reading")
    parser.add_argument("--hardware", default="hgx-h100", choices=("hgx-h100", "gb200-nvl72"))
    parser.add_argument("--top", type=int, default=25, help="rules listed")
    parser.add_argument(
        "--expressions", type=Path, help="PromQL expressions to time, one per paragraph"
    )
    args = parser.parse_args()
    expressions = (
        []
        if args.expressions is None
        else [e.strip() for e in args.expressions.read_text().split("\n\n") if e.strip()]
    )
    timed: list[tuple[float, int, str]] = []
    samples = fleet.template(args.hardware)
    with tempfile.TemporaryDirectory(prefix="rule-costs-") as tmp:
        workdir, minutes = Path(tmp), args.seconds / 60
        with fleet.scraping(args.nodes, samples, minutes, workdir, "rules") as (prometheus, _):
            groups = prometheus_rules(prometheus.url)
            for expression in expressions:
                timed.append((*query_seconds(prometheus.url, expression), expression))
    gpus = args.nodes * fleet.gpus_of(samples)
    print(f"{gpus:,} GPUs ({args.nodes} nodes, {args.hardware}), {args.seconds:g} s of scraping")
    print("\ngroup: seconds per evaluation (interval)")
    for group in sorted(groups, key=lambda g: -g["evaluationTime"]):
        print(f"  {group['evaluationTime']:7.3f}  {group['name']} ({group['interval']:g} s)")
    rules = [(r["evaluationTime"], g["name"], r["name"]) for g in groups for r in g["rules"]]
    print(f"\nthe {args.top} slowest rules: seconds per evaluation")
    for seconds, group, name in sorted(rules, reverse=True)[: args.top]:
        print(f"  {seconds:7.3f}  {name} ({group})")
    if timed:
        print("\nexpressions: median seconds of 5 instant queries (rows)")
    for seconds, rows, expression in timed:
        print(f"  {seconds:7.3f}  ({rows} rows)  " + " ".join(expression.split())[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main())
