"""A variant's memory as served (docs/memory.md), on a tiny Llama large enough for its weights to
show in the resident set above its noise (150M parameters: 600 MB fp32 on disk, 300 MB at bf16, 150 MB at int8).

When int8 runs before its bf16 baseline (here a grid listing int8 first; the adaptive search did
so before baselines went first), its fidelity reference is made while it runs: in the preparation
process, whose peak is the variant's preparation peak and never its serving peak. Its serving peak
must hold its own weights, not the baseline's. Under the adaptive search the baseline runs first and
writes the reference itself, so it loads once in the whole sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sweep_helpers import run_in_process
from tests.tiny import CORPUS, build_tiny_llama, evalset_corpus, write_model_config

pytestmark = pytest.mark.quant("bitsandbytes")
MB = 2**20
# What is measured here is memory: one task's few items (the fidelity probes are drawn from them)
ONE_TASK = ("evalset.limit=4", "evalset.tasks=[sentiment]", "policy.floors.sentiment=0.0")


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # its tokenizer knows the eval set's words: prompts of a few hundred tokens, not a thousand
    return build_tiny_llama(tmp_path_factory.mktemp("models") / "wide", hidden=2048, layers=4, vocab_size=4096,
                            corpus=CORPUS + evalset_corpus())


def _records(out: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    [sweep] = sorted((out / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)[-1:]
    return {f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text()) for p in sweep.rglob("record.json")}


def test_serving_peak_leaves_out_the_baseline_that_ran_after_it(tmp_path: Path, wide_model: Path) -> None:
    setup = {"conf": tmp_path / "conf", "out": tmp_path / "out", "cache": tmp_path / "cache"}
    write_model_config(setup["conf"], "wide", wide_model)
    result = run_in_process(setup, "model=wide", "precision=int8,bf16", "search=grid", "measure=quick",
                            *ONE_TASK, "policy.max_memory_gb=100")
    assert result.returncode == 0, result.stderr[-3000:]
    records = _records(setup["out"])
    int8, bf16 = records["wide/int8"], records["wide/bf16"]
    assert int8["status"] == bf16["status"] == "completed"
    assert int8["finished_at"] <= bf16["started_at"]  # the grid's order: as listed
    mem, base = int8["memory"], bf16["memory"]
    print(json.dumps({"int8": mem, "bf16": base}, indent=1))
    # int8 made the bf16 reference in its preparation process, and was compared against it
    assert any("fidelity reference of wide/bf16" in line for line in int8["config"]["prepared"])
    assert any(line.startswith("other processes took ") for line in int8["config"]["prepared"])  # the machine meanwhile
    assert int8["fidelity"]["baseline"] == "wide/bf16" and int8["fidelity"]["mean_kl"] > 0
    assert mem["prepare"]["rss_bytes"] > 0 and base["prepare"] is None  # bf16 found everything cached
    # plan's estimate stands beside the measured figure
    assert 0.5 < mem["serving"]["rss_bytes"] / mem["planned_serving_bytes"] < 2.0

    # The same variant again with the reference already cached (a new output folder, the same cache):
    # nothing to prepare, and the same serving peak. Had the baseline been loaded in its process the
    # first time, that peak would hold the bf16 weights too (300 MB here, more in its transient); two runs of one variant differ by tens of MB (threads, allocator arenas).
    again = run_in_process({**setup, "out": tmp_path / "again"}, "model=wide", "precision=int8", "measure=quick",
                           *ONE_TASK)
    assert again.returncode == 0, again.stderr[-3000:]
    second = _records(tmp_path / "again")["wide/int8"]
    assert second["memory"]["prepare"] is None and "prepared" not in second["config"]
    assert second["fidelity"]["mean_kl"] == pytest.approx(int8["fidelity"]["mean_kl"])

    def growth(m: dict) -> int:  # type: ignore[type-arg]
        return m["serving"]["rss_bytes"] - m["runtime_rss_bytes"]

    print("serving above the runtime (MB):", growth(mem) / MB, growth(second["memory"]) / MB)
    assert abs(growth(mem) - growth(second["memory"])) < base["weight_bytes"] / 2


def test_adaptive_search_loads_the_baseline_once(tmp_path: Path, wide_model: Path) -> None:
    """bf16 runs first and writes the reference; int8 then finds it cached: nothing of the baseline
    in its preparation, and no evidence wave loading bf16 again after the search."""
    setup = {"conf": tmp_path / "conf", "out": tmp_path / "out", "cache": tmp_path / "cache"}
    write_model_config(setup["conf"], "wide", wide_model)
    result = run_in_process(setup, "model=wide", "precision=bf16,int8", "measure=quick", *ONE_TASK)
    assert result.returncode == 0, result.stderr[-3000:]
    records = _records(setup["out"])
    int8, bf16 = records["wide/int8"], records["wide/bf16"]
    assert bf16["finished_at"] <= int8["started_at"]
    assert not any("fidelity reference" in line for line in int8["config"].get("prepared", []))
    assert int8["fidelity"]["baseline"] == "wide/bf16" and int8["fidelity"]["mean_kl"] > 0
    [state] = [json.loads(p.read_text()) for p in (setup["out"] / "sweeps").glob("*/sweep.json")]
    assert [(w["kind"], w["names"]) for w in state["search"]["waves"]] == [("search", ["wide/bf16"]),
                                                                          ("search", ["wide/int8"])]
    assert state["search"]["counts"]["materialized"] == 2
