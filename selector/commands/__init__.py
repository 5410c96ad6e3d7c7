"""The sub-commands of `python -m selector` that never load a model, one module each; `cli.py`
dispatches to their `main(argv) -> exit code` and reports a UserError from any of them."""

from __future__ import annotations

import importlib

COMMANDS = {  # name -> module
    "list": "selector.commands.listing",
    "select": "selector.commands.select",
    "plan": "selector.commands.plan",
    "sync": "selector.commands.sync",
    "evalset": "selector.commands.evalset",
    "compare": "selector.commands.compare",
}


def run(name: str, argv: list[str]) -> int:
    return int(importlib.import_module(COMMANDS[name]).main(argv))
