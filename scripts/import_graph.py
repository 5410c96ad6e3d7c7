"""The shape of selector's imports, as figures to compare before and after a change.

    python scripts/import_graph.py [--json] [--package selector]

- a room is a subpackage of the package (selector/tasks/) or one of its top-level modules
  (selector/config.py); an arrow is "some module of room A imports something of room B";
- floors: rooms layered so that every arrow points down (floor 1 imports no other room); an arrow
  that must point up to close a cycle between rooms is an "arrow running back up";
- cycles are also counted between modules (a <-> b inside one room is still a cycle);
- sizes: modules over 350 lines.
Every import counts, at module level or inside a function (a lazy import is still a dependency).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(package: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports (resolving relative imports and `from x import mod`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # not its own package's __init__
                out.add(target)
    return out


def room_of(module: str, package: str) -> str:
    parts = module.split(".")
    return package if len(parts) == 1 else f"{package}.{parts[1]}"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the cycles of a directed graph, as groups of nodes."""
    index, low, stack, on, out = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def floors(graph: dict[str, set[str]]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Floor of each node (1 = imports nothing else) over the graph with its cycles condensed, and
    the arrows that point up (those inside a cycle, which no layering can point down)."""
    groups = strongly_connected(graph)
    group_of = {v: i for i, g in enumerate(groups) for v in g}
    level: dict[int, int] = {}

    def floor_of(i: int) -> int:
        if i not in level:
            level[i] = 0  # guards recursion; condensed graph is acyclic
            below = {group_of[w] for v in groups[i] for w in graph.get(v, ()) if group_of[w] != i}
            level[i] = 1 + max((floor_of(j) for j in below), default=0)
        return level[i]

    result = {v: floor_of(group_of[v]) for v in graph}
    up = sorted((v, w) for v in graph for w in graph[v] if group_of[v] == group_of[w])
    return result, up


def measure(package_dir: Path) -> dict:  # type: ignore[type-arg]
    package = package_dir.name
    mods = modules(package_dir)
    known = set(mods)
    module_graph = {m: imports_of(m, p, known) for m, p in mods.items()}
    rooms: dict[str, set[str]] = defaultdict(set)
    for m, targets in module_graph.items():
        rooms[room_of(m, package)]  # every room is a node, even one that imports nothing
        for t in targets:
            a, b = room_of(m, package), room_of(t, package)
            if a != b and package not in (a, b):  # the package's own __init__ is not a room
                rooms[a].add(b)
    rooms.pop(package, None)
    room_floor, up = floors(dict(rooms))
    module_cycles = [g for g in strongly_connected(module_graph) if len(g) > 1]
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in mods.items()}
    return {
        "rooms": len(rooms),
        "floors": max(room_floor.values(), default=0),
        "arrows": sum(len(v) for v in rooms.values()),
        "module_imports": sum(len(v) for v in module_graph.values()),
        "modules": len(mods),
        "module_cycles": module_cycles,
        "arrows_back_up": up,
        "over_350_lines": {m: n for m, n in sorted(sizes.items()) if n > 350},
        "largest": sorted(sizes.items(), key=lambda kv: -kv[1])[:5],
        "floor_of": dict(sorted(room_floor.items(), key=lambda kv: (kv[1], kv[0]))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", default="selector")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(ROOT / args.package)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{figures['rooms']} rooms on {figures['floors']} floors, {figures['arrows']} arrows between rooms; "
          f"{figures['modules']} modules, {figures['module_imports']} imports between modules")
    print(f"module cycles: {len(figures['module_cycles'])} {figures['module_cycles'] or ''}")
    print(f"arrows running back up: {len(figures['arrows_back_up'])} {figures['arrows_back_up'] or ''}")
    print(f"modules over 350 lines: {figures['over_350_lines'] or 'none'}")
    by_floor: dict[int, list[str]] = defaultdict(list)
    for room, floor in figures["floor_of"].items():
        by_floor[floor].append(room.split(".", 1)[1])
    for floor in sorted(by_floor, reverse=True):
        print(f"  floor {floor:2d}: {', '.join(by_floor[floor])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
