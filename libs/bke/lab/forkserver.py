"""The lab's fork server: one Python process per lab work directory that has imported the BKE
programs once and forks each service, the renewer and every agent launcher from there.

Why: a lab runs a dozen Python processes or more (five services, a renewer, an agent launcher and
an agent per node) and starts them again on every kill, restart and upgrade. Each fresh
interpreter spends 1.3 to 2.3 CPU-seconds importing pydantic, FastStream, nats-py, redis-py and
our contracts before it does anything; on a two-core machine that was about half of what a lab
install costs. A child forked from a process that has already imported them starts at once and
shares those pages until it writes to them.

What a child gets is what a fresh start would give it: a session of its own, stdin from
/dev/null, stdout and stderr appended to its log, no other inherited descriptor, default signal
dispositions, exactly the environment and argv it was started with, and the working directory
asked for. It runs the same entry point its console script or `python -m` would. Nothing BKE
imports reads the environment at import time (checked: no module-level `os.environ` read), so
importing before the environment is set changes nothing. The server itself starts no thread and
no event loop, so a fork from it is safe.

The programs are imported by name at run time (`PRELOAD`, the console scripts' entry points), as a
console script loads its service: `bke` still imports no service statically (the import contracts).

`BKE_LAB_FORKSERVER=0` turns it off: every process is then a fresh interpreter, as a deployment
starts them (systemd units, `deploy/`).

Protocol: one JSON request per connection on `<workdir>/forkserver.sock` ({"argv", "env",
"log", "cwd"}), answered by {"pid"} or {"error"}. The socket is reached through
/proc/self/fd/<dir fd>/..., since a lab's work directory under a test's temporary tree can be
longer than a socket address allows (108 bytes)."""
from __future__ import annotations

import contextlib
import fcntl
import importlib
import importlib.util
import json
import logging
import os
import runpy
import signal
import socket
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import NoReturn

from bke.adapters.logs import setup_logging
from bke.core.secrets.at_rest import SECRET_KEY_ENV
from bke.adapters.runtime.processes import ManagedProcess, exit_as_program, pid_alive, poll_until, stop_pid

__all__ = ["ENABLE_ENV", "PRELOAD", "SOCKET_NAME", "enabled", "ensure_server", "entry_point", "request_spawn", "serve",
           "spawn", "start_server", "stop_server"]

_log = logging.getLogger("bke.lab.forkserver")  # the same name when it runs as __main__

ENABLE_ENV = "BKE_LAB_FORKSERVER"
SOCKET_NAME = "forkserver.sock"
PID_FILE = "forkserver.pid"
# What the lab forks: importing these once is the whole point (the agent's modules too: its
# launcher forks the agent from its own loaded code, bke_agent.launcher)
PRELOAD = ("bke_planner.main", "bke_certs.main", "bke_renderer.main", "bke_dispatcher.main",
           "bke_upgrader.main", "bke_agent.launcher", "bke_agent.main", "bke.adapters.auth.serve_renewals")
MAX_REQUEST = 1 << 20  # an environment and an argv: far below this


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENABLE_ENV, "1") not in {"0", "false", "no"}


def entry_point(argv: Sequence[str]) -> tuple[str, str] | None:
    """(module, function) of a console script of ours (its path's name), ("-m", module) for
    `python -m module`, or None when `argv` is neither (then it is started as a fresh program)."""
    if len(argv) >= 3 and argv[1] == "-m" and Path(argv[0]) == Path(sys.executable):
        return "-m", argv[2]
    if Path(argv[0]).parent != Path(sys.executable).parent:
        return None
    for ep in entry_points(group="console_scripts", name=Path(argv[0]).name):
        module, _, func = ep.value.partition(":")
        # ours only: the venv's other scripts (pip, say) are started as they are
        return (module, func) if module.split(".")[0].startswith("bke") else None
    return None


def _socket_path(dir_fd: int) -> str:
    return f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}"


@contextlib.contextmanager
def _connected(workdir: Path, timeout: float) -> Iterator[socket.socket]:
    """A connection to the fork server of `workdir`; OSError when none listens there."""
    dir_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(_socket_path(dir_fd))
            yield sock
    finally:
        os.close(dir_fd)


def request_spawn(workdir: Path, argv: Sequence[str], env: Mapping[str, str], log: Path,
                  cwd: Path | None = None, timeout: float = 30.0) -> int:
    """Ask the fork server of `workdir` to start `argv`; its pid. Raises OSError when none
    answers (the caller starts the process itself) and RuntimeError when it could not fork."""
    with _connected(workdir, timeout) as sock:
        sock.sendall(json.dumps({"argv": list(argv), "env": dict(env), "log": str(log),
                                 "cwd": str(cwd) if cwd else None}).encode())
        sock.shutdown(socket.SHUT_WR)
        answer = json.loads(_read_all(sock) or b"{}")
    if "pid" not in answer:
        raise RuntimeError(f"the lab's fork server could not start {argv[0]}: {answer.get('error', 'no answer')}")
    return int(answer["pid"])


def spawn(workdir: Path, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str]) -> int:
    """Start one of the lab's Python programs; its pid. Forked by the work directory's fork
    server (started first if none runs) unless BKE_LAB_FORKSERVER=0 or `argv` is not one of
    ours; a fresh interpreter then, as also when the server cannot be reached."""
    if enabled(os.environ) and entry_point(argv) is not None:
        try:
            try:
                pid = request_spawn(workdir, argv, env, log)
            except OSError:  # none listening yet (or any more): start it, then ask again
                ensure_server(workdir)
                pid = request_spawn(workdir, argv, env, log)
            _log.info("forked %s pid=%d log=%s", name, pid, log)
            return pid
        except (OSError, RuntimeError, TimeoutError) as exc:
            _log.warning("the lab's fork server did not start %s (%s): starting it afresh", name, exc)
    return ManagedProcess.start(name, argv, log, env=env).pid


def ensure_server(workdir: Path) -> int:
    """The running fork server of `workdir`, started if there is none (its pid in
    `forkserver.pid`); one at a time under `forkserver.lock`, since two CLI calls may ask at once."""
    with open(workdir / "forkserver.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pid_file = workdir / PID_FILE
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            if pid_alive(pid) and _answers(workdir):  # alive and answering: not a reused pid
                return pid
        # the server needs no key: its children are given theirs
        pid = start_server(workdir, {k: v for k, v in os.environ.items()
                                     if k != SECRET_KEY_ENV and not k.startswith("BKE_KEY_FILE_")})
        pid_file.write_text(str(pid))
        return pid


def stop_server(workdir: Path) -> list[int]:
    """Stop the fork server of `workdir`, if it runs (its children are not touched)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((workdir / PID_FILE).read_text())
        (workdir / PID_FILE).unlink()
        if stop_pid(pid, 5.0):
            return [pid]
    return []


def start_server(workdir: Path, env: Mapping[str, str], timeout: float = 120.0) -> int:
    """Start the fork server of `workdir` and wait until it answers; its pid."""
    proc = ManagedProcess.start("fork server", [sys.executable, "-m", __name__, str(workdir)],
                                workdir / "logs" / "forkserver.log", env=dict(env, PYTHONUNBUFFERED="1"))

    def answering() -> bool | None:
        proc.ensure_running()
        return True if _answers(workdir) else None

    # its imports take seconds, more on a loaded machine
    poll_until(answering, timeout=timeout, what="the lab's fork server", interval=0.1)
    return proc.pid


def _answers(workdir: Path) -> bool:
    try:
        with _connected(workdir, 5.0):  # connects and sends nothing: the server skips it
            return True
    except OSError:
        return False


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    size = 0
    while chunk := sock.recv(65536):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REQUEST:
            raise ValueError("request too large")
    return b"".join(chunks)


def _target(argv: Sequence[str]) -> Callable[[], object]:
    """What the child runs: the console script's function, or the module as __main__."""
    found = entry_point(argv)
    if found is None:
        raise ValueError(f"not a BKE program: {argv[0]}")
    module, func = found
    if module == "-m":
        # run again as __main__ though imported already (preloaded): runpy warns of exactly
        # that, and here it is the intent
        warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                                category=RuntimeWarning)
        if importlib.util.find_spec(func) is None:
            raise ModuleNotFoundError(f"No module named {func!r}")
        return lambda: runpy.run_module(func, run_name="__main__", alter_sys=True)
    return getattr(importlib.import_module(module), func)


def _become(request: dict[str, object], keep: Sequence[int]) -> None:
    """In the child, before it runs: what a fresh start would have given it (module docstring)."""
    os.setsid()
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd in keep:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = Path(str(request["log"]))
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # as ManagedProcess.start keeps logs: 0700, 0600
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.closerange(3, max(os.sysconf("SC_OPEN_MAX"), 4096))
    if request.get("cwd"):
        os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[call-overload]
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    sys.argv = argv[2:] if argv[1:2] == ["-m"] else argv
    _name_process(Path(argv[2] if argv[1:2] == ["-m"] else argv[0]).name)


def _name_process(name: str) -> None:
    """The child's name in `top`, `ps -o comm` and /proc/<pid>/comm (15 bytes: `bke-dispatcher`,
    `bke-agent-launc`); its command line stays the fork server's, which `ps aux` shows."""
    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text(name[:15])


def _run_child(main: Callable[[], object], request: dict[str, object], keep: Sequence[int]) -> NoReturn:
    """Never returns: the child's exit status is `main`'s, as `sys.exit(main())` gives."""

    def run() -> object:
        _become(request, keep)
        return main()

    exit_as_program(run)


def serve(workdir: Path) -> None:
    """Import the programs, then fork one child per request until SIGTERM."""
    setup_logging("forkserver")  # a JSON line per event, as every process of the lab logs
    for module in PRELOAD:
        importlib.import_module(module)
    # children are reaped by the kernel (no zombies, so a PID check sees a dead one as dead);
    # each child sets SIGCHLD back to the default for its own children
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    dir_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    path = _socket_path(dir_fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket 0600: only the lab's owner starts processes through it
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(64)
    _log.info("fork server ready on %s", workdir / SOCKET_NAME)
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                conn.settimeout(30)
                raw = _read_all(conn)
                if not raw:
                    continue  # a readiness probe (_answers): connected, asked nothing
                request = json.loads(raw)
                main = _target(request["argv"])  # refuse what it cannot run before forking
                pid = os.fork()
                if pid == 0:
                    _run_child(main, request, (listener.fileno(), conn.fileno(), dir_fd))
                conn.sendall(json.dumps({"pid": pid}).encode())
                _log.info("forked pid %d: %s", pid, " ".join(request["argv"]))
            except Exception as exc:  # noqa: BLE001 - a bad request is answered, never fatal
                _log.warning("request refused: %s: %s", type(exc).__name__, exc)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
