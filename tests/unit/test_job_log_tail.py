"""The crash record's log tail: whole lines, however the worker's output was chunked."""

from __future__ import annotations

from selector.variant.supervise import LogTail


def test_lines_split_across_chunks_are_joined() -> None:
    tail = LogTail(lines=3)
    for chunk in [b"Fatal Python error: Segm", b"entation fault\n\nExtension modules: ", b"torch._C", b", numpy",
                  b" (total: 2)\n"]:
        tail.feed(chunk)
    assert tail.text() == "Fatal Python error: Segmentation fault\nExtension modules: torch._C, numpy (total: 2)\n"


def test_only_the_last_lines_are_kept_and_long_lines_are_cut() -> None:
    tail = LogTail(lines=2, line_chars=5)
    tail.feed(b"one\ntwo\nthree\n")
    tail.feed(b"abcdefghij\nno newline yet")
    assert tail.text() == "three\nabcde\ne yet"  # an unfinished line keeps its latest characters


def test_a_multibyte_character_split_between_chunks_survives() -> None:
    tail = LogTail()
    data = "température 42°C\n".encode()
    tail.feed(data[:5])
    tail.feed(data[5:])
    assert tail.text() == "température 42°C\n"


def test_progress_bar_carriage_returns_become_lines() -> None:
    tail = LogTail()
    tail.feed(b"evaluate  10%\revaluate 100%\n")
    assert tail.text() == "evaluate  10%\nevaluate 100%\n"


def test_the_console_gets_selectors_lines_and_its_bar_not_the_libraries_output() -> None:
    from selector.variant.supervise import ConsoleFilter

    console = ConsoleFilter()
    chunks = [b"[2026-12-01 10:00:00,1][selector.variant.pipeline][INFO] - stage load: m/gptq\n",
              b"INFO  | gptqmodel | layer 3/28 | loss 0.0012\n", b"Loading weights: 50%|##   \r",
              b"\revaluate m/gptq:  10%|#   | 1/10", b"\revaluate m/gptq:  20%|##  | 2/10\n",
              b"[2026-12-01 10:00:01,2][gptqmodel][INFO] - packing\n",
              b"[2026-12-01 10:00:02,3][selector][WARN", b"ING] - fidelity: skipped\n", b"partial line, no end"]
    shown = "".join(console.feed(c) for c in chunks)
    assert shown == ("[2026-12-01 10:00:00,1][selector.variant.pipeline][INFO] - stage load: m/gptq\n"
                     "evaluate m/gptq:  10%|#   | 1/10\revaluate m/gptq:  20%|##  | 2/10\n"
                     "[2026-12-01 10:00:02,3][selector][WARNING] - fidelity: skipped\n")
