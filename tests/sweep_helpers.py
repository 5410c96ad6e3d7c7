"""Running the product the way a user does (`python -m selector ...`) and reading its MLflow store.

`run_in_process` runs the command line's own entry (selector.cli.main) in the test's process, with its
exit code, stdout and stderr caught as a process would give them, without the seconds a new Python
spends importing Hydra, MLflow and the report: input that must stop before anything loads, and the
sweeps whose variants are what the test is about (each variant still runs in a worker process of its
own, as in a user's sweep). `run_selector` starts the command line as a process of its own, for
what only a process shows: signals and resuming after a kill, sweeps running beside each other, an
environment read when a library is imported, the exit code and the absence of a traceback
(tests/integration/test_sweep_tiny.py), vLLM servers and a tracking server.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A short, cheap slice of the default eval set: enough to exercise every stage.
QUICK = ("measure=quick", "evalset.limit=2", "evalset.tasks=[sentiment,arithmetic]", "search=grid")


def selector_cmd(setup: dict[str, Path], *overrides: str) -> list[str]:
    return [
        sys.executable, "-m", "selector",
        f"hydra.searchpath=[file://{setup['conf']}]",
        f"output_dir={setup['out']}", f"cache_dir={setup['cache']}",
        *overrides,
    ]


def run_selector(setup: dict[str, Path], *overrides: str, env: dict[str, str] | None = None,
                 timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(selector_cmd(setup, *overrides), capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env={**os.environ, **(env or {})})


def run_in_process(setup: dict[str, Path], *overrides: str,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m selector` with these overrides, run in this process as run_selector runs it."""
    return cli_in_process(*selector_cmd(setup, *overrides)[3:], env=env)


def cli_in_process(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m selector ARGV...` (a sweep or a sub-command) run by selector.cli.main in this process
    from the repository root; what the Hydra app and the command change in the process (logging,
    signal handlers, environment variables, the working directory) is put back after."""
    from selector import cli
    from selector.api import _hydra_in_this_process

    # with a binary buffer under the text, as a process's own streams have (the sweep copies its
    # workers' output to sys.stderr.buffer)
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace", write_through=True)
                for _ in range(2))
    code: int | str | None = 0
    with _hydra_in_this_process(), _environment(env or {}), _cwd(ROOT), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(list(argv))
        except SystemExit as e:
            code = e.code
    returncode = code if isinstance(code, int) else 0 if code is None else 1
    text = [stream.buffer.getvalue().decode("utf-8", errors="replace")  # type: ignore[attr-defined]
            for stream in (out, err)]
    return subprocess.CompletedProcess(list(argv), returncode, *text)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """These variables set while the command runs; the environment as it was after (a command may
    set some itself, as the MLflow tracker sets its retry count)."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def start_selector(setup: dict[str, Path], *overrides: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    # SIGINT as a shell gives it: a pytest-xdist worker ignores SIGINT, and a child would inherit that
    # (Python then installs no KeyboardInterrupt handler, and Ctrl-C tests hang).
    return subprocess.Popen(selector_cmd(setup, *overrides), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, **(env or {})}, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def mlflow_runs(out: Path, experiment: str = "selector") -> tuple[list, list]:
    """(parent runs, child runs) of an experiment in the store under `out`."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return [], []
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("selector.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("selector.role") == "variant"]
    return parents, children
