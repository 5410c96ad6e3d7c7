"""hydra/launcher=slurm without a SLURM cluster: the real submitit launcher writes the real sbatch
script, and `sbatch` is a test double that keeps a copy of it (and then refuses, as no cluster is
here). The script must ask SLURM for what the preset and the command line say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny import build_tiny_llama, write_model_config

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

FAKE_SBATCH = """#!/bin/sh
cp "$1" "$FAKE_SBATCH_COPY"
echo "sbatch: error: test double, no SLURM cluster here" >&2
exit 1
"""


def test_sbatch_script_asks_for_what_the_config_says(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit checks that srun exists
    for tool in ("sbatch", "srun"):
        (bin_dir / tool).chmod(0o755)
    write_model_config(tmp_path / "conf", "tiny", build_tiny_llama(tmp_path / "tiny-model"))
    copy = tmp_path / "submission.sh"
    cmd = [sys.executable, "-m", "selector", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
           f"output_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}", "model=tiny",
           "precision=fp32,bf16,fp16", "evalset.limit=2", "search=grid", "hydra/launcher=slurm",
           "hydra.launcher.partition=gpu-a100", "hydra.launcher.account=proj42", "hydra.launcher.timeout_min=90",
           "hydra.launcher.array_parallelism=2", "hydra.launcher.constraint=a100|h100"]
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_SBATCH_COPY": str(copy)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode != 0 and "test double" in done.stderr  # it got as far as calling sbatch
    script = copy.read_text()
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", script, flags=re.M))
    assert sbatch["partition"] == "gpu-a100" and sbatch["account"] == "proj42"
    assert sbatch["time"] == "90"  # minutes
    assert sbatch["gpus-per-node"] == "1" and sbatch["cpus-per-task"] == "8" and sbatch["mem"] == "64GB"
    assert sbatch["array"] == "0-2%2"  # three variants, at most two at once
    assert sbatch["constraint"] == "'a100|h100'" and sbatch["job-name"] == "selector"  # quoted for the shell
    # Each array task runs this Python on the node, unpickling the jobs submitit saved in the sweep folder.
    assert f"{sys.executable} -u -m submitit.core._submit" in script
    sweep = next((tmp_path / "out" / "sweeps").iterdir())
    assert (sweep / "sweep.json").is_file()  # the parent run's id, for the jobs to find
    assert len(list((sweep / ".submitit").glob("*.pkl"))) == 3
