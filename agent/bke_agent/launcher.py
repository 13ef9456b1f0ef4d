"""`bke-agent-launch`: start the agent from the venv its record selects, and watch a new one.

    bke-agent-launch        (the same environment as `bke-agent run`)

It runs from the venv the node was bootstrapped with and never from a new one: whatever a new
agent does, this code decides (bke_agent.venvs) and puts the old venv back. The loop:

1. read the record (`<state>/agent-venvs.json`; none: this venv) and start `<venv>/bin/bke-agent
   run` with BKE_AGENT_LAUNCHED=1 (only such an agent takes an UpdateAgent step);
2. while it runs, a venv on trial whose agent has written its confirmation becomes current;
   one still unconfirmed at its deadline is stopped (SIGTERM, then SIGKILL);
3. when it has exited: an unconfirmed trial is rolled back (the old venv is current again, the
   version recorded as failed) and the old agent started again; exit 75 (RESTART_EXIT_CODE,
   an update) starts the selected venv, and so does exit 3 (the state lock still held by an agent
   that is stopping) after a short wait; any other exit ends this process with that code
   (systemd's Restart=always starts it again; the lab starts a node's agent again on
   `bke lab install`).

SIGTERM / SIGINT are passed to the agent, whose exit then ends the launcher.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from pydantic import ValidationError

from bke.adapters.logs import setup_logging

from .forked import ForkedAgent, holds_agent_code
from .settings import AgentSettings
from .venvs import CONFLICT_EXIT_CODE, after_exit, after_start, confirmed_version, launch_target, read_record, write_record
from .version import RUNNING_VERSION

__all__ = ["launch", "main"]

log = logging.getLogger("bke.agent.launcher")
POLL_S = 0.5
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_GRACE_S = 20.0
CONFLICT_WAIT_S = 2.0


def _die_with_parent() -> None:
    """In the agent's process, before exec: SIGTERM it when the launcher dies, even by SIGKILL
    (Linux PR_SET_PDEATHSIG), so that no agent outlives its launcher holding the state lock."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the service manager stops the group instead
        pass


def _start_agent(target: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes] | ForkedAgent:
    """The agent of venv `target`: forked when this launcher holds its code already (the lab's
    fork server, bke_agent.forked), else `<target>/bin/bke-agent` as a program of its own."""
    if holds_agent_code(target):
        return ForkedAgent(args, env, before=_die_with_parent)
    return subprocess.Popen([f"{target}/bin/bke-agent", *args], env=env,
                            preexec_fn=_die_with_parent)  # noqa: PLW1509 - async-signal-safe: one prctl


def _stop(proc: subprocess.Popen[bytes] | ForkedAgent) -> None:
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def launch(state: Path, venv: str, version: str, args: list[str] | None = None,
           clock: Callable[[], float] = time.monotonic) -> int:
    """The loop above; returns the exit code of the agent that ended it. `args`: what the agent
    is started with (default `run`)."""
    stopping: list[int] = []
    child: list[subprocess.Popen[bytes] | ForkedAgent] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)
        if child and child[-1].poll() is None:
            child[-1].send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    while True:
        rec = read_record(state, venv, version)
        target = launch_target(rec)
        trial = rec.trial
        env = {**os.environ, "BKE_AGENT_LAUNCHED": "1"}
        log.info("starting the agent from %s%s", target, f" (trial of {trial.version})" if trial else "")
        proc = _start_agent(target, args or ["run"], env)
        child.append(proc)
        deadline = clock() + trial.confirm_timeout_s if trial else 0.0
        timed_out = False
        while proc.poll() is None:
            if rec.trial is not None:
                promoted = after_start(rec, confirmed_version(state))
                if promoted.trial is None:
                    rec = promoted
                    write_record(state, rec)
                    log.info("agent %s confirmed: it is the current agent now", rec.current_version)
                elif clock() >= deadline:
                    log.error("agent %s did not confirm within %gs: stopping it", rec.trial.version,
                              rec.trial.confirm_timeout_s)
                    timed_out = True
                    _stop(proc)
                    break
            try:
                proc.wait(POLL_S)  # the period of the confirmation check, and how fast an exit is seen
            except subprocess.TimeoutExpired:
                pass
        code = proc.returncode
        # read again: the agent that exited may have recorded a trial (an UpdateAgent step)
        rec, action = after_exit(read_record(state, venv, version), target, code, confirmed_version(state), timed_out)
        write_record(state, rec)
        if trial is not None and rec.current != trial.venv:
            log.error("rolled back to agent %s: %s", rec.current_version, rec.failed.get(trial.version, ""))
        if stopping and not timed_out:
            return code
        if action == "exit":
            return code
        if code == CONFLICT_EXIT_CODE:
            time.sleep(CONFLICT_WAIT_S)  # the back-off before the next start, not a synchronisation


def main(argv: list[str] | None = None) -> int:
    setup_logging("agent-launcher")
    try:
        settings = AgentSettings()
    except ValidationError as exc:
        log.error("bad configuration: %s", exc.errors(include_url=False)[0]["msg"])
        return 2
    state = settings.state_path
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    return launch(state, sys.prefix, RUNNING_VERSION, argv if argv else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
