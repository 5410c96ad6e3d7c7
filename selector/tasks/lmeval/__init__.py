"""lm-evaluation-harness tasks in and out of selector's eval-set format (docs/lm-eval.md).

source (an lm-eval task YAML as read) <- mapping (its keys as a selector task) <- importer;
export writes selector tasks as lm-eval task YAML; cli is `python -m selector evalset ...`.
"""

from selector.tasks.lmeval.export import export_evalset, export_task
from selector.tasks.lmeval.importer import import_task, import_to_folder

__all__ = ["export_evalset", "export_task", "import_task", "import_to_folder"]
