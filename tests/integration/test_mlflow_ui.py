"""What a person sees in the MLflow UI after a sweep: a real `mlflow server` on loopback over the
store a sweep wrote (the tiny model on engine=scripted: the UI is under test, not a model), driven
in headless Chromium (Debian's `chromium`, like the report test). The page content is checked, not
just status codes: the sweep run with its two variant runs nested under it, a variant's metrics,
tags, eval-set dataset and artifacts, and the compare page.

Screenshots go to $SELECTOR_ARTIFACTS_DIR (default: the test's tmp_path); their paths are printed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.scripted import ENGINE, write_scripted_engine
from tests.sweep_helpers import QUICK, mlflow_runs, run_in_process
from tests.tiny import write_model_config

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
WAIT_MS = 60_000  # the UI is a React app on a slow shared machine
VARIANTS = ["tiny/bf16", "tiny/fp32"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("mlflow-ui")
    write_model_config(base / "conf", "tiny", tiny_model_dir)
    write_scripted_engine(base / "conf")  # what MLflow shows is under test, not a model
    setup: dict[str, Any] = {"base": base, "conf": base / "conf", "out": base / "out", "cache": base / "cache"}
    result = run_in_process(setup, "model=tiny", f"engine={ENGINE}", "precision=fp32,bf16", *QUICK)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    [report] = (setup["out"] / "sweeps").glob("*/report/report.html")
    assert 'id="examples"' in report.read_text()  # the end of the sweep passed the samples to the report
    setup["printed"] = printed_mlflow_hint(result.stdout)
    return setup


def printed_mlflow_hint(stdout: str) -> dict[str, str]:
    """What the sweep told the user to run and open, from its last lines."""
    tail = stdout[stdout.index("MLflow: "):]
    command = re.search(r"MLflow: (mlflow ui --backend-store-uri \S+)", tail)
    links = dict(re.findall(r"^\s+(sweep runs|sweep run|variants side by side): +(\S+)$", tail, re.M))
    assert command and set(links) == {"sweep runs", "sweep run", "variants side by side"}, tail
    return {"command": command.group(1), **links}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(sweep: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The command the sweep printed, run as printed (on a free port instead of 5000)."""
    port = _free_port()
    log = (sweep["base"] / "mlflow-server.log").open("w")
    command = shlex.split(sweep["printed"]["command"])
    assert command[:2] == ["mlflow", "ui"]
    proc = subprocess.Popen(
        [sys.executable, "-m", *command, "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # its own group: stopped as a whole
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start:\n{(sweep['base'] / 'mlflow-server.log').read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def page(server: str):  # type: ignore[no-untyped-def]
    if CHROMIUM is None:
        pytest.skip("chromium is not installed: run `apt-get install -y chromium` to enable browser tests")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright python package is not installed")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(WAIT_MS)
        yield page
        browser.close()


def _open(page, url: str) -> None:  # type: ignore[no-untyped-def]
    """A fresh load: a goto that only changes the #fragment would leave the React app on its old view."""
    page.goto("about:blank")
    page.goto(url)


def _shot(page, tmp_path: Path, name: str) -> Path:  # type: ignore[no-untyped-def]
    folder = Path(os.environ.get("SELECTOR_ARTIFACTS_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def test_mlflow_ui_shows_the_sweep_its_variants_and_their_metrics(  # type: ignore[no-untyped-def]
        sweep, server, page, tmp_path: Path) -> None:
    [parent], children = mlflow_runs(sweep["out"])
    by_name = {c.info.run_name: c for c in children}
    assert sorted(by_name) == VARIANTS
    experiment = parent.info.experiment_id

    printed = {k: v.replace("http://127.0.0.1:5000", server) for k, v in sweep["printed"].items()}
    # The printed link opens the runs table in MLflow's model-training view (not its GenAI home):
    # the sweep run, and its variant runs nested under it once it is expanded.
    assert f"/#/experiments/{experiment}/runs" in printed["sweep runs"]
    _open(page, printed["sweep runs"])
    page.get_by_role("link", name="Models", exact=True).first.wait_for()  # model-training navigation
    assert page.get_by_text("Welcome to MLflow", exact=False).count() == 0
    parent_link = page.get_by_role("link", name=parent.info.run_name, exact=True)
    parent_link.wait_for()
    assert page.get_by_role("link", name="tiny/fp32", exact=True).count() == 0  # collapsed at first
    row = page.locator("div.ag-row").filter(has=parent_link)
    row.locator("[col-id='attributes.`Run Name`'] button").first.click()  # the +/- beside the sweep run
    links = {name: page.get_by_role("link", name=name, exact=True) for name in VARIANTS}
    for link in links.values():
        link.wait_for()
    top = parent_link.bounding_box()
    for name, link in links.items():
        box = link.bounding_box()
        assert top and box and box["y"] > top["y"], name  # listed below the sweep run...
        assert box["x"] > top["x"], name  # ...and indented under it
    _shot(page, tmp_path, "mlflow-runs-nested.png")

    # A variant's own page: its metrics, where it belongs, its tags and the eval set it was scored on.
    fp32 = by_name["tiny/fp32"]
    _open(page, f"{server}/#/experiments/{experiment}/runs/{fp32.info.run_id}")
    for task in ("sentiment", "arithmetic"):
        metric_row = page.get_by_role("row").filter(has=page.get_by_text(f"accuracy/{task}", exact=True))
        metric_row.first.wait_for()
        assert metric_row.first.inner_text().split() == [f"accuracy/{task}", f"{fp32.data.metrics[f'accuracy/{task}']:g}"]
    page.get_by_role("link", name=parent.info.run_name, exact=True).first.wait_for()  # "Parent run": the sweep
    body = page.locator("body")
    digest = fp32.inputs.dataset_inputs[0].dataset.digest
    page.get_by_text(f"default ({digest})", exact=False).first.wait_for()  # the eval set, logged with log_inputs
    text = body.inner_text()
    for key, value in (("selector.precision", "fp32"), ("selector.status", "completed"), ("selector.model", "tiny"),
                       ("selector.size", fp32.data.tags["selector.size"])):
        assert f"{key}\n: {value}" in text, key
    _shot(page, tmp_path, "mlflow-run-variant.png")

    # Its artifacts: the record and the per-sample predictions; the sweep run holds the report.
    _open(page, f"{server}/#/experiments/{experiment}/runs/{fp32.info.run_id}/artifacts")
    page.get_by_text("samples.jsonl", exact=True).first.wait_for()
    page.get_by_text("record.json", exact=True).first.wait_for()
    page.get_by_text("samples.jsonl", exact=True).first.click()
    page.get_by_text('"task":"sentiment"', exact=False).first.wait_for()  # the preview shows the predictions
    _shot(page, tmp_path, "mlflow-run-artifacts.png")
    _open(page, f"{server}/#/experiments/{experiment}/runs/{parent.info.run_id}/artifacts")
    page.get_by_text("report", exact=True).first.click()
    page.get_by_text("report.html", exact=True).first.wait_for()

    # The printed sweep-run link: the sweep's verdict as the run's description.
    _open(page, printed["sweep run"])
    page.get_by_text(parent.data.tags["mlflow.note.content"][:60], exact=False).first.wait_for()

    # The printed compare link: both variants side by side, each metric value in its run's column.
    _open(page, printed["variants side by side"])
    page.get_by_text("Comparing 2 Runs", exact=False).wait_for()
    for name in VARIANTS:
        page.get_by_text(name, exact=True).first.wait_for()
    label = page.get_by_text("accuracy/sentiment", exact=True).first
    label.scroll_into_view_if_needed()
    # The values sit in a separate virtualised grid: one text per run, on the label's line, to its right
    # (only text that is on top there: another table scrolls underneath).
    on_line = page.evaluate(
        """(label) => {
            const box = label.getBoundingClientRect(), mid = box.y + box.height / 2, out = [];
            for (const e of document.querySelectorAll('span, div')) {
                const r = e.getBoundingClientRect();
                if (e.children.length || !e.textContent.trim() || r.x <= box.right) continue;
                if (Math.abs(r.y + r.height / 2 - mid) >= 4) continue;
                const top = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);  // what shows there
                if (top && (top === e || e.contains(top) || top.contains(e))) out.push([r.x, e.textContent.trim()]);
            }
            return out.sort((a, b) => a[0] - b[0]).map(p => p[1]);
        }""", label.element_handle())
    from urllib.parse import parse_qs, unquote

    shown = json.loads(parse_qs(unquote(printed["variants side by side"]).split("?", 1)[1])["runs"][0])
    assert sorted(shown) == sorted(by_name[n].info.run_id for n in VARIANTS)
    by_id = {c.info.run_id: c for c in children}
    expected = [f"{by_id[i].data.metrics['accuracy/sentiment']:g}" for i in shown]
    assert on_line[:2] == expected, on_line
    _shot(page, tmp_path, "mlflow-compare.png")
