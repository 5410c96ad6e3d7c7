"""Where floors come from: the eval set's policy.yaml beneath the sweep's, names checked against the
eval set, and `policy.floors.<task>=` on the command line without Hydra's `+`."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.compose import MAP_FIELDS, compose, normalize, policy_with_overrides
from selector.config import PolicyConfig
from selector.errors import ConfigError, EvalsetError, UserError
from selector.sweep.floors import check_floor_tasks, merged_policy
from selector.tasks.evalset_policy import read_evalset_policy
from selector.paths import DEFAULT_EVALSET

TASKS = ["arithmetic", "code", "extraction", "sentiment"]


def _own(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    (tmp_path / "policy.yaml").write_text(text)
    return read_evalset_policy(tmp_path)


def test_the_sweeps_floors_win_over_the_eval_sets(tmp_path: Path) -> None:
    own = _own(tmp_path, "floors: {code: 0.5, sentiment: 0.8}\ndefault_floor: 0.3\nmargins: {code: 0.1}\n")
    merged = merged_policy(PolicyConfig(floors={"code": 0.7}), own)
    assert merged.floors == {"code": 0.7, "sentiment": 0.8}
    assert merged.default_floor == 0.3 and merged.margins == {"code": 0.1}
    assert merged_policy(PolicyConfig(default_floor=0.6), own).default_floor == 0.6
    assert merged_policy(PolicyConfig(floors={"code": 0.7}), None).floors == {"code": 0.7}


def test_a_floor_naming_no_task_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        check_floor_tasks(PolicyConfig(floors={"sentimnt": 0.8}), None, TASKS, TASKS, lambda t: "command line", "ev")
    assert e.value.where == "command line" and e.value.field == "policy.floors.sentimnt"
    assert "Did you mean sentiment?" in str(e.value)
    own = _own(tmp_path, "floors:\n  code: 0.5\n  cod: 0.5\n")
    with pytest.raises(EvalsetError) as f:
        check_floor_tasks(PolicyConfig(), own, TASKS, TASKS, lambda t: "x", "ev")
    assert (f.value.line, f.value.field) == (3, "floors.cod")


def test_floors_of_tasks_left_out_of_the_run_are_set_aside_with_one_notice(tmp_path: Path) -> None:
    own = _own(tmp_path, "floors: {code: 0.5, sentiment: 0.8, arithmetic: 0.6}\n")
    policy, notices = check_floor_tasks(PolicyConfig(floors={"extraction": 0.7, "weighted": 0.5}), own,
                                        ["sentiment"], TASKS, lambda t: "x", "ev")
    assert policy.floors == {"sentiment": 0.8, "weighted": 0.5}
    [notice] = notices
    assert "arithmetic, code, extraction" in notice


@pytest.mark.parametrize("text, field, problem", [
    ("rule: lower_bound\n", "rule", "unknown key"),
    ("floors: {code: high}\n", "floors.code", "must be a number"),
    ("floors: {code: 80}\n", "floors.code", "fractions"),
    ("floors: [code]\n", "floors", "must be a mapping"),
])
def test_an_eval_sets_policy_file_is_checked_key_by_key(tmp_path: Path, text: str, field: str, problem: str) -> None:
    with pytest.raises(EvalsetError) as e:
        _own(tmp_path, text)
    assert e.value.field == field and problem in e.value.problem and e.value.line == 1


def test_the_default_eval_set_carries_its_floors_and_the_default_policy_none() -> None:
    cfg = compose([])
    assert cfg.policy.floors == {}
    own = read_evalset_policy(DEFAULT_EVALSET)
    assert own is not None and own.floors == {"sentiment": 0.8, "extraction": 0.7, "arithmetic": 0.6, "code": 0.5}


def test_map_keys_need_no_plus_on_the_command_line() -> None:
    assert {"policy.floors", "policy.margins", "measure.load.slo"} <= set(MAP_FIELDS)
    assert normalize(["policy.floors.ticket_routing=0.9", "policy.rule=point", "+x.y=1", "model=a"]) == [
        "++policy.floors.ticket_routing=0.9", "policy.rule=point", "+x.y=1", "model=a"]
    # engine.*: every engine kind's settings are its own, checked by selector.validate (engine.params a map of them)
    assert normalize(["engine.params.top_k=1", "engine=vllm"]) == ["++engine.params.top_k=1", "engine=vllm"]
    assert compose(["engine=openai", "engine.params.top_k=1"]).engine.params == {"top_k": 1}
    cfg = compose(["policy.floors.ticket_routing=0.9", "measure.load.slo.ttft_ms=500", "policy.floors={a: 0.5}"])
    assert cfg.policy.floors == {"ticket_routing": 0.9, "a": 0.5}
    assert cfg.measure.load.slo == {"ttft_ms": 500.0}


def test_a_recorded_policy_takes_overrides_on_top() -> None:
    recorded = PolicyConfig(rule="lower_bound", floors={"code": 0.5, "sentiment": 0.8}, max_weight_gb=2.0)
    policy = policy_with_overrides(recorded, ["policy.floors.code=0.7", "~policy.floors.sentiment"])
    assert (policy.rule, policy.floors, policy.max_weight_gb) == ("lower_bound", {"code": 0.7}, 2.0)
    assert policy_with_overrides(recorded, ["policy=default"]).floors == {}
    with pytest.raises(UserError, match="could not be converted to Float"):
        policy_with_overrides(recorded, ["policy.floors.code=abc"])


@pytest.mark.parametrize("override, message", [
    ("threads=-1", "command line: field 'threads' must be a positive number"),
    ("threads=0", "command line: field 'threads' must be a positive number"),
    ("engine.batch_size=0", "command line: field 'engine.batch_size' must be at least 1"),
    ("policy.floors.code=abc", "command line: Value 'abc' of type 'str' could not be converted to Float"),
    ("search.alpha=0.5", "command line: field 'search.alpha' must be a probability strictly between 0 and 0.5"),
    ("search.alpha=0", "command line: field 'search.alpha' must be a probability strictly between 0 and 0.5"),
])
def test_bad_values_are_caught_while_composing(override: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        compose([override])
    assert str(e.value).startswith(message)
