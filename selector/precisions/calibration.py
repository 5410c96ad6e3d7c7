"""Calibration text for GPTQ/AWQ: where it comes from, how it is packed, and its hash.

Sources (CalibrationConfig.source):
- `builtin`: selector/precisions/calibration_corpus/builtin.txt, everyday prose, some code and some numbers,
  written for this project and sharing no text with any eval set (so calibration cannot leak answers);
- `evalset`: the loaded eval set's own items (their string fields joined), for users who want the
  quantizer to see their domain, accepting that it has then seen the test items;
- `file`: a .txt file (paragraphs separated by blank lines) or a .jsonl file with a "text" field.

The paragraphs are shuffled with `seed` and packed, in that order and cycling when they run out, into
exactly `num_samples` texts of about `seq_len` tokens each (the quantizer truncates each to `seq_len`
tokens). Packing short paragraphs into long samples is what GPTQ/AWQ calibration usually does with
web text; when the corpus holds fewer than num_samples x seq_len tokens, paragraphs recur, in
different neighbours. Everything is a pure function of the config and the files: same config, same
texts, same hash, so a quantized artifact can be keyed by it.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any, Iterable

from selector.config import CalibrationConfig
from selector.errors import ConfigError, EvalsetError

BUILTIN_CORPUS = Path(__file__).resolve().parent / "calibration_corpus" / "builtin.txt"
SOURCES = ("builtin", "evalset", "file")
# Characters per token is ~4 for English prose and less for code and numbers; aiming a little over
# seq_len tokens means most samples fill their whole window once the quantizer truncates them.
CHARS_PER_TOKEN_TARGET = 5


def calibration_texts(cfg: CalibrationConfig, tasks: Iterable[Any] = ()) -> list[str]:
    """`cfg.num_samples` texts of about `cfg.seq_len` tokens, deterministic given cfg.seed."""
    _check(cfg)
    if cfg.source == "builtin":
        paragraphs = read_paragraphs(BUILTIN_CORPUS)
    elif cfg.source == "evalset":
        paragraphs = evalset_paragraphs(tasks)
        if not paragraphs:
            raise ConfigError("conf/calibration", "source", "source=evalset but the eval set has no text fields")
    else:
        paragraphs = read_paragraphs(Path(cfg.path))  # type: ignore[arg-type]
    return pack(paragraphs, cfg.num_samples, cfg.seq_len * CHARS_PER_TOKEN_TARGET, cfg.seed)


def calibration_hash(texts: list[str]) -> str:
    """sha256 over the texts, in order, with their boundaries (hex)."""
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def pack(paragraphs: list[str], num_samples: int, target_chars: int, seed: int) -> list[str]:
    """Shuffle the paragraphs with `seed` and concatenate them into `num_samples` texts."""
    order = list(paragraphs)
    random.Random(seed).shuffle(order)
    samples: list[str] = []
    pos = 0
    for _ in range(num_samples):
        parts: list[str] = []
        size = -2  # no separator before the first part
        while size < target_chars:
            parts.append(order[pos % len(order)])
            size += 2 + len(parts[-1])  # "\n\n" + paragraph
            pos += 1
        samples.append("\n\n".join(parts))
    return samples


def read_paragraphs(path: Path) -> list[str]:
    """Paragraphs of a .txt file (blank-line separated) or the "text" fields of a .jsonl file."""
    if not path.is_file():
        raise EvalsetError(str(path), None, None, "calibration file not found")
    if path.suffix.lower() == ".jsonl":
        return _jsonl_texts(path)
    if path.suffix.lower() != ".txt":
        raise EvalsetError(str(path), None, None, "calibration file must be .txt (blank-line separated) or .jsonl")
    paragraphs, lines = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            lines.append(line)
        elif lines:  # a blank (or whitespace-only) line ends a paragraph
            paragraphs.append("\n".join(lines))
            lines = []
    if lines:
        paragraphs.append("\n".join(lines))
    if not paragraphs:
        raise EvalsetError(str(path), None, None, "calibration file holds no text")
    return paragraphs


def _jsonl_texts(path: Path) -> list[str]:
    texts = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise EvalsetError(str(path), line_no, None, f"not valid JSON: {e.msg}") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise EvalsetError(str(path), line_no, "text", "each line must be an object with a string 'text'")
        if row["text"].strip():
            texts.append(row["text"])
    if not texts:
        raise EvalsetError(str(path), None, "text", "calibration file holds no text")
    return texts


def evalset_paragraphs(tasks: Iterable[Any]) -> list[str]:
    """One paragraph per eval item: its string fields joined with newlines, in file order."""
    paragraphs = []
    for task in tasks:
        for item in getattr(task, "items", []):
            fields = getattr(item, "fields", None) or {}
            text = "\n".join(v for v in fields.values() if isinstance(v, str) and v.strip())
            if text:
                paragraphs.append(text)
    return paragraphs


def _check(cfg: CalibrationConfig) -> None:
    where = "conf/calibration"
    if cfg.source not in SOURCES:
        known = ", ".join(SOURCES)
        raise ConfigError(where, "source", f"unknown calibration source {cfg.source!r}: use one of {known}")
    if cfg.source == "file" and not cfg.path:
        raise ConfigError(where, "path", "source=file needs a path to a .txt or .jsonl file")
    if cfg.num_samples < 1:
        raise ConfigError(where, "num_samples", f"must be at least 1, got {cfg.num_samples}")
    if cfg.seq_len < 8:
        raise ConfigError(where, "seq_len", f"must be at least 8 tokens, got {cfg.seq_len}")
