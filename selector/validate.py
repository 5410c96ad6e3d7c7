"""A composed config checked against the schema (selector.config): merged into its dataclasses,
unknown keys refused, and the numbers its types cannot restrict checked, each error naming the file
and line the value came from (selector.origin) before any model loads."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from selector.config import EngineConfig, SelectorConfig
from selector.origin import Origin

if TYPE_CHECKING:
    from selector.engines.spec import Knob, Range


def validate(cfg: DictConfig, origin: Origin = Origin()) -> SelectorConfig:
    """Merge a composed config into the schema; raise ConfigError naming file, line and field
    (origin: where its values came from)."""
    schema = OmegaConf.structured(SelectorConfig)
    try:
        merged = OmegaConf.merge(schema, cfg)
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", "") or ""
        raise origin.error(key, _first_line(e)) from None
    assert isinstance(obj, SelectorConfig)
    obj.engine = typed_engine(obj.engine, origin)
    unknown = _unknown_keys(obj)
    if unknown:
        key, cls = unknown
        known = ", ".join(f.name for f in dataclasses.fields(cls))
        raise origin.error(key, f"unknown key (known in {cls.__name__}: {known})")
    for key, ok, rule in _RANGES:
        value = _get(obj, key)
        if value is not None and not ok(value):
            raise origin.error(key, f"must be {rule}, got {value!r}")
    return obj


# Numbers the schema's types cannot restrict: (field, test, what it must be). Checked before anything loads.
_RANGES: tuple[tuple[str, Any, str], ...] = (
    ("threads", lambda v: v >= 1, "a positive number of threads (or null for all cores)"),
    ("time_limit_s", lambda v: v > 0, "a positive number of seconds (or null for no limit)"),
    ("memory_limit_gb", lambda v: v > 0, "a positive number of GB (or null for no limit)"),
    ("evalset.limit", lambda v: v >= 1, "at least 1 item per task (or null for all)"),
    ("calibration.num_samples", lambda v: v >= 1, "at least 1"),
    ("calibration.seq_len", lambda v: v >= 1, "at least 1"),
    ("measure.latency.repeats", lambda v: v >= 1, "at least 1"),
    ("measure.latency.warmup", lambda v: v >= 0, "0 or more"),
    ("measure.latency.min_repeats", lambda v: v >= 1, "at least 1"),
    ("measure.latency.precision", lambda v: 0 < v < 1, "a fraction in (0, 1) (0.02 = +-2%), or null for every repeat"),
    ("measure.latency.new_tokens", lambda v: v >= 1, "at least 1"),
    ("measure.throughput.repeats", lambda v: v >= 1, "at least 1"),
    ("measure.throughput.new_tokens", lambda v: v >= 1, "at least 1"),
    ("measure.noise_floor.repeats", lambda v: v >= 0, "0 or more"),
    ("search.strategy", lambda v: v in ("adaptive", "grid"), "adaptive or grid (search=adaptive|grid)"),
    ("search.alpha", lambda v: 0 < v < 0.5, "a probability strictly between 0 and 0.5"),
    ("search.round_size", lambda v: v >= 1, "at least 1 item"),
    ("search.prune_margin", lambda v: v >= 0, "0 or more (a fraction: 0.05 = 5%)"),
    ("search.sibling_margin", lambda v: 0 <= v <= 1, "a fraction in [0, 1] (0.15 = 15 points), or null for off"),
    ("search.workers", lambda v: v >= 1, "at least 1 (or null: as many as the launcher runs at once)"),
    ("measure.load.time_scale", lambda v: v > 0, "a positive factor (0.5 replays twice as fast)"),
    ("measure.load.capacity_start_rps", lambda v: v > 0, "a positive rate in requests/s"),
    ("measure.load.capacity_min_rps", lambda v: v > 0, "a positive rate in requests/s"),
    ("measure.load.capacity_tolerance", lambda v: 0 < v < 1, "a fraction strictly between 0 and 1"),
    ("measure.load.capacity_confidence", lambda v: 0.5 <= v < 1, "a probability in [0.5, 1)"),
    ("measure.load.capacity_max_steps", lambda v: v >= 2, "at least 2"),
    ("measure.load.capacity_repeats", lambda v: v >= 1, "at least 1 run (2 or more give an interval)"),
    ("measure.load.capacity_on", lambda v: v in ("rate", "concurrency", "both"), "rate, concurrency or both"),
    ("measure.load.capacity_start_concurrency", lambda v: v >= 1, "at least 1 request in flight"),
    ("measure.load.capacity_probe_s", lambda v: v > 0, "a positive number of seconds"),
    ("measure.load.capacity_warmup_s", lambda v: v >= 0, "0 or more seconds"),
    ("measure.load.capacity_probe_requests", lambda v: v >= 1, "at least 1 request"),
    ("measure.load.confirm_s", lambda v: v >= 0, "0 or more seconds (0: no confirmation run)"),
    ("policy.traffic_rps", lambda v: v > 0, "a positive rate in requests/s"),
    ("policy.cost_per_hour", lambda v: v > 0, "a positive price per machine-hour"),
)


def typed_engine(data: Any, origin: Origin = Origin()) -> EngineConfig:
    """The engine config as its kind's own dataclass (selector/engines): a setting the kind does not
    have is named with the kind that has it, or a did-you-mean; its numbers checked as above."""
    from selector.engines import engine_class, unknown_key, upgrade
    from selector.registry import UnknownNameError

    if dataclasses.is_dataclass(data):  # typed already (a kind's config)
        return cast(EngineConfig, data)
    if isinstance(data, DictConfig):
        data = cast("dict[str, Any]", OmegaConf.to_container(data, resolve=True))
    data = upgrade(dict(data))
    kind = str(data.get("kind", "hf"))
    try:
        cls = engine_class(kind)
    except UnknownNameError as e:
        raise origin.error("engine.kind", str(e)) from None
    unknown = unknown_key(kind, data)
    if unknown:
        raise origin.error(f"engine.{unknown[0]}", unknown[1])
    try:
        # a structured config made from a dataclass converts back to an instance of it
        obj = cast(EngineConfig, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls.Config), data)))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", "") or ""
        raise origin.error(f"engine.{key}" if key else "engine", _first_line(e)) from None
    rules: tuple[Range | Knob, ...] = (*cls.ranges, *(r for r in cls.knobs if r.key.startswith("engine.")))
    for rule in rules:
        key = rule.key.removeprefix("engine.")
        value = _get(obj, key)
        if value is not None and not rule.ok(value):
            raise origin.error(f"engine.{key}", f"must be {rule.rule}, got {value!r}")
    return obj


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _unknown_keys(obj: Any, prefix: str = "") -> tuple[str, type] | None:
    """The first key a dataclass node carries beyond its fields ('+key=value' lets Hydra add one)."""
    names = {f.name for f in dataclasses.fields(obj)}
    for key in vars(obj):
        if key not in names:
            return f"{prefix}{key}", type(obj)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            found = _unknown_keys(value, f"{prefix}{f.name}.")
            if found:
                return found
    return None


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
