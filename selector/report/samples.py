"""Model outputs for the report: per task, the items where the winner and the reference disagree
(flips) and a few of the winner's wrong answers, with prompt, output and gold answer.

Samples come from each job folder's samples.jsonl (one SampleRecord per line) beside its
record.json. Everything here is plain text: the HTML template escapes it (autoescape) and the
Markdown template fences it, so a model that writes `<script>` shows those characters.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from selector.report.view import task_names
from selector.selection.evidence import RIGHT_THRESHOLD
from selector.records import RunRecord, SampleRecord
from selector.verdicts import Selection

log = logging.getLogger("selector.report")

SAMPLES_FILE = "samples.jsonl"
PER_TASK = 5  # examples shown per task: enough to see a pattern, few enough to read
PROMPT_CHARS = 400  # the prompt's tail (the item itself comes last, after any few-shot examples)
OUTPUT_CHARS = 400

Samples = dict[str, list[SampleRecord]]  # variant name -> its scored items


def read_samples(path: Path) -> list[SampleRecord]:
    """One file's SampleRecords; a damaged line is skipped with a warning (the report still renders)."""
    out = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(SampleRecord.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as e:
            log.warning("%s line %d: not a sample record (%s); skipped", path, number, str(e).splitlines()[0])
    return out


def load_samples(sweep_dir: Path) -> Samples:
    """Every variant's samples under a sweep folder: the samples.jsonl beside each record.json
    (the newest record of a variant wins, as in finish.gather_records)."""
    newest: dict[str, tuple[float, Path]] = {}
    for record_path in sorted(Path(sweep_dir).rglob("record.json")):
        samples_path = record_path.with_name(SAMPLES_FILE)
        if not samples_path.is_file():
            continue
        try:
            name = RunRecord.load(record_path).name
        except (OSError, ValueError) as e:
            log.warning("%s: unreadable record (%s); its samples are not shown", record_path, e)
            continue
        mtime = record_path.stat().st_mtime
        if name not in newest or newest[name][0] < mtime:
            newest[name] = (mtime, samples_path)
    return {name: read_samples(path) for name, (_, path) in sorted(newest.items())}


@dataclass(frozen=True)
class Example:
    id: str
    kind: str  # "right → wrong" | "wrong → right" | "wrong"
    prompt: str  # truncated from the start: "…" + the tail
    output: str
    target: str
    score: float
    reference_output: str | None = None  # for flips: what the reference said
    reference_score: float | None = None


@dataclass
class TaskExamples:
    task: str
    subject: str  # the variant whose answers are shown (the winner, when there is one)
    reference: str | None
    examples: list[Example] = field(default_factory=list)
    flips_to_wrong: int = 0  # totals over the task, of which at most PER_TASK are shown
    flips_to_right: int = 0
    wrong: int = 0
    n: int = 0


def clip_tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def clip_head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def subject_variant(records: list[RunRecord], selection: Selection, samples: Samples) -> str | None:
    """The winner; with no winner, the best-placed other completed variant with samples."""
    if selection.winner and selection.winner in samples:
        return selection.winner
    done = {r.name for r in records if r.status == "completed"}
    for verdict in selection.verdicts:  # sorted best first by the selection
        if verdict.variant in done and verdict.variant in samples and verdict.variant != selection.reference:
            return verdict.variant
    return selection.reference if selection.reference in samples else None


def _example(kind: str, mine: SampleRecord, ref: SampleRecord | None) -> Example:
    return Example(
        id=mine.id, kind=kind, prompt=clip_tail(mine.prompt, PROMPT_CHARS), output=clip_head(mine.output, OUTPUT_CHARS),
        target=clip_head(mine.target, OUTPUT_CHARS), score=mine.score,
        reference_output=clip_head(ref.output, OUTPUT_CHARS) if ref else None,
        reference_score=ref.score if ref else None,
    )


def task_examples(task: str, subject: str, reference: str | None, mine: list[SampleRecord],
                  theirs: list[SampleRecord], per_task: int = PER_TASK) -> TaskExamples:
    """Flips first (the subject's losses, then its gains), then its other wrong answers, in item order."""
    ref_by_id = {s.id: s for s in theirs} if reference and reference != subject else {}
    right = lambda s: s.score >= RIGHT_THRESHOLD  # noqa: E731 (the selection's own McNemar threshold)
    to_wrong = [(s, ref_by_id[s.id]) for s in mine if s.id in ref_by_id and right(ref_by_id[s.id]) and not right(s)]
    to_right = [(s, ref_by_id[s.id]) for s in mine if s.id in ref_by_id and not right(ref_by_id[s.id]) and right(s)]
    flipped = {s.id for s, _ in to_wrong + to_right}
    wrong = [s for s in mine if not right(s)]
    chosen = [_example("right → wrong", s, r) for s, r in to_wrong]
    chosen += [_example("wrong → right", s, r) for s, r in to_right]
    chosen += [_example("wrong", s, ref_by_id.get(s.id)) for s in wrong if s.id not in flipped]
    return TaskExamples(task=task, subject=subject, reference=reference if ref_by_id else None,
                        examples=chosen[:per_task], flips_to_wrong=len(to_wrong), flips_to_right=len(to_right),
                        wrong=len(wrong), n=len(mine))


def examples(records: list[RunRecord], selection: Selection, samples: Samples | None,
             per_task: int = PER_TASK) -> list[TaskExamples]:
    """The report's examples section, one entry per task that has anything to show."""
    if not samples:
        return []
    subject = subject_variant(records, selection, samples)
    if subject is None:
        return []
    reference = selection.reference if selection.reference in samples else None
    by_task: dict[str, list[SampleRecord]] = {}
    for s in samples[subject]:
        by_task.setdefault(s.task, []).append(s)
    ref_by_task: dict[str, list[SampleRecord]] = {}
    for s in samples.get(reference, []) if reference else []:
        ref_by_task.setdefault(s.task, []).append(s)
    ordered = [t for t in task_names(records, selection) if t in by_task] + sorted(
        set(by_task) - set(task_names(records, selection)))
    out = []
    for task in ordered:
        found = task_examples(task, subject, reference, by_task[task], ref_by_task.get(task, []), per_task)
        if found.examples:
            out.append(found)
    return out
