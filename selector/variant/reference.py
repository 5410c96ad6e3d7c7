"""The fidelity reference of a variant's model: the baseline precision loaded in this process,
its distributions on the probes written once to the cache (selector.measure.fidelity reads them)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from typing import Any

from selector.config import SelectorConfig
from selector.engines.inprocess.logprobs import probe_logprobs
from selector.measure.fidelity import (
    PROBE_POSITIONS,
    PromptEncoder,
    probe_token_ids,
    reference_from,
    reference_path,
    save_reference,
)

log = logging.getLogger(__name__)


def ensure_reference(cfg: SelectorConfig, tasks: Sequence[Any], device: str, baseline: dict[str, Any] | None) -> str:
    """Write the baseline's reference file for `cfg`'s model if it is not cached: load the baseline
    precision (`baseline`: its config as the sweep's preflight composed it; None when it could not)
    here, measure it, free it. Says what it did (a failure is logged, never raised: the variant's own
    results do not depend on it)."""
    import torch

    from selector.compose import precision_from_dict
    from selector.precisions import get_backend, load_variant

    if baseline is None:
        log.warning("fidelity: baseline precision %r could not be composed; skipped", cfg.baseline_precision)
        return f"no fidelity reference: baseline {cfg.baseline_precision} cannot be composed"
    precision = precision_from_dict(baseline)
    ok, why = get_backend(precision.backend).availability(precision, device)
    if not ok:
        log.warning("fidelity: baseline %s cannot run here (%s); skipped", precision.name, why)
        return f"no fidelity reference: {why}"
    try:
        _, loaded = load_variant(cfg.model, precision, cfg.cache_dir, device, calibration=cfg.calibration,
                                 progress=False)
    except Exception as e:  # e.g. no memory for the baseline: the variant's own results still stand
        log.warning("fidelity: could not load the baseline %s (%s: %s); skipped", precision.name, type(e).__name__, e)
        return f"no fidelity reference: loading {precision.name} failed ({type(e).__name__})"
    try:
        probes = probe_token_ids(PromptEncoder(loaded.tokenizer), tasks, cfg)
        path = reference_path(cfg, probes)
        if probes and not path.is_file():
            log.info("fidelity: computing the reference of %s/%s", cfg.model.name, precision.name)
            save_reference(path, reference_from(probe_logprobs(loaded.model, probes, PROBE_POSITIONS)))
        return f"fidelity reference of {cfg.model.name}/{precision.name} in {path.name}"
    finally:
        del loaded
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
