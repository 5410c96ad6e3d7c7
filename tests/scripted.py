"""engine=scripted for the tests of what is not about the model (the search, the policy flow, the
faults, the launchers, the tracking server): a sweep without a model, in seconds.

`write_scripted_engine` writes a user's engine config next to the model configs, as a user would
(conf/engine/<name>.yaml over the packaged scripted.yaml); a test then adds `engine=<name>`. The
default answers like the tiny random model the tests used before (tests/tiny.py): sentiment right
about half the time, every other task wrong, so the default floors fail every variant and floors of
0 pass them all.
"""

from __future__ import annotations

import json
from pathlib import Path

ENGINE = "scripted-tiny"
LIKE_THE_TINY_MODEL = {"tiny": {"sentiment": 0.5}}


def write_scripted_engine(conf_dir: Path, name: str = ENGINE, accuracy: dict[str, dict[str, float]] | None = None,
                          default_accuracy: float = 0.0, **settings: object) -> Path:
    """conf/engine/<name>.yaml: engine=scripted with these accuracies ({"model/precision" | precision |
    model: {task: probability}}) and settings."""
    path = Path(conf_dir) / "engine" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["defaults: [scripted, _self_]",
             f"accuracy: {json.dumps(LIKE_THE_TINY_MODEL if accuracy is None else accuracy)}",
             f"default_accuracy: {default_accuracy}", *(f"{k}: {json.dumps(v)}" for k, v in settings.items())]
    path.write_text("\n".join(lines) + "\n")
    return path
