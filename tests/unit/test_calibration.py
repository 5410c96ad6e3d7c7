"""Calibration text: sources, seeded packing, hashing, and errors that name file, line and field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from selector.precisions.calibration import (
    BUILTIN_CORPUS,
    CHARS_PER_TOKEN_TARGET,
    calibration_hash,
    calibration_texts,
    evalset_paragraphs,
    pack,
    read_paragraphs,
)
from selector.config import CalibrationConfig
from selector.errors import ConfigError, EvalsetError
from selector.paths import DEFAULT_EVALSET

REPO = Path(__file__).resolve().parents[2]


def test_builtin_gives_num_samples_texts_of_about_seq_len_tokens() -> None:
    cfg = CalibrationConfig(num_samples=16, seq_len=128)
    texts = calibration_texts(cfg, [])
    assert len(texts) == 16
    target = 128 * CHARS_PER_TOKEN_TARGET
    assert all(len(t) >= target for t in texts)
    # packing stops at the first paragraph that reaches the target: never far past it
    longest_paragraph = max(len(p) for p in read_paragraphs(BUILTIN_CORPUS))
    assert all(len(t) < target + longest_paragraph + 2 for t in texts)


def test_same_config_same_texts_and_hash_other_seed_other_texts() -> None:
    cfg = CalibrationConfig(num_samples=8, seq_len=64, seed=0)
    a, b = calibration_texts(cfg, []), calibration_texts(cfg, [])
    assert a == b and calibration_hash(a) == calibration_hash(b)
    other = calibration_texts(CalibrationConfig(num_samples=8, seq_len=64, seed=1), [])
    assert other != a and calibration_hash(other) != calibration_hash(a)


def test_hash_sees_text_boundaries() -> None:
    assert calibration_hash(["ab", "c"]) != calibration_hash(["a", "bc"])
    assert calibration_hash(["x"]) != calibration_hash(["x", ""])
    assert re.fullmatch(r"[0-9a-f]{64}", calibration_hash(["x"]))


def test_pack_cycles_through_every_paragraph_before_repeating() -> None:
    paragraphs = [f"p{i}" * 10 for i in range(10)]  # 20 chars each
    samples = pack(paragraphs, num_samples=10, target_chars=40, seed=3)
    used = [part for s in samples for part in s.split("\n\n")]
    assert sorted(used[:10]) == sorted(paragraphs)  # one full pass first
    assert len(used) == 20 and used[10:] == used[:10]  # then the same seeded order again


def test_builtin_corpus_is_about_a_hundred_paragraphs_of_prose_code_and_numbers() -> None:
    paragraphs = read_paragraphs(BUILTIN_CORPUS)
    assert 90 <= len(paragraphs) <= 200
    assert any(p.startswith("def ") for p in paragraphs)  # some code
    assert sum(bool(re.search(r"\d", p)) for p in paragraphs) >= 10  # some numbers
    assert len(set(paragraphs)) == len(paragraphs)


def test_builtin_corpus_shares_no_text_with_the_default_eval_set() -> None:
    corpus = BUILTIN_CORPUS.read_text(encoding="utf-8").lower()
    for path in sorted(DEFAULT_EVALSET.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for name, value in row.items():
                if isinstance(value, str) and len(value) >= 24 and name != "id":
                    assert value.lower() not in corpus, f"{path.name}: field {name} appears in the corpus"


def test_file_source_txt_splits_on_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "cal.txt"
    path.write_text("first paragraph\nstill first\n\n  \nsecond\n\n\nthird\n", encoding="utf-8")
    assert read_paragraphs(path) == ["first paragraph\nstill first", "second", "third"]
    texts = calibration_texts(CalibrationConfig(source="file", path=str(path), num_samples=3, seq_len=8), [])
    assert len(texts) == 3 and all(t for t in texts)


def test_file_source_jsonl_reads_text_fields(tmp_path: Path) -> None:
    path = tmp_path / "cal.jsonl"
    path.write_text('{"text": "alpha"}\n\n{"text": "beta", "other": 1}\n', encoding="utf-8")
    assert read_paragraphs(path) == ["alpha", "beta"]


def test_jsonl_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n{"body": "no text"}\n', encoding="utf-8")
    with pytest.raises(EvalsetError) as info:
        read_paragraphs(path)
    assert info.value.line == 2 and info.value.field == "text" and "bad.jsonl:2" in str(info.value)
    path.write_text('{"text": "fine"}\n{not json\n', encoding="utf-8")
    with pytest.raises(EvalsetError, match=r"bad.jsonl:2: not valid JSON"):
        read_paragraphs(path)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(EvalsetError, match="not found"):
        read_paragraphs(tmp_path / "missing.txt")
    (tmp_path / "cal.csv").write_text("a,b\n")
    with pytest.raises(EvalsetError, match=r"\.txt .* or \.jsonl"):
        read_paragraphs(tmp_path / "cal.csv")
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    with pytest.raises(EvalsetError, match="no text"):
        read_paragraphs(tmp_path / "empty.txt")


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (CalibrationConfig(source="web"), "source"),
        (CalibrationConfig(source="file", path=None), "path"),
        (CalibrationConfig(num_samples=0), "num_samples"),
        (CalibrationConfig(seq_len=2), "seq_len"),
    ],
)
def test_bad_config_names_the_field(cfg: CalibrationConfig, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        calibration_texts(cfg, [])
    assert info.value.field == field


def test_evalset_source_uses_the_items_string_fields() -> None:
    from selector.tasks import load_evalset

    tasks = load_evalset(DEFAULT_EVALSET, ["extraction", "arithmetic"], limit=3)
    paragraphs = evalset_paragraphs(tasks)
    assert len(paragraphs) == 6
    first = tasks[0].items[0].fields
    assert all(v in paragraphs[0] for v in first.values() if v.strip())
    texts = calibration_texts(CalibrationConfig(source="evalset", num_samples=4, seq_len=32), tasks)
    assert len(texts) == 4
    joined = "\n\n".join(texts)
    assert any(p in joined for p in paragraphs)


def test_evalset_source_without_text_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no text"):
        calibration_texts(CalibrationConfig(source="evalset"), [])
