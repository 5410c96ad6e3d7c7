"""The wheel works outside the checkout: `python -m build` makes an sdist and (from it) a wheel that
carry the configs, the default eval set, the report templates and the calibration corpus; installed
into a new venv, `selector --help`, `selector list`, a sweep on SmolLM2, a user's own config folder
and the Python API all run from an empty folder.

How the venv is made, and why: a real `pip install` of the wheel's dependencies (torch,
transformers, mlflow, ...) takes many minutes and gigabytes. The venv is created without pip, the
wheel is installed into it with `--no-deps` (by this environment's pip, `pip --python VENV`), and a
.pth file appends this environment's site-packages for the dependencies only. That cannot hide a
packaging bug: the venv's own site-packages comes first on sys.path, a .pth line does not run the
.pth files of the folder it adds (so an editable install of the checkout there stays inert), every
command runs from an empty temporary folder with PYTHONPATH unset, and the tests check that
`selector` is imported from the venv. Module-scoped: built and installed once for all tests here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.sweep_helpers import ROOT
from tests.tiny import write_model_config

pytestmark = pytest.mark.slow

PACKAGE_DATA = (  # what a wheel must carry for selector to run without the checkout
    "selector/conf/config.yaml", "selector/conf/hydra/help/selector.yaml", "selector/conf/model/smollm2-135m.yaml",
    "selector/conf/model/path.yaml", "selector/conf/precision/bf16.yaml", "selector/conf/arch/qwen2.5-7b.json",
    "selector/evalsets/default/policy.yaml", "selector/evalsets/default/sentiment.yaml",
    "selector/evalsets/default/code.jsonl", "selector/report/templates/report.html.j2",
    "hydra_plugins/selector_sweeper/selector_sweeper.py", "selector/conf/search/adaptive.yaml",
)


def _sh(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n---\n{result.stderr[-5000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("wheel")
    # A clean tree (what `git clone` gives): tracked and untracked-but-not-ignored files only, so
    # nothing built or cached in this checkout can leak into the sdist.
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, text=True, check=True).stdout.split("\0")
    src = base / "src"
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # --no-isolation: build with this environment's setuptools instead of downloading one.
    _sh([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(base / "dist"), str(src)], base, env)
    [wheel] = (base / "dist").glob("selector-*.whl")
    [sdist] = (base / "dist").glob("selector-*.tar.gz")

    venv = base / "venv"
    _sh([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, env)
    python = venv / "bin" / "python"
    _sh([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "--quiet",
         str(wheel)], base, env)
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    empty = base / "empty"
    empty.mkdir()
    return {"base": base, "wheel": wheel, "sdist": sdist, "venv": venv, "python": python, "purelib": purelib,
            "cwd": empty, "env": {**env, "PATH": f"{venv / 'bin'}:{env['PATH']}"}}


def _selector(installed: dict, *args: str, cwd: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    return _sh([str(installed["venv"] / "bin" / "selector"), *args], cwd or installed["cwd"], installed["env"], timeout)


def test_the_wheel_and_the_sdist_carry_the_package_data(installed: dict) -> None:  # type: ignore[type-arg]
    wheel = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for name in PACKAGE_DATA:
        assert name in wheel, name
    assert any(n.startswith("selector/precisions/calibration_corpus/") for n in wheel)
    assert not any(n.startswith(("tests/", "conf/", "evalsets/")) for n in wheel)  # nothing beside the package
    with tarfile.open(installed["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for name in PACKAGE_DATA:
        assert name in names, name


def test_selector_runs_from_the_venv_not_the_checkout(installed: dict) -> None:  # type: ignore[type-arg]
    probe = ("import selector, selector.paths as p; from selector.measure.environment import environment; "
             "e = environment(); print(selector.__file__); print(p.DEFAULT_EVALSET.is_dir()); "
             "print(e['selector_version']); print(e['commit'])")
    out = _sh([str(installed["python"]), "-c", probe], installed["cwd"], installed["env"]).stdout.split()
    assert out[0] == str(installed["purelib"] / "selector" / "__init__.py")
    assert out[1:] == ["True", "0.1.0", "None"]  # a wheel has a version and no git commit


def test_help_and_list(installed: dict) -> None:  # type: ignore[type-arg]
    help_text = _selector(installed, "--help").stdout
    assert "model=path model.path=" in help_text and "model: gemma3-270m, gguf, hub, path" in help_text
    listing = _selector(installed, "list").stdout
    assert "smollm2-135m" in listing and "Precisions" in listing and "model=path model.path=DIR" in listing
    assert "default" in listing and "sentiment (48)" in listing  # the packaged eval set, found from here


def test_a_sweep_from_an_empty_folder(installed: dict) -> None:  # type: ignore[type-arg]
    # The README's smoke sweep; measure=quick only shortens the latency measurement, search=grid
    # scores every task (the adaptive search would stop SmolLM2 at its 2% on arithmetic).
    result = _selector(installed, "model=smollm2-135m", "precision=bf16", "evalset.limit=2", "measure=quick",
                       "search=grid")
    assert "Report: " in result.stdout
    [report] = installed["cwd"].glob("outputs/sweeps/*/report/report.json")
    doc = json.loads(report.read_text())
    [record] = doc["records"]
    assert (record["variant"]["model"], record["variant"]["precision"], record["status"]) == (
        "smollm2-135m", "bf16", "completed")
    assert set(record["tasks"]) == {"sentiment", "extraction", "arithmetic", "code"}
    assert record["environment"]["selector_version"] == "0.1.0" and record["environment"]["commit"] is None
    assert doc["selection"]["policy"]["floors"]["sentiment"] > 0  # the packaged eval set's policy.yaml
    assert (installed["cwd"] / "outputs" / "mlflow.db").is_file()


def test_a_users_config_folder_and_a_model_on_the_command_line(installed: dict, tiny_model_dir: Path) -> None:  # type: ignore[type-arg]
    work = installed["base"] / "user"
    write_model_config(work / "my_conf", "tiny", tiny_model_dir)
    cheap = ["precision=fp32", "evalset.limit=2", "evalset.tasks=[sentiment]", "measure=quick", "tracker=none"]
    result = _selector(installed, "hydra.searchpath=[file://my_conf]", "model=tiny", *cheap, cwd=work)
    assert "Report: " in result.stdout
    result = _selector(installed, "model=path", f"model.path={tiny_model_dir}", *cheap, cwd=work)
    assert "Report: " in result.stdout
    models = {json.loads(p.read_text())["records"][0]["variant"]["model"]
              for p in work.glob("outputs/sweeps/*/report/report.json")}
    assert models == {"tiny", tiny_model_dir.name}


def test_the_python_api_from_the_wheel(installed: dict) -> None:  # type: ignore[type-arg]
    sweeps = sorted(installed["cwd"].glob("outputs/sweeps/*/sweep.json"))
    assert sweeps, "runs after test_a_sweep_from_an_empty_folder"
    code = ("import selector, sys\n"
            f"r = selector.load({str(sweeps[-1].parent)!r})\n"
            "print([x.name for x in r.records], r.policy.rule)\n"
            "from selector.errors import UserError\n"
            "try:\n    selector.run(['model=nope'])\nexcept UserError as e:\n    print('UserError:', e)\n")
    out = _sh([str(installed["python"]), "-c", code], installed["cwd"], installed["env"]).stdout
    assert "['smollm2-135m/bf16'] point" in out
    assert "UserError: command line: model=nope" in out
