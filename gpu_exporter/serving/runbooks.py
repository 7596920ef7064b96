"""/runbooks: the alerts' runbooks (docs/alerts.md, shipped in the package) as a page a
browser opens at an alert's section, as each rule's runbook_url asks (`#gpulost`).

A small renderer of the Markdown that file uses, not a Markdown library: headings get
GitHub's anchors as ids, paragraphs and list items keep `code`, **bold** and links to
http(s) or an anchor, and tables and code blocks are shown as preformatted text.
Everything else is escaped. Imported only when someone opens /runbooks.
"""

from __future__ import annotations

import html
import re
from functools import cache

from gpu_exporter.shipped import RUNBOOKS, shipped_path

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_LIST_ITEM = re.compile(r"^(?:[-*]|\d+\.)\s+")
_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's id of a heading: lower case, punctuation dropped, spaces as hyphens."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def _inline(text: str) -> str:
    out: list[str] = []
    last = 0
    for match in _INLINE.finditer(text):
        out.append(html.escape(text[last : match.start()]))
        code, bold, label, url = match.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{_inline(bold)}</strong>")
        elif url.startswith(("https://", "http://", "#")):
            out.append(f'<a href="{html.escape(url)}">{_inline(label)}</a>')
        else:  # a relative link to a file of the repository: its text only
            out.append(_inline(label))
        last = match.end()
    out.append(html.escape(text[last:]))
    return "".join(out)


def _block(lines: list[str]) -> str:
    if lines[0].startswith("|"):
        return f"<pre>{html.escape(chr(10).join(lines))}</pre>"
    if _LIST_ITEM.match(lines[0]):
        items: list[list[str]] = []
        for line in lines:
            if _LIST_ITEM.match(line) or not items:
                items.append([_LIST_ITEM.sub("", line, count=1)])
            else:
                items[-1].append(line.strip())
        return "<ul>" + "".join(f"<li>{_inline(' '.join(i))}</li>" for i in items) + "</ul>"
    return f"<p>{_inline(' '.join(line.strip() for line in lines))}</p>"


def render(markdown: str) -> str:
    """The HTML body of `markdown`."""
    out: list[str] = []
    block: list[str] = []
    code: list[str] | None = None

    def flush() -> None:
        if block:
            out.append(_block(block))
            block.clear()

    for line in markdown.splitlines():
        if code is not None:
            if line.startswith("```"):
                out.append(f"<pre><code>{html.escape(chr(10).join(code))}</code></pre>")
                code = None
            else:
                code.append(line)
            continue
        heading = _HEADING.match(line)
        if line.startswith("```"):
            flush()
            code = []
        elif heading:
            flush()
            level, text = len(heading.group(1)), heading.group(2)
            out.append(f'<h{level} id="{html.escape(anchor(text))}">{_inline(text)}</h{level}>')
        elif not line.strip():
            flush()
        else:
            block.append(line)
    flush()
    if code is not None:
        out.append(f"<pre><code>{html.escape(chr(10).join(code))}</code></pre>")
    return "\n".join(out)


@cache
def page() -> bytes:
    """The /runbooks page, rendered once from the shipped docs/alerts.md."""
    body = render(shipped_path(RUNBOOKS).read_text(encoding="utf-8"))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>GPU Exporter: alert runbooks</title></head><body>\n"
        f"{body}\n</body></html>\n"
    ).encode()
