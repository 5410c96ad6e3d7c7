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
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def environment(device: str | None = None) -> dict[str, Any]:
    import psutil

    env: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "versions": library_versions(),
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
