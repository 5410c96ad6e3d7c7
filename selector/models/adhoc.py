"""Models given on the command line, without a YAML file of their own:

    selector model=path model.path=/models/my-7b          a transformers folder (safetensors)
    selector model=gguf model.path=/models/my-7b.gguf     a GGUF file (converted once to safetensors)
    selector model=hub  model.repo_id=org/name            a Hugging Face Hub repo

selector/conf/model/{path,gguf,hub}.yaml copy the shorthand into `source` and name the model after
the folder, file or repo (selector/resolvers.py) (`model.name=...` overrides it). Such a model went through no review, so
the sweep checks it before anything starts and stops with one line naming the path and the
problem, where an unavailable model from a config file is only skipped.
"""

from __future__ import annotations

from pathlib import Path

from selector.errors import UserError
from selector.resolvers import absolute

ADHOC = {"path": "model.path", "gguf": "model.path", "hub": "model.repo_id"}  # choice -> the key the user sets


def check(cfg, choice: str) -> None:  # type: ignore[no-untyped-def]
    """Stop now, in one line, when a model given on the command line cannot be had here."""
    from selector import models

    key = ADHOC[choice]
    given = cfg.model.path if key == "model.path" else cfg.model.repo_id
    ok, why = models.check_available(cfg.model, cache_dir=Path(cfg.cache_dir))
    if not ok:
        why = _one_line(why)
        if key == "model.path":  # the reason names the path itself: say it once
            why = why.removeprefix(f"{absolute(given)}: ")
        raise UserError(f"command line: model={choice} {key}={given}: {why}")
    if cfg.model.prompt_style == "chat" and choice in ("path", "gguf") and not has_chat_template(Path(absolute(given))):
        raise UserError(f"command line: model={choice} {key}={given}: the model has no chat template; "
                        "add model.prompt_style=plain (few-shot completion prompts, as for a base model)")


def has_chat_template(path: Path) -> bool:
    """Whether a model folder or GGUF file carries a chat template (answers True when unsure)."""
    import json

    if path.is_dir():
        if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
            return True
        try:
            return bool(json.loads((path / "tokenizer_config.json").read_text()).get("chat_template"))
        except (OSError, ValueError):
            return False
    try:
        from gguf import GGUFReader

        return "tokenizer.chat_template" in GGUFReader(str(path)).fields
    except Exception:  # an unreadable file was already reported by the availability check
        return True


def check_distinct_names(planned: list) -> None:  # type: ignore[type-arg]
    """Two different models under one name would share a job folder and a row of the report."""
    from selector.config import to_dict

    sources: dict[str, dict] = {}  # type: ignore[type-arg]
    for p in planned:
        source = to_dict(p.cfg.model.source)
        other = sources.setdefault(p.cfg.model.name, source)
        if other != source:
            where = [s.get("path") or s.get("repo_id") or s.get("kind") for s in (other, source)]
            raise UserError(
                f"command line: two different models are both named '{p.cfg.model.name}' ({where[0]} and "
                f"{where[1]}): give the folders or files distinct names, or run them one at a time with "
                "model.name=<a name of your own>")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
