"""Preparing a variant's artifact in a process of its own, so its memory never counts as the variant's.

Converting a GGUF to safetensors, quantizing with calibration data and computing the fidelity
reference (the baseline precision's next-token distributions) all need far more memory than
serving the result: a 1.5B model's GPTQ pass peaks near 11 GB on CPU, and the bf16 baseline a
4-bit variant is compared with is twice its size. The worker runs them here, in a child process
(`python -m selector.variant.prepare <request.json>`), before it loads the variant; the child's own
peak is the variant's *preparation peak* (what the machine that makes the artifact needs) and
everything it made lands in the cache, where the worker then loads it as production would.

The child runs only when there is something to prepare; a variant whose artifact, converted model
and fidelity reference are all cached goes straight to loading.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from selector.config import SelectorConfig, to_dict
from selector.errors import UnavailableError
from selector.processes import skip_exit_collection
from selector.records import PeakMemory

log = logging.getLogger("selector.variant.prepare")


@dataclass
class Prepared:
    """What the preparation process did and the most memory it held."""

    peak: PeakMemory
    did: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # What it made, not found in the cache: "conversion", "artifact" (it quantized; the worker then
    # loads what this run put in the cache), "reference" (the fidelity reference). []: all was cached.
    made: list[str] = field(default_factory=list)


def reasons_to_prepare(cfg: SelectorConfig, backend: Any, tasks: Sequence[Any]) -> list[str]:
    """What this variant still needs made before it can load and be measured; [] when all is cached."""
    from selector import models
    from selector.precisions.loading import load_tokenizer

    if not models.is_ready(cfg.model, Path(cfg.cache_dir), precision=cfg.precision.name, dtype=cfg.precision.dtype):
        return ["the model's source is not converted yet"]
    reasons = []
    prequantized = cfg.precision.name in cfg.model.prequantized
    if backend.builds_artifact and not prequantized:
        reasons.append(f"{cfg.precision.name} is quantized into the cache (reused when it is there)")
    if _wants_reference(cfg):
        from selector.measure.fidelity import reference_exists

        resolved = models.resolve(cfg.model, Path(cfg.cache_dir), precision=cfg.precision.name,
                                  dtype=cfg.precision.dtype, progress=False)
        if not reference_exists(cfg, tasks, load_tokenizer(resolved)):
            reasons.append(f"the fidelity reference of {cfg.model.name}/{cfg.baseline_precision} is not cached")
    return reasons


def _wants_reference(cfg: SelectorConfig) -> bool:
    return bool(cfg.measure.fidelity) and cfg.precision.name != cfg.baseline_precision


def prepare_in_child(cfg: SelectorConfig, baseline: dict[str, Any] | None, job_dir: Path) -> Prepared:
    """Run the preparation in a child process and wait for it; raises what the child raised."""
    request = Path(job_dir) / "prepare.request.json"
    result = Path(job_dir) / "prepare.json"
    result.unlink(missing_ok=True)
    request.write_text(json.dumps({"config": to_dict(cfg), "baseline": baseline, "result": str(result)}))
    proc = subprocess.run([sys.executable, "-m", "selector.variant.prepare", str(request)], check=False)
    outcome = json.loads(result.read_text()) if result.exists() else None
    if outcome is None:
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        raise RuntimeError(f"the preparation process died ({how}) before it said why; see worker.log")
    error = outcome.get("error")
    if error:
        if error["unavailable"]:
            raise UnavailableError(error["message"])
        raise RuntimeError(f"{error['type']} while preparing: {error['message']}")
    return Prepared(PeakMemory.model_validate(outcome["peak"]), outcome["did"], outcome["seconds"],
                    outcome.get("made", []))


# ---- the child's side ---------------------------------------------------------------------------
def prepare(cfg: SelectorConfig, baseline: dict[str, Any] | None, device: str,
            made: list[str] | None = None) -> list[str]:
    """Convert, quantize into the cache, compute the fidelity reference: whatever is missing (each
    one it made, rather than found, appended to `made`: conversion, artifact, reference)."""
    from selector import models
    from selector.precisions import get_backend, load_variant
    from selector.precisions.calibration import calibration_texts
    from selector.tasks import load_evalset

    tasks = load_evalset(cfg.evalset.path, cfg.evalset.tasks, cfg.evalset.limit)
    did = []
    made = [] if made is None else made
    if not models.is_ready(cfg.model, Path(cfg.cache_dir), precision=cfg.precision.name, dtype=cfg.precision.dtype):
        made.append("conversion")
    resolved = models.resolve(cfg.model, Path(cfg.cache_dir), precision=cfg.precision.name, dtype=cfg.precision.dtype)
    did.append(f"resolved {cfg.model.name} ({resolved.path})")
    if get_backend(cfg.precision.backend).builds_artifact and not resolved.prequantized:
        _, prepared = load_variant(cfg.model, cfg.precision, cfg.cache_dir, device, calibration=cfg.calibration,
                                   calibration_texts=lambda: calibration_texts(cfg.calibration, tasks),
                                   prepare_only=True)
        quantized = not (prepared.quant and prepared.quant.cached)
        made += ["artifact"] if quantized else []
        did.append(f"artifact {Path(str(prepared.artifact_dir)).name} ({'quantized' if quantized else 'cached'})")
    if _wants_reference(cfg):
        from selector.measure.fidelity import reference_exists
        from selector.variant.reference import ensure_reference
        from selector.precisions.loading import load_tokenizer

        # made by the baseline's own run when it ran first: loading the baseline again would only find it
        tokenizer = load_tokenizer(resolved)
        if not reference_exists(cfg, tasks, tokenizer):
            did.append(ensure_reference(cfg, tasks, device, baseline))
            made += ["reference"] if reference_exists(cfg, tasks, tokenizer) else []  # none when it could not
    return did


def machine_load(share: Any) -> str:
    """What else ran on the machine while preparing (in the record with what was prepared): on 2 cores
    one busy neighbour (or a hypervisor's steal) made SmolLM2's GPTQ take 1.7 times as long (docs/precisions.md)."""
    if share.other is None:
        return "other processes' share of the CPU: not measured (under a second)"
    busy = " (busy: it took longer than it would on a quiet machine)" if share.as_dict()["busy"] else ""
    return f"other processes took {share.other:.0%} of the {share.cores} cores meanwhile{busy}"


def main(argv: list[str]) -> int:
    import torch

    from selector.compose import config_from_dict
    from selector.logs import setup_logging
    from selector.measure.contention import CpuShare
    from selector.resources.memory import peak_rss_bytes
    from selector.variant.device import resolve_device

    setup_logging()
    request = json.loads(Path(argv[0]).read_text())
    result = Path(request["result"])
    cfg = config_from_dict(request["config"])
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    outcome: dict[str, Any] = {"did": [], "error": None, "made": []}
    device = "cpu"
    try:
        device = resolve_device(cfg.device)
        with CpuShare() as share:
            outcome["did"] = prepare(cfg, request.get("baseline"), device, outcome["made"])
        outcome["did"].append(machine_load(share))
    except Exception as e:  # said to the worker, which records the variant as skipped or failed
        outcome["error"] = {"type": type(e).__name__, "message": str(e)[:4000],
                            "unavailable": isinstance(e, UnavailableError)}
        traceback.print_exc()
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    outcome["peak"] = PeakMemory(rss_bytes=peak_rss_bytes(),
                                 cuda_allocated_bytes=torch.cuda.max_memory_allocated() if cuda else None,
                                 cuda_reserved_bytes=torch.cuda.max_memory_reserved() if cuda else None).model_dump()
    outcome["seconds"] = round(time.perf_counter() - t0, 3)
    result.write_text(json.dumps(outcome))
    log.info("prepared %s/%s in %.1f s: %s", cfg.model.name, cfg.precision.name, outcome["seconds"],
             "; ".join(outcome["did"]) or "nothing")
    return 1 if outcome["error"] else 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    skip_exit_collection()
    sys.exit(code)
