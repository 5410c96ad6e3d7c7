"""Render a sweep's records + selection into report.html, report.md and report.json.

HTML goes through Jinja2 with autoescaping on, so every string from a model, an error or a config
is text, never markup; the only unescaped insertions are the SVGs matplotlib wrote (it escapes its
own text) and the package's own stylesheet. The page has no scripts and no external URLs.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from selector.report import samples as sample_outputs
from selector.report import answers_view, compare_view, load_view, search_view, sections, statistics_view, view
from selector.report.plots import Plot, accuracy_by_task, accuracy_vs_latency, accuracy_vs_memory
from selector.report.plots_load import capacity_curve, latency_vs_concurrency, settings_tradeoff, throughput_vs_latency
from selector.records import SCHEMA_VERSION, RunRecord, SampleRecord
from selector.verdicts import Selection

TEMPLATES = Path(__file__).parent / "templates"
_MD_SPECIAL = re.compile(r"([\\`*\[\]|])")


def all_plots(records: list[RunRecord], selection: Selection) -> list[Plot]:
    """Every figure the data supports, in report order."""
    plots = [accuracy_by_task(records, selection), accuracy_vs_memory(records, selection),
             accuracy_vs_latency(records, selection), latency_vs_concurrency(records),
             throughput_vs_latency(records), capacity_curve(records), settings_tradeoff(records, selection)]
    return [p for p in plots if p is not None]


def build_view(records: list[RunRecord], selection: Selection, context: dict[str, Any],
               *, with_plots: bool = True, samples: dict[str, list[SampleRecord]] | None = None) -> dict[str, Any]:
    """Everything the templates show, as plain data."""
    experiment = context.get("experiment") or "selector"
    return {
        "title": f"Model selection report — {experiment}",
        "created": context.get("created_at") or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "meta": sections.meta(records, context),
        "summary": view.summary(records, selection),
        "variants": view.variant_table(records, selection),
        "search": search_view.search(records, context),
        "load": load_view.load_section(records, selection),
        "answers": answers_view.answers_section(records),  # shown in the load section
        "comparison": compare_view.section(context.get("comparison"), brief=True),
        "plots": all_plots(records, selection) if with_plots else [],
        "paired": statistics_view.paired_table(records, selection),
        "sensitivity": statistics_view.dict_table(selection.sensitivity),
        "sample_size": statistics_view.dict_table(selection.sample_size),
        "power": statistics_view.power_table(selection),
        "noise": statistics_view.noise_table(selection.noise_floor),
        "agreement": sections.agreement_table(records),
        "serving": sections.serving_table(records),
        "examples": sample_outputs.examples(records, selection, samples),
        "failures": sections.failures(records),
        "environment": sections.environment(records, context),
        "config": sections.config_text(context),
        "mlflow": sections.mlflow(records, context),
        "caveats": sections.caveats(records, context),
    }


# ---- Markdown escaping ----

def md_text(text: Any) -> str:
    """Text for a Markdown paragraph or table cell: no markup, no HTML, no table breaks."""
    s = " ".join(str(text).split())  # a newline would end a table row
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def md_code(text: Any) -> str:
    """A fenced block that no run of backticks inside the text can close early."""
    s = str(text).rstrip("\n")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{s}\n{fence}"


def _environment(autoescape: bool) -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=autoescape, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["md"] = md_text
    env.filters["md_code"] = md_code
    return env


def render_html(data: dict[str, Any]) -> str:
    env = _environment(autoescape=True)
    # matplotlib wrote these SVGs and escaped their text itself; mark them as markup, nothing else.
    plots = [{"id": p.id, "title": p.title, "caption": p.caption, "svg": Markup(p.svg)} for p in data["plots"]]
    return env.get_template("report.html.j2").render(**{**data, "plots": plots})


def render_markdown(data: dict[str, Any]) -> str:
    return _environment(autoescape=False).get_template("report.md.j2").render(**data)


def report_json(records: list[RunRecord], selection: Selection, context: dict[str, Any]) -> str:
    """Records, selection and context in one machine-readable document (RunRecord/Selection schema)."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "records": [r.model_dump(mode="json") for r in records],
        "selection": selection.model_dump(mode="json"),
        "context": context,
    }
    return json.dumps(doc, indent=2, default=str)


def write_report(records: list[RunRecord], selection: Selection, context: dict[str, Any],
                 out_dir: Path, samples: dict[str, list[SampleRecord]] | None = None) -> dict[str, Path]:
    """Write report.html, report.md and report.json into out_dir; return their paths by kind.

    context keys (all optional): experiment, tracking_uri, parent_run_id, sweep_dir, config (dict),
    environment (dict: hardware, device, versions, git_commit, threads), wall_time_s, created_at.
    samples: variant name -> its SampleRecords (report.samples.load_samples reads a sweep folder's);
    with them the report shows example outputs (flips vs the reference, wrong answers).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = build_view(records, selection, context, samples=samples)
    paths = {"html": out_dir / "report.html", "md": out_dir / "report.md", "json": out_dir / "report.json"}
    paths["html"].write_text(render_html(data), encoding="utf-8")
    paths["md"].write_text(render_markdown(data), encoding="utf-8")
    paths["json"].write_text(report_json(records, selection, context), encoding="utf-8")
    return paths


def render_comparison_markdown(comparison: dict[str, Any]) -> str:
    """`python -m selector compare`'s Markdown: the configs' differences and what moved."""
    return _environment(autoescape=False).get_template("compare.md.j2").render(c=compare_view.section(comparison))
