"""The README is executed: every shell snippet of its "Quick start", "Choosing what to sweep" and
"Bring your own eval set" sections runs as written, and the one-variant example of "From Python"
(selector.evaluate), so an example that stops working fails CI.

Only the cost is changed, never the text: a `python` placed first on PATH runs the real
interpreter and, for a sweep (`python -m selector [overrides]`), appends a config override that
keeps it short: the default ladder's sweep axis becomes the tiny test model, two items per task,
quick measurement, and a temporary output folder. Commands that name a model (SmolLM2, Gemma 3)
run it for real. `make run` runs with that `python` as the venv's; `make test` is checked with
`make -n` (running the suite inside itself would recurse).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sweep_helpers import ROOT
from tests.tiny import write_model_config

SECTIONS = ("Quick start", "Choosing what to sweep", "Bring your own eval set")
SUBCOMMANDS = ("list", "select", "plan", "sync", "evalset", "--help")


def readme_snippets() -> dict[str, list[str]]:
    """Section title -> its ```bash blocks, in order."""
    text = (ROOT / "README.md").read_text()
    found: dict[str, list[str]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        if title.strip() in SECTIONS:
            found[title.strip()] = re.findall(r"^```bash\n(.*?)^```", body, flags=re.M | re.S)
    return found


def test_the_readme_has_the_sections_this_test_runs() -> None:
    snippets = readme_snippets()
    assert set(snippets) == set(SECTIONS)
    assert all(snippets[s] for s in SECTIONS)


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, shared_model_cache: Path) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("readme")
    write_model_config(base / "conf", "tiny", tiny_model_dir)
    extra = [f"hydra.searchpath=[file://{base / 'conf'}]", f"output_dir={base / 'out'}", f"cache_dir={shared_model_cache}",
             "hydra.sweeper.params.model=tiny", "evalset.limit=2", "measure=quick"]
    venv = base / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$1" = -m ] && [ "$2" = selector ] && [[ " {" ".join(SUBCOMMANDS)} " != *" $3 "* ]]; then\n'
        f'  exec {sys.executable} "$@" {" ".join(extra)}\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    return {"base": base, "venv": venv, "bin": venv / "bin", "out": base / "out"}


def run_snippet(code: str, cwd: Path, shim: dict[str, Path], timeout: int = 2400) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{shim['bin']}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-3000:] + "\n---\n" + result.stderr[-5000:]
    return result.stdout


def _newest_report(out: Path) -> dict:  # type: ignore[type-arg]
    reports = sorted((out / "sweeps").glob("*/report/report.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(reports[-1].read_text())


@pytest.mark.slow
@pytest.mark.quant()  # its sweeps name the quantized precisions
def test_choosing_what_to_sweep(shim: dict[str, Path], tmp_path: Path) -> None:
    [block] = readme_snippets()["Choosing what to sweep"]
    for line in [ln.split("#")[0].strip() for ln in block.splitlines()]:
        if not line:
            continue
        stdout = _ok(run_snippet(line, tmp_path, shim))
        if line.endswith(" list"):
            assert "Precisions" in stdout and "gptq-int4" in stdout
        elif line.endswith("--help"):
            assert "python -m selector" in stdout
        else:
            assert "Report: " in stdout, line
            report = _newest_report(shim["out"])
            floors = report["selection"]["policy"]["floors"]
            for key, value in re.findall(r"policy\.floors\.(\w+)=([\d.]+)", line):
                assert floors[key] == float(value), (line, floors)


@pytest.mark.slow
@pytest.mark.quant()  # the default sweep's precisions
def test_bring_your_own_eval_set(shim: dict[str, Path], tmp_path: Path) -> None:
    [block] = readme_snippets()["Bring your own eval set"]
    result = run_snippet(block, tmp_path, shim)
    stdout = _ok(result)
    assert "Report: " in stdout
    report = _newest_report(shim["out"])
    # The user's floor, and only it: the default eval set's floors do not follow it here.
    assert report["selection"]["policy"]["floors"] == {"ticket_routing": 0.9}
    assert {t for r in report["records"] for t in r["tasks"]} == {"ticket_routing"}
    assert "ignored" not in result.stderr and "no task" not in result.stderr


@pytest.mark.slow
@pytest.mark.quant()  # `make run` installs the extra and runs the default sweep
def test_quick_start(shim: dict[str, Path]) -> None:
    [block] = readme_snippets()["Quick start"]
    commands = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.split("#")[0].strip()]
    assert commands == ["make run", "make test"]
    stdout = _ok(run_snippet(f"make run VENV={shim['venv']}", ROOT, shim))
    assert "Report: " in stdout and "MLflow: mlflow ui --backend-store-uri" in stdout
    dry = _ok(run_snippet("make -n test", ROOT, shim))
    assert "pytest" in dry


def python_snippets(section: str) -> list[str]:
    """A section's ```python blocks, in order."""
    text = (ROOT / "README.md").read_text()
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        if title.strip() == section:
            return re.findall(r"^```python\n(.*?)^```", body, flags=re.M | re.S)
    return []


def test_from_python_one_variant(tmp_path: Path) -> None:
    """selector.evaluate's example, as written (engine=scripted: nothing loads), in a fresh folder."""
    [block] = [b for b in python_snippets("From Python") if "selector.evaluate(" in b]
    result = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    stdout = _ok(result)
    assert stdout.startswith("completed {") and "'sentiment': 1.0" in stdout, stdout
    record = json.loads((tmp_path / "outputs" / "one-variant" / "record.json").read_text())
    assert record["status"] == "completed" and set(record["tasks"]) == {"arithmetic", "code", "extraction", "sentiment"}
