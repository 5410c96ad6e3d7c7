"""Coverage-guided fuzzing (atheris) of the eval-set loader and prompt building.

    python tests/fuzz/fuzz_evalset.py -runs=20000       # or -max_total_time=60

Each input becomes a task YAML plus a JSONL data file in a fresh folder; loading it and building
every prompt must either work, with fields reaching prompts literally, or raise EvalsetError.
Any other exception is a bug (a crash report and the input are written by libFuzzer).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

# Only selector's own modules get coverage instrumentation: instrumenting the libraries they pull in
# (numpy, jinja2, pydantic, ...) multiplies memory and slows every input without finding our bugs.
with atheris.instrument_imports(include=["selector"]):
    from selector.errors import EvalsetError
    from selector.tasks import build_requests, load_evalset

HEADERS = [
    "type: generate\ndata: d.jsonl\nprompt: 'Q: {{ q }}'\ntarget: '{{ a }}'\n",
    "type: multiple_choice\ndata: d.jsonl\nprompt: '{{ q }}'\ntarget: '{{ a }}'\nchoices: [x, y]\n",
    "type: generate\ndata: d.jsonl\nprompt: {chat: '{{ q }}', plain: 'Q {{ q }}'}\ntarget: '{{ a }}'\nmetric: numeric\n",
]


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    header = HEADERS[fdp.ConsumeIntInRange(0, len(HEADERS) - 1)]
    extra_yaml = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
    rows = fdp.ConsumeBytes(fdp.remaining_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "t.yaml").write_bytes(header.encode() + extra_yaml)
        (folder / "d.jsonl").write_bytes(rows)
        try:
            tasks = load_evalset(folder)
        except EvalsetError:
            return
        for task in tasks:
            for style in ("chat", "plain"):
                build_requests(task, "m", style)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
