"""Logging set-up shared by the sweep and its workers, and quieting of noisy libraries."""

from __future__ import annotations

import logging
import os
import sys
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
    # transformers takes its verbosity from the environment when it is imported; importing it here
    # would cost every process about a second, the sweep's own included, which never loads a model.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None:  # imported already: the variable is read no more
        hf_logging.set_verbosity_error()
