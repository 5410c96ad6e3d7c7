"""Start a model server from a command template, wait until it answers, stop it whatever happens.

The server runs in its own session (process group), so stopping it reaches every process it
spawned: SIGTERM to the group, then SIGKILL after a grace period. On Linux it also gets SIGTERM if
the process that started it dies (a worker killed for its time limit leaves no server behind).
It must listen on loopback only; its output goes to a log file in the job folder.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import psutil

from selector.errors import ConfigError
from selector.engines.spec import ServerDiedError
from selector.processes import die_with_parent, signal_group

log = logging.getLogger("selector.engines.served.process")

LOOPBACK = "127.0.0.1"
PLACEHOLDERS = ("model_path", "port", "host", "dtype", "served_model")
INTERRUPTED_GRACE_S = 3.0


class ServerStartError(RuntimeError):
    """The server exited, or did not answer in time; the message ends with its log's last lines."""


def free_port() -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def render_command(template: str, values: Mapping[str, object]) -> list[str]:
    """argv for a template such as "vllm serve {model_path} --port {port}".

    Each value is shell-quoted before it is substituted, so a path with spaces stays one argument;
    the result is split like a shell would but never run through one.
    """
    where = "engine.server_command"
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        raise ConfigError(where, problem=f"cannot read the template {template!r}: {e}") from None
    unknown = sorted(n for n in names if n not in PLACEHOLDERS)
    if unknown:
        raise ConfigError(where, problem=f"unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)}; "
                                         f"known: {', '.join('{' + n + '}' for n in PLACEHOLDERS)}")
    if "port" not in names:
        raise ConfigError(where, problem="the template must pass {port} to the server (the harness picks a free "
                                         "loopback port per variant)")
    quoted = {k: shlex.quote(str(v)) for k, v in values.items()}
    argv = shlex.split(template.format(**quoted))
    if not argv:
        raise ConfigError(where, problem="the template is empty")
    # A console script installed next to this Python (a virtualenv that is not activated) is found too.
    beside = Path(sys.executable).parent / argv[0]
    if shutil.which(argv[0]) is None and "/" not in argv[0] and beside.exists():
        argv[0] = str(beside)
    return argv


class ServerProcess:
    """A server started from argv; `with ServerProcess(...) as s:` starts it, waits for it, stops it."""

    def __init__(
        self,
        argv: list[str],
        root_url: str,
        log_path: Path,
        ready_timeout_s: float = 600.0,
        stop_timeout_s: float = 20.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv, self.root_url = argv, root_url.rstrip("/")
        self.log_path = Path(log_path)
        self.ready_timeout_s, self.stop_timeout_s = ready_timeout_s, stop_timeout_s
        self.env = dict(env) if env is not None else None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> ServerProcess:
        self.start()
        try:
            self.wait_ready()
            self.check_loopback_only()
        except BaseException as e:
            self.stop(interrupted=not isinstance(e, Exception))
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.stop(interrupted=exc_type is not None and not issubclass(exc_type, Exception))

    @property
    def pgid_file(self) -> Path:
        """Names the server's process group while it runs, so the sweep can kill the group if the
        worker dies without stopping it (selector.processes.reap_servers)."""
        return self.log_path.with_suffix(".pgid")

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"$ {shlex.join(self.argv)}\n".encode())
            out.flush()
            try:
                self.proc = subprocess.Popen(
                    self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM), env=self.env,
                )
            except OSError as e:
                raise ConfigError("engine.server_command", problem=f"cannot start {self.argv[0]!r}: {e}") from None
        self.pgid_file.write_text(str(self.proc.pid))
        log.info("started server pid %d: %s (log: %s)", self.proc.pid, shlex.join(self.argv), self.log_path)

    def wait_ready(self) -> None:
        """Poll /health (and /v1/models) until one answers 200; fail fast if the server exits."""
        assert self.proc is not None
        urls = (f"{self.root_url}/health", f"{self.root_url}/v1/models")
        deadline = time.monotonic() + self.ready_timeout_s
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while True:
                if self.proc.poll() is not None:
                    raise ServerStartError(f"the server exited with status {self.proc.returncode} before it was "
                                           f"ready{self._log_tail()}")
                for url in urls:
                    try:
                        if client.get(url).status_code == 200:
                            log.info("server ready at %s", self.root_url)
                            return
                    except httpx.HTTPError:
                        pass
                if time.monotonic() > deadline:
                    raise ServerStartError(f"the server did not answer at {self.root_url} within "
                                           f"engine.ready_timeout_s={self.ready_timeout_s:g} s{self._log_tail()}")
                time.sleep(0.5)

    def check_loopback_only(self) -> None:
        """Refuse a server that listens beyond this machine (e.g. a template with --host 0.0.0.0)."""
        for proc in self.processes():
            try:
                conns = proc.net_connections(kind="inet")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            for c in conns:
                if c.status == psutil.CONN_LISTEN and not _is_loopback(c.laddr.ip):
                    raise ConfigError("engine.server_command",
                                      problem=f"the server listens on {c.laddr.ip}:{c.laddr.port}; a server the "
                                              "harness starts must listen on loopback only (pass --host {host})")

    def processes(self) -> list[psutil.Process]:
        """The server and everything it spawned (for CPU accounting and the loopback check)."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, interrupted: bool = False) -> None:
        """SIGTERM the whole process group; SIGKILL whatever is left after stop_timeout_s.
        interrupted (Ctrl-C, the sweep stopping the worker): a grace of INTERRUPTED_GRACE_S only,
        inside the time the sweep gives the worker before it kills it (vLLM still starting up
        can take longer than that to act on SIGTERM)."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # the leader of its own session: its pid is the group id
        spawned = [p for p in self.processes() if p.pid != pgid]  # found while still attached to the leader
        grace = min(self.stop_timeout_s, INTERRUPTED_GRACE_S) if interrupted else self.stop_timeout_s
        deadline = time.monotonic() + grace
        signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log.warning("server pid %d ignored SIGTERM for %.0f s", pgid, grace)
        # Its workers get the rest of the grace period to finish on their own.
        left = _still_running(spawned, timeout_s=max(0.5, deadline - time.monotonic()))
        if self.proc.poll() is None or left:
            signal_group(pgid, signal.SIGKILL)
            for p in left:  # also those that left the group (setsid)
                with contextlib.suppress(psutil.Error):
                    p.kill()
            self.proc.wait(timeout=10)
            _still_running(spawned, timeout_s=5.0)  # signals arrive asynchronously
        self.pgid_file.unlink(missing_ok=True)
        log.info("stopped server pid %d (exit status %s)", pgid, self.proc.returncode)

    def check_alive(self, during: str, grace_s: float = 0.0) -> None:
        """ServerDiedError if the server has exited (with its status and its log's last lines).
        grace_s: how long to wait for an exit under way; a dying process closes its sockets (the
        client's requests fail) before the kernel reports it exited, later on a busy machine."""
        if self.proc is None:
            return
        if grace_s > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        if self.proc.poll() is not None:
            raise ServerDiedError(f"the server exited with status {self.proc.returncode} during {during}"
                                  f"{self._log_tail()}")

    def _log_tail(self, lines: int = 25) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"; last lines of {self.log_path}:\n" + "\n".join(tail) if tail else ""


def _still_running(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of `procs` still running after waiting up to timeout_s (a zombie counts as gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _is_loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip in ("::1", "::ffff:127.0.0.1")
