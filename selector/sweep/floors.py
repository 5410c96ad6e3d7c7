"""Which floors a sweep applies, decided once, before anything loads.

Sources, weakest first: the eval set's own `policy.yaml`, then the sweep's policy config file,
then the command line. A floor must name a task of the eval set: a name the eval set does not
have is an error (a typo would otherwise be ignored or, worse, fail every variant), with a
did-you-mean; a floor for a task the eval set has but this run leaves out (`evalset.tasks=[...]`)
is set aside with one notice.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Callable

from selector.config import PolicyConfig
from selector.errors import ConfigError
from selector.tasks.evalset_policy import EvalsetPolicy

WEIGHTED = "weighted"  # a floor on the weighted mean score, not a task


def merged_policy(policy: PolicyConfig, own: EvalsetPolicy | None) -> PolicyConfig:
    """The sweep's policy with the eval set's per-task entries beneath it."""
    if own is None:
        return policy
    return dataclasses.replace(
        policy,
        floors={**own.floors, **policy.floors},
        margins={**own.margins, **policy.margins},
        weights={**own.weights, **policy.weights},
        default_floor=policy.default_floor if policy.default_floor is not None else own.default_floor,
    )


def check_floor_tasks(policy: PolicyConfig, own: EvalsetPolicy | None, run_tasks: list[str],
                      all_tasks: list[str], where: Callable[[str], str], evalset: str) -> tuple[PolicyConfig, list[str]]:
    """Keep the floors of the tasks this run measures; refuse names the eval set does not have.

    where(task): the file (or "command line") the sweep's floor for that task came from."""
    notices: list[str] = []
    for source, floors in (("own", own.floors if own else {}), ("sweep", policy.floors)):
        for task in floors:
            if task == WEIGHTED or task in all_tasks:
                continue
            close = difflib.get_close_matches(task, all_tasks, n=2)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            problem = f"names no task of the eval set {evalset}.{hint} Its tasks: {', '.join(all_tasks)}"
            if source == "own":
                assert own is not None
                raise own.fail(["floors", task], problem)
            raise ConfigError(where(task), field=f"policy.floors.{task}", problem=problem)
    left_out = sorted(t for t in merged_policy(policy, own).floors if t != WEIGHTED and t not in run_tasks)
    merged = merged_policy(policy, own)
    if left_out:
        keep = {t: f for t, f in merged.floors.items() if t not in left_out}
        merged = dataclasses.replace(merged, floors=keep)
        notices.append(f"floors set aside for tasks this run leaves out ({', '.join(left_out)}): "
                       f"evalset.tasks selects {', '.join(run_tasks)}")
    return merged, notices
