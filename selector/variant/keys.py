"""Stable keys: a variant's key hashes everything that can change its result, so a re-run of the
same sweep can skip what is already measured and a changed eval set or library cannot be mistaken
for the old one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

from selector.config import SelectorConfig, to_dict
from selector.engines import engine_for
from selector.measure.environment import library_versions

# Libraries whose version can change a number we report.
RESULT_LIBRARIES = ("torch", "transformers", "accelerate", "bitsandbytes", "gptqmodel", "llmcompressor",
                    "compressed-tensors", "torchao", "optimum", "selector")


def digest(obj: Any, length: int = 16) -> str:
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def calibrates(cfg: SelectorConfig) -> bool:
    """Does this variant quantize from calibration data (so the calibration can change its scores)?
    The backend says whether it calibrates; a pre-quantized checkpoint was calibrated elsewhere."""
    from selector.precisions import get_backend

    return get_backend(cfg.precision.backend).calibrates and cfg.precision.name not in cfg.model.prequantized


def evaluation_key(cfg: SelectorConfig, evalset_hash: str) -> str:
    """What can change an item's score: the model, its precision (and calibration), the eval set,
    the engine, device, seed, threads and library versions. Not what only changes a measurement
    (latency, load tests, serving knobs, the policy, the search), so those share scored items."""
    d = to_dict(cfg)
    versions = library_versions()
    material = {
        # path / repo_id: command-line shorthands, already copied (made absolute) into model.source;
        # arch_config only sizes the plan (the weights come from the source)
        "model": {k: v for k, v in d["model"].items() if k not in ("notes", "path", "repo_id", "arch_config")},
        "precision": {k: v for k, v in d["precision"].items() if k != "description"},
        "calibration": d["calibration"] if calibrates(cfg) else None,
        "evalset": {"hash": evalset_hash, "tasks": d["evalset"]["tasks"], "limit": d["evalset"]["limit"]},
        "engine": engine_for(cfg.engine).key_material(),  # its kind says what cannot change an answer
        "device": cfg.device,
        "seed": cfg.seed,
        "threads": cfg.threads,
        "versions": {k: versions.get(k) for k in RESULT_LIBRARIES},
    }
    return digest(material)


class Keys(NamedTuple):
    variant: str  # the record's key (what resume and reuse look up)
    evaluation: str  # the scored items' key (the item store's folder)


def keys_of(cfg: SelectorConfig, evalset_hash: str) -> Keys:
    """The variant's two keys, computed once (the sweep's preflight; selector.evaluate for one
    variant) and handed to its run: the evaluation key goes into the variant key."""
    evaluation = evaluation_key(cfg, evalset_hash)
    return Keys(variant_key(cfg, evaluation), evaluation)


def variant_key(cfg: SelectorConfig, evaluation: str) -> str:
    """Everything that can change a variant's record: its evaluation (its evaluation key), and
    how it is measured."""
    d = to_dict(cfg)
    material = {"evaluation": evaluation, "measure": d["measure"],
                "baseline": cfg.baseline_precision}
    measured = engine_for(cfg.engine).measure_material()  # its scheduling knobs change the measurements, not the scores
    if measured:
        material["engine"] = measured
    if cfg.measure.load.requests:  # the request file's rows, not its name, make the load figures
        material["load_requests"] = _file_digest(cfg.measure.load.requests)
    return digest(material)


def _file_digest(path: str) -> str | None:
    from selector.paths import find_path

    found = find_path(path)
    return hashlib.sha256(found.read_bytes()).hexdigest()[:16] if found.is_file() else None

