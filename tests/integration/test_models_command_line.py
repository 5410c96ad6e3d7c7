"""Models named on the command line, without a YAML file: model=path|gguf|hub with model.path or
model.repo_id. Real tiny models (a transformers folder from tests/tiny.py, a GGUF file written with
the `gguf` package), real sweeps through `python -m selector`, real bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from selector.compose import compose
from selector.errors import ConfigError
from tests.integration.test_bad_input import assert_usage_error
from tests.integration.test_models_gguf import write_tiny_gguf
from tests.sweep_helpers import QUICK, mlflow_runs, run_in_process, run_selector


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny-chat.Q8_0.gguf"
    write_tiny_gguf(path)
    return path


def test_the_name_comes_from_the_folder_file_or_repo_and_the_path_is_made_absolute(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    cfg = compose(["model=path", "model.path=models/my-7b/"])
    assert cfg.model.name == "my-7b"
    assert (cfg.model.source.kind, cfg.model.source.path) == ("local", str(tmp_path / "models" / "my-7b"))
    assert (cfg.model.trust_remote_code, cfg.model.allow_pickle) == (False, False)  # the safe defaults
    cfg = compose(["model=gguf", "model.path=/m/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf"])
    assert (cfg.model.name, cfg.model.source.kind, cfg.model.source.path) == (
        "Qwen2.5-0.5B-Instruct-Q4_K_M", "gguf", "/m/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf")
    cfg = compose(["model=hub", "model.repo_id=Qwen/Qwen2.5-0.5B-Instruct", "model.source.revision=abc123"])
    assert (cfg.model.name, cfg.model.source.repo_id, cfg.model.source.revision) == (
        "Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "abc123")
    assert compose(["model=path", "model.path=/m/x", "model.name=mine"]).model.name == "mine"


@pytest.mark.parametrize("choice, key", [("path", "model.path"), ("gguf", "model.path"), ("hub", "model.repo_id")])
def test_a_missing_path_or_repo_id_names_the_key_to_set(choice: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose([f"model={choice}"])
    assert f"{key} is not set" in str(err.value) and f"{key}=" in str(err.value)


def _broken(kind: str, base: Path, tiny_model_dir: Path, tiny_gguf: Path) -> tuple[list[str], str, dict[str, str]]:
    """(overrides, what the one-line error must say, extra environment) for each kind of bad input."""
    if kind == "no such folder":
        return ["model=path", f"model.path={base / 'nope'}"], "no such folder", {}
    if kind == "no config.json":
        (base / "empty").mkdir()
        return ["model=path", f"model.path={base / 'empty'}"], "no config.json", {}
    if kind == "no weights":
        (base / "config-only").mkdir()
        shutil.copy(tiny_model_dir / "config.json", base / "config-only")
        return ["model=path", f"model.path={base / 'config-only'}"], "no weights", {}
    if kind == "pickle weights":
        folder = base / "pickled"
        shutil.copytree(tiny_model_dir, folder)
        (folder / "pytorch_model.bin").write_bytes(b"not even a pickle")
        return ["model=path", f"model.path={folder}"], "pickle files ['pytorch_model.bin']", {}
    if kind == "no chat template":
        folder = base / "base-model"
        shutil.copytree(tiny_model_dir, folder)
        (folder / "chat_template.jinja").unlink()
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config.pop("chat_template", None)
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        return ["model=path", f"model.path={folder}"], "model.prompt_style=plain", {}
    if kind == "truncated gguf":
        cut = base / "cut.gguf"
        cut.write_bytes(tiny_gguf.read_bytes()[: tiny_gguf.stat().st_size * 2 // 3])
        return ["model=gguf", f"model.path={cut}"], "truncated or corrupt GGUF file", {}
    if kind == "no such gguf":
        return ["model=gguf", f"model.path={base / 'absent.gguf'}"], "no such GGUF file", {}
    assert kind == "hub offline"
    return (["model=hub", "model.repo_id=selector-tests/no-such-model"], "HF_HUB_OFFLINE=1 is set",
            {"HF_HUB_OFFLINE": "1", "HF_HOME": str(base / "hf-home")})


@pytest.mark.parametrize("kind", ["no such folder", "no config.json", "no weights", "pickle weights",
                                  "no chat template", "truncated gguf", "no such gguf", "hub offline"])
@pytest.mark.fast
def test_bad_model_on_the_command_line_is_one_line_exit_2_and_nothing_in_mlflow(
        kind: str, tiny_setup: dict[str, Path], tiny_model_dir: Path, tiny_gguf: Path) -> None:
    overrides, problem, env = _broken(kind, tiny_setup["base"], tiny_model_dir, tiny_gguf)
    # In this process through the command line's entry, but a process of its own where the case sets
    # the environment (huggingface_hub reads HF_HUB_OFFLINE when it is imported).
    result = run_selector(tiny_setup, *overrides, "precision=fp32", env=env, timeout=300) if env else \
        run_in_process(tiny_setup, *overrides, "precision=fp32")
    given = overrides[1]  # model.path=... or model.repo_id=...
    assert_usage_error(result, f"error: command line: {overrides[0]} {given}: ", problem)
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert problem in line  # the whole message is that one line
    assert not (tiny_setup["out"] / "mlflow.db").exists() and not (tiny_setup["out"] / "sweeps").exists()


@pytest.mark.fast
def test_two_folders_with_the_same_name_are_refused_before_anything_runs(tiny_setup: dict[str, Path],
                                                                        tiny_model_dir: Path) -> None:
    a, b = tiny_setup["base"] / "a" / "tiny", tiny_setup["base"] / "b" / "tiny"
    shutil.copytree(tiny_model_dir, a)
    shutil.copytree(tiny_model_dir, b)
    result = run_in_process(tiny_setup, "model=path", f"model.path={a},{b}", "precision=fp32")
    assert_usage_error(result, "both named 'tiny'", str(a), str(b))
    assert not (tiny_setup["out"] / "mlflow.db").exists()


def test_a_sweep_over_two_folders_and_one_over_a_gguf_file(tiny_setup: dict[str, Path], tiny_model_dir: Path,
                                                           tiny_gguf: Path) -> None:
    small, other = tiny_setup["base"] / "models" / "small-llama", tiny_setup["base"] / "elsewhere" / "other-llama"
    shutil.copytree(tiny_model_dir, small)
    shutil.copytree(tiny_model_dir, other)
    result = run_in_process(tiny_setup, "model=path", f"model.path={small},{other}", "precision=fp32", *QUICK)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    parents, children = mlflow_runs(tiny_setup["out"])
    assert len(parents) == 1
    assert sorted(c.info.run_name for c in children) == ["other-llama/fp32", "small-llama/fp32"]
    assert all(c.data.tags["selector.status"] == "completed" for c in children)
    report = json.loads((Path(parents[0].data.params["sweep_dir"]) / "report" / "report.json").read_text())
    by_name = {r["variant"]["model"]: r for r in report["records"]}
    sources = {name: r["config"]["model"]["source"] for name, r in by_name.items()}
    assert (sources["small-llama"]["kind"], sources["small-llama"]["path"]) == ("local", str(small))
    assert (sources["other-llama"]["kind"], sources["other-llama"]["path"]) == ("local", str(other))
    assert by_name["small-llama"]["key"] != by_name["other-llama"]["key"]  # same weights, two models: no reuse

    result = run_in_process(tiny_setup, "model=gguf", f"model.path={tiny_gguf}", "precision=fp32", *QUICK)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    parents, children = mlflow_runs(tiny_setup["out"])
    assert len(parents) == 2
    [gguf_run] = [c for c in children if c.info.run_name == "tiny-chat.Q8_0/fp32"]
    assert gguf_run.data.tags["selector.status"] == "completed"
    assert gguf_run.data.metrics["memory/weight_gb"] > 0
