"""Which code runs a variant's evaluation and measurements for each `engine.kind`, as the precision
backends are registered: a name maps to a function imported only when its engine is used.

Each takes the variant's VariantRun (selector.sweep.pipeline), the resolved source, the loaded
model, the tasks and the device, after the model is loaded and before its record is written.
"""

from __future__ import annotations

from selector.registry import Registry

ENGINE_RUNS: Registry = Registry("engine")
ENGINE_RUNS.register("hf", "selector.sweep.inprocess_run:run_inprocess")  # transformers in this process
ENGINE_RUNS.register("openai", "selector.sweep.served_run:run_served")  # an OpenAI-compatible server
