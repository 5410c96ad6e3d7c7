"""What a result was measured on: hardware, library versions, threads, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

LIBRARIES = (
    "selector", "torch", "transformers", "accelerate", "bitsandbytes", "gptqmodel", "llmcompressor",
    "compressed-tensors", "torchao", "optimum", "mlflow", "hydra-core", "datasets",
)


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        version = selector_version() if name == "selector" else _installed(name)
        if version is not None:
            out[name] = version
    return out


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


PACKAGE_DIR = Path(__file__).resolve().parents[1]  # selector/


def selector_version() -> str | None:
    """The version of the installed `selector` distribution, but only when that distribution IS the
    code running now: a wheel whose files are these, or an editable install of this checkout. A
    checkout imported from its own folder while another copy is installed gets None, not the
    other copy's version."""
    try:
        dist = metadata.distribution("selector")
    except metadata.PackageNotFoundError:
        return None
    installed = Path(str(dist.locate_file("selector/__init__.py"))).resolve()
    if installed == PACKAGE_DIR / "__init__.py":
        return dist.version
    try:
        import json

        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    editable = url.get("dir_info", {}).get("editable") and str(url.get("url", "")).startswith("file://")
    if editable and Path(url["url"][len("file://"):]).resolve() == PACKAGE_DIR.parent:
        return dist.version
    return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The instruction sets that decide which bf16/int8 kernels torch and the quantization libraries run:
# scores of quantized models and every timing can differ between machines that differ here.
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu_features() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return [f for f in CPU_FEATURES if f in flags]
    except OSError:
        pass
    return []


def git_commit() -> str | None:
    """The commit of selector's own git checkout (with -dirty for uncommitted changes to tracked
    files), or None: installed from a wheel, or a copy lying inside some other repository, whose
    commit says nothing about this code."""
    root = PACKAGE_DIR.parent
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:
        return None
    if _git(root, "ls-files", "--error-unmatch", "selector/__init__.py") is None:
        return None  # the folder is a repository's top, but not one that holds this package
    head = _git(root, "rev-parse", "HEAD")
    if head is None:
        return None
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return head + ("-dirty" if dirty else "")


def _git(root: Path, *args: str) -> str | None:
    """git's stdout, or None when git is missing, fails or hangs."""
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment(device: str | None = None) -> dict[str, Any]:
    import psutil

    env: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_features": cpu_features(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "versions": library_versions(),
        "selector_version": selector_version(),
        "commit": git_commit(),
    }
    if device is not None:
        import torch

        env["device"] = device
        env["torch_threads"] = torch.get_num_threads()
        if "CUDA_VISIBLE_DEVICES" in os.environ:
            env["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
        if device.startswith("cuda") and torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.device(device))
            env["gpu"] = props.name
            env["gpu_mem_gb"] = round(props.total_memory / 2**30, 1)
            env["cuda"] = torch.version.cuda
    return env
