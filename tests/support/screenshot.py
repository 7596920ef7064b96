"""`make screenshot`: docs/screenshot.png, the live page of `--simulate 4` with history.

Starts the real program on loopback, lets its history build up, and photographs `/`
through the same browser helper the tests use (tests/support/browser.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.support.browser import chromium, open_live_page, wait_for_history
from tests.support.exporter import REPO, start_exporter

HISTORY_SECONDS_AT_200MS = 90  # points a GPU's 5-minute chart holds before the picture


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default=str(REPO / "docs" / "screenshot.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exporter = start_exporter(["--simulate", "4", "--collect.interval", "200ms"], Path(tmp))
        try:
            wait_for_history(
                exporter,
                points=HISTORY_SECONDS_AT_200MS,
                verdicts={"input-bound", "memory-leaked", "near-oom"},
                timeout=HISTORY_SECONDS_AT_200MS * 3,
            )
            with chromium() as browser:
                page = open_live_page(browser, exporter.url + "/")
                page.screenshot(path=args.output, full_page=False)
        finally:
            exporter.stop()
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
