"""Run untrusted Python (model-written code) in a separate, limited process.

What the sandbox does, in layers (each one is used where this machine allows it; `isolation()`
names the active ones, and each run's result carries them):
- "scrubbed-env": a fresh `python -I` process (isolated mode: no user site, no PYTHON* variables)
  in a new empty temporary folder that is removed afterwards, with an environment holding only
  PATH, LANG and TMPDIR (the run's folder), so no tokens or secrets reach it;
- "rlimits": limits set with `resource.setrlimit` before exec: CPU seconds (RLIMIT_CPU), address
  space (RLIMIT_AS), size of any file it writes, stdout included (RLIMIT_FSIZE), number of
  processes of its user (RLIMIT_NPROC, stops fork bombs) and of open files (RLIMIT_NOFILE); no core
  dumps;
- "process-group": its own session and process group, killed whole (SIGKILL) on timeout and after
  it exits;
- "unprivileged-user": when this process runs as root, the code runs as `nobody` instead (root
  ignores RLIMIT_NPROC and may write anywhere);
- where unprivileged user namespaces work, `unshare` puts it in new user and network namespaces
  and, where selector/tasks/sandbox_init.py can set them up from inside, new mount and PID namespaces;
  the program then runs as uid 65534 of a nested user namespace, without capabilities, so it
  cannot undo them:
  - "no-network": an empty network namespace (only a loopback that is down);
  - "pid-namespace": the program is PID 1 of its own PID namespace, so when it exits or is killed
    the kernel kills every process it started, setsid() or not; it sees only those in /proc. As
    PID 1 it ignores signals it has no handler for (a SIGTERM to itself does nothing);
  - "read-only-fs" (Linux 5.12+): every mount is read-only except the run's folder, where TMPDIR
    points, and a private 16 MiB /dev/shm (for multiprocessing); /tmp and home folders included.
  Where these do not work, the layers before them still apply, and `isolation()` lacks the names.

What it does not do: the program can read whatever its user can read (the file system is visible,
only not writable). Without "read-only-fs" it can write (files up to the size limit) wherever its
user may; without "pid-namespace" a child that calls setsid() leaves the process group, is not
killed with it and outlives the run (it keeps its own CPU limit).
"""

from __future__ import annotations

import functools
import math
import os
import pwd
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

_NET_ONLY = ("unshare", "--user", "--map-root-user", "--net")
_ALL_NAMESPACES = (*_NET_ONLY, "--mount", "--pid")  # sandbox_init forks PID 1 and mounts its /proc
_INIT = Path(__file__).with_name("sandbox_init.py")


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # exited 0 within its limits
    returncode: int | None  # negative: killed by that signal; None: killed at the wall-clock timeout
    timed_out: bool  # killed for running past its wall-clock or CPU limit
    stdout_tail: str
    stderr_tail: str
    duration_s: float = 0.0
    isolation: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Setup:
    interpreter: str
    user: int | None  # uid to run as (None: our own)
    group: int | None
    wrapper: tuple[str, ...]  # unshare and its options, or nothing
    init: str | None  # None: no sandbox_init; "1"/"0": run it with a read-only file system or not
    features: tuple[str, ...]

    def argv(self, folder: Path, script: str) -> list[str]:
        if self.init is None:
            return [*self.wrapper, self.interpreter, "-I", script]
        init = [self.interpreter, "-I", "-S", "-c", _init_source(), str(folder), self.init, self.interpreter, script]
        return [*self.wrapper, *init]


def run_python(
    code: str,
    timeout_s: float = 10,
    memory_mb: int = 512,
    *,
    cpu_s: float | None = None,
    max_file_mb: int = 16,
    max_processes: int = 32,
    max_open_files: int = 64,
    tail_chars: int = 2000,
) -> SandboxResult:
    """Run `code` as a script in the sandbox; passed means exit status 0 within the limits."""
    setup = _setup()
    cpu_limit = max(1, math.ceil(cpu_s if cpu_s is not None else timeout_s))
    workdir = Path(tempfile.mkdtemp(prefix="selector-sandbox-"))
    try:
        script = workdir / "main.py"
        script.write_text(code, encoding="utf-8")
        if setup.user is not None:
            os.chown(workdir, setup.user, setup.group if setup.group is not None else -1)
        limits = _limits(
            cpu_limit,
            memory_mb,
            max_file_mb,
            max_open_files,
            processes=max_processes + _tasks_of_user(setup.user if setup.user is not None else os.getuid()),
        )
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            started = time.monotonic()
            proc = subprocess.Popen(
                setup.argv(workdir, script.name),
                cwd=workdir,
                env=_scrubbed_env(workdir),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                close_fds=True,
                start_new_session=True,
                preexec_fn=functools.partial(_apply_limits, limits),
                user=setup.user,
                group=setup.group,
                extra_groups=[] if setup.user is not None else None,
            )
            exited = _wait_without_reaping(proc.pid, timeout_s)
            _kill_group(proc.pid)  # the leader is not reaped yet, so its group id cannot be reused
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = returncode = os.waitstatus_to_exitcode(status)
            duration = time.monotonic() - started
            # PID 1 of a namespace ignores SIGXCPU: the CPU limit then ends it with SIGKILL a second later
            out_of_cpu = returncode == -signal.SIGXCPU or (
                returncode == -signal.SIGKILL and usage.ru_utime + usage.ru_stime >= cpu_limit)
            return SandboxResult(
                passed=exited and returncode == 0 and not out_of_cpu,
                returncode=returncode if exited else None,
                timed_out=not exited or out_of_cpu,
                stdout_tail=_tail(out, tail_chars),
                stderr_tail=_tail(err, tail_chars),
                duration_s=round(duration, 3),
                isolation=setup.features,
            )
    finally:
        _remove_tree(workdir)


def isolation() -> tuple[str, ...]:
    """The isolation layers active on this machine, e.g. ("rlimits", ..., "pid-namespace", "read-only-fs")."""
    return _setup().features


# ---- limits ----


def _limits(cpu_s: int, memory_mb: int, file_mb: int, open_files: int, processes: int) -> list[tuple[int, int]]:
    return [
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_AS, memory_mb * 1024 * 1024),
        (resource.RLIMIT_FSIZE, file_mb * 1024 * 1024),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_NPROC, processes),
        (resource.RLIMIT_CORE, 0),
    ]


def _apply_limits(limits: list[tuple[int, int]]) -> None:
    """Runs in the child between fork and exec (after the uid switch): lower soft and hard limits."""
    for which, value in limits:
        hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU first, SIGKILL 1 s later
        resource.setrlimit(which, (value, hard))


def _tasks_of_user(uid: int) -> int:
    """Threads the user already runs: RLIMIT_NPROC counts all of them, not only the sandbox's."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1").strip())
    return count


# ---- process handling ----


def _wait_without_reaping(pid: int, timeout_s: float) -> bool:
    """Wait until the process exits (True) or the timeout passes (False); leave it unreaped.

    A pidfd wakes us the moment it exits; sleep-polling (before Linux 5.3) adds up to its last
    sleep to every run, 30 ms for a run of 35 ms."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return _poll_without_reaping(pid, timeout_s)
    try:
        watch = select.poll()
        watch.register(pidfd, select.POLLIN)
        return bool(watch.poll(max(0, math.ceil(timeout_s * 1000))))
    finally:
        os.close(pidfd)


def _poll_without_reaping(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        if info is not None:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.05)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(stream, chars: int) -> str:  # type: ignore[no-untyped-def]
    size = stream.seek(0, os.SEEK_END)
    stream.seek(max(0, size - chars * 4))  # up to 4 bytes a character in UTF-8
    return stream.read().decode("utf-8", errors="replace")[-chars:]


def _remove_tree(path: Path) -> None:
    """Remove the work folder even if the code made parts of it unreadable."""
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        for root, dirs, _ in os.walk(path):
            for name in dirs:
                try:
                    os.chmod(os.path.join(root, name), 0o700)
                except OSError:
                    pass
        shutil.rmtree(path, ignore_errors=True)


def _scrubbed_env(folder: Path) -> dict[str, str]:
    # TMPDIR: temporary files go to the run's folder, the one place it may write, removed afterwards
    return {"PATH": os.environ.get("PATH", os.defpath), "LANG": os.environ.get("LANG", "C.UTF-8"),
            "TMPDIR": str(folder)}


# ---- what this machine allows (probed once per process) ----


@functools.lru_cache(maxsize=1)
def _setup() -> _Setup:
    user = group = None
    interpreter = sys.executable
    features = ["rlimits", "process-group", "scrubbed-env"]
    if os.geteuid() == 0:
        dropped = _unprivileged_identity()
        if dropped is not None:
            user, group, interpreter = dropped
    if user is not None or os.geteuid() != 0:
        features.append("unprivileged-user")  # RLIMIT_NPROC holds only for non-root users
    # The strongest wrapper whose probe passes: each probe checks what its features claim.
    options: list[tuple[tuple[str, ...], str | None, list[str]]] = [
        (_ALL_NAMESPACES, "1", ["no-network", "pid-namespace", "read-only-fs"]),
        (_ALL_NAMESPACES, "0", ["no-network", "pid-namespace"]),  # kernels before 5.12: no mount_setattr
        (_NET_ONLY, None, ["no-network"]),
    ]
    if shutil.which("unshare"):
        for wrapper, init, extra in options:
            candidate = _Setup(interpreter, user, group, wrapper, init, tuple(features + extra))
            if _probe(candidate):
                return candidate
    return _Setup(interpreter, user, group, (), None, tuple(features))


_PROBE_CHECKS = {
    "pid-namespace": "assert os.getpid() == 1",
    # its own folder is writable, the world-writable temporary folder around it is not
    "read-only-fs": "assert os.access('.', os.W_OK) and not os.access('..', os.W_OK)",
}


def _probe(setup: _Setup) -> bool:
    """Whether a program run through `setup` exits 0 and sees the isolation its features claim."""
    code = "import os\n" + "\n".join(check for name, check in _PROBE_CHECKS.items() if name in setup.features)
    folder = Path(tempfile.mkdtemp(prefix="selector-sandbox-probe-"))
    try:
        (folder / "main.py").write_text(code, encoding="utf-8")
        if setup.user is not None:
            os.chown(folder, setup.user, setup.group if setup.group is not None else -1)
        return _runs(setup.argv(folder, "main.py"), setup.user, setup.group, folder)
    finally:
        _remove_tree(folder)


@functools.lru_cache(maxsize=1)
def _init_source() -> str:
    return _INIT.read_text(encoding="utf-8")


def _unprivileged_identity() -> tuple[int, int, str] | None:
    """(uid, gid, interpreter) of `nobody` with a Python it can execute, or None."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return None
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), os.path.realpath(sys.executable)]
    candidates.append(shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "")
    for candidate in dict.fromkeys(c for c in candidates if c):
        if _runs([candidate, "-I", "-c", "pass"], nobody.pw_uid, nobody.pw_gid, Path(tempfile.gettempdir())):
            return nobody.pw_uid, nobody.pw_gid, candidate
    return None


def _runs(argv: list[str], user: int | None, group: int | None, folder: Path) -> bool:
    """Whether `argv` starts and exits 0 as the given user, in `folder`."""
    try:
        done = subprocess.run(
            argv,
            env=_scrubbed_env(folder),
            cwd=folder,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0
