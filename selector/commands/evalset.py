"""`python -m selector evalset import-lmeval|export-lmeval`: move tasks between selector and lm-eval."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


EPILOG = """examples:
  python -m selector evalset export-lmeval evalsets/default --out lmeval-tasks
  lm_eval --model hf --model_args pretrained=MODEL --include_path lmeval-tasks --tasks selector_default
  python -m selector evalset import-lmeval my_task.yaml other_task.yaml --out evalsets/mine
  python -m selector evalset.path=evalsets/mine model=smollm2-135m

See docs/lm-eval.md for what maps to what, and what cannot."""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m selector evalset", epilog=EPILOG,
                                  description="Convert eval tasks between selector and lm-evaluation-harness.",
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="action", required=True, metavar="{import-lmeval,export-lmeval}")
    imp = sub.add_parser("import-lmeval", help="lm-eval task YAML files -> a selector eval set folder")
    imp.add_argument("tasks", nargs="+", type=Path, help="lm-eval task YAML files (local data files)")
    imp.add_argument("--out", type=Path, required=True, help="the eval set folder to write (created if needed)")
    exp = sub.add_parser("export-lmeval", help="a selector eval set folder -> lm-eval tasks (+ a group)")
    exp.add_argument("evalset", type=Path, help="a selector eval set folder, e.g. evalsets/default")
    exp.add_argument("--out", type=Path, required=True, help="the folder to write; pass it to lm_eval --include_path")
    exp.add_argument("--style", choices=("plain", "chat"), default="plain",
                     help="which prompt templates to export (chat: run lm_eval with --apply_chat_template "
                          "--fewshot_as_multiturn); default: plain")
    exp.add_argument("--tasks", nargs="+", help="only these tasks of the eval set")
    return top


def main(argv: list[str]) -> int:
    import logging

    from selector.tasks.lmeval import export_evalset, import_to_folder

    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    args = parser().parse_args(argv)
    if args.action == "import-lmeval":
        for path, notes in import_to_folder(args.tasks, args.out):
            print(f"wrote {path}")
            for note in notes:
                print(f"  note: {note}")
        print(f"\nRun it: python -m selector evalset.path={args.out} model=...")
        return 0
    written = export_evalset(args.evalset, args.out, args.style, tasks=args.tasks)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print("nothing exported: no task of this eval set can be scored by lm-eval", file=sys.stderr)
        return 1
    print(f"\nRun them: lm_eval --model hf --model_args pretrained=MODEL --include_path {args.out} "
          f"--tasks {','.join(p.stem for p in written)}")
    return 0
