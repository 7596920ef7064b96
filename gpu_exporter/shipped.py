"""Where the files shipped beside the code are: the systemd units, Prometheus and
Alertmanager examples, alert rules, Grafana dashboards and the alerts' runbooks.

The repository keeps one copy of each at its place (deploy/, grafana/, docs/alerts.md);
the build (setup.py) carries them into the package under `gpu_exporter/shipped/` at the
same relative paths. Only `--print-config` reads them (and `make docs`, which renders the
runbooks into the page served at /runbooks).
"""

from __future__ import annotations

from pathlib import Path

RUNBOOKS = "docs/alerts.md"
"""The runbook of every alert (its repository path): served at /runbooks as HTML."""


def shipped_path(relative: str) -> Path:
    """The shipped file at repository path `relative` (for example "docs/alerts.md"):
    in the installed package, or in the checkout the package is imported from."""
    package = Path(__file__).resolve().parent
    installed = package / "shipped"
    root = installed if installed.is_dir() else package.parent
    return root / relative
