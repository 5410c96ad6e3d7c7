"""Does the fast tier (`make test-fast`, `pytest -m fast`) reach every module of selector?

Importing a module runs its top level (imports, constants, the `def` and `class` lines), so a module
counts as reached only where the fast tier ran a line that importing it does not run: a function or
method body. The script measures both with coverage.py, in this process (importing every module)
and over the fast tier (its xdist workers and every Python process its tests start: `patch =
subprocess`), and lists each module with the lines the tier ran beyond its import.

    python scripts/fast_tier_coverage.py            # make test-fast-coverage; exit 1 if a module is not reached
    python scripts/fast_tier_coverage.py -- -x      # arguments after -- go to pytest
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Modules no test on this machine can reach, and why (the tier is judged on the rest).
UNREACHABLE_HERE = {
    "selector.measure.bandwidth": "times copies on a CUDA device (tests/integration/test_gpu_check.py, marked gpu)",
    "selector.tasks.sandbox_init": "runs inside the code sandbox's scrubbed process, where coverage cannot follow "
                                   "(tests/unit/test_sandbox.py, fast, runs it)",
}
RCFILE = """\
[run]
source = selector
parallel = true
patch = subprocess
        _exit
data_file = {data}
"""


def import_lines() -> dict[str, set[int]]:
    """Per module file: the lines importing it runs."""
    import coverage

    cov = coverage.Coverage(data_file=None, source=["selector"])
    cov.start()
    import selector

    for info in pkgutil.walk_packages(selector.__path__, "selector."):
        if info.name.endswith(".__main__"):  # importing it runs the command line
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as e:  # an optional extra this install lacks: the tier cannot reach it either
            print(f"{info.name}: not importable here ({e})", file=sys.stderr)
    cov.stop()
    data = cov.get_data()
    return {f: set(data.lines(f) or ()) for f in data.measured_files()}


def fast_tier_lines(pytest_args: list[str], workers: str) -> tuple[int, dict[str, set[int]]]:
    """Run the fast tier under coverage; (pytest's exit code, per module file: the lines it ran)."""
    import coverage

    with tempfile.TemporaryDirectory() as tmp:
        rc = Path(tmp) / "coveragerc"
        rc.write_text(RCFILE.format(data=Path(tmp) / ".coverage"))
        cmd = [sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest", "-n", workers,
               "--dist", "loadfile", "-m", "fast", "-p", "no:cacheprovider", *pytest_args]
        code = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "COVERAGE_RCFILE": str(rc)}).returncode
        cov = coverage.Coverage(config_file=str(rc))
        cov.combine(keep=False)
        data = cov.get_data()
        return code, {f: set(data.lines(f) or ()) for f in data.measured_files()}


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    own, pytest_args = argv[:split], argv[split + 1:]
    p = argparse.ArgumentParser(prog="python scripts/fast_tier_coverage.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default=os.environ.get("TEST_WORKERS", "3"))
    args = p.parse_args(own)
    imported = import_lines()
    code, ran = fast_tier_lines(pytest_args, args.workers)
    rows, missing = [], []
    for path in sorted(imported):
        module = Path(path).resolve().relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        beyond = ran.get(path, set()) - imported[path]
        rows.append((module, len(beyond)))
        if not beyond and _has_bodies(path) and module not in UNREACHABLE_HERE:
            missing.append(module)
    width = max(len(m) for m, _ in rows)
    print(f"\n{'module':<{width}}  lines run beyond its import")
    for module, n in rows:
        print(f"{module:<{width}}  {n}")
    for module, why in UNREACHABLE_HERE.items():
        print(f"not counted: {module}: {why}")
    print(f"\n{len(rows) - len(missing)} of {len(rows)} modules reached beyond their import or not counted"
          + (f"; not reached: {', '.join(missing)}" if missing else ""))
    return code or (1 if missing else 0)


def _has_bodies(path: str) -> bool:
    """Whether the module has a function with a body to run (not a protocol's or a base class's
    stub: a docstring, `...`, `pass` or `raise NotImplementedError`)."""
    import ast

    def stub(statement: ast.stmt) -> bool:
        if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
            return True
        return isinstance(statement, ast.Raise) and "NotImplementedError" in ast.unparse(statement)

    tree = ast.parse(Path(path).read_text())
    return any(not all(stub(s) for s in n.body)
               for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
