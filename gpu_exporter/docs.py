"""Generate the README's metrics and flags reference from the code.

`python -m gpu_exporter.docs --write README.md` rewrites the text between the
`<!-- BEGIN generated:NAME -->` and `<!-- END generated:NAME -->` markers; a test fails
when the README and the code disagree.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable

from gpu_exporter.config import OPTIONS
from gpu_exporter.metrics.catalogue import COLLECTORS, METRICS
from gpu_exporter.metrics.specs import SAMPLED, RenderOptions


def metrics_reference() -> str:
    lines = [
        "| metric | type | labels | collector | meaning |",
        "|---|---|---|---|---|",
    ]
    for m in METRICS:
        labels = ", ".join(f"`{label}`" for label in m.label_names(RenderOptions())) or "-"
        help_text = m.help.replace(SAMPLED, "").replace("|", "\\|")
        lines.append(
            f"| `{m.name}` | {m.type} | {labels} | {m.collector or 'always'} | {help_text} |"
        )
    return "\n".join(lines)


def flags_reference() -> str:
    lines = ["| flag | meaning |", "|---|---|"]
    for o in OPTIONS:
        value = f" {o.metavar}" if o.metavar else ""
        where = " (flag only)" if o.flag_only else ""
        lines.append(f"| `--{o.key}{value}` | {o.help.replace('|', '/')}{where} |")
    for c in COLLECTORS:
        state = "on" if c.default_enabled else "off"
        lines.append(f"| `--[no-]collector.{c.name}` | {c.description} (default {state}) |")
    lines.append("| `--version` | print the version and exit |")
    return "\n".join(lines)


SECTIONS = {"metrics": metrics_reference, "flags": flags_reference}


def render(text: str) -> str:
    """`text` with every generated section replaced by its current content."""
    for name, make in SECTIONS.items():
        pattern = re.compile(
            rf"(<!-- BEGIN generated:{name} -->\n)(?:.*?\n)?(<!-- END generated:{name} -->)",
            re.S,
        )
        if not pattern.search(text):
            raise ValueError(f"README has no generated:{name} section")
        text = pattern.sub(_replacement(make()), text)
    return text


def _replacement(body: str) -> Callable[[re.Match[str]], str]:
    return lambda m: m.group(1) + body + "\n" + m.group(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", metavar="README", help="rewrite the file in place")
    parser.add_argument("--check", metavar="README", help="exit 1 if the file is out of date")
    args = parser.parse_args()
    path = args.write or args.check
    if path is None:
        print(metrics_reference())
        return 0
    with open(path, encoding="utf-8") as handle:
        current = handle.read()
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(f"{path} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
