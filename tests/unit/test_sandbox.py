"""The code sandbox against hostile programs: each runs for real in a subprocess."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from selector.tasks.sandbox import isolation, run_python

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs POSIX resource limits")


def test_passing_assertion_passes_and_returns_stdout() -> None:
    result = run_python("def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\nprint('all good')")
    assert result.passed and result.returncode == 0 and not result.timed_out
    assert result.stdout_tail == "all good\n"


def test_failing_assertion_fails_with_its_traceback() -> None:
    result = run_python("assert 1 + 1 == 3, 'arithmetic is broken'")
    assert not result.passed and result.returncode == 1 and not result.timed_out
    assert "AssertionError: arithmetic is broken" in result.stderr_tail


def test_syntax_error_fails() -> None:
    result = run_python("def broken(:\n    pass")
    assert not result.passed and "SyntaxError" in result.stderr_tail


def test_infinite_loop_is_killed_at_the_timeout() -> None:
    started = time.monotonic()
    result = run_python("while True:\n    pass", timeout_s=1.5)
    assert not result.passed and result.timed_out
    assert time.monotonic() - started < 6


def test_cpu_limit_stops_a_busy_loop_before_the_wall_clock() -> None:
    result = run_python("while True:\n    pass", timeout_s=20, cpu_s=1)
    assert not result.passed and result.timed_out
    assert result.duration_s < 10


def test_sleeping_program_is_killed_at_the_timeout() -> None:
    result = run_python("import time\ntime.sleep(60)", timeout_s=1)
    assert result.timed_out and not result.passed and result.returncode is None


def test_unbounded_allocation_hits_the_memory_limit() -> None:
    result = run_python("blocks = []\nwhile True:\n    blocks.append(bytearray(10_000_000))", memory_mb=256, timeout_s=20)
    assert not result.passed and not result.timed_out
    assert "MemoryError" in result.stderr_tail


def test_one_huge_allocation_fails() -> None:
    result = run_python("x = bytearray(8 * 1024 ** 3)\nprint('allocated')", memory_mb=256)
    assert not result.passed and "allocated" not in result.stdout_tail


@pytest.mark.skipif("unprivileged-user" not in isolation(), reason="RLIMIT_NPROC does not bind root")
def test_fork_bomb_is_stopped_by_the_process_limit() -> None:
    started = time.monotonic()
    result = run_python("import os\nwhile True:\n    os.fork()", timeout_s=15, max_processes=16)
    assert not result.passed
    assert "Resource temporarily unavailable" in result.stderr_tail or "BlockingIOError" in result.stderr_tail
    assert time.monotonic() - started < 15


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie is dead, only not reaped yet


def test_background_child_is_killed_with_the_group_when_the_program_exits() -> None:
    code = "import os, time\npid = os.fork()\nif pid == 0:\n    time.sleep(60)\n    os._exit(0)\nprint(pid)\n"
    result = run_python(code)
    assert result.passed
    child = int(result.stdout_tail.strip())
    deadline = time.monotonic() + 3
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_big_file_in_its_own_folder_is_cut_by_the_file_size_limit() -> None:
    code = "with open('big.bin', 'wb') as f:\n    f.write(b'x' * (64 * 1024 * 1024))"
    result = run_python(code, max_file_mb=4)
    assert not result.passed and "File too large" in result.stderr_tail


def test_cannot_write_a_big_file_outside_its_folder(tmp_path: Path) -> None:
    target = tmp_path / "outside.bin"
    code = f"with open({str(target)!r}, 'wb') as f:\n    f.write(b'x' * (64 * 1024 * 1024))"
    result = run_python(code, max_file_mb=4)
    assert not result.passed
    # Either the folder is not writable for the sandbox's user, or the size limit cut the file.
    assert not target.exists() or target.stat().st_size <= 4 * 1024 * 1024


def test_flood_of_output_is_bounded() -> None:
    result = run_python("import sys\nsys.stdout.write('y' * (64 * 1024 * 1024))", max_file_mb=2, tail_chars=100)
    assert not result.passed
    assert len(result.stdout_tail) == 100 and set(result.stdout_tail) == {"y"}


def test_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "secret-token-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    result = run_python("import os\nprint(sorted(os.environ))")
    assert result.passed
    names = eval(result.stdout_tail)  # a list of names printed by our own code
    assert set(names) <= {"PATH", "LANG", "LC_CTYPE"}


def test_runs_in_a_fresh_empty_folder_that_is_removed() -> None:
    result = run_python("import os\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))\nopen('left.txt', 'w').write('x')")
    assert result.passed
    cwd, listing = result.stdout_tail.splitlines()
    assert listing == "['main.py']"
    assert not Path(cwd).exists()


def test_network_is_isolated_when_the_machine_allows() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        code = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')"
        result = run_python(code)
    finally:
        server.close()
    if "no-network" in isolation():
        assert not result.passed and "connected" not in result.stdout_tail
        assert "OSError" in result.stderr_tail or "Error" in result.stderr_tail
    else:  # documented: without user namespaces the network is not isolated
        assert result.passed


def test_result_names_the_active_isolation() -> None:
    result = run_python("pass")
    assert result.isolation == isolation()
    assert {"rlimits", "process-group", "scrubbed-env"} <= set(result.isolation)
