"""The agent started by forking its launcher, when the launcher already holds the agent's code.

A launcher forked by the lab's fork server (bke.lab.forkserver) has imported `bke_agent.main`
from the very venv it would start the agent from; forking then gives the agent at once what a
fresh `<venv>/bin/bke-agent` would spend over a CPU-second importing. A launcher started as a
program of its own (a node's systemd unit) never has, and execs the agent as before; so does any
launcher starting another venv's agent (an update), whose code it does not hold.

`ForkedAgent` answers the part of `subprocess.Popen` the launcher uses."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from bke.adapters.runtime.processes import exit_as_program

__all__ = ["ForkedAgent", "holds_agent_code"]

AGENT_MODULE = "bke_agent.main"
WAIT_POLL_S = 0.05


def holds_agent_code(venv: str | os.PathLike[str]) -> bool:
    """Whether this process can fork the agent of `venv`: it runs from that venv and has the
    agent's code loaded already."""
    return AGENT_MODULE in sys.modules and Path(venv).resolve() == Path(sys.prefix).resolve()


class ForkedAgent:
    """A forked agent, seen through Popen's poll/wait/send_signal/terminate/kill/returncode."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], before: Callable[[], None]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.returncode: int | None = None
        pid = os.fork()
        if pid == 0:
            self._child(list(args), env, before)
        self.pid = pid

    @staticmethod
    def _child(args: list[str], env: Mapping[str, str], before: Callable[[], None]) -> NoReturn:
        def run() -> int:
            before()
            for sig in (signal.SIGTERM, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.environ.clear()
            os.environ.update(env)
            sys.argv = [str(Path(sys.prefix) / "bin" / "bke-agent"), *args]
            with contextlib.suppress(OSError):  # its name in top and ps -o comm, as exec would give
                Path("/proc/self/comm").write_text("bke-agent")
            from .main import main  # loaded already (holds_agent_code)

            return main(args)

        exit_as_program(run)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(["bke-agent"], timeout or 0.0)
            time.sleep(WAIT_POLL_S)  # polling the child's exit under a deadline
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
