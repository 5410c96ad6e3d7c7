"""`hydra/sweeper=selector`: the grid, or an adaptive search through it (selector/sweep/sweeper.py).

conf/config.yaml selects it. Only the plugin shell lives here, where Hydra requires plugins to be.
"""

# No `from __future__ import annotations` here: Hydra imports plugins in a way that leaves the
# module out of sys.modules while it runs, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig


@dataclass
class SelectorSweeperConf:
    _target_: str = "hydra_plugins.selector_sweeper.selector_sweeper.SelectorSweeper"
    params: Optional[Dict[str, str]] = None  # the grid's axes, as for Hydra's basic sweeper


ConfigStore.instance().store(group="hydra/sweeper", name="selector", node=SelectorSweeperConf, provider="selector")


class SelectorSweeper(Sweeper):
    def __init__(self, params: Optional[Dict[str, str]] = None) -> None:
        self.params = params or {}
        self.runner: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        from selector.sweep.sweeper import SweepRunner

        launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)
        self.runner = SweepRunner(config, launcher)

    def sweep(self, arguments: List[str]) -> Any:
        return self.runner.sweep(arguments)
