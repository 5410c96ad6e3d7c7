"""Stable keys: a variant's key hashes everything that can change its result, so a re-run of the
same sweep can skip what is already measured and a changed eval set or library cannot be mistaken
for the old one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from selector.config import SelectorConfig, to_dict
from selector.measure.environment import library_versions

# Libraries whose version can change a number we report.
RESULT_LIBRARIES = ("torch", "transformers", "accelerate", "bitsandbytes", "gptqmodel", "llmcompressor",
                    "compressed-tensors", "torchao", "optimum", "selector")


def digest(obj: Any, length: int = 16) -> str:
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def variant_key(cfg: SelectorConfig, evalset_hash: str) -> str:
    d = to_dict(cfg)
    versions = library_versions()
    quantizes = cfg.precision.backend in ("gptqmodel", "llmcompressor")
    material = {
        # path / repo_id: command-line shorthands, already copied (made absolute) into model.source
        "model": {k: v for k, v in d["model"].items() if k not in ("notes", "path", "repo_id")},
        "precision": {k: v for k, v in d["precision"].items() if k != "description"},
        "calibration": d["calibration"] if quantizes else None,
        "evalset": {"hash": evalset_hash, "tasks": d["evalset"]["tasks"], "limit": d["evalset"]["limit"]},
        "engine": d["engine"],
        "measure": d["measure"],
        "device": cfg.device,
        "seed": cfg.seed,
        "threads": cfg.threads,
        "baseline": cfg.baseline_precision,
        "versions": {k: versions.get(k) for k in RESULT_LIBRARIES},
    }
    return digest(material)


def sweep_key(experiment: str, variant_keys: list[str], policy: dict[str, Any]) -> str:
    """The same variants judged under another policy are another sweep (another parent run, with
    its own floors as params); the variants' measurements are still reused."""
    return digest({"experiment": experiment, "variants": sorted(variant_keys), "policy": policy})
