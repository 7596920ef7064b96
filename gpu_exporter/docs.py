"""Generate the reference sections of the docs from the code, and the /runbooks page.

`python -m gpu_exporter.docs --write docs/reference.md docs/migrating-from-dcgm-exporter.md
gpu_exporter/serving/static/runbooks.html` (`make docs`) rewrites the text between the
`<!-- BEGIN generated:NAME -->` and `<!-- END generated:NAME -->` markers of each file; a
test fails when a file and the code disagree.

The runbooks (docs/alerts.md) are rendered to HTML here, at build time, with markdown-it-py
(CommonMark with GitHub's tables): a development dependency, imported only by this
function. The exporter serves the checked-in result and never imports it.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Iterable
from itertools import pairwise

from gpu_exporter.attribution.identity import CMDLINE_MAX_CHARS, MAX_READ_BYTES
from gpu_exporter.config import OPTIONS
from gpu_exporter.metrics.catalogue import METRICS, read_cadence
from gpu_exporter.metrics.collectors import COLLECTORS
from gpu_exporter.metrics.dcgm import DCGM_METRICS
from gpu_exporter.metrics.specs import SAMPLED, RenderOptions
from gpu_exporter.metrics.text import (
    CUT_DIGEST_HEX_DIGITS,
    CUT_MARKER,
    LABEL_VALUE_MAX_BYTES,
    LONG_LABEL_VALUE_MAX_BYTES,
)
from gpu_exporter.shipped import RUNBOOKS, shipped_path


def metrics_reference() -> str:
    lines = [
        "| metric | type | labels | collector | read | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for m in METRICS:
        labels = ", ".join(f"`{label}`" for label in m.label_names(RenderOptions())) or "-"
        help_text = m.help.replace(SAMPLED, "").replace("|", "\\|")
        read = read_cadence(m.name)
        lines.append(
            f"| `{m.name}` | {m.type} | {labels} | {m.collector or 'always'} | {read} "
            f"| {help_text} |"
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


def label_values_reference() -> str:
    """The rule every writer follows for label values (`metrics.text.capped_label_value`)."""
    longer = ", ".join(f"`{name}` {limit}" for name, limit in LONG_LABEL_VALUE_MAX_BYTES.items())
    digits = CUT_DIGEST_HEX_DIGITS
    text = (
        "Every label value of every metric, in the text and the OpenMetrics format and under "
        f"the DCGM names, is at most {LABEL_VALUE_MAX_BYTES} bytes of UTF-8 ({longer}), as "
        "Prometheus' `label_value_length_limit` counts them. A longer value (a process name, "
        "a user, a cgroup path, a pod name of up to 253 characters) is written as its start, "
        f"cut at a character boundary, then `{CUT_MARKER}` (U+2026) and the first {digits} hex "
        "digits of the SHA-256 of the whole value in UTF-8 "
        f'(`printf %s "$value" | sha256sum | cut -c1-{digits}`). So two values that differ '
        "stay two label values, and two series, however long the start they share, and a "
        "value is written the same from one run to the next. A value within the limit that "
        f"already ends in `{CUT_MARKER}` and {digits} hex digits is written the same way, so "
        "no value is written as another's cut form. The digest is of the value as read: a "
        f"command line's first {CMDLINE_MAX_CHARS} characters, a process name from the first "
        f"{MAX_READ_BYTES // 1024} KiB of its command line."
    )
    return textwrap.fill(text, width=88, break_on_hyphens=False)


DCGM_SUFFIX = " dcgm-exporter compatibility (--compat.dcgm)."
GPU_NAME = re.compile(r"\bgpu_[a-z0-9_]+")


def dcgm_to_gpu() -> str:
    """The name map from each DCGM field to the PromQL that gives it from the gpu_ names."""
    lines = [
        "| DCGM field | type | value | from the gpu_ metrics | same value |",
        "|---|---|---|---|---|",
    ]
    for m in DCGM_METRICS:
        meaning = m.help.removesuffix(DCGM_SUFFIX).replace("|", "\\|")
        instance = " Also per MIG instance." if m.instance is not None else ""
        same = m.difference or (
            "exactly" if m.exact else "over the rate's window, not the last interval"
        )
        equivalent = m.equivalent.replace("|", "\\|")
        lines.append(f"| `{m.name}` | {m.type} | {meaning}{instance} | `{equivalent}` | {same} |")
    return "\n".join(lines)


def gpu_to_dcgm() -> str:
    """The name map the other way: every gpu_ metric and the DCGM fields it answers."""
    answered: dict[str, list[str]] = {}
    for m in DCGM_METRICS:
        for name in GPU_NAME.findall(m.equivalent):
            answered.setdefault(name, []).append(m.name)
    lines = ["| gpu_ metric | DCGM fields (default set) |", "|---|---|"]
    for metric in METRICS:
        fields = ", ".join(f"`{f}`" for f in answered.get(metric.name, [])) or "none"
        lines.append(f"| `{metric.name}` | {fields} |")
    return "\n".join(lines)


def github_anchor(heading: str) -> str:
    """GitHub's id of a heading (its text as shown): lower case, punctuation dropped,
    spaces as hyphens. Each alert's runbook_url ends in `#` and its anchor."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def runbooks_html(markdown: str) -> str:
    """`markdown` as HTML: CommonMark with tables; raw HTML in it escaped; each heading
    with GitHub's anchor as its id; links kept to http(s) and to anchors (a link to a
    file of the repository keeps its text only: it would not resolve under /runbooks)."""
    from markdown_it import MarkdownIt  # a development dependency: `make docs` only

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(markdown)
    for heading, inline in pairwise(tokens):
        if heading.type == "heading_open":
            shown = "".join(c.content for c in inline.children or () if c.content)
            heading.attrSet("id", github_anchor(shown))
    for inline in tokens:
        kept, dropped = [], 0
        for child in inline.children or ():
            href = str(child.attrGet("href") or "")
            if child.type == "link_open" and not href.startswith(("https://", "http://", "#")):
                dropped += 1
            elif child.type == "link_close" and dropped:
                dropped -= 1
            else:
                kept.append(child)
        if inline.children:
            inline.children = kept
    return str(md.renderer.render(tokens, md.options, {})).rstrip("\n")


def runbooks_section() -> str:
    """The body of /runbooks: the shipped docs/alerts.md as HTML."""
    return runbooks_html(shipped_path(RUNBOOKS).read_text(encoding="utf-8"))


def actions_reference() -> str:
    """The rules of `gpu_recommended_action` and the Xid catalog they read, as tables."""
    from gpu_exporter.sampling import actions

    rows = [
        "| action | what to run |",
        "|---|---|",
        *(f"| `{action}` | {advice} |" for action, advice in actions.action_rows()),
        "",
        "| reason | fires when | action | source |",
        "|---|---|---|---|",
        *(
            f"| `{signal}` | {condition} | `{action}` | {source} |"
            for signal, condition, action, source in actions.rule_rows()
        ),
        "",
        "The actions are listed weakest first. An Xid "
        f"rule names the code in its reason (`xid_79`) and holds for "
        f"{actions.RECENT_XID_SECONDS / 60:.0f} minutes after the Xid was logged.",
    ]
    return "\n".join(rows)


SECTIONS = {
    "metrics": metrics_reference,
    "label-values": label_values_reference,
    "flags": flags_reference,
    "dcgm-to-gpu": dcgm_to_gpu,
    "gpu-to-dcgm": gpu_to_dcgm,
    "runbooks": runbooks_section,
    "actions": actions_reference,
}
# The flag and metric tables of docs/reference.md, and its rule for label values.
REFERENCE_SECTIONS = ("metrics", "label-values", "flags")


def sections_in(text: str) -> tuple[str, ...]:
    """The generated sections whose markers `text` holds."""
    return tuple(name for name in SECTIONS if f"<!-- BEGIN generated:{name} -->" in text)


def render(text: str, sections: Iterable[str] = REFERENCE_SECTIONS) -> str:
    """`text` with each of `sections` replaced by its current content."""
    for name in sections:
        text = replace_section(text, f"generated:{name}", SECTIONS[name]())
    return text


def replace_section(text: str, marker: str, body: str) -> str:
    """`text` with the lines between `<!-- BEGIN marker -->` and `<!-- END marker -->`
    replaced by `body`; ValueError when `text` has no such markers. Also used by the
    benchmarks to record their figures."""
    pattern = re.compile(rf"(<!-- BEGIN {marker} -->\n)(?:.*?\n)?(<!-- END {marker} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"the file has no {marker} section")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def write_section(path: str, marker: str, body: str) -> None:
    """`replace_section` on the file at `path`, in place."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(replace_section(text, marker, body))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", metavar="FILE", nargs="+", help="rewrite the files in place")
    parser.add_argument("--check", metavar="FILE", nargs="+", help="exit 1 if one is out of date")
    args = parser.parse_args()
    paths = args.write or args.check
    if paths is None:
        print(metrics_reference())
        return 0
    stale = 0
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            current = handle.read()
        sections = sections_in(current)
        if not sections:
            print(f"{path} has no generated section", file=sys.stderr)
            return 1
        wanted = render(current, sections)
        if args.check:
            if wanted != current:
                print(f"{path} is out of date: run `make docs`", file=sys.stderr)
                stale += 1
            continue
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(wanted)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
