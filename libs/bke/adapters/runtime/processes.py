"""Start, probe and stop local server processes by PID.

Servers for tests and the lab are plain child processes. They run in their own session, so a Ctrl-C
in the terminal that started them reaches only the parent, and a lab runtime can outlive the CLI
call that started it. Because they may outlive us, everything here works from a PID (which is
written to disk), never from a process name: ``pkill nats-server`` would also hit the NATS that
other people run on this machine.

Readiness is always a probe polled under a deadline (:func:`poll_until`); a fixed sleep is either
too short on a busy CI box or wastes time everywhere else.

Errors::

    RuntimeError
     └─ ProcessExitedError   the server died while we waited for it (log tail in the message)
    TimeoutError
     └─ ReadinessTimeout     still not ready at the deadline (last probe failure in the message)
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TypeVar

__all__ = [
    "ManagedProcess",
    "ProcessExitedError",
    "ReadinessTimeout",
    "free_port",
    "exit_as_program",
    "is_ours",
    "pid_alive",
    "pid_cwd",
    "port_is_free",
    "poll_until",
    "retry_start",
    "reuse_if_answering",
    "stop_ours",
    "stop_pid",
    "wait_tcp",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

POLL_INTERVAL = 0.02
# Popen objects of the children we started, so their exit status can be reaped: a dead child that is
# never waited for stays a zombie, and os.kill(pid, 0) would still report it alive.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ProcessExitedError(RuntimeError):
    """A server exited before it became ready; retrying the same command would fail the same way."""


class ReadinessTimeout(TimeoutError):
    """A probe kept failing until the deadline."""


def free_port(host: str = "127.0.0.1") -> int:
    """Ask the kernel for a free TCP port; racy by nature (free now), so callers retry on bind failure."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """True if ``port`` can be bound now; used to decide whether a remembered port can be reused.

    SO_REUSEADDR as the servers themselves set it, so leftover TIME_WAIT connections of a killed
    server do not make its port look taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def poll_until(probe: Callable[[], T | None], *, timeout: float, what: str,
               interval: float = POLL_INTERVAL) -> T:
    """Call ``probe`` until it returns a non-None value, or raise :class:`ReadinessTimeout`.

    Any exception from the probe counts as "not ready yet" and is kept for the error message,
    except :class:`ProcessExitedError`, which means waiting longer cannot help.
    """
    deadline = time.monotonic() + timeout
    last: str = "no attempt finished"
    while True:
        try:
            result = probe()
        except ProcessExitedError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is a reason to poll again
            last = f"{type(exc).__name__}: {exc}"
        else:
            if result is not None:
                return result
            last = "probe returned no result"
        if time.monotonic() >= deadline:
            raise ReadinessTimeout(f"{what} not ready after {timeout:.1f}s; last failure: {last}")
        time.sleep(interval)  # poll interval under a deadline, not synchronisation


def wait_tcp(host: str, port: int, timeout: float = 10.0) -> None:
    """Wait until a TCP connect to ``host:port`` succeeds."""

    def probe() -> bool:
        with socket.create_connection((host, port), timeout=min(1.0, timeout)):
            return True

    poll_until(probe, timeout=timeout, what=f"tcp://{host}:{port}")


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a running process (zombies count as dead; our own children get reaped)."""
    if pid <= 0:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        del _CHILDREN[pid]
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return _proc_state(pid) not in {None, "Z", "X"}


def pid_cwd(pid: int) -> Path | None:
    """The working directory of a live process, or None if it is gone or not readable by us.

    Used to check that a PID read from a state file is still the server we started (we start each
    one in its own data directory), rather than trusting a number that may have been reused.
    """
    if not pid_alive(pid):
        return None
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).resolve()
    except OSError:
        return None


def stop_pid(pid: int, timeout: float = 10.0) -> bool:
    """SIGTERM ``pid``, SIGKILL it if it outlives ``timeout``; return False if it was already gone."""
    if not pid_alive(pid):
        _CHILDREN.pop(pid, None)
        return False
    for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        try:
            poll_until(lambda: True if not pid_alive(pid) else None, timeout=grace,
                       what=f"exit of pid {pid} after {sig.name}")
            break
        except ReadinessTimeout:
            log.warning("pid %d ignored %s for %.1fs", pid, sig.name, grace)
    _CHILDREN.pop(pid, None)
    log.info("stopped pid %d", pid)
    return True


def is_ours(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` (read from a state file; 0 for none) still runs in ``data_dir``: the server we
    started there, not a process that was given the same number since."""
    return bool(pid) and pid_cwd(pid) == data_dir.resolve()


def stop_ours(servers: Iterable[tuple[int, Path]], timeout: float = 10.0) -> list[int]:
    """Stop each (pid, data directory) that is still ours, in the order given; the PIDs stopped."""
    return [pid for pid, data_dir in servers if is_ours(pid, data_dir) and stop_pid(pid, timeout)]


def reuse_if_answering(pid: int, cwd: Path, probe: Callable[[], object | None],
                       timeout: float = 5.0) -> bool:
    """True if ``pid`` still runs in ``cwd`` (so it is ours, not a reused PID) and ``probe`` succeeds.

    A process that is ours but does not answer in time is stopped, so it can be started afresh.
    """
    if pid_cwd(pid) != cwd.resolve():
        return False
    try:
        poll_until(probe, timeout=timeout, what=f"existing server pid {pid}")
        return True
    except ReadinessTimeout as exc:
        log.warning("restarting a server that does not answer: %s", exc)
        stop_pid(pid)
        return False


def retry_start(name: str, start: Callable[[bool], T], attempts: int = 3) -> T:
    """Call ``start(fresh_ports)``, retrying on fresh ports if the server exits during startup.

    The usual cause is a port taken between choosing it and binding it (see :func:`free_port`).
    """
    for attempt in range(1, attempts + 1):
        try:
            return start(attempt > 1)
        except ProcessExitedError:
            if attempt == attempts:
                raise
            log.warning("%s failed to start (attempt %d), retrying on new ports", name, attempt)
    raise AssertionError("unreachable")


def exit_as_program(run: Callable[[], object]) -> NoReturn:
    """In a forked child: call `run` as a program's main and end the process with the status
    `sys.exit(run())` would give (a crash's traceback on stderr, status 1), without returning
    into the parent's code, whose cleanup is not the child's to run (os._exit)."""
    code = 1
    try:
        result = run()
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - a crash is printed, as the interpreter would
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


@dataclass(frozen=True)
class ManagedProcess:
    """A server we started: enough to find its log and stop it by PID, even from another process."""

    name: str
    pid: int
    log_path: Path
    argv: tuple[str, ...] = field(default=())

    @classmethod
    def start(cls, name: str, argv: Sequence[str | os.PathLike[str]], log_path: Path,
              env: Mapping[str, str] | None = None, cwd: Path | None = None) -> ManagedProcess:
        """Spawn ``argv`` in its own session with stdout+stderr appended to ``log_path``."""
        # 0700 / 0600: a process's log names clusters, nodes and addresses, and a crash's
        # traceback may hold more; only the lab's owner reads it
        log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_path.parent.chmod(0o700)
        os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        log_path.chmod(0o600)
        args = tuple(os.fspath(a) for a in argv)
        with open(log_path, "ab") as out:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            )
        _CHILDREN[proc.pid] = proc
        log.info("started %s pid=%d log=%s", name, proc.pid, log_path)
        return cls(name=name, pid=proc.pid, log_path=log_path, argv=args)

    def alive(self) -> bool:
        """True while the process runs."""
        return pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop by PID; see :func:`stop_pid`."""
        return stop_pid(self.pid, timeout)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def ensure_running(self) -> None:
        """Raise :class:`ProcessExitedError` if the process died; call it inside readiness probes."""
        if not self.alive():
            raise ProcessExitedError(
                f"{self.name} (pid {self.pid}) exited during startup; log {self.log_path}:\n"
                f"{self.log_tail()}"
            )
