"""Deliberate faults for testing the sweep's own reliability (never set in normal use).

SELECTOR_INJECT_FAULT="<variant>@<stage>:<kind>[,...]" makes the worker of that variant (e.g.
"tiny/bf16", or "*" for any) fail when it enters that stage. Kinds: raise, segfault, hang, oom,
exit. The fault-injection tests use it to prove that each failure is recorded and the sweep goes on.
"""

from __future__ import annotations

import ctypes
import os
import time

ENV = "SELECTOR_INJECT_FAULT"


class InjectedFault(RuntimeError):
    pass


def maybe_inject(variant: str, stage: str) -> None:
    for spec in filter(None, os.environ.get(ENV, "").split(",")):
        target, _, rest = spec.partition("@")
        where, _, kind = rest.partition(":")
        if where == stage and target in ("*", variant):
            _fail(stage, kind)


def _fail(stage: str, kind: str) -> None:
    if kind == "raise":
        raise InjectedFault(f"injected fault in stage {stage}")
    if kind == "segfault":
        ctypes.string_at(0)  # reads address 0: a real SIGSEGV, as a broken native kernel would cause
    if kind == "hang":
        while True:
            time.sleep(1)
    if kind == "oom":
        hog = []
        while True:  # grows until the memory limit (RLIMIT_AS) or the kernel stops it
            hog.append(bytearray(256 * 2**20))
    if kind == "exit":
        os._exit(3)
    raise ValueError(f"{ENV}: unknown fault kind {kind!r}")
