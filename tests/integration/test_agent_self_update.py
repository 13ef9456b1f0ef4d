"""UpdateAgent end to end on this machine, without a bus: the running agent's SelfUpdater
fetches a wheel (a hand-built stand-in agent, version 2.0.0), checks its sha256, makes a real
virtualenv beside, installs the wheel there with no package index and records the trial; the
real launcher then starts the new venv's `bke-agent`, which confirms, and keeps it as current
with the old venv as previous. The rollback paths are tests/unit/agent/test_agent_launcher.py."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bke.contracts.agent_steps import AgentWheel, UpdateAgent
from bke_agent.launcher import launch
from bke_agent.selfupdate import RestartRequested, SelfUpdater
from bke_agent.venvs import read_record

from ..unit.agent_wheels import standin_wheel

pytestmark = pytest.mark.integration


async def test_a_new_agent_is_installed_beside_and_kept_once_it_confirms(tmp_path: Path, monkeypatch) -> None:
    state = tmp_path / "state"
    state.mkdir()
    wheel = standin_wheel(tmp_path, "2.0.0")
    step = UpdateAgent(id="agent:update", version="2.0.0", confirm_timeout_s=120,
                       wheels=[AgentWheel(url=f"file://{wheel}", sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())])
    with pytest.raises(RestartRequested, match="agent 2.0.0 installed"):
        await SelfUpdater(state, "/old-venv", "1.0.0", launched=True).update(step)
    rec = read_record(state, "?", "?")
    new = state / "venvs/2.0.0"
    assert rec.current == "/old-venv" and rec.trial is not None and rec.trial.venv == str(new)
    assert (new / "bin/bke-agent").is_file() and not (state / "venvs/.2.0.0.wheels").exists()

    monkeypatch.setenv("BKE_AGENT_STATE_DIR", str(state))
    assert launch(state, "/old-venv", "1.0.0") == 0  # the stand-in confirms and exits 0
    rec = read_record(state, "?", "?")
    assert (rec.current, rec.current_version, rec.previous, rec.trial) == (str(new), "2.0.0", "/old-venv", None)

    # the new agent, given the same command again (the old one never answered it), skips it
    out = await SelfUpdater(state, str(new), "2.0.0", launched=True).update(step)
    assert out.status == "Skipped"
