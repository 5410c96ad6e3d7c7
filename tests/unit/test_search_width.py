"""selector.sweep.width on hand-built configs: each shipped launcher's width and where it came from.
The Ray part that reads a real cluster is in tests/integration/test_launchers_ray.py."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from selector.sweep.width import HINT, joblib_width, ray_width, search_width, with_autoscaler

BASIC = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
SLURM = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
RAY = "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
GIB = 2**30


def config(launcher: dict[str, Any], workers: int | None = None) -> Any:
    return OmegaConf.create({"search": {"workers": workers}, "hydra": {"launcher": launcher}})


def test_search_workers_wins_over_any_launcher() -> None:
    width = search_width(config({"_target_": SLURM, "array_parallelism": 16}, workers=3))
    assert (width.workers, width.source, width.hint) == (3, "search.workers=3", "")


def test_the_local_launcher_runs_one_at_a_time() -> None:
    width = search_width(config({"_target_": BASIC}))
    assert (width.workers, width.source, width.hint) == (1, "local launcher: one variant at a time", "")


def test_joblib_is_its_n_jobs() -> None:
    assert search_width(config({"_target_": JOBLIB, "n_jobs": 2})).workers == 2
    assert joblib_width(4) == joblib_width(4, cpus=64)
    assert (joblib_width(4).workers, joblib_width(4).source) == (4, "joblib: n_jobs=4")


@pytest.mark.parametrize(("n_jobs", "cpus", "workers"), [(-1, 8, 8), (-2, 8, 7), (-8, 8, 1), (-20, 8, 1), (None, 8, 1)])
def test_joblib_negative_n_jobs_counts_from_the_cpus(n_jobs: int | None, cpus: int, workers: int) -> None:
    assert joblib_width(n_jobs, cpus=cpus).workers == workers


def test_joblib_minus_one_says_how_many_cpus() -> None:
    assert joblib_width(-1, cpus=2).source == "joblib: n_jobs=-1 of 2 CPUs"
    import joblib

    assert search_width(config({"_target_": JOBLIB, "n_jobs": -1})).workers == joblib.cpu_count()


def test_slurm_is_its_array_parallelism() -> None:
    width = search_width(config({"_target_": SLURM, "array_parallelism": 16}))
    assert (width.workers, width.source) == (16, "SLURM: array_parallelism=16")


def test_an_unknown_launcher_runs_one_at_a_time_and_says_how_to_change_it() -> None:
    width = search_width(config({"_target_": "my_plugins.KubeLauncher", "n_jobs": 8}))
    assert (width.workers, width.hint) == (1, HINT)
    assert width.source == "launcher my_plugins.KubeLauncher: its width is unknown"
    assert "search.workers=N" in width.hint


def test_ray_divides_the_cluster_by_what_a_variant_asks() -> None:
    width = ray_width({"CPU": 2.0, "memory": 8.0 * GIB}, {"num_cpus": 1, "num_gpus": 0})
    assert (width.workers, width.source, width.hint) == (2, "Ray cluster: 2 CPUs / 1 CPU per variant", "")


def test_ray_takes_the_scarcest_resource() -> None:
    """ray_gpus on 16 GPUs and 48 CPUs: CPUs allow 12, GPUs 16, memory 6."""
    total = {"CPU": 48.0, "GPU": 16.0, "memory": 200.0 * GIB}
    width = ray_width(total, {"num_cpus": 4, "num_gpus": 1, "memory": 32 * GIB})
    assert width.workers == 6
    assert width.source == ("Ray cluster: 48 CPUs / 4 CPUs per variant, 16 GPUs / 1 GPU per variant, "
                            "200 GiB memory / 32 GiB memory per variant")


def test_ray_custom_resources_and_the_default_cpu_ask() -> None:
    width = ray_width({"CPU": 8.0, "accel": 3.0}, {"resources": {"accel": 1}})  # no num_cpus: Ray asks 1
    assert width.workers == 3 and "8 CPUs / 1 CPU per variant" in width.source


def test_ray_fractional_asks_round_down() -> None:
    assert ray_width({"CPU": 3.0, "GPU": 1.0}, {"num_cpus": 0.5, "num_gpus": 0.3}).workers == 3


def test_ray_a_cluster_too_small_for_one_variant_still_gets_one_and_a_warning() -> None:
    width = ray_width({"CPU": 8.0}, {"num_cpus": 4, "num_gpus": 1})
    assert width.workers == 1 and width.source.endswith("0 GPUs / 1 GPU per variant")
    assert "less GPU than one variant asks" in width.hint


def test_ray_config_reads_the_launchers_remote_and_init() -> None:
    """search_width hands `hydra.launcher.ray.init` to whatever counts the cluster (the integration
    test passes the real one); here a cluster given by hand."""
    seen = []
    launcher = {"_target_": RAY,
                "ray": {"init": {"address": "10.0.0.1:6379"}, "remote": {"num_cpus": 4, "num_gpus": 1}}}

    def cluster(init: Any) -> tuple[dict[str, float], str]:
        seen.append(dict(init))
        return {"CPU": 64.0, "GPU": 8.0}, "Ray cluster"

    width = search_width(config(launcher), ray_resources=cluster)
    assert width.workers == 8 and seen == [{"address": "10.0.0.1:6379"}]


def shipped(*overrides: str) -> Any:
    from hydra import compose, initialize_config_dir

    from selector.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return search_width(compose("config", overrides=list(overrides), return_hydra_config=True))


def test_the_shipped_presets_as_composed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launchers' real _target_ names and defaults, through the project's own presets."""
    assert shipped() == search_width(config({"_target_": BASIC}))
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    import selector.sweep.gpu_pool  # noqa: F401  registers ${selector_gpu_count:}, as the preset's callback does

    monkeypatch.setenv("SELECTOR_GPUS", "0,1,2")
    assert (shipped("hydra/launcher=joblib_gpus").workers, shipped("hydra/launcher=joblib_gpus").source) == (
        3, "joblib: n_jobs=3")
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    assert shipped("hydra/launcher=slurm") == search_width(config({"_target_": SLURM, "array_parallelism": 16}))
    assert shipped("hydra/launcher=slurm", "hydra.launcher.array_parallelism=4").workers == 4
    assert shipped("hydra/launcher=slurm", "search.workers=2").source == "search.workers=2"


def test_ray_counts_what_the_autoscaler_may_grow_to() -> None:
    """A head of 8 CPUs whose autoscaler may add up to 16 GPUs: waves of 16 ask it to grow."""
    total, label = with_autoscaler({"CPU": 8.0, "memory": 30.0 * GIB}, {"CPU": 256, "GPU": 16, "memory": 0})
    assert label == "Ray autoscaler's maximum" and total == {"CPU": 256.0, "GPU": 16.0, "memory": 30.0 * GIB}
    width = ray_width(total, {"num_cpus": 4, "num_gpus": 1}, label)
    assert width.workers == 16 and width.source.startswith("Ray autoscaler's maximum: 256 CPUs / 4 CPUs per variant")


def test_ray_without_a_known_finite_maximum_counts_the_nodes_there_now() -> None:
    import sys

    now = {"CPU": 2.0}
    assert with_autoscaler(now, None) == (now, "Ray cluster")  # no autoscaler (a `ray start` cluster)
    assert with_autoscaler(now, {"CPU": sys.maxsize}) == (now, "Ray cluster")  # an unbounded node group
    assert with_autoscaler(now, {"CPU": 1}) == (now, "Ray cluster")  # the cluster is already larger
