"""End to end: an upgrade with an agent release (`BKE_UPGRADER_AGENT_RELEASE`, a bundle's
directory) rolls every lab agent to the new version, and the rest of the upgrade proceeds.

The lab (the seed example: 3 masters, 1 worker; every service and agent a process) starts each
agent under `bke-agent-launch`, as `bke agent bootstrap`'s unit does. The release is laid out as
`bke bundle build` lays it out, its dependency wheels those of Python 3.11 and 3.12 for x86_64
and aarch64 (agent_release_helpers, cached after the first run): each node must be sent only
the wheels its agent's heartbeat says it installs, since pip refuses a wheel of another
platform given to it and the update would fail.

Checked: the upgrade (1.33.2 -> 1.33.3, its agents step two nodes at a time) succeeds; every
node's launcher keeps the new venv (the lab's own venv kept as the previous one, for a
rollback); the new venv holds exactly one wheel's install per distribution, this machine's;
every answer to the upgrade's commands carries the new version, the agents step's UpdateAgent
`Skipped` (the new agent answered the command the old one took) before its disk check; the
heartbeats report the new version; no command ran twice.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
from redis import Redis

from bke.adapters.bundle.wheelhouse import WheelhouseError
from bke.contracts.agent import AgentRuntime, CommandResult
from bke.adapters.runtime import poll_until
from bke.adapters.state.keys.dispatcher import heartbeat_runtime_key
from bke.core.upgrade.run import is_upgrade_command
from bke_agent.settings import LAB_STATE_SUBDIR
from bke_agent.venvs import read_record

from .agent_release_helpers import release_bundle
from .test_lab_install import SEED, assert_ran_once
from .test_lab_upgrade import _bke, _spec_copy

# The upgrader's per-node wheel choice: tests/integration/test_upgrader_agent_release.py; the
# agent's install beside and the launcher's keep/rollback: tests/integration/test_agent_self_update.py.
pytestmark = pytest.mark.e2e
NEW = "0.1.1"  # the agent version of the release (this code, built with that version)


def _runtimes(r: Redis, cluster: str) -> dict[str, AgentRuntime]:
    return {h: AgentRuntime.model_validate_json(v) for h, v in r.hgetall(heartbeat_runtime_key(cluster)).items()}


def _upgrade_answers(state: Path) -> list[CommandResult]:
    # each journal entry is {"expiresAt": ..., "result": <the CommandResult>} (bke_agent.journal)
    out = [CommandResult.model_validate(json.loads(p.read_bytes())["result"]) for p in (state / "results").glob("*.json")]
    return [r for r in out if is_upgrade_command(r.command_id)]


async def test_an_upgrade_with_an_agent_release_rolls_every_agent_and_carries_on(lab_factory, tmp_path, monkeypatch):
    started = time.monotonic()
    try:
        bundle = await asyncio.to_thread(release_bundle, tmp_path / "bundle", NEW, tmp_path / "build")
    except WheelhouseError as exc:  # the first run needs the package index (later ones the cache)
        pytest.skip(f"the agent's wheelhouse cannot be built here: {exc}")
    built = time.monotonic() - started
    # the upgrader reads it from the environment the lab gives its processes (bke.lab.supervisor.lab_env)
    monkeypatch.setenv("BKE_UPGRADER_AGENT_RELEASE", str(bundle))
    spec = _spec_copy(tmp_path, SEED, "127.0.10.", "127.0.91.")
    lab = lab_factory(str(spec))
    assert await lab.install() == 0, lab.out.getvalue()
    hosts = sorted(n.hostname for n in lab.plan.nodes)
    r = Redis.from_url(lab.info.redis_url, decode_responses=True)
    # every agent's runtime recorded from its heartbeats (every 10 s; the first before the plan
    # existed was dropped), the old version's
    before = poll_until(lambda: rts if sorted(rts := _runtimes(r, lab.plan.cluster)) == hosts else None,
                        timeout=30, what="every agent's runtime")
    assert {rt.agent_version for rt in before.values()} == {"0.1.0"}

    t0 = time.monotonic()
    done = await asyncio.to_thread(_bke, "lab", "upgrade", str(spec), "--to", "1.33.3", "--etcd-version", "3.5.1",
                                   "--max-unavailable", "2", "--workdir", str(lab.workdir))
    upgraded = time.monotonic() - t0
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upgrade Succeeded" in done.stdout, done.stdout
    assert "v1.33.3" in (lab.host("master1") / "etc/kubernetes/manifests/kube-apiserver.yaml").read_text()

    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    for host in hosts:
        state = lab.host(host) / LAB_STATE_SUBDIR
        # the launcher keeps the new venv once its agent confirms (it looks every 0.5 s)
        rec = poll_until(lambda s=state: rec if (rec := read_record(s, "?", "?")).trial is None else None,
                         timeout=30, what=f"{host}'s launcher to keep the new agent")
        assert rec.current == str(state / "venvs" / NEW) and rec.previous == sys.prefix, (host, rec)
        assert not rec.failed, (host, rec.failed)
        # one install per distribution: this machine's wheels only (a cp312 or aarch64 wheel
        # given to pip would have failed the step)
        installed = sorted(p.name for p in (state / "venvs" / NEW / site).glob("pydantic_core-*.dist-info"))
        assert installed == ["pydantic_core-2.50.5.dist-info"], (host, installed)
        answers = _upgrade_answers(state)
        assert answers, host
        assert {a.agent_version for a in answers} == {NEW}, (host, [(a.command_id, a.agent_version) for a in answers])
        agents = [a for a in answers if "@agents/" in a.command_id]
        assert len(agents) == 1 and [s.status for s in agents[0].steps] == ["Skipped", "Succeeded"], (host, agents)
    def all_new() -> dict[str, AgentRuntime] | None:
        rts = _runtimes(r, lab.plan.cluster)
        return rts if {rt.agent_version for rt in rts.values()} == {NEW} else None

    after = poll_until(all_new, timeout=30, what="the heartbeats of the new agents")
    assert sorted(after) == hosts
    assert_ran_once(lab)
    print(f"\nrelease built in {built:.1f}s; upgrade with the agent release in {upgraded:.1f}s")
