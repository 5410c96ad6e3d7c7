"""The verdict obeys the user: the policy a sweep applies is the one given for that sweep, on the
default eval set and on a user's own, at the end of a sweep and in `select --from`.

Each sweep runs the product as a user does (`python -m selector ...`) on engine=scripted-tiny, which
answers like the tiny random model without loading one (tests/scripted.py): floors of 0 make every
completed variant eligible, the default floors (80/70/60/50) fail every variant, so a verdict tells
which floors were applied. Input that stops before anything loads, and `select --from`, run the
command line's entry in this process (run_in_process, cli_in_process).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sweep_helpers import QUICK, ROOT, cli_in_process, mlflow_runs, run_in_process

ZERO_FLOORS = ("policy.floors.sentiment=0.0", "policy.floors.arithmetic=0.0")


def _report(setup: dict[str, Path], newest: bool = True) -> dict:  # type: ignore[type-arg]
    reports = sorted((setup["out"] / "sweeps").glob("*/report/report.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(reports[-1 if newest else 0].read_text())


def _sweep_dirs(setup: dict[str, Path]) -> list[Path]:
    return sorted((setup["out"] / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)


def _floors_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if "floors:" in line).split("floors:")[1].strip()


def test_a_rerun_with_new_floors_reuses_the_variants_and_applies_the_new_floors(tiny_setup: dict[str, Path],
                                                                                  scripted: str) -> None:
    first = run_in_process(tiny_setup, "model=tiny", "precision=fp32,bf16", scripted, *QUICK)
    assert first.returncode == 0, first.stderr[-3000:]
    assert _report(tiny_setup)["selection"]["winner"] is None  # default floors: nothing passes
    assert _floors_line(first.stdout).startswith("sentiment 80%, arithmetic 60%")

    second = run_in_process(tiny_setup, "model=tiny", "precision=fp32,bf16", scripted, *QUICK, *ZERO_FLOORS)
    assert second.returncode == 0, second.stderr[-3000:]
    assert (second.stdout + second.stderr).count("already measured") == 2  # nothing measured again
    report = _report(tiny_setup)
    assert report["selection"]["policy"]["floors"] == {"sentiment": 0.0, "arithmetic": 0.0}
    assert report["selection"]["winner"] == "tiny/bf16"  # the smaller of two eligible variants
    assert _floors_line(second.stdout) == "sentiment 0%, arithmetic 0%"
    state = json.loads((_sweep_dirs(tiny_setup)[-1] / "sweep.json").read_text())
    assert state["config"]["policy"]["floors"] == {"sentiment": 0.0, "arithmetic": 0.0}
    # A new policy is a new sweep: its own parent run, with its own floors as params.
    parents, _ = mlflow_runs(tiny_setup["out"])
    assert len(parents) == 2
    newest = max(parents, key=lambda r: r.info.start_time)
    assert newest.data.params["policy.floor.sentiment"] == "0.0"
    assert newest.data.tags["selector.winner"] == "tiny/bf16"

    # select --from starts from the sweep's recorded floors and changes only the one given.
    reselect = cli_in_process("select", "--from", str(_sweep_dirs(tiny_setup)[-1]), "policy.floors.sentiment=0.99")
    assert reselect.returncode == 0, reselect.stderr[-3000:]
    assert _floors_line(reselect.stdout) == "sentiment 99%, arithmetic 0%"
    [newest_report] = sorted(_sweep_dirs(tiny_setup)[-1].glob("report-*/report.json"))
    assert json.loads(newest_report.read_text())["selection"]["policy"]["floors"] == {"sentiment": 0.99, "arithmetic": 0.0}


@pytest.mark.fast
def test_a_users_own_eval_set_gets_its_floors_and_not_the_default_ones(tiny_setup: dict[str, Path], scripted: str,
                                                                          tmp_path: Path) -> None:
    evalset = tmp_path / "my_evalset"
    evalset.mkdir()
    (evalset / "routing.yaml").write_text(
        "type: multiple_choice\ndata: rows.jsonl\nprompt: 'Ticket: {{ text }}'\ntarget: '{{ team }}'\n"
        "choices: [billing, shipping]\nmetric: choice_accuracy\n")
    (evalset / "echo.yaml").write_text("data: rows.jsonl\nprompt: 'Say {{ team }}'\ntarget: '{{ team }}'\n")
    rows = [{"id": f"r{i}", "text": f"ticket {i}", "team": ["billing", "shipping"][i % 2]} for i in range(6)]
    (evalset / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (evalset / "policy.yaml").write_text("floors:\n  routing: 0.0\n  echo: 0.9\n")

    result = run_in_process(tiny_setup, "model=tiny", "precision=fp32,bf16", scripted, "measure=quick",
                            f"evalset.path={evalset}", "policy.floors.echo=0.0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no task" not in result.stdout + result.stderr and "ignored" not in result.stdout + result.stderr
    selection = _report(tiny_setup)["selection"]
    # The eval set's own floor for routing, the command line's for echo (it wins over policy.yaml).
    assert selection["policy"]["floors"] == {"routing": 0.0, "echo": 0.0}
    assert selection["winner"] == "tiny/bf16"


@pytest.mark.fast
def test_floors_naming_no_task_stop_before_anything_loads(tiny_setup: dict[str, Path], tmp_path: Path) -> None:
    typo = run_in_process(tiny_setup, "model=tiny", "precision=bf16", *QUICK, "policy.floors.sentimnt=0.9")
    assert typo.returncode == 2
    [line] = typo.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: command line: field 'policy.floors.sentimnt'") and "Did you mean sentiment?" in line

    evalset = tmp_path / "ev"
    evalset.mkdir()
    (evalset / "echo.yaml").write_text("data: rows.jsonl\nprompt: 'Say {{ x }}'\ntarget: '{{ x }}'\n")
    (evalset / "rows.jsonl").write_text('{"id": "a", "x": "yes"}\n')
    (evalset / "policy.yaml").write_text("floors:\n  echo: 0.5\n  ecko: 0.5\n")
    own = run_in_process(tiny_setup, "model=tiny", "precision=bf16", "measure=quick", f"evalset.path={evalset}")
    assert own.returncode == 2
    assert f"{evalset / 'policy.yaml'}:3: field 'floors.ecko'" in own.stderr
    assert not (tiny_setup["out"] / "mlflow.db").exists()  # nothing was written to MLflow


def test_bad_values_are_one_line_errors_in_every_command(tiny_setup: dict[str, Path], scripted: str) -> None:
    cases = {
        "threads=-1": "field 'threads' must be a positive number of threads",
        "threads=0": "field 'threads' must be a positive number of threads",
        "policy.floors.code=abc": "could not be converted to Float (field 'policy.floors.code')",
        "policy.floors.code=1.5": "floors are fractions",
    }
    for override, expected in cases.items():
        result = run_in_process(tiny_setup, "model=tiny", "precision=bf16", *QUICK, override)
        assert result.returncode == 2, override
        assert result.stderr.strip().splitlines()[-1].startswith("error: command line:"), result.stderr[-500:]
        assert expected in result.stderr, (override, result.stderr[-500:])
        assert "Traceback" not in result.stderr
    assert not (tiny_setup["out"] / "mlflow.db").exists()

    # select: a malformed policy override is one line too, not an omegaconf traceback (a process of
    # its own: nothing else reaches its stderr).
    done = run_in_process(tiny_setup, "model=tiny", "precision=bf16", scripted, *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    [sweep] = _sweep_dirs(tiny_setup)
    for args in (["policy.floors={intent: 0.45}"], ["policy.floors.code=abc"], ["policy.rule=best"]):
        result = subprocess.run([sys.executable, "-m", "selector", "select", "--from", str(sweep), *args],
                                capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
