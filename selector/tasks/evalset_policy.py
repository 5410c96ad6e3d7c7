"""An eval set's own floors: `policy.yaml` beside its task files.

Floors are knowledge about tasks ("routing must stay above 90%"), so they live with the tasks and
travel with the folder. The file may set `floors`, `default_floor`, `margins` and `weights` (the
per-task parts of a policy); the decision rule, budgets and objective stay with the sweep's
`policy` config. Floors given in the sweep's policy or on the command line win over these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from selector.yaml_lines import yaml_line
from selector.errors import EvalsetError

POLICY_FILE = "policy.yaml"
MAPS = ("floors", "margins", "weights")
KEYS = (*MAPS, "default_floor")


@dataclass
class EvalsetPolicy:
    path: Path
    floors: dict[str, float] = field(default_factory=dict)
    margins: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    default_floor: float | None = None

    def fail(self, keys: list[str], problem: str) -> EvalsetError:
        return EvalsetError(str(self.path), yaml_line(self.path, keys), ".".join(keys), problem)


def read_evalset_policy(folder: Path) -> EvalsetPolicy | None:
    """The folder's policy.yaml, checked key by key (errors name the file, line and key)."""
    path = Path(folder) / POLICY_FILE
    if not path.is_file():
        return None
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise EvalsetError(str(path), None, None, f"not valid YAML: {' '.join(str(e).split())}") from None
    policy = EvalsetPolicy(path)
    if not isinstance(raw, dict):
        raise EvalsetError(str(path), None, None, f"must be a mapping of {', '.join(KEYS)}")
    for key, value in raw.items():
        if key not in KEYS:
            raise policy.fail([str(key)], f"unknown key (an eval set's policy.yaml takes {', '.join(KEYS)}; "
                                           "the rule, budgets and objective belong to the sweep's policy config)")
        if key == "default_floor":
            policy.default_floor = None if value is None else _fraction(policy, [key], value)
            continue
        if not isinstance(value, dict):
            raise policy.fail([key], f"must be a mapping of task name to number, got {type(value).__name__}")
        setattr(policy, key, {str(task): _number(policy, [key, str(task)], v) for task, v in value.items()})
    for task, floor in policy.floors.items():
        _fraction(policy, ["floors", task], floor)
    return policy


def _number(policy: EvalsetPolicy, keys: list[str], value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise policy.fail(keys, f"must be a number, got {value!r}")
    return float(value)


def _fraction(policy: EvalsetPolicy, keys: list[str], value: Any) -> float:
    number = _number(policy, keys, value)
    if not 0.0 <= number <= 1.0:
        raise policy.fail(keys, f"floors are fractions (0.8 = 80%), got {value!r}")
    return number
