"""docs/what-nvml-really-does.md quotes NVIDIA's header: every quote it attributes to a
line of nvml.h is on that line (or the lines it names), and every test it names exists."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_nvml_header import include_dir  # noqa: F401 (the pinned header's fixture)

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "what-nvml-really-does.md"
# "quoted text" (nvml.h:N), (nvml.h:N-M, an en dash in the page) or (nvml.h:N, M, K)
DASH = "\u2013"
CITED = re.compile(r'"([^"]+)"\s*\(nvml\.h:(\d+(?:[' + DASH + r"-]\d+)?(?:,\s*\d+)*)\)")


def _lines(spec: str) -> list[int]:
    out: list[int] = []
    for part in re.split(r",\s*", spec):
        first, _, last = part.replace(DASH, "-").partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^\w.]+", " ", text).split()).lower()


def test_every_quote_from_the_header_is_on_the_line_it_cites(include_dir: Path) -> None:  # noqa: F811
    header = (include_dir / "nvml.h").read_text().splitlines()
    page = " ".join(PAGE.read_text().split())
    cited = CITED.findall(page)
    assert len(cited) >= 8, cited
    for quote, spec in cited:
        lines = _lines(spec)
        for line in lines:
            window = _words(" ".join(header[max(0, line - 3) : line + 2]))
            if all(_words(piece) in window for piece in quote.split("…") if piece.strip()):
                break
        else:
            raise AssertionError(f"{quote!r} is not at nvml.h:{spec}")


def test_every_test_and_support_file_the_page_names_exists() -> None:
    named = set(re.findall(r"`((?:tests|benchmarks)/[\w/.]+\.py)`", PAGE.read_text()))
    assert named
    assert [path for path in sorted(named) if not (ROOT / path).exists()] == []
