"""Server process management with real processes: readiness, early exit, loopback-only, and a stop
that reaches the whole process group (SIGTERM, then SIGKILL for a server that ignores it)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from selector.errors import ConfigError
from selector.engines.served.process import LOOPBACK, ServerProcess, ServerStartError, free_port, render_command

pytestmark = pytest.mark.fast  # make test-fast: a server's process, started and stopped

# A stand-in server: answers 200 on /health, spawns a child (as real servers spawn workers) and
# writes the child's pid where the test can find it; "stubborn" ignores SIGTERM.
SERVER = """
import http.server, signal, subprocess, sys
port, host, mode, pid_file = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(pid_file, "w").write(str(child.pid))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
print("serving", flush=True)
http.server.HTTPServer((host, port), Handler).serve_forever()
"""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def start(tmp_path: Path, host: str = LOOPBACK, mode: str = "plain", **kwargs: float
          ) -> tuple[ServerProcess, Path]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    pid_file = tmp_path / "child.pid"
    port = free_port()
    template = f"{sys.executable} {script} {{port}} {{host}} {mode} {pid_file}"
    argv = render_command(template, {"port": port, "host": host})
    server = ServerProcess(argv, f"http://{LOOPBACK}:{port}", tmp_path / "server.log", ready_timeout_s=30, **kwargs)
    return server, pid_file


def test_ready_then_stopped_with_everything_it_spawned(tmp_path: Path) -> None:
    server, pid_file = start(tmp_path)
    with server:
        assert server.alive()
        child = int(pid_file.read_text())
        assert {p.pid for p in server.processes()} >= {server.pid, child}
        leader = server.pid
    assert gone(leader) and gone(child)
    assert "serving" in (tmp_path / "server.log").read_text()  # its output went to the log file


def test_a_server_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    server, pid_file = start(tmp_path, mode="stubborn", stop_timeout_s=1.0)
    with server:
        child = int(pid_file.read_text())
    t0 = time.monotonic()
    assert gone(server.pid) and gone(child)
    assert server.proc is not None and server.proc.returncode == -9  # SIGKILL
    assert time.monotonic() - t0 < 5


def test_interrupted_it_gets_a_short_grace_then_sigkill(tmp_path: Path) -> None:
    # Ctrl-C or the sweep stopping the worker: the worker has seconds, not stop_timeout_s.
    server, pid_file = start(tmp_path, mode="stubborn", stop_timeout_s=60.0)
    with pytest.raises(KeyboardInterrupt):
        with server:
            child = int(pid_file.read_text())
            t0 = time.monotonic()
            raise KeyboardInterrupt
    assert gone(server.pid) and gone(child) and time.monotonic() - t0 < 10
    assert not server.pgid_file.exists()


def test_a_server_its_worker_left_behind_is_reaped(tmp_path: Path) -> None:
    from selector.processes import reap_servers

    server, pid_file = start(tmp_path, mode="stubborn")
    server.start()  # started, never stopped: as when the worker that started it is killed
    server.wait_ready()
    child = int(pid_file.read_text())
    assert server.pgid_file.read_text() == str(server.pid)
    assert reap_servers(tmp_path) == [server.pid]
    assert server.proc is not None and server.proc.wait(timeout=10) == -9
    deadline = time.monotonic() + 5
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child) and not server.pgid_file.exists()
    assert reap_servers(tmp_path) == []


def test_a_server_listening_beyond_loopback_is_refused_and_stopped(tmp_path: Path) -> None:
    server, pid_file = start(tmp_path, host="0.0.0.0")
    with pytest.raises(ConfigError, match="loopback"):
        with server:
            pass
    assert gone(server.pid) and gone(int(pid_file.read_text()))


def test_a_server_that_exits_early_reports_its_log(tmp_path: Path) -> None:
    argv = render_command(f"{sys.executable} -c \"print('no such model'); raise SystemExit(3)\" {{port}}", {"port": 1})
    server = ServerProcess(argv, "http://127.0.0.1:1", tmp_path / "server.log", ready_timeout_s=30)
    with pytest.raises(ServerStartError, match=r"(?s)status 3.*no such model"):
        with server:
            pass


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    argv = render_command(f"{sys.executable} -c \"import time; time.sleep(60)\" {{port}}", {"port": free_port()})
    server = ServerProcess(argv, "http://127.0.0.1:9", tmp_path / "server.log", ready_timeout_s=1.5)
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match="ready_timeout_s=1.5"):
        with server:
            pass
    assert time.monotonic() - t0 < 15 and gone(server.pid)


def test_a_missing_program_is_a_config_error(tmp_path: Path) -> None:
    argv = render_command("no-such-server-program --port {port}", {"port": 1})
    with pytest.raises(ConfigError, match="no-such-server-program"):
        with ServerProcess(argv, "http://127.0.0.1:1", tmp_path / "server.log"):
            pass


def test_a_port_taken_before_the_server_binds_it_gets_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from selector.engines.served import servers

    script = tmp_path / "server.py"
    script.write_text(SERVER)
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy, free_port()])  # the first pick is taken by someone else by the time it binds
        monkeypatch.setattr(servers, "free_port", lambda: next(ports))
        server = servers.start_servers(
            lambda port: [sys.executable, str(script), str(port), LOOPBACK, "plain", str(tmp_path / "child.pid")],
            [tmp_path / "server.log"], [dict(__import__("os").environ)], 30, 5)[0]
        try:
            assert server.alive() and not server.root_url.endswith(f":{busy}")
        finally:
            server.stop()
    assert "Address already in use" in (tmp_path / "server.log").read_text()  # the first try's log is kept
