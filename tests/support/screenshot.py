"""`make screenshot`: docs/screenshot.png, the live page of `--simulate 4` with history.

Starts the real program on loopback at the default interval (what a user sees), lets
5 minutes of history build up (the 5-minute charts full), and photographs `/`
through the same browser helper the tests use (tests/support/browser.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.support.browser import chromium, open_live_page, wait_for_history
from tests.support.exporter import REPO, start_exporter

WINDOW_POINTS = 60  # a full 5-minute chart at the default 5 s interval: 5 minutes of history
INTERVAL_SECONDS = 5.0  # --collect.interval's default, what a user sees


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default=str(REPO / "docs" / "screenshot.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exporter = start_exporter(["--simulate", "4"], Path(tmp))
        try:
            wait_for_history(
                exporter,
                points=WINDOW_POINTS,
                verdicts={"input-bound", "memory-leaked", "near-oom"},
                timeout=WINDOW_POINTS * INTERVAL_SECONDS * 1.5,
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
