"""write_report: the three files, their sections, escaping, and graceful absence of optional data."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from selector.report import sections, write_report
from selector.report.render import md_code, md_text
from tests.fixtures.sample_report import sample_sweep
from selector.records import RunRecord
from selector.verdicts import Selection, Verdict
from tests.factories import perf, run_record, task_result

XSS = "<script>alert(1)</script>"


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the page's visible-ish text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], tuple]:
    sweep = sample_sweep(inject=XSS)
    return write_report(*sweep, out_dir=tmp_path_factory.mktemp("report")), sweep


def test_writes_three_files(sample_report) -> None:  # type: ignore[no-untyped-def]
    paths, _ = sample_report
    assert set(paths) == {"html", "md", "json"}
    assert [p.name for p in paths.values()] == ["report.html", "report.md", "report.json"]
    assert all(p.stat().st_size > 1000 for p in paths.values())


def test_html_sections_in_order(sample_report) -> None:  # type: ignore[no-untyped-def]
    paths, (records, selection, _) = sample_report
    html = paths["html"].read_text()
    order = ['id="recommendation"', 'id="variants"', 'id="plots"', 'id="statistics"', 'id="failures"',
             'id="reproducibility"', 'id="caveats"']
    positions = [html.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "<title>Model selection report — selector-sample</title>" in html
    summary_html = selection.summary.replace("<", "&lt;")
    assert summary_html in html[html.index('id="recommendation"'):html.index('id="variants"')]


def test_html_is_self_contained_and_runs_no_script(sample_report) -> None:  # type: ignore[no-untyped-def]
    paths, _ = sample_report
    html = paths["html"].read_text()
    tags = _parse(html).tags
    names = [t for t, _ in tags]
    assert "script" not in names and "link" not in names and "img" not in names and "iframe" not in names
    for _, attrs in tags:
        assert not any(k.startswith("on") for k in attrs), attrs  # no inline event handlers
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            assert not value or value.startswith("#"), (key, value)  # only in-page anchors
    assert "@import" not in html and not re.search(r"url\((?!#)", html)  # only in-document references


def test_injected_markup_is_escaped_everywhere(sample_report) -> None:  # type: ignore[no-untyped-def]
    paths, _ = sample_report
    html = paths["html"].read_text()
    assert XSS not in html and "<script" not in html.lower()
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert html.count(escaped) >= 4  # warning, reasons cell, error message, log tail
    text = "".join(_parse(html).text)
    assert text.count(XSS) >= 4  # shown to the reader as literal text
    md = paths["md"].read_text()
    outside_code = re.sub(r"```+text\n.*?\n```+", "", md, flags=re.S)
    assert "<script" not in outside_code and "&lt;script&gt;" in outside_code


def test_variant_table_has_one_row_per_record(sample_report) -> None:  # type: ignore[no-untyped-def]
    paths, (records, selection, _) = sample_report
    html = paths["html"].read_text()
    variants = html[html.index('id="variants"'):html.index('</section>', html.index('id="variants"'))]
    assert variants.count("<tr") == len(records) + 1  # header row
    assert variants.count('class="winner-row"') == 1
    for record in records:
        assert f'<td class="name">{record.name}</td>' in variants


def test_plots_are_valid_inline_svg_with_unique_ids(sample_report) -> None:  # type: ignore[no-untyped-def]
    paths, _ = sample_report
    html = paths["html"].read_text()
    svgs = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    assert len(svgs) == 5
    for svg in svgs:
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg") and root.get("role") == "img"
        assert float(root.get("width", "0").removesuffix("pt")) > 200
    ids = re.findall(r'\sid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "clip-path ids of two plots collide"


def test_json_round_trips_to_the_types(sample_report) -> None:  # type: ignore[no-untyped-def]
    paths, (records, selection, context) = sample_report
    doc = json.loads(paths["json"].read_text())
    assert [RunRecord.model_validate(r) for r in doc["records"]] == records
    assert Selection.model_validate(doc["selection"]) == selection
    assert doc["context"] == json.loads(json.dumps(context))
    assert doc["schema_version"] == 1


def test_markdown_tables_keep_their_shape(sample_report) -> None:  # type: ignore[no-untyped-def]
    paths, (records, _, _) = sample_report
    md = paths["md"].read_text()
    assert md.startswith("# Model selection report — selector-sample")
    start = md.index("## All variants")
    table = md[start:md.index("\n## ", start + 3)]
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len(rows) == len(records) + 2  # header and separator
    widths = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
    assert len(widths) == 1, "an unescaped pipe split a cell"
    assert sections.DEQUANTIZED_NOTE in md
    assert "mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db" in md


def test_markdown_escaping_helpers() -> None:
    assert md_text("a|b <i>x</i>\nnext *bold* [link]") == r"a\|b &lt;i&gt;x&lt;/i&gt; next \*bold\* \[link\]"
    block = md_code("one ``` two")
    assert block.startswith("````text\n") and block.endswith("\n````")


def _minimal(device: str = "cuda:0", notes: str = "") -> tuple[list[RunRecord], Selection, dict]:
    """Two variants, no load test, no quantization data, no statistics, nothing failed."""
    records = [
        run_record("evil<b>model</b>$x$", precision, [task_result("qa|x", value=acc, n=60, ci=(acc - 0.1, acc + 0.1),
                                                                   metric="exact_match")],
                   params=10**9, weight_bytes=weight, perf=perf(device, e2e_ms=50.0 * weight / 1e9),
                   config={"model": {"notes": notes}})
        for precision, weight, acc in (("bf16", 2_000_000_000, 0.8), ("int8", 1_100_000_000, 0.78))
    ]
    names = [r.name for r in records]
    selection = Selection(policy={"floors": {"qa|x": 0.7}}, winner=names[1], reference=names[0],
                          summary=f"Use {names[1]}.", verdicts=[Verdict(variant=names[0], status="eligible"),
                                                                Verdict(variant=names[1], status="winner")])
    return records, selection, {}


def test_optional_sections_are_left_out_without_data(tmp_path: Path) -> None:
    records, selection, context = _minimal()
    paths = write_report(records, selection, context, tmp_path)
    html = paths["html"].read_text()
    for absent in ('id="statistics"', 'id="failures"', 'id="caveats"', 'id="plot-load-latency"',
                   'id="plot-load-throughput"', "Resolved config", "quantize time", ">KL<"):
        assert absent not in html, absent
    for present in ('id="plot-accuracy"', 'id="plot-memory"', 'id="plot-latency"'):
        assert present in html, present
    assert "No tracker was used." in html
    assert sections.CPU_NOTE not in html
    assert 'id="serving"' not in html  # nothing was served by vLLM


def test_how_vllm_served_each_variant(tmp_path: Path) -> None:
    from selector.records import ServingInfo

    records, selection, context = _minimal()
    records[0].serving = ServingInfo(engine="vllm", label="vLLM", version="0.32.0", quantization="compressed-tensors",
                                     kernels=["CPUInt8ScaledMMLinearKernel"], packed=True, start_s=61.4, instances=2,
                                     cores=["0", "1"], requests=[11, 12])
    paths = write_report(records, selection, context, tmp_path)
    md = paths["md"].read_text()
    assert "## How vLLM served each variant" in md
    assert "| 0.32.0 | compressed-tensors | CPUInt8ScaledMMLinearKernel | packed | 2 (0 \\| 1) | 11 / 12 | 61 |" in md
    assert 'id="serving"' in paths["html"].read_text()
    # The variants table's kernel is vLLM's for a served variant, not the in-process copy's.
    assert "| CPUInt8ScaledMMLinearKernel (vLLM) |" in md


def test_the_served_section_is_labelled_as_the_records_say(tmp_path: Path) -> None:
    """No label is assumed: a record names its server (ServingInfo.label; an older record, its engine)."""
    from selector.records import ServingInfo

    records, selection, context = _minimal()
    records[0].serving = ServingInfo(engine="sglang", label="SGLang", version="0.5", kernels=["Marlin"], packed=True)
    md = write_report(records, selection, context, tmp_path / "a")["md"].read_text()
    assert "## How SGLang served each variant" in md and "| Marlin (SGLang) |" in md and "vLLM" not in md
    old = ServingInfo.model_validate({"engine": "vllm", "version": "0.32.0"})  # written before labels
    assert old.shown == "vllm"
    records[0].serving = old
    md = write_report(records, selection, context, tmp_path / "b")["md"].read_text()
    assert "## How vllm served each variant" in md and "| vllm, not quantized |" in md
    records[1].serving = ServingInfo(engine="vllm", label="vLLM", version="0.33.0")
    md = write_report(records, selection, context, tmp_path / "c")["md"].read_text()
    assert "## How the servers served each variant" in md  # two names: the column says which served each
    assert "| vllm 0.32.0 |" in md and "| vLLM 0.33.0 |" in md


def test_names_with_markup_and_mathtext_characters(tmp_path: Path) -> None:
    records, selection, context = _minimal(device="cpu", notes="dequantized Q4_K_M")
    paths = write_report(records, selection, context, tmp_path)
    html = paths["html"].read_text()
    assert "<b>model" not in html and "evil&lt;b&gt;model&lt;/b&gt;$x$/int8" in html
    for svg in re.findall(r"<svg .*?</svg>", html, flags=re.S):
        ET.fromstring(svg)  # matplotlib escaped the name inside its own XML
        assert "<b>" not in svg
    assert sections.CPU_NOTE in html and sections.DEQUANTIZED_NOTE.replace("'", "&#39;") in html
    md = paths["md"].read_text()
    assert r"evil&lt;b&gt;model&lt;/b&gt;$x$/int8" in md and r"qa\|x" in md


def test_no_winner_is_said_plainly(tmp_path: Path) -> None:
    records, selection, context = _minimal()
    rejected = [v.model_copy(update={"status": "rejected", "reasons": ["qa below floor"]}) for v in selection.verdicts]
    selection = selection.model_copy(update={"winner": None, "verdicts": rejected,
                                             "summary": "No variant meets qa >= 70%."})
    paths = write_report(records, selection, context, tmp_path)
    html = paths["html"].read_text()
    assert "No variant meets the policy" in html and "No variant meets qa &gt;= 70%." in html
    assert 'class="winner-row"' not in html
    assert "**No variant meets the policy.**" in paths["md"].read_text()


def test_reproducibility_names_the_code_sandbox_layers_of_the_variants(tmp_path: Path) -> None:
    records, selection, _ = _minimal()
    layers = ["rlimits", "process-group", "pid-namespace", "read-only-fs"]
    records = [r.model_copy(update={"environment": {"cpu": "x", "code_sandbox": layers}}) for r in records]
    context = {"environment": {"cpu": "x", "python": "3.11"}}  # the sweep's own: it ran no code
    assert ("code_sandbox", "rlimits, process-group, pid-namespace, read-only-fs") in sections.environment(records,
                                                                                                          context)
    paths = write_report(records, selection, context, tmp_path)
    assert "- code_sandbox: rlimits, process-group, pid-namespace, read-only-fs" in paths["md"].read_text()
    assert "<dt>code_sandbox</dt><dd>rlimits, process-group, pid-namespace, read-only-fs</dd>" in paths[
        "html"].read_text()


def test_code_sandbox_that_differed_between_machines_is_listed_per_variant() -> None:
    records, _, _ = _minimal()
    first, second = records
    records = [first.model_copy(update={"environment": {"code_sandbox": ["rlimits", "read-only-fs"]}}),
               second.model_copy(update={"environment": {"code_sandbox": ["rlimits"]}})]
    env = dict(sections.environment(records, {"environment": {"cpu": "x"}}))
    assert env["code_sandbox"] == f"rlimits, read-only-fs ({first.name}); rlimits ({second.name})"


def test_no_code_sandbox_line_without_a_code_task() -> None:
    records, _, _ = _minimal()
    assert "code_sandbox" not in dict(sections.environment(records, {"environment": {"cpu": "x"}}))


def test_search_section_lists_the_waves_escaped(tmp_path: Path) -> None:
    """Which variants ran in which wave, and the width's source, as text in both formats."""
    records, selection, context = sample_sweep()
    names = [r.name for r in records]
    context["search"] = {
        "strategy": "adaptive", "order": names, "first": [], "workers": 2, "verdicts": [], "notes": [],
        "width_source": "Ray cluster: 2 CPUs / 1 CPU per variant" + XSS,
        "waves": [{"kind": "search", "names": names[:2], "wall_s": 41.2},
                  {"kind": "evidence", "names": [names[2] + "|" + XSS], "wall_s": 20.0}],
        "savings": {"variants_measured": 3, "variants": len(names), "items_evaluated": 10, "grid_items": 20,
                    "spent_s": 60.0, "grid_estimate_s": 120.0},
    }
    paths = write_report(records, selection, context, tmp_path)
    html, md = paths["html"].read_text(), paths["md"].read_text()
    assert XSS not in html and XSS not in md
    text = " ".join(" ".join(_parse(html).text).split())
    assert f"2 waves of up to 2 variants at a time (Ray cluster: 2 CPUs / 1 CPU per variant{XSS}):" in text
    assert f"wave 1 (search, 41 s): {names[0]}, {names[1]}" in text
    assert f"wave 2 (evidence, 20 s): {names[2]}|{XSS}" in text
    assert f"- wave 1 (search, 41 s): {md_text(names[0])}, {md_text(names[1])}\n" in md
    assert f"- wave 2 (evidence, 20 s): {md_text(names[2] + '|' + XSS)}\n" in md


def test_the_verdict_carries_what_the_eval_set_can_tell_apart(sample_report) -> None:  # type: ignore[no-untyped-def]
    """Issue 36, points 3 and 4: next to the verdict, the chance a variant a margin below a floor
    would have passed at this size; in the statistics, the same per task."""
    paths, (_, selection, _) = sample_report
    assert selection.power_note and selection.power
    html, md = paths["html"].read_text(), paths["md"].read_text()
    recommendation = html[html.index('id="recommendation"'):html.index('id="variants"')]
    assert 'id="power-note"' in recommendation and "below a floor would pass it with probability" in recommendation
    assert 'id="power"' in html and "### What this eval set can tell apart" in md
    assert md.index("would pass it with probability") < md.index("## All variants")


def test_a_sibling_not_needed_is_counted_in_the_search_line(tmp_path: Path) -> None:
    records, selection, context = sample_sweep()
    context["search"] = {"strategy": "adaptive", "order": [r.name for r in records], "first": [], "verdicts": [],
                         "notes": [], "waves": [],
                         "savings": {"variants_measured": 1, "variants": len(records), "items_evaluated": 10,
                                     "grid_items": 20, "spent_s": 60.0, "grid_estimate_s": 120.0,
                                     "siblings_not_needed": 2}}
    md = write_report(records, selection, context, tmp_path)["md"].read_text()
    assert "2 not needed as siblings of a baseline far below a floor (never converted, quantized or loaded)" in md
