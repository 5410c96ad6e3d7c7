"""Import an lm-evaluation-harness task YAML (a local-file task) as a selector task.

The rows are read with every value a string as written and copied beside the new task YAML as
JSONL. Where lm-eval's meaning needs data (per-row choices from a Jinja expression, an answer
given as an index into the choices), it is computed here with lm-eval's rules and stored in an
extra column (`_choices`, `_target`, `_id`), so the task file stays plain. What selector cannot
reproduce exactly is listed in `notes`; what it cannot run at all raises EvalsetError.
"""

from __future__ import annotations

from pathlib import Path

from selector.tasks.lmeval.mapping import build_spec
from selector.tasks.lmeval.source import UNSUPPORTED, ImportedTask, Source, data_files, rows_of, selector_utils


def import_task(yaml_path: str | Path) -> ImportedTask:
    """Read an lm-eval task YAML into a selector task (spec + rows); nothing is written."""
    src = Source(Path(yaml_path))
    for key in UNSUPPORTED:
        if key in src.raw and not (selector_utils(src, src.raw[key], "load_jsonl" if key == "custom_dataset"
                                                   else "process_results")):
            src.fail(key, f"{key} is Python code or a prompt library that selector does not run; "
                     "rewrite it as Jinja doc_to_text/doc_to_target or preprocess the data file")
    path = src.get("dataset_path")
    if path not in (None, "json", "csv", "parquet") and "custom_dataset" not in src.raw:
        src.fail("dataset_path", f"{path!r}: selector imports local files only (json, csv, parquet)")
    choices_field = src.get("doc_to_choice") if isinstance(src.get("doc_to_choice"), str) else None
    splits = {s: rows_of(src, p, frozenset([choices_field] if choices_field else [])) for s, p in data_files(src).items()}
    return build_spec(src, splits)


def import_to_folder(yaml_paths: list[str | Path], out_dir: str | Path) -> list[tuple[Path, list[str]]]:
    """Import each lm-eval task YAML into out_dir (a selector eval set folder): (task file, notes).
    Each written task is loaded back, so a problem shows now, with its file and line."""
    from selector.tasks.loader import load_evalset

    written = []
    for path in yaml_paths:
        imported = import_task(path)
        written.append((imported.write(out_dir), imported.notes))
        load_evalset(out_dir, tasks=[imported.name])
    return written


