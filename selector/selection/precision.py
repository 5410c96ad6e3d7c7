"""How precise a precision is, and which variant the others are compared against.

Order (most precise first): fp32 > bf16 = fp16 > int8 > 4-bit (and anything narrower). The bit width
comes from the record's precision config (`config["precision"]["bits"]`) when it is there, else from
the precision's name; bf16 and fp16 both rank as 16 bits.
"""

from __future__ import annotations

import re

from selector.records import RunRecord

# Names whose width cannot be read off a digit in the name (or whose digit is not the width).
_KNOWN_BITS = {
    "fp32": 32, "float32": 32, "f32": 32, "full": 32,
    "bf16": 16, "bfloat16": 16, "fp16": 16, "float16": 16, "f16": 16, "half": 16,
    "int8": 8, "llm.int8": 8, "8bit": 8, "fp8": 8,
    "nf4": 4, "fp4": 4, "int4": 4, "4bit": 4, "gptq": 4, "awq": 4,
}  # fmt: skip
_WIDTH = re.compile(r"(?:int|fp|nf|w|q)(\d{1,2})", re.IGNORECASE)  # int8, w4a16, q4_k_m, nf4


def precision_bits(name: str, bits: int | None = None) -> int:
    """Bit width of a precision; 0 when it cannot be told (ranks below everything known)."""
    if bits:
        return int(bits)
    key = name.lower()
    if key in _KNOWN_BITS:
        return _KNOWN_BITS[key]
    match = _WIDTH.search(key)
    if match:
        return int(match.group(1))
    for known, width in _KNOWN_BITS.items():  # "llmc-gptq", "awq-torch", "bnb-8bit" ...
        if known in key:
            return width
    return 0


def record_bits(record: RunRecord) -> int:
    precision = record.config.get("precision")
    bits = precision.get("bits") if isinstance(precision, dict) else None
    return precision_bits(record.variant.precision, bits if isinstance(bits, int) else None)


def record_params(record: RunRecord) -> float:
    """Parameter count; when the record lacks it, estimate from weight bytes and bit width."""
    if record.variant.params > 0:
        return float(record.variant.params)
    bits = record_bits(record)
    if record.memory is not None and bits > 0:
        return record.memory.weight_bytes * 8 / bits
    return 0.0


def reference_name(candidates: list[tuple[str, float, int]]) -> str | None:
    """Of (name, parameters, bits), the largest model at the highest precision; ties by name.
    The one rule for "the reference", whether a sweep plans it or selection finds it."""
    if not candidates:
        return None
    return min(candidates, key=lambda c: (-c[1], -c[2], c[0]))[0]


def pick_reference(records: list[RunRecord]) -> RunRecord | None:
    """The largest completed model at the highest precision present for it; ties by name."""
    completed = {r.name: r for r in records if r.status == "completed" and r.tasks}
    name = reference_name([(r.name, record_params(r), record_bits(r)) for r in completed.values()])
    return completed[name] if name else None


def pick_baseline(record: RunRecord, records: list[RunRecord]) -> RunRecord | None:
    """The same model at the sweep's baseline precision (config `baseline_precision`), else at
    the highest precision present; None for the baseline itself or when nothing else is there."""
    same = [r for r in records if r.status == "completed" and r.tasks and r.variant.model == record.variant.model]
    same = [r for r in same if r.variant.setting == record.variant.setting] or same  # its own serving setting first
    wanted = record.config.get("baseline_precision")
    named = [r for r in same if r.variant.precision == wanted]
    pool = named or same
    if not pool:
        return None
    best = min(pool, key=lambda r: (-record_bits(r), r.name))
    return None if best.name == record.name else best
