"""selector: pick the smallest LLM size x precision that still meets your accuracy floors.

From Python (selector/api.py, docs/api.md):

    import selector
    result = selector.run(["model=smollm2-135m", "precision=bf16,int8"])
    result.winner, result.records, result.report_paths, result.select({"floors": {"code": 0.6}})
    selector.load("outputs/sweeps/<time>")  # or an MLflow parent run id
    record = selector.evaluate(model="smollm2-135m", precision="int8")  # one variant, no Hydra app

The command line is `selector` (or `python -m selector`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SweepResult", "evaluate", "latest_sweep", "load", "run"]


def __getattr__(name: str) -> Any:
    # Imported on first use: `import selector.config` in a worker stays as light as it was.
    if name in __all__:
        from selector import api

        return getattr(api, name)
    raise AttributeError(f"module 'selector' has no attribute {name!r}")
