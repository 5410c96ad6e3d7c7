"""Checks that run before any model loads: the grid, every job's config, the eval set, and whether
each variant can run on this machine at all.

Bad input stops the sweep here with exit code 2 and nothing written to MLflow. A variant that
cannot run here (no CUDA, no hub, a backend that needs a GPU) is not an error: it is recorded as
skipped, unless every variant is, in which case the sweep stops with the reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from selector.config import SelectorConfig
from selector.validate import validate
from selector.errors import ConfigError, UserError
from selector.models import adhoc
from selector.origin import Origin
from selector.plan.estimate import planned_weight_bytes
from selector.variant.availability import availability, check_precision, planned_device
from selector.variant.evaluation import evalset_of, load_tasks
from selector.variant.keys import digest, keys_of
from selector.sweep.state import PlannedEntry


@dataclass
class PlannedVariant:
    cfg: SelectorConfig
    overrides: list[str]
    key: str
    available: bool
    reason: str
    evaluation_key: str = ""
    planned_bytes: float = 0.0  # weight memory the search orders by (plan's estimate)
    setting: dict[str, Any] = field(default_factory=dict)  # the serving knobs the sweep varies (serving.knobs)
    baseline: Any = None  # the baseline precision's config when the variant wants a fidelity reference

    def describe(self) -> PlannedEntry:
        """What the sweep's state keeps of it (sweep.json), for the jobs, the search and the end."""
        from selector.config import to_dict
        from selector.variant.keys import calibrates

        baseline = to_dict(self.baseline) if self.baseline is not None else None
        return PlannedEntry(name=self.name, key=self.key, evaluation_key=self.evaluation_key,
                            overrides=self.overrides, config=to_dict(self.cfg), baseline=baseline,
                            available=self.available, reason=self.reason,
                            model=self.cfg.model.name, precision=self.cfg.precision.name, setting=self.setting,
                            family=self.cfg.model.family, params=int(self.cfg.model.params_b * 1e9),
                            planned_bytes=self.planned_bytes, needs_quantization=calibrates(self.cfg),
                            is_baseline=self.cfg.precision.name == self.cfg.baseline_precision)

    @property
    def name(self) -> str:
        from selector.records import Variant

        return Variant(model=self.cfg.model.name, precision=self.cfg.precision.name, setting=self.setting).name


def job_config_and_notices(job: DictConfig, origin: Origin) -> tuple[SelectorConfig, list[str]]:
    """One job's validated config, with the floors the sweep applies (see selector.sweep.floors), and
    the notices about them. origin: where its values came from (errors name it)."""
    plain = OmegaConf.create({k: v for k, v in job.items() if k != "hydra"})
    cfg = validate(plain, origin)
    cfg.policy, notices = resolve_policy(cfg, origin)
    return cfg, notices


def resolve_policy(cfg: SelectorConfig, origin: Origin) -> tuple[Any, list[str]]:
    """The eval set's own floors beneath the sweep's; floors naming no task of the eval set refused."""
    from selector.sweep.floors import check_floor_tasks
    from selector.tasks.evalset_policy import read_evalset_policy
    from selector.tasks.loader import locate_evalset

    from selector.selection.under_load import floors_under_load_problem

    _validate_policy(cfg, origin)
    folder = locate_evalset(cfg.evalset.path)
    tasks = load_tasks(cfg)[0]
    run_tasks = [t.name for t in tasks]
    all_tasks = run_tasks if cfg.evalset.tasks is None else [t.name for t in evalset_of(cfg.evalset.path, None, 1)[0]]
    policy, notices = check_floor_tasks(cfg.policy, read_evalset_policy(folder), run_tasks, all_tasks,
                                        lambda task: origin.where(f"policy.floors.{task}"), str(cfg.evalset.path))
    if (problem := floors_under_load_problem(policy, cfg.measure.load, tasks)) is not None:
        raise origin.error("policy.floors_under_load", problem)  # a level the load test does not run, ...
    return policy, notices


def _validate_policy(cfg: SelectorConfig, origin: Origin) -> None:
    """A policy that cannot be applied stops the sweep now, naming where the bad value came from."""
    from selector.selection.checks import validate_policy

    try:
        validate_policy(cfg.policy)
    except ConfigError as e:
        raise origin.error(f"policy.{e.field}", e.problem) from None


def plan(config: DictConfig, multirun: bool) -> tuple[list[PlannedVariant], str]:
    """Compose and check every job of the sweep; return them with the sweep's key."""
    from selector.compose import compose_job, given_keys, grid_overrides, origin_of
    from selector.config import to_dict

    jobs = grid_overrides(config) if multirun else [list(config.hydra.overrides.task)]
    user_dirs = tuple(Path(str(e)[len("file://"):]) for e in OmegaConf.select(config, "hydra.searchpath") or []
                      if str(e).startswith("file://"))
    origins: list[Origin] = []
    planned, choices = [], {}
    baselines: dict[str, Any] = {}
    notices: list[str] = []
    checked: set[str] = set()
    for overrides in jobs:
        job, choices = compose_job(config, overrides) if multirun else (config, dict(config.hydra.runtime.choices))
        origins.append(origin_of(overrides, choices, user_dirs))
        cfg, found = job_config_and_notices(job, origins[-1])
        check_precision(cfg, origins[-1])  # a bad precision param stops the sweep here
        notices = notices or found
        _check_command_line_model(cfg, choices.get("model", ""), checked)
        _, ehash = load_tasks(cfg)
        # decided here, once for the sweep (its jobs read it from sweep.json); the worker imports the
        # library and asks again on the device it gets
        ok, why = availability(cfg, load_library=False)
        planned_bytes, _ = planned_weight_bytes(cfg, planned_device(cfg))
        keys = keys_of(cfg, ehash)
        planned.append(PlannedVariant(cfg, overrides, keys.variant, ok, why, keys.evaluation, planned_bytes,
                                      baseline=baseline_precision(cfg, config, baselines)))
    if not planned:
        raise UserError("the sweep has no variants: check hydra.sweeper.params and your overrides")
    from selector.engines import engine_for
    from selector.engines.knobs import check_engine_knobs, setting_of, swept_knobs

    knobs = swept_knobs(p.cfg for p in planned)  # settings of one model x precision are distinct variants
    checked_engines: set[str] = set()
    for p, origin in zip(planned, origins):
        check_engine_knobs(p.cfg, given_keys(p.overrides), knobs)
        p.setting = setting_of(p.cfg, knobs)
        seen = repr((p.cfg.engine, p.cfg.threads))
        if seen not in checked_engines:  # each distinct engine setting once (vLLM's --help takes seconds)
            engine_for(p.cfg.engine).check(p.cfg, origin)
            checked_engines.add(seen)
    adhoc.check_distinct_names(planned)
    check_reference(planned, origins[0])
    check_deploy(planned, origins[0])
    policy_notices(planned[0].cfg, notices)
    power_notices(planned[0].cfg)
    check_load(planned[0].cfg, origins[0], model_contexts(planned))
    prefix_cache_notices(planned)
    check_compare_to(planned[0].cfg)
    experiment = planned[0].cfg.experiment
    return planned, sweep_key(experiment, [p.key for p in planned], to_dict(planned[0].cfg.policy))


def sweep_key(experiment: str, variant_keys: list[str], policy: dict[str, Any]) -> str:
    """The same variants judged under another policy are another sweep (another parent run, with
    its own floors as params); the variants' measurements are still reused."""
    return digest({"experiment": experiment, "variants": sorted(variant_keys), "policy": policy})


def baseline_precision(cfg: SelectorConfig, config: DictConfig, composed: dict[str, Any]) -> Any:
    """The baseline precision's config (composed once per sweep, from conf/ and the user's folders,
    as Hydra composes `precision=NAME` under this sweep) when this variant wants a fidelity
    reference; None otherwise, or when it cannot be composed (the variant then says it has no
    reference, and its own results stand)."""
    from selector.compose import compose_job, precision_from_dict

    name = cfg.baseline_precision
    if not cfg.measure.fidelity or cfg.precision.name == name:
        return None
    if name not in composed:
        try:
            job, _ = compose_job(config, [f"precision={name}"])
            composed[name] = precision_from_dict(OmegaConf.to_container(job.precision, resolve=True))  # type: ignore[arg-type]
        except Exception as e:  # a broken baseline file costs the reference, not the sweep
            import logging

            logging.getLogger("selector.sweep.preflight").warning(
                "fidelity: baseline precision %r cannot be composed (%s); no variant gets a reference", name, e)
            composed[name] = None
    return composed[name]


def _check_command_line_model(cfg: SelectorConfig, choice: str, checked: set[str]) -> None:
    """A model given on the command line (model=path|gguf|hub) that cannot be had is a typo, not a
    variant to skip: stop now, once per distinct model."""
    from selector.config import to_dict

    seen = repr(to_dict(cfg.model))
    if choice in adhoc.ADHOC and seen not in checked:
        adhoc.check(cfg, choice)
        checked.add(seen)


def unavailable_message(planned: list[PlannedVariant]) -> str:
    lines = [f"  - {p.name}: {p.reason}" for p in planned]
    return (
        "No variant of this sweep can run on this machine, so nothing was started and nothing was "
        "written to MLflow:\n" + "\n".join(lines) + "\nRun it on a machine with what is missing "
        "(for hub models: network access to huggingface.co or a local mirror via HF_ENDPOINT; for GPU "
        "sweeps: a CUDA build of torch and a GPU), or pick variants that run here, e.g. "
        "`python -m selector model=smollm2-135m precision=bf16,int8`."
    )


def policy_notices(cfg: SelectorConfig, notices: list[str]) -> list[str]:
    """Log what a person should know about the sweep's floors before it starts: floors set aside,
    and tasks without a floor. (A policy that cannot be applied already stopped the sweep.)"""
    import logging

    notices = list(notices or [])
    tasks = [t.name for t in load_tasks(cfg)[0]]
    if cfg.policy.default_floor is None:
        notices += [f"task '{t}' has no accuracy floor, so it does not constrain the choice "
                    f"(set policy.floors.{t}=0.8 or policy.default_floor)" for t in tasks if t not in cfg.policy.floors]
    for notice in notices:
        logging.getLogger("selector.sweep.preflight").warning(notice)
    return notices


def power_notices(cfg: SelectorConfig) -> list[str]:
    """Warn before anything loads when the policy's rule cannot be met at the eval set's size, or only
    with low power (selection.power: a non-inferiority margin no truly equal variant can be shown
    within, a floor no result can pass), with the margin that can be shown and the items needed. A
    warning, not an error: the sweep's measurements stand, and the report carries the same figures."""
    import logging

    from selector.selection.power import preflight_lines
    from selector.tasks import get_metric

    tasks = {t.name: (len(t.items), get_metric(t.metric).binary) for t in load_tasks(cfg)[0]}
    lines = preflight_lines(cfg.policy, tasks)
    for line in lines:
        logging.getLogger("selector.sweep.preflight").warning(line)
    return lines


def check_load(cfg: SelectorConfig, origin: Origin, contexts: dict[str, int] | None = None) -> None:
    """Load-test settings are checked now, not after every variant's evaluation.
    contexts: model name -> context tokens (model_contexts), for a trace's lengths."""
    load = cfg.measure.load
    if load.enabled or load.capacity:
        from selector.measure.capacity import check_capacity
        from selector.measure.traffic import check_slo, levels_of
        from selector.measure.requests import check_request_file

        check_slo(load.slo)
        check_capacity(load)
        # a bad row, or a trace longer than a model's context, stops it now
        timed = check_request_file(load.requests, load.new_tokens, contexts or {}) if load.requests else False
        if load.enabled and not timed:  # recorded arrivals are a level of their own
            levels_of(load)


def prefix_cache_notices(planned: list[PlannedVariant]) -> list[str]:
    """Warn, once per engine setting, when a load test runs on an engine that cannot keep its
    requests out of each other's cached prompts (engine.prefix_cache=unknown: an attached server or
    a server command whose prefix cache and cache_salt support selector cannot know): repeated
    prompts may then be served from the server's prefix cache (docs/load-testing.md, "Fresh prompts")."""
    import logging

    from selector.engines import engine_for

    lines: list[str] = []
    for p in planned:
        load = p.cfg.measure.load
        if not (load.enabled or load.capacity):
            continue
        engine = engine_for(p.cfg.engine)
        if engine.prefix_cache() != "unknown":
            continue
        line = (f"engine {engine.display_name()}: its prefix cache cannot be isolated (engine.prefix_cache=unknown, "
                "so no cache_salt is sent), so load-test requests may be served from prompts cached by earlier "
                "ones and the prefix-cache hit rates, throughput and capacity may be inflated; set "
                "engine.prefix_cache=salt for a server that takes vLLM's cache_salt, none for one without a "
                "prefix cache")
        if line not in lines:
            lines.append(line)
            logging.getLogger("selector.sweep.preflight").warning(line)
    return lines


def model_contexts(planned: list[PlannedVariant]) -> dict[str, int]:
    """Each model's context in tokens where it is known before anything loads (its config.json or
    GGUF metadata; the engine's own limit when it has a smaller one), for a trace's lengths."""
    from selector.engines import engine_for
    from selector.plan.arch import read_arch

    out: dict[str, int] = {}
    for p in planned:
        cfg = p.cfg
        if not cfg.measure.load.requests or not (cfg.measure.load.enabled or cfg.measure.load.capacity):
            continue
        facts = read_arch(cfg.model, Path(cfg.cache_dir))
        known = [x for x in (facts.context_length if facts else None, engine_for(cfg.engine).context_limit()) if x]
        if known:
            out[cfg.model.name] = min([*known, out.get(cfg.model.name, min(known))])
    return out


def check_deploy(planned: list[PlannedVariant], origin: Origin) -> None:
    """policy.deploy_engine takes one spelling per engine (selector.engines.check_deploy_engine): a
    different one (transformers for hf, VLLM) stops the sweep here with a did-you-mean, rather than
    scoring one engine's answers and warning about another's latency."""
    from selector.engines import check_deploy_engine, engine_for

    problem = check_deploy_engine(planned[0].cfg.policy.deploy_engine, [engine_for(p.cfg.engine) for p in planned])
    if problem:
        raise origin.error("policy.deploy_engine", problem)


def check_reference(planned: list[PlannedVariant], origin: Origin) -> None:
    """non_inferiority compares every variant with the reference: a sweep with no other variant
    that can run has nothing to compare, and would recommend the reference by default."""
    cfg = planned[0].cfg
    runnable = [p.name for p in planned if p.available]
    if cfg.policy.rule != "non_inferiority" or len(runnable) != 1:
        return
    raise origin.error("policy.rule", f"non_inferiority compares each variant with the reference (the largest "
                       f"model at its highest precision), but {runnable[0]} is the only variant of this sweep that "
                       "can run: add another (e.g. precision=bf16,int8) or use rule=point")


def check_compare_to(cfg: SelectorConfig) -> None:
    """compare_to must name a sweep that can be read now, not only when this one ends."""
    if not cfg.compare_to:
        return
    from selector.sweep.comparison import load_side

    try:
        load_side(str(cfg.compare_to), cfg.tracker.tracking_uri, cfg.output_dir)
    except UserError as e:
        raise ConfigError("command line", "compare_to", str(e)) from None


def reference_variant(planned: list[PlannedVariant]) -> str | None:
    """The variant selection will compare against: the largest model at its highest precision."""
    from selector.selection.precision import precision_bits, reference_name

    return reference_name([(p.name, p.cfg.model.params_b * 1e9, precision_bits(p.cfg.precision.name, p.cfg.precision.bits))
                           for p in planned if p.available])
