"""The adaptive search's width: how many variants it hands the launcher at once, and why that many.

`search.workers=N` wins. Otherwise each launcher the project ships says how many variants it runs
at once: joblib its n_jobs (-1: every CPU, as joblib counts them), SLURM its array_parallelism,
Ray the cluster's resources (or its autoscaler's maximum, when Ray knows one) divided by what each
variant asks in `hydra.launcher.ray.remote` (the fewest over the resources asked), Hydra's local
launcher one. A launcher this module does not know gets 1, and a hint on how to set it. The source
goes to the console line and the report.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

HINT = "set search.workers=N to run N variants at a time"


@dataclass(frozen=True)
class Width:
    workers: int
    source: str  # where the number came from, e.g. "Ray cluster: 2 CPUs / 1 CPU per variant"
    hint: str = ""  # a warning for the console: the number is a guess


def search_width(config: DictConfig,
                 ray_resources: Callable[[Any], tuple[Mapping[str, float], str]] | None = None) -> Width:
    """The width for this sweep's config (the composed one, with its `hydra` node)."""
    explicit = OmegaConf.select(config, "search.workers")
    if explicit:
        return Width(int(explicit), f"search.workers={explicit}")
    launcher = OmegaConf.select(config, "hydra.launcher") or {}
    target = str(launcher.get("_target_") or "")
    kind = target.rsplit(".", 1)[-1]
    if kind == "BasicLauncher":
        return Width(1, "local launcher: one variant at a time")
    if kind == "JoblibLauncher":
        return joblib_width(launcher.get("n_jobs"))
    if "submitit" in target and kind in ("SlurmLauncher", "LocalLauncher"):
        parallel = launcher.get("array_parallelism")
        name = "SLURM" if kind == "SlurmLauncher" else "submitit (local)"
        return Width(max(1, int(parallel or 1)), f"{name}: array_parallelism={parallel}")
    if kind == "RayLauncher":
        ray = launcher.get("ray") or {}
        total, label = (ray_resources or cluster_resources)(ray.get("init"))
        return ray_width(total, ray.get("remote") or {}, label)
    return Width(1, f"launcher {target or '?'}: its width is unknown", HINT)


def joblib_width(n_jobs: Any, cpus: int | None = None) -> Width:
    """joblib's own reading of n_jobs: None is 1, -1 every CPU, -2 all but one, and so on."""
    if n_jobs is None:
        return Width(1, "joblib: n_jobs unset")
    n = int(n_jobs)
    if n > 0:
        return Width(n, f"joblib: n_jobs={n}")
    cpus = cpus or _cpu_count()
    return Width(max(1, cpus + 1 + n), f"joblib: n_jobs={n} of {_count(cpus, 'CPU')}")


def _cpu_count() -> int:
    try:
        from joblib import cpu_count  # what joblib itself will use (cgroup- and affinity-aware)

        return int(cpu_count())
    except ImportError:
        return os.cpu_count() or 1


# hydra.launcher.ray.remote key -> Ray's resource name; a Ray task asks 1 CPU unless told otherwise.
RAY_ASKS = {"num_cpus": ("CPU", 1.0), "num_gpus": ("GPU", 0.0), "memory": ("memory", 0.0)}


def ray_width(total: Mapping[str, float], remote: Mapping[str, Any], label: str = "Ray cluster") -> Width:
    """How many variants fit at once: for each resource a variant asks, the cluster's total over
    the ask (rounded down); the fewest of those, at least 1."""
    asks: dict[str, float] = {}
    for key, (resource, default) in RAY_ASKS.items():
        value = remote.get(key)
        asks[resource] = float(default if value is None else value)
    for resource, value in (remote.get("resources") or {}).items():
        asks[str(resource)] = float(value)
    asks = {r: a for r, a in asks.items() if a > 0}
    if not asks:  # num_cpus: 0 and nothing else: Ray would start every task at once
        return Width(1, "Ray: each variant asks for no resource", HINT)
    fits = {r: math.floor(float(total.get(r, 0.0)) / a + 1e-9) for r, a in asks.items()}
    parts = [f"{_amount(r, total.get(r, 0.0), plural=True)} / {_amount(r, a)} per variant" for r, a in asks.items()]
    short = [r for r, n in fits.items() if n < 1]
    hint = (f"the Ray cluster has less {', '.join(short)} than one variant asks: its tasks wait until it grows"
            if short else "")
    return Width(max(1, min(fits.values())), f"{label}: " + ", ".join(parts), hint)


def _amount(resource: str, value: float, plural: bool = False) -> str:
    if resource == "memory":
        return f"{value / 2**30:.3g} GiB memory"
    name = resource if resource in ("CPU", "GPU") else f"'{resource}'"
    return _count(value, name) if plural or value != 1 else f"1 {name}"


def _count(value: float, name: str) -> str:
    number = f"{value:g}"
    return f"{number} {name}" + ("" if value == 1 or name.startswith("'") else "s")


def cluster_resources(init: Any) -> tuple[dict[str, float], str]:
    """The resources of the Ray cluster the launcher will use, and what they are ("Ray cluster" now,
    or what its autoscaler may grow it to). Ray is reached the way the launcher reaches it
    (hydra-ray-launcher's own start_ray with `hydra.launcher.ray.init`): joining `address`, or,
    with none, whatever ray.init() finds or starts in this process, which the launcher would do
    before its first job anyway. The launcher then finds Ray running and uses this connection."""
    import ray
    from hydra_plugins.hydra_ray_launcher._launcher_util import start_ray

    start_ray(init if isinstance(init, DictConfig) else OmegaConf.create(dict(init or {})))
    now = {str(k): float(v) for k, v in ray.cluster_resources().items()}
    return with_autoscaler(now, _autoscaler_maximum())


def _autoscaler_maximum() -> dict[str, float] | None:
    """The autoscaler's maximum per resource from its cluster config (what Ray Train and Ray Data
    read, through the same private call); None without an autoscaler, e.g. a `ray start` cluster."""
    try:
        from ray._private.state import state

        return state.get_max_resources_from_cluster_config()
    except Exception:  # a private API: a Ray without it counts the nodes there now
        return None


def with_autoscaler(now: Mapping[str, float], maximum: Mapping[str, float] | None) -> tuple[dict[str, float], str]:
    """Today's resources, raised to the autoscaler's maximum where it names a larger finite one
    (Ray reports an unbounded node group as sys.maxsize: that says nothing about how many fit)."""
    bounded = {str(k): float(v) for k, v in (maximum or {}).items() if 0 < v < sys.maxsize}
    if not any(v > now.get(k, 0.0) for k, v in bounded.items()):
        return dict(now), "Ray cluster"
    return {**now, **{k: max(v, now.get(k, 0.0)) for k, v in bounded.items()}}, "Ray autoscaler's maximum"
