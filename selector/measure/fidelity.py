"""How far a variant's next-token distributions moved from the baseline precision of the same model.

Probe set: the first PROBE_PROMPTS prompts of the eval set (taken round-robin over its tasks, so each
task is represented) exactly as the model sees them (the engine's rendering, chat template and
few-shot examples included), plus CORPUS_PROBES texts of the built-in calibration corpus; the last
PROBE_POSITIONS positions of each. The same token ids go through every variant.

The baseline run (`cfg.baseline_precision`, bf16 by default) saves, per position, its top-k
(TOP_K=256) token ids and log-probabilities plus the log of the remaining mass to
`<cache>/fidelity/<model>-<probehash>.safetensors`. Every other variant reads that file. When it is
missing, the variant's preparation process (variant/prepare.py, `ensure_reference`) loads the
baseline, writes the file and exits before the variant loads, so the baseline's memory never
counts as the variant's. Each variant reports:

- mean KL(baseline || variant) over the buckets "each of the baseline's top-k tokens" and "all
  other tokens". Bucketing is exact for the bucketed distributions
  and, by the log-sum inequality (merging outcomes never increases KL), a lower bound of the
  full-vocabulary KL. In-process the variant gives its whole distribution, so every one of the
  baseline's top-256 tokens is a bucket and the rest bucket usually holds well under 1% of the
  mass: the bound is tight. A server gives its top `max_logprobs` (vLLM: 20) per position, so only
  the baseline's top tokens among them have a known q; for the others the figure takes the least KL
  any distribution agreeing with what the server said can have (`compare_top`): no unnamed token is
  more likely than the server's k-th, and together they hold one minus the named mass. Still a lower
  bound of the full-vocabulary KL, marked by `FidelityResult.method` = "top-20"; a variant whose top
  tokens leave the baseline's reads higher, not 0 (docs/precisions.md measures it over a sweep).
  `FidelityResult.disjoint` counts the positions where the server named none of the baseline's top
  tokens: there the figure is the most a top-20 can show, however far the variant moved.
- top-1 agreement: how often the variant's most likely next token is the baseline's.

The baseline itself gets None (there is nothing to compare it with), not KL 0.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from selector.config import SelectorConfig, to_dict
from selector.records import FidelityResult

if TYPE_CHECKING:
    from selector.engines.spec import Running

log = logging.getLogger("selector.measure.fidelity")

PROBE_PROMPTS = 32
CORPUS_PROBES = 4
PROBE_POSITIONS = 32
MAX_PROBE_TOKENS = 1024  # longer prompts keep their last tokens (the positions that are measured)
TOP_K = 256
FORMAT_VERSION = 1


@dataclass
class Reference:
    """The baseline's view of every probe position."""

    ids: Any  # int64 [positions, k]: the baseline's top-k token ids, most likely first
    logp: Any  # float32 [positions, k]: their log-probabilities
    rest: Any  # float32 [positions]: log of the probability mass outside the top-k


def measure_fidelity(running: Running, tasks: Sequence[Any], cfg: SelectorConfig) -> FidelityResult | None:
    """KL and top-1 agreement of the variant, through the engine that serves it, against the
    baseline's reference file; None for the baseline itself (in-process it writes the file) and when
    there is no file (`ensure_reference` makes it) or the engine gives no log-probabilities."""
    from selector.errors import UnavailableError

    probes = probe_token_ids(running, tasks, cfg)
    if not probes:
        log.warning("fidelity: no probe prompts; skipped")
        return None
    path = reference_path(cfg, probes)
    if cfg.precision.name == cfg.baseline_precision:
        if not path.exists() and running.max_logprobs is None:  # the whole distribution: the reference itself
            save_reference(path, reference_from(t.logp for t in running.token_logprobs(probes, PROBE_POSITIONS)))
        return None
    ref = load_reference(path)
    if ref is None:  # its preparation could not make one (said in its log): no figure rather than a second model here
        log.warning("fidelity: no reference of %s/%s in the cache; skipped", cfg.model.name, cfg.baseline_precision)
        return None
    disjoint: list[Any] = []
    try:
        kl, agree = compare_all(ref, running.token_logprobs(probes, PROBE_POSITIONS), running.max_logprobs, disjoint)
    except UnavailableError as e:
        log.warning("fidelity: %s; skipped", e)
        return None
    apart = sum(int(d.sum()) for d in disjoint)
    if apart:
        log.warning("fidelity: at %d of %d positions the server named none of the baseline's top-%d tokens; the KL "
                    "there is the least its top-%s allows", apart, kl.numel(), ref.ids.shape[-1], running.max_logprobs)
    return FidelityResult(
        baseline=f"{cfg.model.name}/{cfg.baseline_precision}",
        mean_kl=float(kl.mean()),
        top1_agreement=float(agree.float().mean()),
        positions=int(kl.numel()),
        method="full" if running.max_logprobs is None else f"top-{running.max_logprobs}",
        disjoint=apart,
    )


# ---- probes -------------------------------------------------------------------------------------
def probe_prompts(tasks: Sequence[Any], cfg: SelectorConfig, k: int = PROBE_PROMPTS) -> list[Any]:
    """The first `k` eval prompts, round-robin over tasks, as each task builds them for this model."""
    from selector.tasks import build_prompt, resolve_style

    queues = [(t, resolve_style(t, cfg.model.name, cfg.model.prompt_style), list(t.items)) for t in tasks]
    prompts: list[Any] = []
    row = 0
    while len(prompts) < k and any(row < len(items) for _, _, items in queues):
        for task, style, items in queues:
            if row < len(items) and len(prompts) < k:
                prompts.append(build_prompt(task, items[row], style))
        row += 1
    return prompts


def corpus_probes(n: int = CORPUS_PROBES) -> list[str]:
    """`n` paragraphs spread evenly over the built-in corpus (prose, code and numbers)."""
    from selector.precisions.calibration import BUILTIN_CORPUS, read_paragraphs

    paragraphs = read_paragraphs(BUILTIN_CORPUS)
    return [paragraphs[i * len(paragraphs) // n] for i in range(n)]


def probe_token_ids(engine: Any, tasks: Sequence[Any], cfg: SelectorConfig) -> list[list[int]]:
    prompts = probe_prompts(tasks, cfg) + corpus_probes()
    return [ids[-MAX_PROBE_TOKENS:] for ids in (engine.encode(p) for p in prompts) if ids]


class PromptEncoder:
    """Encodes prompts as the in-process engine does, from the tokenizer alone (no model loaded)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer

    def encode(self, prompt: Any) -> list[int]:
        from selector.generation import encode_prompt

        return encode_prompt(self.tok, prompt)


def reference_exists(cfg: SelectorConfig, tasks: Sequence[Any], tokenizer: Any) -> bool:
    probes = probe_token_ids(PromptEncoder(tokenizer), tasks, cfg)
    return not probes or reference_path(cfg, probes).is_file()


def reference_path(cfg: SelectorConfig, probes: list[list[int]]) -> Path:
    """Keyed by the model config, the baseline precision and the exact probe tokens."""
    digest = hashlib.sha256()
    header = {"v": FORMAT_VERSION, "model": to_dict(cfg.model), "baseline": cfg.baseline_precision,
              "k": TOP_K, "positions": PROBE_POSITIONS}
    digest.update(json.dumps(header, sort_keys=True, default=str).encode())
    for ids in probes:
        digest.update(len(ids).to_bytes(4, "little") + b"".join(i.to_bytes(4, "little") for i in ids))
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in cfg.model.name)
    return Path(cfg.cache_dir) / "fidelity" / f"{safe}-{digest.hexdigest()[:16]}.safetensors"


# ---- distributions ------------------------------------------------------------------------------
def reference_from(distributions: Iterable[Any]) -> Reference:
    """The reference from the baseline's whole next-token distributions, probe by probe."""
    import torch

    ids, logps, rests = [], [], []
    for logp in distributions:
        top = logp.topk(min(TOP_K, logp.shape[-1]), dim=-1)
        ids.append(top.indices.to(torch.int64))
        logps.append(top.values)
        rests.append(logp.scatter(-1, top.indices, float("-inf")).logsumexp(-1))
    return Reference(torch.cat(ids), torch.cat(logps), torch.cat(rests))


def compare_all(ref: Reference, variant: Iterable[Any], k: int | None = None,
                disjoint: list[Any] | None = None) -> tuple[Any, Any]:
    """Per-position KL and agreement of the variant's distributions (TopLogprobs, probe by probe,
    whole or top-k) against the reference. `k`: how many of a server's named tokens per position are
    its top ones (`compare_top`). `disjoint`, when given, gets per top-k probe a bool per position:
    the server named none of the baseline's top tokens."""
    import torch

    kls, agrees, start = [], [], 0
    for got in variant:
        end = start + got.logp.shape[0]
        if end > ref.ids.shape[0]:
            raise ValueError("the variant has more probe positions than the baseline reference")
        part = Reference(ref.ids[start:end], ref.logp[start:end], ref.rest[start:end])
        kl, agree = compare_full(part, got.logp) if got.ids is None else compare_top(part, got.ids, got.logp, k)
        if disjoint is not None and got.ids is not None:
            disjoint.append(shares_none(part, got.ids))
        kls.append(kl)
        agrees.append(agree)
        start = end
    if start != ref.ids.shape[0]:
        raise ValueError(f"the variant has {start} probe positions, the baseline reference {ref.ids.shape[0]}")
    return torch.cat(kls), torch.cat(agrees)


def compare_full(ref: Reference, logq: Any) -> tuple[Any, Any]:
    """Per-position bucketed KL(baseline || variant) and top-1 agreement (bool).

    `logq` is the variant's full log-distribution [positions, vocab] at the reference's positions.
    """
    import torch

    q_top = logq.gather(-1, ref.ids)
    q_rest = logq.scatter(-1, ref.ids, float("-inf")).logsumexp(-1)
    kl = _bucketed_kl(ref.logp, q_top, ref.rest, q_rest, torch.ones_like(q_top, dtype=torch.bool))
    # The variant's most likely token is the baseline's when it gives that token its highest value: a
    # tie (bf16 logits tie often) is agreement, whichever token argmax or topk happens to name.
    agree = q_top[:, 0] >= logq.amax(-1)
    return kl, agree


REST_FLOOR = 1e-6  # the least unnamed mass a server's float32 log-probabilities can resolve


def compare_top(ref: Reference, ids: Any, logq: Any, k: int | None = None) -> tuple[Any, Any]:
    """The same with only the variant's top-k per position known (a server's log-probabilities):
    per position, the least KL(baseline || variant) over the buckets "each of the baseline's top
    tokens" and "everything else" that any distribution agreeing with what the server said can have.

    What the server says: the named tokens' log-probabilities, exactly; so the mass it did not name
    is one minus theirs (`U`, in float64, at least REST_FLOOR: float32 log-probabilities summing to a
    hair over 1 must not make it empty), and no unnamed token is more likely than its `k`-th most
    likely one (`c`). A baseline top token it names is a bucket with both sides known. One it does not
    name (the set M) has q <= c, and all of M together at most U. The baseline's rest bucket gets what
    the variant holds outside its named tokens in the baseline's top (exact) plus the unnamed mass M
    leaves. Over those q the KL is convex; its least value puts q_t = min(c, tau * p_t) on M (water
    filling, tau found by bisection) and is a lower bound of the bucketed KL the whole distribution
    gives (`compare_full`), hence of the full-vocabulary KL.

    So a variant whose top tokens move away from the baseline's reads more, not less: with no token in
    common, each of the baseline's top tokens counts at most the variant's k-th probability. (Merging
    M into the rest bucket, as this did before, read exactly 0 there.)

    `k`: how many of the named tokens are the variant's top ones (vLLM adds the prompt's own token to
    its top `max_logprobs` when that token is not among them); None: all of them are. A position
    given fewer than `k` tokens has no cap c, only U."""
    import torch

    match = ref.ids.unsqueeze(-1) == ids.unsqueeze(-2)  # [positions, K_ref, k]: the same token
    known = match.any(-1)
    minus_inf = torch.tensor(float("-inf"), dtype=logq.dtype)
    q_top = torch.where(match, logq.unsqueeze(-2), minus_inf).amax(-1)
    kl = _served_kl(ref, q_top.double(), known, logq.double(), match.any(-2), k)
    agree = (ids[:, 0] == ref.ids[:, 0]) | (q_top[:, 0] >= logq[:, 0])  # a tie at the top is agreement
    return kl.to(ref.logp.dtype), agree


def shares_none(ref: Reference, ids: Any) -> Any:
    """Per position: the server named none of the baseline's top tokens (bool)."""
    return ~(ref.ids.unsqueeze(-1) == ids.unsqueeze(-2)).any(-1).any(-1)


def _served_kl(ref: Reference, lq_top: Any, known: Any, logq: Any, bucketed: Any, k: int | None) -> Any:
    """`compare_top`'s bound in float64: `lq_top` the variant's log-probabilities of the baseline's top
    tokens (where `known`), `logq` everything the server named (`bucketed`: among the baseline's top)."""
    import torch

    lp = ref.logp.double()
    p = lp.exp()
    q = logq.exp()  # a padded -inf (no token) or vLLM's -9999 gives 0
    q_in = torch.where(known, lq_top.exp(), torch.zeros_like(p)).sum(-1)
    q_out = torch.where(bucketed, torch.zeros_like(q), q).sum(-1)  # named, outside the baseline's top
    p_m = torch.where(known, torch.zeros_like(p), p)  # the baseline's top tokens the server did not name
    unnamed = (1 - q_in - q_out).clamp_min(0.0)
    unnamed = torch.where((p_m > 0).any(-1), unnamed.clamp_min(REST_FLOOR), unnamed)  # M's q cannot all be 0
    named = (q > 0).sum(-1)
    k_eff = named if k is None else torch.full_like(named, k)
    kth = q.sort(-1, descending=True).values.gather(-1, (k_eff - 1).clamp(0, q.shape[-1] - 1).unsqueeze(-1))[:, 0]
    cap = torch.where((named >= k_eff) & (k_eff > 0), kth, torch.full_like(kth, float("inf")))
    cap = torch.minimum(cap, unnamed)
    p_rest = ref.rest.double().exp()
    room = q_out + unnamed  # the rest bucket's mass plus M's: Q_rest = room - sum over M

    def held(tau: Any) -> Any:
        return torch.minimum(cap.unsqueeze(-1), tau.unsqueeze(-1) * p_m).sum(-1)

    # The least KL puts q_t = min(cap, tau p_t) on M with tau the smallest value where the rest's
    # marginal (P_rest / Q_rest = 1 / tau) is reached or M holds all the unnamed mass: both sides
    # grow with tau, so bisect on log tau. The lower end is kept: a feasible point (Q_rest > 0).
    lo = torch.full_like(p_rest, -200.0)
    hi = torch.full_like(p_rest, 200.0)
    for _ in range(80):
        mid = (lo + hi) / 2
        tau = mid.exp()
        x = held(tau)
        over = (x + tau * p_rest >= room) | (x >= unnamed)
        hi = torch.where(over, mid, hi)
        lo = torch.where(over, lo, mid)
    tau = lo.exp()
    q_m = torch.minimum(cap.unsqueeze(-1), tau.unsqueeze(-1) * p_m)
    tiny = torch.finfo(torch.float64).tiny  # float rounding never makes a log of 0
    q_rest = (room - q_m.sum(-1)).clamp_min(REST_FLOOR)  # raising it only lowers the bound
    zero = torch.zeros_like(p)
    kl_known = torch.where(known & (p > 0), p * (lp - lq_top), zero).sum(-1)
    kl_m = torch.where(~known & (p > 0), p * (lp - q_m.clamp_min(tiny).log()), zero).sum(-1)
    kl_rest = torch.where(p_rest > 0, p_rest * (ref.rest.double() - q_rest.log()), torch.zeros_like(p_rest))
    return (kl_known + kl_m + kl_rest).clamp_min(0.0)


def _bucketed_kl(p_top: Any, q_top: Any, p_rest: Any, q_rest: Any, buckets: Any) -> Any:
    """KL over the bucket tokens (where `buckets`) and one rest bucket, per position."""
    import torch

    zero = torch.zeros_like(p_top)
    kl_top = torch.where(buckets, p_top.exp() * (p_top - q_top), zero).sum(-1)
    p_rest_mass = p_rest.exp()
    # 0 * log(0/q) = 0: a rest bucket the baseline gives no mass contributes nothing.
    kl_rest = torch.where(p_rest_mass > 0, p_rest_mass * (p_rest - q_rest), torch.zeros_like(p_rest_mass))
    return (kl_top + kl_rest).clamp_min(0.0)  # tiny negative values are float rounding


# ---- the reference file -------------------------------------------------------------------------
def save_reference(path: Path, ref: Reference) -> None:
    """Written to a temporary name, then renamed: a reader never sees half a file."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tensors = {"ids": ref.ids.contiguous(), "logp": ref.logp.contiguous(), "rest": ref.rest.contiguous()}
    save_file(tensors, str(tmp), metadata={"format_version": str(FORMAT_VERSION), "top_k": str(ref.ids.shape[-1])})
    os.replace(tmp, path)


def load_reference(path: Path) -> Reference | None:
    from safetensors.torch import load_file

    if not path.is_file():
        return None
    t = load_file(str(path))
    return Reference(t["ids"], t["logp"], t["rest"])
