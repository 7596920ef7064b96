"""`gpu-exporter --print-config WHAT [NAME]`: print a file shipped with the exporter (a
systemd unit, the Prometheus and Alertmanager examples, the alert rules, a Grafana
dashboard) exactly as the repository holds it, so a pip user can install it:

    gpu-exporter --print-config systemd > /etc/systemd/system/gpu-exporter.service

`--runbook-url BASE` rewrites the alert rules' runbook links from the exporter's own
/runbooks page to BASE (a wiki, or docs/alerts.md in your repository). Imported only for
`--print-config`: the daemon never loads it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gpu_exporter.config import EXIT_USAGE
from gpu_exporter.shipped import RUNBOOKS, shipped_path

CONFIGS: dict[tuple[str, ...], str] = {
    ("systemd",): "deploy/systemd/gpu-exporter.service",
    ("systemd", "env"): "deploy/systemd/gpu-exporter.env",
    ("systemd", "kmsg-socket"): "deploy/systemd/gpu-exporter-kmsg.socket",
    ("systemd", "textfile-service"): "deploy/systemd/gpu-exporter-textfile.service",
    ("systemd", "textfile-timer"): "deploy/systemd/gpu-exporter-textfile.timer",
    ("systemd", "textfile-kmsg-socket"): "deploy/systemd/gpu-exporter-textfile-kmsg.socket",
    ("prometheus",): "deploy/prometheus/prometheus.yml",
    ("prometheus", "federation"): "deploy/prometheus/federation.yml",
    ("rules", "alerts"): "deploy/prometheus/rules/gpu-alerts.yml",
    ("rules", "recording"): "deploy/prometheus/rules/gpu-recording.yml",
    ("rules", "kubernetes"): "deploy/kubernetes/prometheusrule.yaml",
    ("alertmanager",): "deploy/alertmanager/alertmanager.yml",
    ("dashboard", "fleet"): "grafana/dashboards/gpu-fleet.json",
    ("dashboard", "node"): "grafana/dashboards/gpu-node.json",
    ("dashboard", "chargeback"): "grafana/dashboards/gpu-chargeback.json",
    ("dashboard", "provisioning"): "grafana/provisioning/dashboards/gpu-exporter.yaml",
    ("runbooks",): RUNBOOKS,
}
"""What `--print-config` takes -> the file's repository path (and its place in the package)."""

RULES_WITH_RUNBOOKS = frozenset({("rules", "alerts"), ("rules", "kubernetes")})

DEFAULT_RUNBOOK_BASE = "http://{{ $labels.instance }}/runbooks"
"""Every alert's runbook_url is this base, '#', and the alert's name in lower case: the
runbook served by the exporter that the alert is about, of the same version as its rules.
The one place the base is written; `--runbook-url` replaces it."""


def choices() -> str:
    return ", ".join(" ".join(words) for words in CONFIGS)


def print_config(words: Sequence[str], runbook_url: str | None) -> int:
    """Write the file `words` name to stdout; exit code 0, or 2 with one line on stderr."""
    key = tuple(words)
    if key not in CONFIGS:
        what = f"unknown {' '.join(words)!r}; " if words else ""
        return _usage(f"--print-config: {what}choose one of: {choices()}")
    if runbook_url is not None and key not in RULES_WITH_RUNBOOKS:
        return _usage("--runbook-url: only with --print-config rules alerts|kubernetes")
    body = shipped_path(CONFIGS[key]).read_bytes()
    if runbook_url is not None:
        body = with_runbook_base(body.decode(), runbook_url).encode()
    sys.stdout.buffer.write(body)
    sys.stdout.flush()
    return 0


def with_runbook_base(rules: str, base: str) -> str:
    """The rule file `rules` with each runbook link under `base` instead of the default."""
    return rules.replace(f"{DEFAULT_RUNBOOK_BASE}#", f"{base.rstrip('#')}#")


def _usage(message: str) -> int:
    print(f"gpu-exporter: error: {message}", file=sys.stderr)
    return EXIT_USAGE
