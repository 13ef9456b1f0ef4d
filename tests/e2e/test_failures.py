"""End to end: a service that fails for one cluster after planning fails the install at once,
with its reason, and `bke retry` after the fix finishes it (every failure has a
listener)."""
from __future__ import annotations

import asyncio
import base64
import os
import time
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.contracts.agent import AgentRegistered
from bke.adapters.state.keys.certs import certs_agents_key

from .test_lab_install import SEED, assert_ran_once

pytestmark = pytest.mark.e2e


async def _forge_unusable_key(lab, node: str) -> None:
    """Make `node`'s stored sealing key one whose id is not its own: the certs service cannot seal
    that node's bundle (the very check that keeps a bundle from a key its agent does not own).

    A registration can no longer bring such a key (only the key recorded at
    provisioning is accepted, a forged one is refused and stores nothing), so the accepted record
    itself is corrupted, as a damaged store would be."""
    forged = AgentRegistered(cluster=lab.plan.cluster, node=node, agent_id="not-this-key",
                             seal_public_key_b64=base64.b64encode(os.urandom(32)).decode(), backend="lab",
                             version="test", at=datetime.now(timezone.utc).isoformat())
    r = Redis.from_url(lab.info.redis_url)
    key = certs_agents_key(lab.plan.cluster)
    try:
        deadline = time.monotonic() + 60
        while await r.hlen(key) < len(lab.plan.nodes):  # the real registrations first: none may follow ours
            assert time.monotonic() < deadline, "the agents never registered"
            await asyncio.sleep(0.05)  # polling Redis under a deadline
        await r.hset(key, node, forged.model_dump_json(by_alias=True))
    finally:
        await r.aclose()


async def test_unsealable_node_fails_the_install_at_once_then_retry_after_the_fix_finishes(lab_factory):
    lab = lab_factory(SEED)
    await _forge_unusable_key(lab, "node1")
    started = time.monotonic()
    code = await lab.install(timeout=120)
    took = time.monotonic() - started
    out = lab.out.getvalue()
    assert code == 1, out  # operational: fix the agent, then retry
    assert took < 60, f"the failure took {took:.0f}s to reach the user"
    doc = await lab.status()
    assert doc["status"] == "Failed"
    assert "node1" in doc["message"] and "sealing key" in doc["message"] and doc["message"].startswith("certs: ")
    assert doc["kind"] == "operational"
    failed = [p for p in doc["phases"] if p["status"] == "Failed"]
    assert len(failed) == 1 and "node1" in failed[0]["message"]
    assert "sealing key" in out

    # the fix: node1's own agent announces itself again (a restart re-registers its real key)
    assert lab.sup.stop_agent("node1")
    lab.sup.ensure_agents(lab.info, lab.plan, only=["node1"])
    r = Redis.from_url(lab.info.redis_url)
    try:
        deadline = time.monotonic() + 60
        # (re-provisioning forgets the corrupt record at once: wait for the real key, not its absence)
        while b"not-this-key" in (await r.hget(certs_agents_key(lab.plan.cluster), "node1") or b"not-this-key"):
            assert time.monotonic() < deadline, "node1's agent never announced itself again"
            await asyncio.sleep(0.05)  # polling Redis under a deadline
    finally:
        await r.aclose()
    from bke_cli.status_cmd import retry  # the CLI path, as an operator would run it

    with pytest.raises(BaseException) as exc:  # typer.Exit carries the follow's exit code
        await asyncio.to_thread(retry, lab.plan.cluster, None, lab.workdir, None, True, 240.0)
    assert getattr(exc.value, "exit_code", None) == 0, lab.out.getvalue()
    doc = await lab.status()
    assert doc["status"] == "Succeeded", doc
    assert_ran_once(lab)
