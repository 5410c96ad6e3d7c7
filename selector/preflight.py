"""Checks that run before any model loads: the grid, every job's config, the eval set, and whether
each variant can run on this machine at all.

Bad input stops the sweep here with exit code 2 and nothing written to MLflow. A variant that
cannot run here (no CUDA, no hub, a backend that needs a GPU) is not an error: it is recorded as
skipped, unless every variant is, in which case the sweep stops with the reasons.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from selector.config import SelectorConfig, validate
from selector.errors import ConfigError, UserError
from selector.keys import sweep_key, variant_key


@dataclass
class PlannedVariant:
    cfg: SelectorConfig
    overrides: list[str]
    key: str
    available: bool
    reason: str

    @property
    def name(self) -> str:
        return f"{self.cfg.model.name}/{self.cfg.precision.name}"


def grid_overrides(config: DictConfig) -> list[list[str]]:
    """The override list of each job Hydra's basic sweeper will launch, in launch order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    args = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(args)
    return BasicSweeper.split_arguments(parsed, None)[0]


def compose_job(config: DictConfig, overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    try:
        job = loader.load_sweep_config(config, overrides)
    except Exception as e:  # Hydra's "Could not find 'model/x'" and friends
        raise ConfigError("command line", problem=f"{' '.join(overrides)}: {str(e).strip()}") from None
    choices = dict(OmegaConf.to_container(job.hydra.runtime.choices))  # type: ignore[arg-type]
    return job, choices


def job_config(job: DictConfig, choices: dict[str, str] | None) -> SelectorConfig:
    plain = OmegaConf.create({k: v for k, v in job.items() if k != "hydra"})
    return validate(plain, choices)


@functools.lru_cache(maxsize=8)
def _evalset(path: str, tasks: tuple[str, ...] | None, limit: int | None) -> tuple[Any, str]:
    from selector.tasks import evalset_hash, load_evalset

    loaded = load_evalset(path, list(tasks) if tasks else None, limit)
    return loaded, evalset_hash(loaded)


def load_tasks(cfg: SelectorConfig) -> tuple[Any, str]:
    """The eval set's tasks and content hash (loaded once per distinct eval set)."""
    return _evalset(cfg.evalset.path, tuple(cfg.evalset.tasks) if cfg.evalset.tasks else None, cfg.evalset.limit)


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def availability(cfg: SelectorConfig) -> tuple[bool, str]:
    """Can this variant run on this machine? (False, reason) when it cannot."""
    from selector import models
    from selector.precisions import get_backend

    wants_cuda = cfg.device.startswith("cuda") or (cfg.device == "auto" and cuda_available())
    device = "cuda" if wants_cuda else "cpu"
    if cfg.model.requires_cuda and not cuda_available():
        return False, f"model={cfg.model.name} needs a CUDA GPU and torch.cuda.is_available() is False here"
    if cfg.device.startswith("cuda") and not cuda_available():
        return False, f"device={cfg.device} but CUDA is not available here"
    ok, why = models.check_available(cfg.model, precision=cfg.precision.name, cache_dir=Path(cfg.cache_dir))
    if not ok:
        return False, f"model={cfg.model.name}: {why}"
    try:
        ok, why = get_backend(cfg.precision.backend).availability(cfg.precision, device)
    except KeyError as e:
        raise ConfigError(f"conf/precision/{cfg.precision.name}.yaml", "backend", str(e)) from None
    if not ok:
        return False, f"precision={cfg.precision.name} is not available on {device}: {why}"
    return True, ""


def plan(config: DictConfig, multirun: bool) -> tuple[list[PlannedVariant], str]:
    """Compose and check every job of the sweep; return them with the sweep's key."""
    jobs = grid_overrides(config) if multirun else [list(config.hydra.overrides.task)]
    planned, choices = [], {}
    for overrides in jobs:
        job, choices = compose_job(config, overrides) if multirun else (config, dict(config.hydra.runtime.choices))
        cfg = job_config(job, choices)
        _, ehash = load_tasks(cfg)
        ok, why = availability(cfg)
        planned.append(PlannedVariant(cfg, overrides, variant_key(cfg, ehash), ok, why))
    if not planned:
        raise UserError("the sweep has no variants: check hydra.sweeper.params and your overrides")
    check_policy(planned[0].cfg, choices.get("policy"))
    check_engine_and_load(planned[0].cfg, choices)
    experiment = planned[0].cfg.experiment
    return planned, sweep_key(experiment, [p.key for p in planned])


def unavailable_message(planned: list[PlannedVariant]) -> str:
    lines = [f"  - {p.name}: {p.reason}" for p in planned]
    return (
        "No variant of this sweep can run on this machine, so nothing was started and nothing was "
        "written to MLflow:\n" + "\n".join(lines) + "\nRun it on a machine with what is missing "
        "(for hub models: network access to huggingface.co or a local mirror via HF_ENDPOINT; for GPU "
        "sweeps: a CUDA build of torch and a GPU), or pick variants that run here, e.g. "
        "`python -m selector model=smollm2-135m precision=bf16,int8`."
    )


def check_policy(cfg: SelectorConfig, choice: str | None) -> list[str]:
    """A policy that cannot be applied stops the sweep now, not after hours of measuring.
    Returns (and logs) warnings about floors that name no task, and tasks without a floor."""
    import logging

    from selector.config import CONF_DIR, yaml_line
    from selector.selection.checks import validate_policy

    try:
        validate_policy(cfg.policy)
    except ConfigError as e:
        path = CONF_DIR / "policy" / f"{choice}.yaml" if choice else None
        line = yaml_line(path, e.field.split(".")) if path else None
        where = f"conf/policy/{choice}.yaml" + (f":{line}" if line else "") if choice else "policy"
        raise ConfigError(where, f"policy.{e.field}", e.problem) from None
    tasks = [t.name for t in load_tasks(cfg)[0]]
    warnings = [f"policy floor for '{t}' is ignored: the eval set has no task of that name (tasks: {', '.join(tasks)})"
                for t in cfg.policy.floors if t not in tasks and t != "weighted"]
    if cfg.policy.default_floor is None:
        warnings += [f"task '{t}' has no accuracy floor, so it does not constrain the choice "
                     f"(set policy.floors.{t}=0.8 or policy.default_floor)" for t in tasks if t not in cfg.policy.floors]
    for w in warnings:
        logging.getLogger("selector.preflight").warning(w)
    return warnings


ENGINES = ("hf", "openai")


def check_engine_and_load(cfg: SelectorConfig, choices: dict[str, str]) -> None:
    """Engine and load-test settings are checked now, not after every variant's evaluation."""
    if cfg.engine.kind not in ENGINES:
        where = f"conf/engine/{choices.get('engine', 'hf')}.yaml"
        raise ConfigError(where, "engine.kind", f"unknown engine {cfg.engine.kind!r}; choose one of {', '.join(ENGINES)}")
    from selector.engines.fast import compile_setting

    compile_setting(cfg.engine.compile)  # a typo stops the sweep now, not each variant after its evaluation
    if cfg.engine.kind == "openai" and not (cfg.engine.base_url or cfg.engine.server_command):
        raise ConfigError(f"conf/engine/{choices.get('engine', 'openai')}.yaml", "engine.base_url",
                          "engine=openai needs base_url (attach to a running server) or server_command (start one per variant)")
    if cfg.measure.load.enabled:
        from selector.measure.load import check_slo, levels_of

        check_slo(cfg.measure.load.slo)
        levels_of(cfg.measure.load)


def reference_variant(planned: list[PlannedVariant]) -> str | None:
    """The variant selection will compare against: the largest model at its highest precision."""
    from selector.selection.precision import precision_bits

    runnable = [p for p in planned if p.available]
    if not runnable:
        return None
    best = max(runnable, key=lambda p: (p.cfg.model.params_b, precision_bits(p.cfg.precision.name, p.cfg.precision.bits)))
    return best.name
