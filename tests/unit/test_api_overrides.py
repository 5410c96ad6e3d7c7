"""Python values to command-line overrides (selector.run / SweepResult.select), checked by composing
them with Hydra: what a dict says is what the sweep gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.api import as_overrides, policy_overrides
from selector.compose import compose


def test_a_dict_becomes_dotted_overrides_and_a_list_of_choices_a_sweep() -> None:
    assert as_overrides({"model": ["smollm2-135m", "gemma3-270m"], "precision": "bf16",
                         "evalset": {"limit": 10, "tasks": ["sentiment", "code"]}, "force": True, "threads": None}) == [
        "model=smollm2-135m,gemma3-270m", "precision=bf16", "evalset.limit=10", "evalset.tasks=[sentiment,code]",
        "force=true", "threads=null"]
    assert as_overrides(["model=smollm2-135m", "precision=bf16,int8"]) == ["model=smollm2-135m", "precision=bf16,int8"]
    assert policy_overrides({"rule": "lower_bound", "floors": {"code": 0.6}}) == [
        "policy.rule=lower_bound", "policy.floors.code=0.6"]
    with pytest.raises(TypeError):
        as_overrides("model=smollm2-135m")  # type: ignore[arg-type]


def test_strings_that_would_parse_as_something_else_are_quoted(tmp_path: Path) -> None:
    odd = tmp_path / "my eval, set's (v2)"
    odd.mkdir()
    cfg = compose(as_overrides({"evalset": {"path": str(odd)}, "experiment": "null", "output_dir": "1e3"}))
    assert cfg.evalset.path == str(odd)
    assert cfg.experiment == "null" and cfg.output_dir == "1e3"  # strings, as given
    cfg = compose(as_overrides({"model": "path", "model.path": "/models/a b/my-7b"}))
    assert cfg.model.name == "my-7b" and cfg.model.source.path == "/models/a b/my-7b"
