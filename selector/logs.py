"""Logging set-up shared by the sweep and its workers, and quieting of noisy libraries."""

from __future__ import annotations

import logging
import os
import warnings

NOISY = ("transformers", "bitsandbytes", "torchao", "accelerate", "datasets", "urllib3", "mlflow", "alembic", "gptqmodel",
         "llmcompressor", "compressed_tensors", "httpx", "filelock", "huggingface_hub")


def setup_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(level=level, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s", force=False)
    logging.getLogger("selector").setLevel(level)
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.ERROR)
    quiet_libraries()


def quiet_libraries() -> None:
    # Library chatter that says nothing about the user's result.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*inputs will be cast from.*")
    warnings.filterwarnings("ignore", message=".*register_constant.*")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except ImportError:
        pass
