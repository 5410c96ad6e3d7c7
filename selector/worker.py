"""The variant's own process: `python -m selector.worker <job.json>`.

One process per variant returns all its memory when it ends, and a segfault, a CUDA error or an
out-of-memory kill there cannot take the sweep down: the parent (job.py) sees the exit status and
records the failure with the stage the worker had reached.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import resource
import sys
from pathlib import Path

from omegaconf import OmegaConf

from selector.config import SelectorConfig


def load_job(path: Path) -> tuple[SelectorConfig, str, Path, bool]:
    spec = json.loads(path.read_text())
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SelectorConfig), spec["config"]))
    assert isinstance(cfg, SelectorConfig)
    return cfg, spec["key"], Path(spec["job_dir"]), bool(spec.get("is_reference"))


def limit_memory(gb: float | None) -> None:
    """Cap the address space so runaway allocation fails inside the variant, not the machine."""
    if gb:
        cap = int(gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def main(argv: list[str]) -> int:
    from selector.logs import setup_logging
    from selector.runner import VariantRun

    setup_logging()
    faulthandler.enable()  # a segfault prints the Python stack to stderr (captured into worker.log)
    cfg, key, job_dir, is_reference = load_job(Path(argv[0]))
    limit_memory(cfg.memory_limit_gb)
    record = VariantRun(cfg, key, job_dir, is_reference).run()
    logging.getLogger("selector.worker").info("variant %s: %s", record.name, record.status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
