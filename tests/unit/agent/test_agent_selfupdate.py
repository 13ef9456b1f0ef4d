"""UpdateAgent, the agent's side, the paths that make no virtualenv (fast): the version it
already runs, a version its launcher rolled back, no launcher, a wheel that does not match its
sha256, and the step through the executor (a restart is no answer)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import AgentWheel, UpdateAgent
from bke_agent import AgentIdentity, Executor, NullBackend
from bke_agent.errors import PermanentStepError
from bke_agent.selfupdate import RestartRequested, SelfUpdater
from bke_agent.venvs import VenvRecord, read_record, write_record

from ..agent_wheels import standin_wheel


def _step(wheel: Path, version: str = "2.0.0", sha: str | None = None) -> UpdateAgent:
    return UpdateAgent(id="agent:update", version=version,
                       wheels=[AgentWheel(url=str(wheel), sha256=sha or hashlib.sha256(wheel.read_bytes()).hexdigest())])


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return standin_wheel(tmp_path, "2.0.0")


async def test_the_version_it_runs_is_skipped(tmp_path: Path, wheel: Path) -> None:
    out = await SelfUpdater(tmp_path, "/venv", "2.0.0", launched=True).update(_step(wheel))
    assert out.status == "Skipped" and not (tmp_path / "venvs").exists()


async def test_a_version_rolled_back_by_the_launcher_fails_with_its_reason(tmp_path: Path, wheel: Path) -> None:
    write_record(tmp_path, VenvRecord("/venv", "1.0.0", failed={"2.0.0": "the new agent 2.0.0 did not come up within 120s"}))
    with pytest.raises(PermanentStepError, match="did not come up within 120s; the launcher put 1.0.0 back"):
        await SelfUpdater(tmp_path, "/venv", "1.0.0", launched=True).update(_step(wheel))


async def test_an_agent_without_a_launcher_refuses(tmp_path: Path, wheel: Path) -> None:
    with pytest.raises(PermanentStepError, match="not started by bke-agent-launch"):
        await SelfUpdater(tmp_path, "/venv", "1.0.0", launched=False).update(_step(wheel))


async def test_a_wheel_that_does_not_match_its_sha256_installs_nothing(tmp_path: Path, wheel: Path) -> None:
    with pytest.raises(PermanentStepError, match=f"{wheel.name} does not match its sha256"):
        await SelfUpdater(tmp_path, "/venv", "1.0.0", launched=True).update(_step(wheel, sha="0" * 64))
    assert not list((tmp_path / "venvs").iterdir())  # no venv, no staged wheel
    assert read_record(tmp_path, "/venv", "1.0.0").trial is None


async def test_through_the_executor_a_restart_is_no_answer_and_a_refusal_is_a_failed_step(tmp_path: Path,
                                                                                           wheel: Path) -> None:
    cmd = AgentCommand(command_id="c/upgrade@r@agents/n1/0", cluster="c", node="n1", phase="upgrade:agents",
                       issued_at="t", steps=[_step(wheel)])

    class Restarting(SelfUpdater):
        async def update(self, step):  # type: ignore[no-untyped-def]
            raise RestartRequested("installed")

    with pytest.raises(RestartRequested):
        await Executor(NullBackend(), AgentIdentity.ephemeral(), updater=Restarting(tmp_path, "/v", "1.0.0", True)).run(cmd)
    res = await Executor(NullBackend(), AgentIdentity.ephemeral()).run(cmd)  # no updater: a test backend
    assert res.status == "Failed" and "cannot update itself" in res.steps[0].stderr
