"""Apply the policy's constraints to every completed variant and rank the eligible ones by the
objective (lower is better); ties go to the higher accuracy, then, between serving settings of one
model x precision, to the better setting (selection.settings), then to the name."""

from __future__ import annotations

import math
from dataclasses import dataclass

from selector.config import PolicyConfig
from selector.selection.checks import build_checks, is_hypothesis
from selector.selection.cost import cost_at_traffic, money
from selector.selection.evidence import Evidence
from selector.selection.settings import setting_rank, shared_objectives
from selector.selection.measures import cost_per_million_tokens, e2e_p50_ms, weight_gb
from selector.selection.sequence import blocked_check, walk
from selector.selection.under_load import load_checks
from selector.records import RunRecord
from selector.verdicts import Check

# objective -> (what it is, unit, how a person reads "lowest")
OBJECTIVE_TEXT = {
    "weight_memory": ("weight memory", "GB", "smallest"),
    "latency": ("single-request e2e p50", "ms", "fastest"),
    "cost": ("cost per million output tokens", "USD", "cheapest"),
    "cost_at_traffic": ("cost per month at policy.traffic_rps", "USD/month", "cheapest"),
}


def objective_value(record: RunRecord, policy: PolicyConfig) -> float | None:
    if policy.objective == "weight_memory":
        return weight_gb(record)
    if policy.objective == "latency":
        return e2e_p50_ms(record)
    if policy.objective == "cost":
        return cost_per_million_tokens(record, policy.price_per_hour or 0.0)
    if policy.objective == "cost_at_traffic":
        return cost_at_traffic(record, policy)
    raise ValueError(f"unknown objective {policy.objective!r}")  # validate_policy catches it first


def format_objective(objective: str, value: float) -> str:
    _, unit, _ = OBJECTIVE_TEXT[objective]
    if unit == "GB":
        return f"{value:.2f} GB weights"
    if unit == "ms":
        return f"{value:.0f} ms e2e p50"
    if unit == "USD/month":
        return f"{money(value)} per month at the stated traffic"
    return f"${value:.2f} per million output tokens"


def insert_load_checks(checks: list[Check], under_load: list[Check]) -> list[Check]:
    """The floors judged under load (policy.floors_under_load) right after the accuracy checks, before
    the budgets and limits, as the verdict lists them."""
    at = next((i for i, c in enumerate(checks) if not c.name.startswith(("accuracy:", "non_inferiority:"))),
              len(checks))
    return checks[:at] + under_load + checks[at:]


@dataclass
class Ranking:
    checks: dict[str, list[Check]]  # variant -> its checks
    objectives: dict[str, float | None]
    ranked: list[str]  # eligible variants, best first

    @property
    def winner(self) -> str | None:
        return self.ranked[0] if self.ranked else None

    def failed(self, name: str) -> list[Check]:
        return [c for c in self.checks[name] if not c.passed]


def rank(
    evidence: dict[str, Evidence],
    policy: PolicyConfig,
    tasks: list[str],
    reference: Evidence | None,
    objectives: dict[str, float | None],
    sequence: list[str] | None = None,
) -> Ranking:
    """sequence: the size ladder (selection.sequence.ladder) when policy.winner_control is
    fixed_sequence; variants that pass below its first failure are blocked with a check saying so.
    The walk tests the floors and margins only (a stopped variant, with no checks, fails them): a
    budget or limit is a measurement, and a variant failing one is not in the sequence at all."""
    checks = {name: insert_load_checks(build_checks(ev, policy, tasks, reference), load_checks(ev, policy, tasks))
              for name, ev in evidence.items()}
    if policy.winner_control == "fixed_sequence" and sequence is not None:
        passes = {name: name in checks and all(c.passed for c in checks[name] if is_hypothesis(c))
                  for name in sequence}  # fmt: skip
        claimed, stopped_at = walk(sequence, passes)
        for name in checks:
            if stopped_at is not None and name not in claimed and passes.get(name, False):
                checks[name] = [*checks[name], blocked_check(stopped_at)]
    eligible = [
        name for name in evidence
        if objectives[name] is not None and all(c.passed for c in checks[name])
    ]  # fmt: skip
    records = {name: ev.record for name, ev in evidence.items()}
    shared = shared_objectives(records, objectives, policy.objective)
    settings = setting_rank(list(records.values()), policy)  # settings of one model x precision: the best first

    def order(name: str) -> tuple[float, float, int, str]:
        score = evidence[name].score
        return (shared[name] or 0.0, -score if score is not None else math.inf, settings.get(name, 0), name)

    return Ranking(checks, objectives, sorted(eligible, key=order))
