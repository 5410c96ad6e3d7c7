"""OmegaConf resolvers the packaged configs use, registered when selector.config is imported (in the
launching process and in every job, wherever a launcher runs it).

  ${selector_model_name:REF}  a readable model name from a folder, a .gguf file or an org/name repo id
  ${selector_abspath:PATH}    PATH made absolute against the working directory
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def model_name(ref: str, key: str = "model.path") -> str:
    """A readable name from a folder, a .gguf file or an org/name repo id: its last part. `key`: the
    setting `ref` comes from, named when it is not set."""
    _given(ref, key)
    text = str(ref).rstrip("/\\")
    last = text.replace("\\", "/").rsplit("/", 1)[-1] if "/" in text else text
    if last in ("", ".", ".."):
        last = Path(os.path.abspath(os.path.expanduser(text or "."))).name
    last = re.sub(r"\.gguf$", "", last, flags=re.IGNORECASE)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", last).strip("-.") or "model"


def absolute(path: str, key: str = "path") -> str:
    """A path as the variant key and the worker see it: absolute, so the same relative path typed in
    two folders is two models (resolved after a remote job has changed to the launch folder)."""
    _given(path, key)
    return os.path.abspath(os.path.expanduser(str(path)))


def register() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("selector_model_name", model_name, replace=True)
    OmegaConf.register_new_resolver("selector_abspath", absolute, replace=True)


def _given(value: object, key: str) -> None:
    if value is None or str(value).strip() == "":
        example = "org/name" if key.endswith("repo_id") else "/path/to/it"
        raise ValueError(f"{key} is not set: add {key}={example} to the command line")
