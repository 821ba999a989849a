"""The first screen of a run's report, as a user's 1280 x 800 browser window shows it.

    .venv/bin/python docs/report_screenshot.py runs/NAME docs/report-first-screen.png

Needs Playwright (``pip install playwright``) and a Chromium (Debian: ``apt-get install
chromium``; another one through ``CHROMIUM=/path/to/chrome``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def main(run_dir: str, out_png: str) -> int:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if chromium is None:
        print("no Chromium found: apt-get install chromium, or set CHROMIUM", file=sys.stderr)
        return 2
    report = Path(run_dir) / "report.html"
    if not report.is_file():
        print(f"{report}: no report there (run the main job first)", file=sys.stderr)
        return 2
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(report.resolve().as_uri(), wait_until="load")
        page.screenshot(path=out_png)
        browser.close()
    print(out_png)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
