"""A record's provenance: the git commit is selector's own checkout's, never that of a repository
the code merely lies in; the version is the installed distribution's only when it is this code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "selector"
PROBE = ("from selector.measure.environment import git_commit, selector_version; "
         "import selector; print(selector.__file__); print(git_commit()); print(selector_version())")

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q")
    (path / "notes.txt").write_text("an unrelated project\n")
    _git(path, "add", "notes.txt")
    _git(path, "commit", "-q", "-m", "unrelated")
    return path


def _probe(copy_parent: Path, cwd: Path) -> list[str]:
    """Import the copy (not this checkout) from an empty folder and ask it for its provenance."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(copy_parent)}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()


def test_a_copy_inside_an_unrelated_repository_reports_no_commit(tmp_path: Path) -> None:
    other = _repo(tmp_path / "other")
    shutil.copytree(PACKAGE, other / "vendor" / "selector", ignore=shutil.ignore_patterns("__pycache__"))
    where, commit, version = _probe(other / "vendor", tmp_path)
    assert where == str(other / "vendor" / "selector" / "__init__.py")  # the copy, not this checkout
    assert commit == "None"
    assert version == "None"  # whatever selector is installed here, it is not this copy


def test_a_copy_at_the_top_of_a_repository_that_does_not_track_it_reports_no_commit(tmp_path: Path) -> None:
    other = _repo(tmp_path / "other")
    shutil.copytree(PACKAGE, other / "selector", ignore=shutil.ignore_patterns("__pycache__"))
    _, commit, _ = _probe(other, tmp_path)
    assert commit == "None"


def test_selectors_own_checkout_reports_its_commit(tmp_path: Path) -> None:
    own = _repo(tmp_path / "own")
    shutil.copytree(PACKAGE, own / "selector", ignore=shutil.ignore_patterns("__pycache__"))
    _git(own, "add", "selector")
    _git(own, "commit", "-q", "-m", "selector")
    head = _git(own, "rev-parse", "HEAD")
    _, commit, _ = _probe(own, tmp_path)
    assert commit == head
    (own / "selector" / "paths.py").write_text("# edited\n" + (own / "selector" / "paths.py").read_text())
    _, commit, _ = _probe(own, tmp_path)
    assert commit == f"{head}-dirty"
