"""Which distributions `gpu_check.py --arch` needs at run time that a GPU image with torch,
transformers and accelerate preinstalled does not have: the list gpu_wheels.sh fetches.

    python scripts/gpu_wheels_probe.py > scripts/gpu_wheels.txt

It runs the check for real on CPU, on a tiny architecture, through every precision the GPU run
uses (so every backend's imports happen) and records each module loaded and its file. A module
loaded here is not necessarily needed there: libraries import what happens to be installed
(`try: import boto3`). So it follows imports from selector's own modules, through the source of
each module that loaded, keeping only import statements outside `try` blocks, to the
distributions reached that way. Left out: the standard library and what torch, transformers and
accelerate require (their requirement closure, for Python 3.12 on Linux x86-64), except what the
GPU image is known to lack anyway (IMAGE_LACKS). Versions are those installed here: the set
selector pins.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREINSTALLED = ("torch", "transformers", "accelerate")
# In the requirement closure here (typer -> pydantic) but absent from the GPU image (torch 2.11,
# transformers 5.17, accelerate 1.15): pydantic's stack travelled in the last run that worked.
IMAGE_LACKS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions")
ROOTS = ("selector", "gpu_check", "gpu_arch", "tests")  # the check's own modules
TARGET = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
TINY_ARCH = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 128,
             "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 512, "max_position_embeddings": 1024, "tie_word_embeddings": False}
PRECISIONS = "bf16,awq-int4,gptq-int4,int8"
# Runs the check with every executed import recorded: (importer module, imported top-level name,
# the importing file and line), printed when it exits.
RUNNER = """
import atexit, builtins, importlib, json, runpy, sys
edges = set()
def note(name, depth):
    frame = sys._getframe(depth)
    edges.add((frame.f_globals.get("__name__", ""), name.split(".")[0], frame.f_code.co_filename, frame.f_lineno))
real_import, real_import_module = builtins.__import__, importlib.import_module
def hooked_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0:
        note(name, 2)
    return real_import(name, globals, locals, fromlist, level)
def hooked_import_module(name, package=None):
    if not name.startswith("."):
        note(name, 2)
    return real_import_module(name, package)
builtins.__import__, importlib.import_module = hooked_import, hooked_import_module
atexit.register(lambda: print("EDGES " + json.dumps(sorted(edges)), flush=True))
sys.argv = ["gpu_check.py", *sys.argv[1:]]
runpy.run_path({script!r}, run_name="__main__")
"""


def executed_imports() -> list[tuple[str, str, str, int]]:
    """Every import the check executed: (importer, imported top-level name, file, line)."""
    with tempfile.TemporaryDirectory() as tmp:
        arch = Path(tmp) / "probe.json"
        arch.write_text(json.dumps(TINY_ARCH))
        code = RUNNER.format(script=str(ROOT / "scripts" / "gpu_check.py"))
        done = subprocess.run([sys.executable, "-c", code, "--device", "cpu", "--arch", str(arch), "--precisions",
                               PRECISIONS, "--compile", "off", "--repeats", "1", "--warmup", "0",
                               "--out", str(Path(tmp) / "out.json")], capture_output=True, text=True, cwd=tmp)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("EDGES ")), None)
    if line is None:
        raise SystemExit(f"the probe run failed:\n{done.stderr[-4000:]}")
    return [tuple(e) for e in json.loads(line[len("EDGES "):])]


_GUARDED: dict[str, set[int]] = {}


def guarded(path: str, line: int) -> bool:
    """Whether the import at this file and line sits inside a `try` block (an optional import)."""
    if path not in _GUARDED:
        lines: set[int] = set()
        try:
            tree = ast.parse(Path(path).read_text(errors="replace"))
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        for node in ast.walk(tree):
            if isinstance(node, ast.Try):
                for part in (node.body, node.handlers):
                    for stmt in part:
                        lines |= {n.lineno for n in ast.walk(stmt) if hasattr(n, "lineno")}
        _GUARDED[path] = lines
    return line in _GUARDED[path]


def requirement_closure(roots: tuple[str, ...]) -> set[str]:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(TARGET):
                todo.append(req.name)
    return seen


def needed_distributions() -> set[str]:
    """Distributions reached from selector's modules over executed, unguarded imports."""
    from packaging.utils import canonicalize_name

    providers = metadata.packages_distributions()

    def dist(top: str) -> str | None:
        if top in ROOTS or top == "__main__":
            return "selector"
        found = providers.get(top)
        return canonicalize_name(found[0]) if found else None

    present = requirement_closure(PREINSTALLED) - set(IMAGE_LACKS)
    edges: dict[str, set[str]] = defaultdict(set)  # importer's distribution -> distributions it needs
    for importer, top, path, line in executed_imports():
        source, target = dist(importer.split(".")[0]), dist(top)
        if source and target and source != target and not guarded(path, line) and top not in sys.stdlib_module_names:
            edges[source].add(target)
    needed, todo = set(), ["selector"]
    while todo:
        for target in edges[todo.pop()]:
            if target not in needed and target not in present:
                needed.add(target)
                todo.append(target)
    return needed - {"selector"}


def main() -> int:
    needed = sorted(needed_distributions())
    print(f"# gpu_check.py --arch ({PRECISIONS}) imports these, outside try blocks, reached from selector's")
    print("# modules, beyond torch, transformers, accelerate and their requirements (the pydantic stack")
    print("# included: the GPU image lacks it). Written by scripts/gpu_wheels_probe.py, read by gpu_wheels.sh.")
    for name in needed:
        print(f"{name}=={metadata.version(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
