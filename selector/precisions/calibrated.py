"""What every calibrating backend (gptqmodel, llmcompressor) shares: calibration data, the artifact
key, loading the saved checkpoint back (with the kernel rule, selector/precisions/checkpoint.py),
and the QuantInfo that reports it.

A backend supplies only `build(out_dir, plan)`: quantize the base model and save it to `out_dir`.
Everything else (group size, cache, lock, timing, reload) happens here the same way for all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from selector.config import PrecisionConfig
from selector.precisions import artifacts
from selector.precisions.base import LoadContext, LoadedModel, dir_bytes, load_tokenizer
from selector.records import QuantInfo


@dataclass
class Calibration:
    texts: list[str]
    info: dict[str, Any]  # source, num_samples, seq_len, seed, sha256 (recorded in QuantInfo)


@dataclass
class QuantPlan:
    """One local quantization: what to do, with which data, keyed how."""

    library: str
    method: str
    bits: int
    params: dict[str, Any]  # effective parameters (group size actually used, ...)
    calibration: Calibration
    versions: dict[str, str]
    notes: list[str] = field(default_factory=list)


def calibration(ctx: LoadContext) -> Calibration:
    from selector.precisions.calibration import calibration_hash, calibration_texts

    texts = ctx.calibration_texts() or calibration_texts(ctx.calibration, ())
    cfg = ctx.calibration
    info = {
        "source": cfg.source,
        "path": cfg.path,
        "num_samples": len(texts),
        "seq_len": cfg.seq_len,
        "seed": cfg.seed,
        "sha256": calibration_hash(texts),
    }
    return Calibration(texts, info)


def tokenize_calibration(tokenizer: Any, texts: list[str], seq_len: int) -> list[list[int]]:
    """Each text as at most `seq_len` token ids (special tokens as the tokenizer adds them)."""
    return [tokenizer(t, truncation=True, max_length=seq_len)["input_ids"] for t in texts]


def artifact_key(resolved: Any, precision: PrecisionConfig, plan: QuantPlan, model_name: str) -> artifacts.ArtifactKey:
    fields = {
        "base": artifacts.base_model_identity(resolved),
        "library": plan.library,
        "method": plan.method,
        "bits": plan.bits,
        "dtype": precision.dtype,
        "params": plan.params,
        "calibration": {k: plan.calibration.info[k] for k in ("sha256", "seq_len", "num_samples")},
        "versions": plan.versions,
    }
    return artifacts.ArtifactKey(model_name, precision.name, fields)


def quantize_cached(
    resolved: Any,
    precision: PrecisionConfig,
    ctx: LoadContext,
    plan: QuantPlan,
    build: Callable[[Path], None],
    backend: str,
    kernel: str = "auto",
) -> LoadedModel:
    """Build the artifact once (or find it), then load it like any quantized checkpoint, with `kernel`."""
    from selector.precisions.checkpoint import load_checkpoint

    key = artifact_key(resolved, precision, plan, ctx.model_cfg.name)

    def build_and_describe(out: Path) -> dict[str, Any]:
        build(out)
        return {"params": plan.params, "calibration": plan.calibration.info, "library": plan.library,
                "notes": plan.notes}

    art = artifacts.materialize(ctx.cache_dir, key, build_and_describe)
    if ctx.prepare_only:
        loaded = LoadedModel(None, None, ctx.device, str(art.path))
    else:
        loaded = load_checkpoint(str(art.path), precision, ctx, local=True, backend=backend, requested=kernel)
    # The manifest holds what the build learnt (token counts, notes); a cache hit reports the same.
    quant = QuantInfo(
        method=plan.method,
        library=plan.library,
        library_version=plan.versions.get(plan.library, "unknown"),
        params={"bits": plan.bits, **art.manifest.get("params", plan.params)},
        cached=art.cached,
        quantize_s=art.quantize_s,
        artifact_dir=str(art.path),
        artifact_bytes=dir_bytes(art.path),
        calibration=art.manifest.get("calibration", plan.calibration.info),
    )
    notes = list(art.manifest.get("notes", plan.notes))
    if art.cached:
        notes.append(f"reused cached artifact {art.path.name} (quantized in {art.quantize_s} s)")
    notes += loaded.notes
    return LoadedModel(loaded.model, load_tokenizer(resolved), ctx.device, str(art.path), quant, notes, loaded.kernel)


def save_tokenizer(resolved: Any, out: Path) -> None:
    """A self-contained artifact: a server (vLLM, TGI) can be pointed at the folder alone."""
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(resolved.path, **resolved.load_kwargs()).save_pretrained(out)


def group_size(requested: int, linears: Any) -> tuple[dict[str, int], list[str]]:
    """The group size to use (the requested one, lowered until it divides every quantized layer),
    as plan params, and the note saying so when it was lowered."""
    from selector.precisions import groups

    used = groups.pick_group_size((s.in_features for s in linears), requested)
    notes = [f"group size {requested} does not divide every layer; used {used}"] if used != requested else []
    return {"group_size": used, "group_size_requested": requested}, notes
