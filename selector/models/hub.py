"""kind: hub — a Hugging Face Hub repo id (+ revision). Nothing is downloaded when resolving:
transformers fetches (or reads from its cache) at load time, honouring HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE).

`check_available` answers within a few seconds whether the hub (or HF_ENDPOINT's mirror) can serve
the repo, so a sweep can skip such variants up front instead of hanging on a dead network.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlparse

from selector.errors import UserError
from selector.models.resolved import ResolvedModel
from selector.models.sources import SourceContext

TIMEOUT_S = 5.0


def hub_offline() -> str | None:
    """The setting that puts the hub offline (e.g. "HF_HUB_OFFLINE=1"), or None when online.

    Read as huggingface_hub reads it (HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE, with its own true
    values), but at each call rather than once at import, so a setting made after startup counts too."""
    from huggingface_hub.constants import ENV_VARS_TRUE_VALUES

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(name)
        if value:  # the first one set decides, as in huggingface_hub
            return f"{name}={value}" if value.upper() in ENV_VARS_TRUE_VALUES else None
    return None


def hub_host() -> str:
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    return urlparse(endpoint).hostname or endpoint


def cached_file(repo_id: str, filename: str, revision: str | None) -> str | None:
    """Path of a file of this repo in the local Hugging Face cache, without the network."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, filename, revision=revision)
    return found if isinstance(found, str) else None


def repo_id_of(ctx: SourceContext) -> str:
    if not ctx.source.repo_id:
        raise ctx.error("repo_id", f"kind '{ctx.source.kind}' needs a repo_id, e.g. Qwen/Qwen2.5-7B-Instruct")
    return ctx.source.repo_id


class HubSource:
    def resolve(self, ctx: SourceContext) -> ResolvedModel:
        repo_id, revision = repo_id_of(ctx), ctx.source.revision
        offline = hub_offline()
        if offline and cached_file(repo_id, "config.json", revision) is None:
            raise UserError(
                f"model {ctx.model.name}: {repo_id}{'@' + revision if revision else ''} is not in the local "
                f"Hugging Face cache and {offline} is set: download it on a connected machine first "
                f"(huggingface-cli download), or unset {offline.split('=')[0]}"
            )
        return ResolvedModel(
            name=ctx.model.name, path=repo_id, revision=revision, is_local=False,
            prequantized=ctx.prequantized, kind="hub", trust_remote_code=ctx.model.trust_remote_code,
            allow_pickle=ctx.model.allow_pickle,
            manifest={"source": {"kind": "hub", "repo_id": repo_id, "revision": revision}},
        )

    def check_available(self, ctx: SourceContext) -> tuple[bool, str]:
        repo_id, revision = repo_id_of(ctx), ctx.source.revision
        return hub_repo_available(repo_id, revision, ctx.model.allow_pickle)


def hub_repo_available(repo_id: str, revision: str | None, allow_pickle: bool,
                       needed_file: str = "config.json") -> tuple[bool, str]:
    in_cache = cached_file(repo_id, needed_file, revision) is not None
    offline = hub_offline()
    if offline:
        if in_cache:
            return True, f"{repo_id} is in the local Hugging Face cache ({offline})"
        return False, f"needs the Hugging Face Hub: {offline} is set and {repo_id} is not in the local cache"
    ok, why, files = _ask_hub(repo_id, revision)
    if not ok:
        if in_cache:
            return True, f"{why}; using the copy in the local Hugging Face cache"
        return False, why
    if files is not None and not allow_pickle and needed_file == "config.json" \
            and not any(f.endswith(".safetensors") for f in files):
        return False, f"{repo_id} has no safetensors weights (pickle checkpoints are refused unless allow_pickle: true)"
    return True, f"{repo_id} on {hub_host()}"


def _ask_hub(repo_id: str, revision: str | None) -> tuple[bool, str, list[str] | None]:
    """(ok, reason, file names) from one model_info call, bounded by TIMEOUT_S even if the
    network stalls: the call runs in a daemon thread that is abandoned when the time is up."""
    result: dict[str, Any] = {}

    def call() -> None:
        try:
            from huggingface_hub import HfApi

            api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)  # read now, not at import
            info = api.model_info(repo_id, revision=revision, timeout=TIMEOUT_S)
            result["files"] = [s.rfilename for s in (info.siblings or [])]
        except Exception as e:  # classified below; any failure means "not available"
            result["error"] = e

    thread = threading.Thread(target=call, daemon=True, name="hub-check")
    thread.start()
    thread.join(TIMEOUT_S + 1.0)
    host = hub_host()
    if thread.is_alive():
        return False, f"cannot reach {host} (no answer within {TIMEOUT_S:.0f} s)", None
    error = result.get("error")
    if error is None:
        return True, "", result.get("files")
    return False, _describe(error, repo_id, revision, host), None


def _describe(error: Exception, repo_id: str, revision: str | None, host: str) -> str:
    names = {cls.__name__ for cls in type(error).__mro__}
    if "GatedRepoError" in names:
        return f"{repo_id} is gated: accept its licence on {host} and set HF_TOKEN"
    if "RepositoryNotFoundError" in names:
        return f"{repo_id} was not found on {host} (a typo, or a private repo without HF_TOKEN)"
    if "RevisionNotFoundError" in names:
        return f"{repo_id} has no revision {revision!r} on {host}"
    if "TimeoutException" in names or "Timeout" in names:
        return f"cannot reach {host} (no answer within {TIMEOUT_S:.0f} s)"
    if names & {"ConnectError", "ConnectionError", "NetworkError", "TransportError", "OSError"}:
        return f"cannot reach {host} (connection error within {TIMEOUT_S:.0f} s)"
    return f"cannot query {repo_id} on {host}: {type(error).__name__}: {error}"
