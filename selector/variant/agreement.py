"""Served answers against in-process answers on the same checkpoint (engine.compare_in_process).

The same weights can answer differently through vLLM than through transformers in-process: other
kernels, other batching, bf16 rounding in another order. Per task: how many items were answered
differently, and a few of them, so a person sees whether a score moved by the engine, not the model.
Which engine's accuracy the verdict uses is `accuracy_engine`'s rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from selector.engines.spec import Engine
from selector.records import EngineAgreement, SampleRecord

EXAMPLES = 3


def accuracy_engine(deploy_engine: str | None, in_process: Engine[Any] | None) -> str:
    """"in_process" when policy.deploy_engine names the in-process engine the answers were compared
    with (`in_process`: the served engine's Engine.in_process_comparison, asked with
    Engine.is_deploy_engine: deploy_engine=hf), else "served": without a deploy_engine the sweep's own
    engine (the server it started) decides."""
    return "in_process" if in_process is not None and in_process.is_deploy_engine(deploy_engine) else "served"


def engine_agreement(served: Iterable[SampleRecord], in_process: Iterable[SampleRecord]) -> dict[str, EngineAgreement]:
    """Per task, over the items scored both ways: how many answers differ (the output text, or the
    multiple-choice pick, compared after stripping whitespace), with the first few as examples."""
    local = {(s.task, s.id): s for s in in_process}
    by_task: dict[str, list[tuple[SampleRecord, SampleRecord]]] = {}
    for s in served:
        if (s.task, s.id) in local:
            by_task.setdefault(s.task, []).append((local[(s.task, s.id)], s))
    out = {}
    for task, pairs in sorted(by_task.items()):
        pairs.sort(key=lambda p: p[0].id)
        differ = [(a, b) for a, b in pairs if a.output.strip() != b.output.strip()]
        out[task] = EngineAgreement(
            n=len(pairs), differ=len(differ),
            in_process_value=sum(a.score for a, _ in pairs) / len(pairs),
            served_value=sum(b.score for _, b in pairs) / len(pairs),
            examples=[{"id": a.id, "target": a.target, "in_process": a.output[:200], "served": b.output[:200],
                       "in_process_score": a.score, "served_score": b.score} for a, b in differ[:EXAMPLES]])
    return out

