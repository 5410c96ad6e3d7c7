"""Three small sweeps whose records pin selector's behaviour, for a before/after comparison of a refactor.

Usage (from the repository root, with the project's venv; the same command before and after):

    .venv/bin/python scripts/behaviour_sweeps.py OUT [--models DIR] [--only hf,scripted,vllm]
    .venv/bin/python scripts/compare_records.py BEFORE_OUT AFTER_OUT

Each sweep is `python -m selector` with Hydra overrides, in OUT/<name>/ (its own output folder, model
cache and local MLflow store, sqlite:///OUT/<name>/mlflow.db), its console in OUT/<name>/sweep.log:

- hf:       two tiny random Llamas (tests/tiny.py) in-process at fp32, bf16, bitsandbytes int8, GPTQ
            and AWQ int4 (quantized here), the default eval set's four tasks (3 items each), latency,
            throughput, a small load test, fidelity, the noise floor; a grid: every variant measured;
            floors low enough that the smallest variant wins.
- scripted: engine=scripted (no model) on the offline ladder (SmolLM2-135M, Gemma-3-270M, Qwen2.5-
            Coder-1.5B) x bf16, int8, AWQ and GPTQ int4, with made-up accuracies like the README's
            table: the adaptive search stops, prunes and picks.
- vllm:     engine=vllm (vLLM's CPU build, .venv-vllm, --enforce-eager) serving a tiny Llama at bf16,
            W8A8, GPTQ and AWQ int4, bitsandbytes int8 skipped as not servable; two tasks, 3 items
            each, a small load test with vLLM's /metrics split, the in-process agreement; the default
            floors, which no variant meets.

The tiny models are built once into --models (default outputs/behaviour-models) and reused by every
later run, so before and after score the very same weights. Every sweep runs with threads=1, a
fixed item order (search.seed) and a fresh cache of its own, so two runs of one commit start from
the same state: OUT/<name> must not exist yet (a sweep into an output folder that holds records
reuses them). Exit 1 if a sweep fails; OUT/timings.json holds each sweep's wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Made-up accuracies for engine=scripted, shaped like the README's default grid: the small models
# fail arithmetic and code by far, the 1.5B meets every floor at bf16, AWQ and GPTQ.
SCRIPTED_ACCURACY = {
    "smollm2-135m": {"sentiment": 0.9, "extraction": 0.85, "arithmetic": 0.02, "code": 0.2},
    "gemma3-270m": {"sentiment": 0.85, "extraction": 0.85, "arithmetic": 0.04, "code": 0.1},
    "qwen2.5-coder-1.5b": {"sentiment": 0.98, "extraction": 0.98, "arithmetic": 0.85, "code": 0.86},
    "qwen2.5-coder-1.5b/gptq-int4": {"sentiment": 0.96, "extraction": 0.96, "arithmetic": 0.85, "code": 0.88},
    "qwen2.5-coder-1.5b/awq-int4": {"sentiment": 0.98, "extraction": 0.98, "arithmetic": 0.83, "code": 0.83},
}

# search.seed: the item order, drawn afresh by every sweep (a grid's too) unless given
COMMON = ("threads=1", "verbose=false", "search.seed=11")
SWEEPS: dict[str, tuple[str, ...]] = {
    "hf": ("model=tiny,tinyv", "engine=hf", "precision=fp32,bf16,int8,gptq-int4,awq-int4", "measure=load-quick",
           "evalset.limit=3", "search=grid", "measure.noise_floor.repeats=1", "policy.floors.sentiment=0.3",
           "policy.floors.extraction=0", "policy.floors.arithmetic=0", "policy.floors.code=0"),
    "scripted": ("model=smollm2-135m,gemma3-270m,qwen2.5-coder-1.5b", "precision=bf16,int8,awq-int4,gptq-int4",
                 "engine=scripted-behaviour", "measure=load-quick", "search=adaptive"),
    "vllm": ("model=tinyv", "engine=vllm", "engine.vllm.enforce_eager=true",
             "precision=bf16,int8-w8a8,gptq-int4,awq-int4,int8", "measure=load-quick", "evalset.limit=3",
             "evalset.tasks=[sentiment,arithmetic]", "search=grid", "engine.compare_in_process=true"),
}


def build_models(models: Path) -> dict[str, Path]:
    """tiny (in-process) and tinyv (a shape vLLM's CPU build serves), built once and kept."""
    built = {"tiny": models / "tiny", "tinyv": models / "tinyv"}
    for name, folder in built.items():
        if (folder / "model.safetensors").is_file():
            continue
        builder = "build_tiny_llama" if name == "tiny" else "build_vllm_llama"
        print(f"building {name} into {folder}", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", f"from pathlib import Path; from tests.tiny import {builder}; "
                        f"{builder}(Path({str(folder)!r}))"], cwd=ROOT, check=True)
    return built


def write_conf(conf: Path, models: dict[str, Path]) -> None:
    """A user's config folder: model/tiny.yaml, model/tinyv.yaml and engine/scripted-behaviour.yaml."""
    for name, folder in models.items():
        path = conf / "model" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"name: {name}\nfamily: tiny\nparams_b: 0.0001\nsource:\n  kind: local\n"
                        f"  path: {folder}\nprompt_style: chat\n")
    engine = conf / "engine" / "scripted-behaviour.yaml"
    engine.parent.mkdir(parents=True, exist_ok=True)
    engine.write_text(f"defaults: [scripted, _self_]\naccuracy: {json.dumps(SCRIPTED_ACCURACY)}\n"
                      "default_accuracy: 0.0\n")


def run_sweep(name: str, overrides: tuple[str, ...], out: Path, conf: Path) -> tuple[int, float]:
    """One sweep into out/<name>/: (exit code, wall seconds)."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "selector", f"hydra.searchpath=[file://{conf}]", f"output_dir={folder}",
           f"cache_dir={folder / 'cache'}", *COMMON, *overrides]
    (folder / "command.txt").write_text(" ".join(cmd) + "\n")
    print(f"[{name}] {' '.join(cmd[3:])}", flush=True)
    start = time.monotonic()
    with (folder / "sweep.log").open("w") as log:
        code = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ}).returncode
    wall = time.monotonic() - start
    print(f"[{name}] exit {code} after {wall:.0f} s (log: {folder / 'sweep.log'})", flush=True)
    return code, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="an output folder (new, or one to add sweeps to)")
    parser.add_argument("--models", type=Path, default=ROOT / "outputs" / "behaviour-models",
                        help="where the tiny models are built once and kept (default: %(default)s)")
    parser.add_argument("--only", default=",".join(SWEEPS), help="sweeps to run, comma separated (default: all)")
    args = parser.parse_args(argv)
    out, names = args.out.resolve(), [n for n in args.only.split(",") if n]
    unknown = set(names) - set(SWEEPS)
    if unknown:
        parser.error(f"unknown sweep(s) {sorted(unknown)}; known: {list(SWEEPS)}")
    existing = [name for name in names if (out / name).exists()]
    if existing:
        parser.error(f"{', '.join(str(out / n) for n in existing)} exists already: give a new output folder")
    conf = out / "conf"
    write_conf(conf, build_models(args.models.resolve()))
    timings_path = out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    failed = []
    for name in names:
        code, wall = run_sweep(name, SWEEPS[name], out, conf)
        timings[name] = {"wall_s": round(wall, 1), "exit": code}
        timings_path.write_text(json.dumps(timings, indent=2) + "\n")
        if code != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
