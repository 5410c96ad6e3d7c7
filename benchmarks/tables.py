"""The result-table logic of the side-by-side benchmarks: pure functions over plain data, so
they are unit-tested without a model (tests/unit/test_benchmarks_tables.py)."""

from __future__ import annotations

import statistics
from typing import Any, Sequence


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


# ---- accuracy agreement ----------------------------------------------------------------------

def compare_task(task: str, metric: str, selector_items: list[dict[str, Any]], lmeval_items: list[dict[str, Any]],
                 lmeval_score: float) -> dict[str, Any]:
    """One task's agreement. Items are aligned by position (lm-eval's doc_id is the row's index);
    each has `prompt` (the exact text the model saw), `prediction`, `score` and, for multiple
    choice, `logprobs` (one per choice, in choice order)."""
    if len(selector_items) != len(lmeval_items):
        raise ValueError(f"{task}: selector scored {len(selector_items)} items, lm-eval {len(lmeval_items)}")
    n = len(selector_items)
    same_prompt = same_pred = same_pred_same_prompt = 0
    mismatches, logprob_diffs = [], []
    for ours, theirs in zip(selector_items, lmeval_items):
        prompt_equal = ours["prompt"] == theirs["prompt"]
        pred_equal = ours["prediction"] == theirs["prediction"]
        same_prompt += prompt_equal
        same_pred += pred_equal
        same_pred_same_prompt += pred_equal and prompt_equal
        if ours.get("logprobs") and theirs.get("logprobs"):
            logprob_diffs.extend(abs(a - b) for a, b in zip(ours["logprobs"], theirs["logprobs"]))
        if not pred_equal:
            mismatches.append({
                "id": ours["id"], "selector": ours["prediction"], "lm_eval": theirs["prediction"],
                "same_prompt": prompt_equal,
                "whitespace_only": ours["prediction"].strip() == theirs["prediction"].strip(),
                "selector_score": ours["score"], "lm_eval_score": theirs["score"],
                **({"selector_logprobs": ours["logprobs"], "lm_eval_logprobs": theirs["logprobs"]}
                   if ours.get("logprobs") else {}),
            })
    return {
        "task": task, "metric": metric, "n": n,
        "selector_score": sum(i["score"] for i in selector_items) / n if n else 0.0,
        "lm_eval_score": lmeval_score,
        "same_prompt": same_prompt,
        "same_prediction": same_pred,
        "same_prediction_same_prompt": same_pred_same_prompt,
        "max_logprob_diff": max(logprob_diffs) if logprob_diffs else None,
        "mismatches": mismatches,
    }


def agreement_total(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """Items with identical predictions, over all items and over the items whose prompts were identical."""
    n = sum(t["n"] for t in tasks)
    same_prompt = sum(t["same_prompt"] for t in tasks)
    same_pred = sum(t["same_prediction"] for t in tasks)
    both = sum(t["same_prediction_same_prompt"] for t in tasks)
    return {"n": n, "same_prompt": same_prompt, "same_prediction": same_pred,
            "same_prediction_share": same_pred / n if n else None,
            "same_prediction_share_where_prompt_same": both / same_prompt if same_prompt else None}


# ---- evaluation throughput -------------------------------------------------------------------

def throughput(selector_walls: list[float], lmeval_walls: list[float], items: int) -> dict[str, Any]:
    """Median wall time of each tool over repeated runs of the same work, examples per second, and
    selector's speed-up (lm-eval's median wall / selector's)."""
    ours, theirs = median(selector_walls), median(lmeval_walls)
    return {"items": items, "runs": len(selector_walls),
            "selector_wall_s": ours, "lm_eval_wall_s": theirs,
            "selector_walls_s": list(selector_walls), "lm_eval_walls_s": list(lmeval_walls),
            "selector_items_per_s": items / ours, "lm_eval_items_per_s": items / theirs,
            "speedup": theirs / ours}


# ---- latency side by side --------------------------------------------------------------------

LATENCY_FIELDS = (  # (key, label, unit, lower is better)
    ("prefill_ms", "prefill (time to first token)", "ms", True),
    ("decode_ms", "decode (after the first token)", "ms", True),
    ("per_token_ms", "per output token after the first", "ms", True),
    ("generate_ms", "whole generate call", "ms", True),
    ("decode_tokens_per_s", "decode throughput", "tok/s", False),
    ("peak_rss_mb", "peak process memory (RSS)", "MB", True),
)


def relative_diff(ours: float | None, theirs: float | None) -> float | None:
    """(selector - optimum) / optimum, or None when either is missing."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return (ours - theirs) / theirs


def latency_rows(selector: dict[int, dict[str, float]], optimum: dict[int, dict[str, float]],
                 tolerance: float = 0.10) -> list[dict[str, Any]]:
    """One row per batch size and figure: both values, their relative difference, and whether it
    is within `tolerance`. Keys of the inputs are batch sizes; values hold LATENCY_FIELDS keys."""
    rows = []
    for batch in sorted(set(selector) & set(optimum)):
        for key, label, unit, _ in LATENCY_FIELDS:
            ours, theirs = selector[batch].get(key), optimum[batch].get(key)
            if ours is None and theirs is None:
                continue
            diff = relative_diff(ours, theirs)
            rows.append({"batch_size": batch, "figure": key, "label": label, "unit": unit, "selector": ours,
                         "optimum_benchmark": theirs, "diff": diff,
                         "within_tolerance": None if diff is None else abs(diff) <= tolerance})
    return rows


# ---- Markdown ----------------------------------------------------------------------------------

def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", "\\n")

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def machine_markdown(m: dict[str, Any], peers: dict[str, dict[str, str]]) -> str:
    versions = m.get("versions", {})
    ours = ", ".join(f"{k} {versions[k]}" for k in ("python", "torch", "transformers") if k in versions)
    theirs = "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in vers.items()) for name, vers in peers.items())
    return (f"Measured {m['date']} on {m['cpu']}, {m['cores']} cores, {m.get('ram_gb', '?')} GiB RAM, "
            f"torch threads {m['torch_threads']} (both tools); load average {m['load_average_start']} at the start, "
            f"{m.get('load_average_end', 'n/a')} at the end"
            + (f"; other processes kept {m['neighbours_during_runs']['others_busy_cores']} cores busy on average "
               "during the timed runs" if m.get("neighbours_during_runs") else "")
            + f". selector ({m.get('commit') or 'no commit'}): {ours}. "
            f"{theirs}.\n")


def accuracy_markdown(tasks: list[dict[str, Any]], total: dict[str, Any]) -> str:
    rows = []
    for t in tasks:
        rows.append([t["task"], t["style"], t["metric"], t["n"], fmt(t["selector_score"], 3),
                     fmt(t["lm_eval_score"], 3), f"{t['same_prompt']}/{t['n']}", f"{t['same_prediction']}/{t['n']}",
                     "n/a" if t["max_logprob_diff"] is None else f"{t['max_logprob_diff']:.2g}"])
    rows.append(["**all**", "", "", total["n"], "", "", f"{total['same_prompt']}/{total['n']}",
                 f"{total['same_prediction']}/{total['n']} ({pct(total['same_prediction_share'])})", ""])
    return markdown_table(["task", "prompts", "metric", "items", "selector", "lm-eval", "identical prompts",
                           "identical predictions", "max abs logprob diff"], rows)


def throughput_markdown(t: dict[str, Any], batch_size: int) -> str:
    rows = [["selector", fmt(t["selector_wall_s"], 2), fmt(t["selector_items_per_s"], 2),
             ", ".join(fmt(w, 1) for w in t["selector_walls_s"])],
            ["lm-eval", fmt(t["lm_eval_wall_s"], 2), fmt(t["lm_eval_items_per_s"], 2),
             ", ".join(fmt(w, 1) for w in t["lm_eval_walls_s"])]]
    return (markdown_table([f"tool (batch {batch_size}, {t['items']} items)", "median wall s", "items/s",
                            "each run, s"], rows)
            + f"\nselector is **{t['speedup']:.2f}x** lm-eval's examples/second (median of {t['runs']} runs).\n")


def latency_markdown(rows: list[dict[str, Any]]) -> str:
    body = [[r["batch_size"], r["label"], r["unit"], fmt(r["selector"], 1), fmt(r["optimum_benchmark"], 1),
             pct(r["diff"], signed=True)] for r in rows]
    return markdown_table(["batch", "figure", "unit", "selector", "optimum-benchmark", "difference"], body)


def gap_text(mismatch: dict[str, Any]) -> str:
    """How close a mismatched item was, as the Markdown table shows it."""
    if "gap_nats" in mismatch:
        who = "selector's" if mismatch["alone_prefers"] == "selector" else "lm-eval's"
        return (f"{abs(mismatch['gap_nats']):.3f} at output token {mismatch['first_difference_token'] + 1}; "
                f"alone (batch 1) the model picks {who}")
    if "gap_selector_nats" in mismatch:
        return f"selector {mismatch['gap_selector_nats']:.3f}, lm-eval {mismatch['gap_lm_eval_nats']:.3f}"
    return "n/a"


# ---- two load generators taking turns on one server ---------------------------------------------

def ab_order(pair: int) -> tuple[str, str]:
    """Which tool goes first in each pair: A B, then B A, and so on (A: vllm bench, B: selector), so
    neither always runs on the server the other has just warmed or slowed."""
    return ("vllm_bench", "selector") if pair % 2 == 0 else ("selector", "vllm_bench")


def paired_difference(pairs: Sequence[tuple[dict[str, float], dict[str, float]]], key: str,
                      tolerance: float = 0.10) -> dict[str, Any] | None:
    """One figure over the pairs (theirs, ours) of back-to-back runs: each pair's relative difference
    (ours - theirs) / theirs, their median and range, and how far each tool's own figure moved over
    the pairs (max / min - 1: the server's drift, which both tools see). A median within `tolerance`
    is a match; a larger one whose pairs all lie on one side is the tools measuring differently."""
    kept = [(t[key], o[key]) for t, o in pairs if t.get(key) is not None and o.get(key) is not None]
    diffs = [d for t, o in kept if (d := relative_diff(o, t)) is not None]
    if not diffs:
        return None
    theirs, ours = [t for t, _ in kept], [o for _, o in kept]

    def drift(values: list[float]) -> float | None:
        return max(values) / min(values) - 1 if min(values) > 0 else None

    mid = median(diffs)
    return {"median": mid, "low": min(diffs), "high": max(diffs), "n": len(diffs),
            "one_side": all(d > 0 for d in diffs) or all(d < 0 for d in diffs),
            "within": abs(mid) <= tolerance, "drift_theirs": drift(theirs), "drift_ours": drift(ours),
            "theirs_median": median(theirs), "ours_median": median(ours)}
