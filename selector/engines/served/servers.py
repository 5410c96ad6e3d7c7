"""Starting the servers of one variant: each on a free loopback port, all at once, every one stopped
if any fails to come up or the caller is interrupted (engines/vllm/engine.py and engines/served/command.py start
theirs through here; engines/served/process.py runs one)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from selector.engines.served.process import LOOPBACK, ServerProcess, ServerStartError, free_port

log = logging.getLogger("selector.engines.served.servers")


PORT_TRIES = 3


def log_paths(log_dir: Path, instances: int) -> list[Path]:
    """server.log for one server; server-1.log, server-2.log ... for several instances."""
    if instances == 1:
        return [log_dir / "server.log"]
    return [log_dir / f"server-{i}.log" for i in range(1, instances + 1)]


def start_servers(argv_for: Callable[[int], list[str]], logs: list[Path], envs: list[dict[str, str]],
                  ready_timeout_s: float, stop_timeout_s: float) -> list[ServerProcess]:
    """One ready server per (log, env) on a free loopback port, all starting at once (a vLLM start is
    mostly imports and loading, tens of seconds each). The port is free when picked but another
    process can take it before the server binds it: then that server fails with 'Address already in
    use' and another port is tried. If one fails otherwise, or the caller is interrupted, every
    server started is stopped before the error goes on.

    The servers are started from this thread, never a helper thread: each gets SIGTERM when the
    thread that started it ends (processes.die_with_parent); only the waiting is done on threads."""
    ready: list[ServerProcess | None] = [None] * len(logs)
    started: list[ServerProcess] = []
    try:
        for attempt in range(1, PORT_TRIES + 1):
            batch: dict[int, ServerProcess] = {}
            for i in (i for i, server in enumerate(ready) if server is None):
                port = free_port()
                batch[i] = ServerProcess(argv_for(port), f"http://{LOOPBACK}:{port}", logs[i], ready_timeout_s,
                                         stop_timeout_s, env=envs[i])
                batch[i].start()
                started.append(batch[i])
            for (i, server), error in zip(batch.items(), _wait_ready(list(batch.values()))):
                if error is None:
                    ready[i] = server
                    continue
                server.stop()
                if not isinstance(error, ServerStartError) or "address already in use" not in str(error).lower() \
                        or attempt == PORT_TRIES:
                    raise error
                log.warning("port %s was taken before the server bound it; trying another", server.root_url)
            if all(ready):
                return [server for server in ready if server is not None]
    except BaseException as e:
        for server in started:
            server.stop(interrupted=not isinstance(e, Exception))
        raise
    raise AssertionError("unreachable")


def _wait_ready(servers: list[ServerProcess]) -> list[Exception | None]:
    """Wait for each server to answer (and listen on loopback only), side by side: the error of
    each, None for a ready one."""

    def ready(server: ServerProcess) -> Exception | None:
        try:
            server.wait_ready()
            server.check_loopback_only()
        except Exception as e:
            return e
        return None

    if len(servers) == 1:
        return [ready(servers[0])]
    pool = ThreadPoolExecutor(len(servers), thread_name_prefix="server-ready")
    try:  # not `with`: on Ctrl-C it would wait for every thread before the servers are stopped
        return list(pool.map(ready, servers))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
