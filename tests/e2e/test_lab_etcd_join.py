"""End to end: etcd-only nodes join an installed lab cluster through JoinNodes with `etcdJoins`
(a new etcd member joins the right etcd cluster first as a learner, promoted to
a voting member once it has caught up). Real NATS, Redis and etcd 3.5.1; every service and agent
its own process.

A split cluster is installed with one etcd-events member; the plan that names two more is
swapped in as the upgrader swaps its plan; then, one member at a time as `member_sequences`
orders it (etcd allows one learner at a time): EtcdMemberAdd as a signed command to the member
that stays, the new node's agent started and JoinNodes sent with its etcd join (the dispatcher
renders it `--initial-cluster-state=existing` with the given list, issues and seals its
certificates, runs node-env, certs, etcd and health on it; its /health answers while a learner),
then EtcdMemberPromote and every member's health. The caller's part is what `bke apply`'s run
will do; here the test does it. At the end: three voters holding the data written before, each
joined node's manifest as rendered for its join, and no node outside the joins commanded but the
periodic health checks."""
from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bke.contracts.membership import JoinNodes, MembershipEtcdJoin
from bke.core.lifecycle.etcd_members import agent_step, etcd_joins, member_sequences
from bke.core.plan import plan_spec_text
from bke.adapters.runtime import etcd_put_get
from bke.adapters.state.plans import RedisPlanStore, plan_digest
from bke_cli.membership_cmd import follow_membership

from .lab_helpers import Lab, assert_reads_back, etcd_members
from .test_lab_etcd_members import NET, Commands, _checked, _health, _spec as _members_spec
from .test_lab_membership import _executions, _stray

# slow: a lab of its own (the install, then two joins with their learners started and promoted)
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]
EVENTS = ("events1", "events2", "events3")
KEYS = {f"/registry/events/default/join-{i}": f"before-the-joins-{i}" for i in range(5)}


def _spec(events: tuple[str, ...]) -> str:
    """test_lab_etcd_members' layout (m1, etcd1, etcd-events members) on addresses and a name of
    its own, so that the two labs never meet."""
    return _members_spec(events).replace(f"{NET}.", "127.0.24.").replace("{name: grow}", "{name: ejoin}")


async def test_two_etcd_events_members_join_as_learners_then_are_promoted(lab_factory, tmp_path: Path):
    (tmp_path / "spec.yaml").write_text(_spec(EVENTS[:1]))
    lab: Lab = lab_factory(str(tmp_path / "spec.yaml"))
    assert await lab.install() == 0, lab.out.getvalue()
    one, c = lab.plan, lab.plan.cluster
    three = plan_spec_text(_spec(EVENTS)).plan
    assert three is not None
    pki = lab.host("m1") / "etc/kubernetes/pki"
    tls = (pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    first = one.etcd_cluster("etcd-events")
    assert first is not None
    for k, v in KEYS.items():
        assert await asyncio.to_thread(etcd_put_get, first.members[0].client_url, *tls, k, v) == v
    old_hosts = [n.hostname for n in one.nodes]

    # the plan that names events2 and events3, swapped in as the upgrader swaps its plan
    r = aioredis.Redis.from_url(lab.info.redis_url)
    try:
        store = RedisPlanStore(r)
        old = await store.meta(c)
        assert old is not None
        pj = three.to_json()
        digest = plan_digest(pj)
        assert await store.upgrade(three, pj, digest, old.digest, "apply-e2e", datetime.now(timezone.utc).isoformat())
    finally:
        await r.aclose()
    before = _executions(lab, old_hosts)

    ec = three.etcd_cluster("etcd-events")
    assert ec is not None
    [seq] = member_sequences(one, three)
    starts = {j.member: j for j in etcd_joins(one, three)}
    manifest = f"etc/kubernetes/manifests/{ec.manifest}"
    async with Commands(lab) as commands:
        for s in seq.steps:
            if s.kind == "start-member":  # the join: agent started, JoinNodes with the member's etcd join
                await asyncio.to_thread(lab.sup.ensure_agents, lab.info, three, [s.member])
                start = starts[s.member]
                req = JoinNodes(request_id=f"join-{s.member}-{uuid.uuid4().hex[:8]}", cluster=c, plan_digest=digest,
                                nodes=[s.member], etcd_joins=[MembershipEtcdJoin(
                                    etcd_cluster=start.etcd_cluster, member=s.member, initial_cluster=start.initial_cluster)])
                done = await follow_membership(lab.access, req, 600.0)
                assert done.get("status") == "Succeeded", done
                text = (lab.host(s.member) / manifest).read_text()
                assert "--initial-cluster-state=existing" in text and f"--initial-cluster={start.initial_cluster}" in text
            elif s.kind == "check-health":
                for h in s.healthy:
                    await _checked(commands, h, [_health(three, h)])
            else:
                step = agent_step(s, ec)
                assert step is not None
                await _checked(commands, s.run_on, [step])

    # three voters, the data of before through each, with the apiserver's etcd client certificate
    members = await etcd_members(ec.members[0].client_url, tls)
    assert sorted(m["name"] for m in members) == list(EVENTS) and not any(m.get("isLearner") for m in members)
    for m in ec.members:
        await assert_reads_back(m.client_url, tls, KEYS)
    # the joins commanded the joining nodes only: the nodes there before ran nothing new but the
    # periodic health checks and the caller's learner adds and promotions (sent to events1 by the
    # test as signed commands, `<cluster>/etcd-members/<id>`)
    after = {h: [cid for cid in cids if "/etcd-members/" not in cid] for h, cids in _executions(lab, old_hosts).items()}
    assert _stray(before, after) == {}, "a node outside the joins received a command"
