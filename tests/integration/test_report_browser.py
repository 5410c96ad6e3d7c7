"""The HTML report in a real headless Chromium: it loads offline, shows what it should, runs no script.

Needs Debian's chromium (`apt-get install -y chromium`); playwright's own browser download is not used.
Screenshots go to $SELECTOR_ARTIFACTS_DIR (default: the test's tmp_path).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from selector.report.render import write_report
from tests.fixtures.sample_report import sample_sweep

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
XSS = "<script>window.__xss = 1; alert(1)</script>"
PLOT_IDS = ["plot-accuracy", "plot-memory", "plot-latency", "plot-load-latency", "plot-load-throughput"]


@pytest.fixture(scope="module")
def browser():  # type: ignore[no-untyped-def]
    if CHROMIUM is None:
        pytest.skip("chromium is not installed: run `apt-get install -y chromium` to enable browser tests")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright python package is not installed")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _artifacts_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SELECTOR_ARTIFACTS_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _open(browser, html: Path, width: int = 1400):  # type: ignore[no-untyped-def]
    """A page with the report loaded, plus the console errors and non-file requests it produced."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    remote: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.on("request", lambda req: remote.append(req.url) if not req.url.startswith("file://") else None)
    page.goto(html.as_uri())
    page.wait_for_load_state("load")
    return page, errors, remote


def test_report_renders_in_chromium(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    records, selection, context = sample_sweep(inject=XSS)
    paths = write_report(records, selection, context, tmp_path / "report")
    page, errors, remote = _open(browser, paths["html"])

    assert page.title() == "Model selection report — selector-sample"
    assert page.inner_text("#summary-text") == selection.summary
    assert page.inner_text(".winner-name").startswith(selection.winner or "")

    for plot_id in PLOT_IDS:
        box = page.locator(f"#{plot_id} svg").bounding_box()
        assert box is not None, plot_id
        assert box["width"] > 300 and box["height"] > 150, (plot_id, box)

    assert page.locator("#variants tbody tr").count() == len(records) == 12
    assert page.locator("#variants tr.winner-row td.name").inner_text() == selection.winner

    # The injected script is shown as text in the failure card and the warning, and never runs.
    assert XSS in page.locator("#failures").inner_text()
    assert XSS in page.locator("pre.log").inner_text()
    assert XSS in page.locator(".callout.warn").inner_text()
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.evaluate("document.scripts.length") == 0

    assert page.locator("#caveats").inner_text().count("dequantized GGUF weights") == 1
    assert errors == []
    assert remote == []  # self-contained: nothing fetched but the file itself

    shot = _artifacts_dir(tmp_path) / "report-full.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 50_000


def test_variant_table_header_stays_visible_when_scrolled(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    records, selection, context = sample_sweep()
    paths = write_report(records, selection, context, tmp_path / "report")
    page, errors, _ = _open(browser, paths["html"], width=900)  # narrow: the table must scroll sideways
    wrap = page.locator("#variants .table-wrap")
    header = page.locator("#variants thead th").first
    before = header.bounding_box()
    wrap.evaluate("el => { el.style.maxHeight = '220px'; el.scrollTop = 400; el.scrollLeft = 300; }")
    after = header.bounding_box()
    assert before is not None and after is not None
    # The first header cell is sticky both ways: it does not move when the table scrolls.
    assert abs(after["y"] - before["y"]) < 1 and abs(after["x"] - before["x"]) < 1
    assert wrap.evaluate("el => el.scrollWidth > el.clientWidth")
    assert errors == []

    shot = _artifacts_dir(tmp_path) / "report-top-narrow.png"
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(shot))
    print(f"screenshot: {shot}")


def test_model_output_with_script_shows_as_text(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.fixtures.sample_report import sample_outputs

    records, selection, context = sample_sweep()
    paths = write_report(records, selection, context, tmp_path / "report", samples=sample_outputs(records, inject=XSS))
    page, errors, remote = _open(browser, paths["html"])
    section = page.locator("#examples")
    assert section.count() == 1
    outputs = page.locator("#examples .sample.output")
    assert outputs.count() > 0
    texts = [outputs.nth(i).inner_text() for i in range(outputs.count())]
    assert f"wrong answer{XSS}" in texts  # the model's `<script>` is text on the page...
    assert page.evaluate("typeof window.__xss") == "undefined"  # ...and never ran
    assert page.evaluate("document.scripts.length") == 0
    box = outputs.first.bounding_box()
    assert box is not None and box["width"] > 50 and box["height"] > 5
    assert errors == [] and remote == []

    section.scroll_into_view_if_needed()
    shot = _artifacts_dir(tmp_path) / "report-examples.png"
    section.screenshot(path=str(shot))
    print(f"screenshot: {shot}")
