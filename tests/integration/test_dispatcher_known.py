"""What the dispatcher believes exists (bke_dispatcher.known), on a real Redis: a result about
a cluster it never saw is dead-lettered at once, but one about an installed cluster whose plan
just vanished (the store emptied, in the second before the epoch watch holds everything) waits."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.contracts.agent import CommandResult
from bke.core.errors import TemporaryError, UnknownTarget
from bke.core.plan import plan_spec_text
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke_dispatcher.known import KnownTargets
from bke_dispatcher.state import DispatcherState

pytestmark = pytest.mark.integration


def _result(cluster: str) -> CommandResult:
    now = datetime.now(timezone.utc).isoformat()
    return CommandResult(command_id=f"{cluster}/etcd/master1/0", cluster=cluster, node="master1", agent_id="a",
                         status="Succeeded", steps=[], started_at=now, finished_at=now)


async def test_unknown_cluster_is_poison_but_a_vanished_plan_of_a_known_one_waits(redis_url):
    r = Redis.from_url(redis_url)
    try:
        plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: kn")).plan
        pj = plan.to_json()
        now = datetime.now(timezone.utc).isoformat()
        assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), "req-1", now)
        state = DispatcherState(r)
        await state.start_install("kn", "req-1", now, plan_digest(pj))
        known = KnownTargets(state, PlanCache(r))
        await known.check_result(_result("kn"))  # installed, master1 in its plan: believed
        with pytest.raises(UnknownTarget):
            await known.check_result(_result("never-installed"))
        # the store emptied under a running install (only this cluster's keys: the Redis is shared)
        await r.delete(*[k async for k in r.scan_iter(match="bke:kn:*")])
        with pytest.raises(TemporaryError):
            await known.check_result(_result("kn"))
    finally:
        await r.aclose()
