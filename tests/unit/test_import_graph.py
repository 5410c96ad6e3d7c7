"""The house's shape: imports point one way (scripts/import_graph.py's figures), and the engine
interface is the seam between what measures and what runs a model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    package = ROOT / "selector"
    mods = module.modules(package)
    edges = {m: module.imports_of(m, p, set(mods)) for m, p in mods.items()}
    return module.measure(package), edges


def test_no_module_imports_itself_back_and_no_room_imports_back_up(graph) -> None:  # type: ignore[no-untyped-def]
    figures, _ = graph
    assert figures["module_cycles"] == []
    assert figures["arrows_back_up"] == []


def test_no_module_is_over_350_lines(graph) -> None:  # type: ignore[no-untyped-def]
    figures, _ = graph
    assert figures["over_350_lines"] == {}


def test_engines_never_import_what_measures_or_runs_the_sweep(graph) -> None:  # type: ignore[no-untyped-def]
    _, edges = graph
    above = ("selector.measure", "selector.sweep", "selector.variant", "selector.selection", "selector.plan",
             "selector.report")
    wrong = sorted((m, t) for m, ts in edges.items() if m.startswith("selector.engines") for t in ts
                   if t.startswith(above))
    assert wrong == []


def test_measure_reaches_an_engine_only_through_the_interface(graph) -> None:  # type: ignore[no-untyped-def]
    _, edges = graph
    wrong = sorted((m, t) for m, ts in edges.items() if m.startswith("selector.measure") for t in ts
                   if t.startswith("selector.engines") and t != "selector.engines.spec")
    assert wrong == []
