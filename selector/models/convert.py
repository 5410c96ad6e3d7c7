"""GGUF -> a safetensors folder that transformers loads offline, in the dtype the precision loads it
at (bf16 for the default precisions: a float32 folder cost a 1.5B model's bf16 load twice the memory
and read twice the bytes, only to be cast). Done once per GGUF (keyed by its sha256) and dtype and
reused; callers hold the model's cache lock while converting.

The folder is written under a temporary name and renamed into place only when complete and checked
(tokenizer reloads identically, generation stops at the end of a turn, safetensors headers valid).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import platform
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from selector.errors import UserError
from selector.models import gguf_tokenizer as gt
from selector.models.cache import DEFAULT_STORE_DTYPE, MANIFEST, STORE_DTYPES, converted_dir, read_json, write_json_atomic
from selector.models.resolved import ResolvedModel
from selector.models.sources import SourceContext
from selector.models.validate import validate_folder

log = logging.getLogger("selector.models")

FORMAT_VERSION = 2  # 1: float32 for every precision, in a folder named without the dtype


def ensure_converted(ctx: SourceContext, gguf_path: Path, sha256: str, source: dict[str, Any]) -> ResolvedModel:
    """The converted folder for this GGUF, converting it first if the cache has none."""
    if ctx.dtype not in STORE_DTYPES:
        raise UserError(f"a model converted from GGUF can be stored as {', '.join(STORE_DTYPES)}, not {ctx.dtype!r}")
    folder = converted_dir(ctx.cache, ctx.label, sha256, ctx.dtype)
    if folder is None:
        target = ctx.cache.model_dir(ctx.label, sha256, ctx.dtype)
        if target.exists():  # a folder without manifest: left by something else; never trust it
            log.warning("removing incomplete converted folder %s", target)
            shutil.rmtree(target)
        folder = convert_gguf(gguf_path, target, name=ctx.label, sha256=sha256, source=source, progress=ctx.progress,
                              dtype=ctx.dtype)
    else:
        log.info("model %s: using converted folder %s", ctx.label, folder)
    return resolved_from(folder, ctx)


def resolved_from(folder: Path, ctx: SourceContext) -> ResolvedModel:
    manifest = read_json(folder / MANIFEST) or {}
    return ResolvedModel(
        name=ctx.model.name, path=str(folder), is_local=True, prequantized=ctx.prequantized,
        manifest=manifest, kind=ctx.source.kind, trust_remote_code=ctx.model.trust_remote_code,
    )


def convert_gguf(gguf_path: Path, out_dir: Path, *, name: str, sha256: str, source: dict[str, Any],
                 progress: bool = True, dtype: str = DEFAULT_STORE_DTYPE) -> Path:
    """Dequantize the GGUF and save it as `dtype` safetensors. transformers dequantizes to float32
    and casts to `dtype` while loading, so a bf16 folder holds exactly the bf16 weights a float32
    folder cast at load gave (tests/integration/test_models_gguf.py checks it tensor by tensor)."""
    import torch
    import transformers
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    started = time.monotonic()
    meta = gt.read_gguf_meta(gguf_path)
    # The caller holds the model's lock, so any temporary folder of this model is left from a killed run.
    for stale in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    _check_disk(out_dir.parent, meta.tensor_elements * STORE_DTYPES[dtype],
                what=f"the {dtype} conversion of {gguf_path.name}")
    tmp.mkdir(parents=True)
    log.warning("model %s: converting %s (%s) to %s safetensors, once", name, gguf_path.name, meta.file_type, dtype)
    steps = tqdm(total=5, desc=f"convert {name}", unit="step", disable=not progress)
    bars_were_on = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        steps.set_postfix_str("tokenizer")
        tok, fixes = gt.load_tokenizer(gguf_path, meta)
        steps.update()

        steps.set_postfix_str("dequantize")
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=getattr(torch, dtype), local_files_only=True
        )
        # The GGUF quantizer stays attached after dequantizing and refuses to save (docs/models.md, Conversion).
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        eos_ids = gt.generation_eos_ids(tok, meta)
        gen = model.generation_config
        gen.eos_token_id = eos_ids[0] if len(eos_ids) == 1 else eos_ids
        gen.bos_token_id = tok.bos_token_id
        gen.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else eos_ids[0]
        steps.update()

        steps.set_postfix_str("save")
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        if not (tmp / "generation_config.json").exists():
            gen.save_pretrained(str(tmp))
        config_fixes = _clean_config(tmp / "config.json")
        steps.update()

        steps.set_postfix_str("check")
        saved_tok = gt.verify_saved(tmp, tok, eos_ids)
        report = validate_folder(tmp)
        check = gt.probe_nll(model, saved_tok)
        if not check["ok"]:
            log.warning("model %s: mean NLL %.2f on plain English is close to uniform guessing (%.2f): "
                        "the tokenizer may not match the weights", name, check["mean_nll"], check["uniform_nll"])
        steps.update()

        manifest = {
            "format": FORMAT_VERSION,
            "name": name,
            "source": source,
            "gguf": {"file": gguf_path.name, "sha256": sha256, "bytes": gguf_path.stat().st_size,
                     "architecture": meta.architecture, "quantization": meta.file_type},
            "architecture": (model.config.architectures or [type(model).__name__])[0],
            "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": dtype,
            "weight_files": report.weight_files,
            "weight_bytes": report.weight_bytes,
            "tokenizer": {**gt.describe(saved_tok, eos_ids, fixes), "check": check},
            "config_fixes": config_fixes,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__.split("+")[0],
            "python_version": platform.python_version(),
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "conversion_seconds": round(time.monotonic() - started, 1),
            "note": (f"weights are dequantized from a {meta.file_type or 'quantized'} GGUF to {dtype}: they carry "
                     "the GGUF's rounding, so a 'full precision' baseline of this model is really dequantized "
                     f"{meta.file_type or 'GGUF'}"),
        }
        write_json_atomic(tmp / MANIFEST, manifest)
        steps.update()
        del model
        gc.collect()
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        steps.close()
        if bars_were_on:
            hf_logging.enable_progress_bar()
    log.warning("model %s: converted in %.0f s to %s", name, time.monotonic() - started, out_dir)
    return out_dir


def _clean_config(path: Path) -> list[str]:
    """Drop keys of the saved config.json that break other tools."""
    config = json.loads(path.read_text())
    fixes = []
    if "rope_type" in config:  # stray top-level key (Gemma 3): crashes gptqmodel's save (docs/models.md)
        del config["rope_type"]
        fixes.append("removed stray top-level 'rope_type' from config.json")
    if "quantization_config" in config:
        del config["quantization_config"]
        fixes.append("removed the GGUF 'quantization_config' from config.json")
    if fixes:
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return fixes


def _check_disk(folder: Path, needed: int, what: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < needed * 1.05:
        raise UserError(f"{folder}: {what} needs about {needed / 1e9:.1f} GB and only {free / 1e9:.1f} GB is free "
                        "(set SELECTOR_CACHE or cache_dir to a larger disk)")
