"""The agent's self-update, the launcher's side (bke_agent.venvs, bke_agent.launcher): a new
venv on trial is kept once its agent confirms, and put back to the old one - by the launcher,
old code, without the new agent's help - when it does not confirm in time or exits first.

The "agents" here are small scripts in fake venvs (`<venv>/bin/bke-agent`) run by the real
launcher loop: the old one installs the trial (as an UpdateAgent step would) and exits 75."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bke.contracts.agent import RESTART_EXIT_CODE
from bke_agent.launcher import launch
from bke_agent.venvs import Trial, VenvRecord, after_exit, after_start, launch_target, read_record

OLD, NEW = "1.0.0", "2.0.0"


# --- the pure decisions ----------------------------------------------------------------------
REC = VenvRecord(current="/old", current_version=OLD, trial=Trial("/new", NEW, 5.0))


def test_a_trial_runs_and_a_confirmed_one_becomes_current_keeping_the_old_as_previous() -> None:
    assert launch_target(REC) == "/new" and launch_target(VenvRecord("/old", OLD)) == "/old"
    assert after_start(REC, OLD) == REC  # the old agent's confirmation is not the new one's
    kept = after_start(REC, NEW)
    assert (kept.current, kept.current_version, kept.trial, kept.previous) == ("/new", NEW, None, "/old")


@pytest.mark.parametrize(("code", "timed_out", "why"), [
    (1, False, "exited with 1 before it came up"),
    (-15, True, "did not come up within 5s"),
    (RESTART_EXIT_CODE, False, "exited with 75 before it came up"),
])
def test_an_unconfirmed_trial_is_rolled_back_and_the_old_agent_started_again(code: int, timed_out: bool, why: str) -> None:
    rec, action = after_exit(REC, "/new", code, OLD, timed_out)
    assert action == "restart" and rec.current == "/old" and rec.trial is None
    assert why in rec.failed[NEW]


def test_a_confirmed_agent_exit_ends_the_launcher_unless_it_asks_for_a_restart() -> None:
    cur = VenvRecord("/old", OLD)
    assert after_exit(cur, "/old", 0, OLD, False) == (cur, "exit")
    assert after_exit(cur, "/old", RESTART_EXIT_CODE, OLD, False) == (cur, "restart")
    assert after_exit(cur, "/old", 3, OLD, False) == (cur, "restart")  # the lock still held: again
    assert after_exit(cur, "/old", 2, OLD, False) == (cur, "exit")  # bad configuration: no loop
    # the old agent has just recorded the trial and asks for a restart: the trial starts next
    assert after_exit(REC, "/old", RESTART_EXIT_CODE, OLD, False) == (REC, "restart")
    promoted, action = after_exit(REC, "/new", 0, NEW, False)  # confirmed, then stopped: kept
    assert promoted.current == "/new" and action == "exit"


# --- the launcher loop with scripted agents ----------------------------------------------------
def _agent(venv: Path, body: str) -> None:
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin/bke-agent"
    script.write_text(f"#!{sys.executable}\nimport sys, time\nfrom pathlib import Path\n"
                      "from bke_agent.venvs import Trial, confirm, read_record, write_record\n"
                      f"STATE = Path({str(venv.parent / 'state')!r})\n{body}")
    script.chmod(0o755)


# the old agent: the first time, installs the new venv as a trial (an UpdateAgent step) and asks
# for a restart; started again after a rollback, it confirms and exits 0 (which ends the test)
OLD_AGENT = """
from dataclasses import replace
rec = read_record(STATE, {old!r}, {OLDV!r})
if {NEWV!r} in rec.failed or rec.current_version == {NEWV!r}:
    confirm(STATE, {OLDV!r}); sys.exit(0)
write_record(STATE, replace(rec, trial=Trial({new!r}, {NEWV!r}, {timeout})))
sys.exit(75)
"""


def _venvs(tmp_path: Path, new_body: str, timeout: float = 120.0) -> tuple[Path, Path, Path]:
    old, new, state = tmp_path / "old", tmp_path / "new", tmp_path / "state"
    state.mkdir()
    _agent(old, OLD_AGENT.format(old=str(old), new=str(new), timeout=timeout, OLDV=OLD, NEWV=NEW))
    _agent(new, new_body)
    return old, new, state


def test_a_new_agent_that_confirms_is_kept(tmp_path: Path) -> None:
    old, new, state = _venvs(tmp_path, f"confirm(STATE, {NEW!r})\nsys.exit(0)\n")
    assert launch(state, str(old), OLD) == 0
    rec = read_record(state, "?", "?")
    assert (rec.current, rec.current_version, rec.previous, rec.trial) == (str(new), NEW, str(old), None)


def test_a_new_agent_that_never_comes_up_is_stopped_and_the_old_venv_put_back(tmp_path: Path) -> None:
    old, new, state = _venvs(tmp_path, "time.sleep(600)\n", timeout=1.0)
    assert launch(state, str(old), OLD) == 0  # the old agent, started again, ended the test
    rec = read_record(state, "?", "?")
    assert rec.current == str(old) and rec.trial is None
    assert "did not come up within 1s" in rec.failed[NEW]
    assert (state / "agent-confirmed").read_text() == OLD


def test_a_new_agent_that_crashes_is_rolled_back_at_once(tmp_path: Path) -> None:
    old, new, state = _venvs(tmp_path, "raise SystemExit(1)\n", timeout=600.0)
    assert launch(state, str(old), OLD) == 0  # long before the 600 s deadline
    assert "exited with 1 before it came up" in read_record(state, "?", "?").failed[NEW]


def test_an_agent_does_not_outlive_its_launcher_killed_outright(tmp_path: Path) -> None:
    """SIGKILL of the launcher (a crash, `kill -9`): the kernel stops its agent too, which would
    otherwise keep the node's state lock and commands from the next launcher's agent."""
    import os
    import signal
    import subprocess
    import time

    old, new, state = _venvs(tmp_path, "time.sleep(600)\n")
    _agent(tmp_path / "sleeper", "Path(STATE / 'agent.pid').write_text(str(__import__('os').getpid()))\ntime.sleep(600)\n")
    code = (f"from pathlib import Path; from bke_agent.launcher import launch; "
            f"launch(Path({str(state)!r}), {str(tmp_path / 'sleeper')!r}, '1.0.0')")
    launcher = subprocess.Popen([sys.executable, "-c", code])
    pid_file = state / "agent.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for the agent's start under a deadline
    agent = int(pid_file.read_text())
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(agent, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)  # polling for the agent's exit under a deadline
    os.kill(agent, signal.SIGKILL)
    raise AssertionError("the agent outlived its launcher")
