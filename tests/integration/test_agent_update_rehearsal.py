"""The agent self-update rehearsed with a real agent on a real NATS: a lab agent started by
`bke-agent-launch` takes a signed UpdateAgent for a wheel of this same code built with a bumped
version, installs it with its dependencies in a venv beside, restarts into it without
answering, and the new agent answers the same command: UpdateAgent Skipped (it runs that
version), then the disk check, with `agentVersion` the new one. The launcher keeps it.

The wheelhouse is built once, outside the test (it needs the package index):

    git archive HEAD | tar -x -C /tmp/bke-bump
    sed -i 's/^version = "0.1.0"/version = "0.1.1"/' /tmp/bke-bump/pyproject.toml
    .venv/bin/python -m pip wheel --no-deps -w /tmp/bke-wh /tmp/bke-bump
    .venv/bin/python -m pip wheel -w /tmp/bke-wh -r requirements-agent.txt
    BKE_AGENT_REHEARSAL_WHEELHOUSE=/tmp/bke-wh pytest tests/integration/test_agent_update_rehearsal.py

Without it the test skips, saying so."""
from __future__ import annotations

import hashlib
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from bke.adapters.bus.watch import EventWatch
from bke.contracts.agent import AgentCommand, agent_subject
from bke.contracts.agent_steps import AgentWheel, CheckHost, UpdateAgent
from bke.adapters.runtime import ManagedProcess, poll_until
from bke_agent.venvs import read_record
from tests.trust_helpers import SIGNER, signed

from .agent_helpers import free_node_ip

pytestmark = pytest.mark.integration
WHEELHOUSE = os.environ.get("BKE_AGENT_REHEARSAL_WHEELHOUSE", "")


@pytest.mark.skipif(not WHEELHOUSE, reason="BKE_AGENT_REHEARSAL_WHEELHOUSE is not set (see the module docstring)")
async def test_a_lab_agent_updates_itself_to_a_bumped_wheel_and_the_new_one_answers(
        nats_client: NatsClient, js: JetStreamContext, nats_url: str, cluster: str, tmp_path: Path) -> None:
    wheels = sorted(Path(WHEELHOUSE).glob("*.whl"))
    bumped = next(w for w in wheels if w.name.startswith("bke-"))
    version = bumped.name.split("-")[1]
    root = tmp_path / "hosts/m1"
    root.mkdir(parents=True)
    ip, _ = free_node_ip(1)
    env = dict(os.environ, BKE_NATS_URL=nats_url, BKE_AGENT_CLUSTER=cluster, BKE_AGENT_NODE="m1",
               BKE_AGENT_BACKEND="lab", BKE_AGENT_ROOT=str(root), BKE_AGENT_IP=ip, BKE_AGENT_HEARTBEAT_S="0",
               BKE_AGENT_ACK_WAIT_S="30", BKE_AGENT_COMMAND_KEY=SIGNER.verify_key.public_line)
    launcher = ManagedProcess.start("bke-agent-launch", [Path(sys.executable).parent / "bke-agent-launch"],
                                    tmp_path / "launcher.log", env=env)
    try:
        step = UpdateAgent(id="agents:update", version=version, confirm_timeout_s=300,
                           wheels=[AgentWheel(url=str(w), sha256=hashlib.sha256(w.read_bytes()).hexdigest())
                                   for w in wheels])
        cmd = signed(AgentCommand(command_id=f"{cluster}/upgrade@r1@agents/m1/0", cluster=cluster, node="m1",
                                  phase="upgrade:agents", issued_at=datetime.now(timezone.utc).isoformat(),
                                  steps=[step, CheckHost(id="agents:disk", checks=["disk"])]))
        async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
            first = await watch.wait_for(lambda e: e.subject.endswith(".registered"), 60)
            assert first.data["version"] != version
            await js.publish(agent_subject(cluster, "m1", "command"), cmd.to_bytes())
            # the old agent never answers it: the next registration is the new agent's
            again = await watch.wait_for(lambda e: e.subject.endswith(".registered") and e.data["version"] == version,
                                         600)
            done = await watch.wait_for(lambda e: e.subject.endswith(".result"), 120)
        assert again.data["agentId"] == first.data["agentId"]  # the same key: the node's identity stays
        assert done.data["status"] == "Succeeded" and done.data["agentVersion"] == version, done.data
        assert [s["status"] for s in done.data["steps"]] == ["Skipped", "Succeeded"]
        assert not [e for e in watch.seen if e.subject.endswith(".result") and e is not done]  # answered once
        state = root / "var/lib/bke-agent"
        # the launcher keeps it at its next look at the confirmation (every 0.5 s)
        rec = poll_until(lambda: r if (r := read_record(state, "?", "?")).trial is None else None, timeout=30,
                         what="the launcher to keep the new agent")
        assert rec.current == str(state / "venvs" / version) and rec.previous == sys.prefix
    finally:
        launcher.stop()
