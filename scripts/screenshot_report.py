"""Screenshot a report in headless Chromium (the README's picture is made with this).

    python scripts/screenshot_report.py outputs/sweeps/<time>/report/report.html docs/img/report.png

Needs Debian's chromium (scripts/install_browser.sh) and the playwright package (dev extras).
The page is opened from disk with the network off: the report is self-contained.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="a report.html")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1600, help="the visible height (the top of the page)")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not installed: run scripts/install_browser.sh")
    from playwright.sync_api import sync_playwright

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": args.width, "height": args.height}, offline=True)
        page.goto(args.report.resolve().as_uri())
        page.screenshot(path=str(args.out))
        browser.close()
    print(args.out)


if __name__ == "__main__":
    main()
