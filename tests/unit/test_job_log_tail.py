"""The crash record's log tail: whole lines, however the worker's output was chunked."""

from __future__ import annotations

from selector.sweep.supervise import LogTail


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
