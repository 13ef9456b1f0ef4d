"""The upgrader's live facts (bke_upgrader.facts) on a real Redis: certificate expiry from the
certs service's read model, every page; the cgroup version from what agents reported, as the
dispatcher answers it (its own handler over the keys its heartbeats write); unknown when not
every node reported, never guessed."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bke.contracts.expiration import EXPIRATION_GET, CertExpiration, ExpiryItem, GetExpiration
from bke.contracts.status import StatusError
from bke.adapters.state.keys.dispatcher import heartbeat_cgroup_key
from bke_upgrader.facts import LiveFacts, cgroup_v1_hosts
from tests.agent_facts_helpers import with_agent_facts

from ..unit.upgrade_helpers import SEED, plan_of

pytestmark = pytest.mark.integration
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def _row(i: int) -> ExpiryItem:
    return ExpiryItem(instance=f"apiserver@n{i}", name="apiserver", is_ca=False,
                      not_after=(NOW + timedelta(days=i)).isoformat(), residual_s=86400.0 * i)


async def test_expiry_is_read_page_by_page_and_cgroup_v1_hosts_from_the_agents_reports(redis_client):
    plan = plan_of(SEED)
    asked: list[GetExpiration] = []

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        assert subject == EXPIRATION_GET
        ask = GetExpiration.model_validate_json(payload)
        asked.append(ask)
        rows = [_row(i) for i in range(7)][ask.offset:ask.offset + 3]  # pages of 3 here
        nxt = ask.offset + 3 if ask.offset + 3 < 7 else None
        return CertExpiration(cluster=plan.cluster, now=NOW.isoformat(), total=7, rows=rows, next_offset=nxt).to_bytes()

    facts = LiveFacts(with_agent_facts(redis_client, request), lambda: NOW, heartbeat_stale_s=90, timeout_s=1)
    got = await facts.cert_expiry(plan.cluster)
    assert got == {f"apiserver@n{i}": NOW + timedelta(days=i) for i in range(7)}
    assert [a.offset for a in asked] == [0, 3, 6]

    key, hosts = heartbeat_cgroup_key(plan.cluster), [n.hostname for n in plan.nodes]
    await redis_client.hset(key, mapping={"master1": "2", "master2": "1", "master3": "2"})
    assert cgroup_v1_hosts(await facts.agents.get(plan.cluster, hosts)) is None  # node1 reported nothing yet: not known
    await redis_client.hset(key, "node1", "1")
    assert cgroup_v1_hosts(await facts.agents.get(plan.cluster, hosts)) == frozenset({"master2", "node1"})


async def test_no_pki_or_no_answer_leaves_expiry_unknown(redis_client):
    async def not_found(subject: str, payload: bytes, timeout: float) -> bytes:
        return StatusError(reason="NotFound", cluster="c", message="no PKI").to_bytes()

    async def silent(subject: str, payload: bytes, timeout: float) -> bytes:
        raise TimeoutError

    for request in (not_found, silent):
        facts = LiveFacts(request, lambda: NOW, heartbeat_stale_s=90, timeout_s=1)
        assert await facts.cert_expiry("c") is None
