"""A deleted cluster's records, removed by each service under its own Redis ACL user
(bke.adapters.forgetting): together the five leave no `bke:<c>:*` key and no index entry, each touches
only its own families (no permission error), another cluster and the deployment's keys stay,
and a redelivery removes nothing more."""
from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bke.contracts.reset import DELETE_OWNERS
from bke.adapters.forgetting import INDEXES, forget_cluster, owned_members
from bke.adapters.runtime import EmbeddedRuntime, redis_acl
from bke.adapters.state.keys.common import cluster_key, epoch_key
from bke.adapters.state.keys.planner import request_key
from bke.core.state.schema import RECORDS

pytestmark = pytest.mark.integration
GONE, KEPT = "forget-me", "keep-me"


def _every_key(cluster: str) -> list[str]:
    """One key of every member family of every record (a `*` filled in)."""
    return [cluster_key(cluster, m.replace("*", "x")) for kind in RECORDS for m in kind.members]


def test_every_record_has_an_owner_among_the_services() -> None:
    owned = {m for s in DELETE_OWNERS for m in owned_members(s)}
    assert owned == {m for kind in RECORDS for m in kind.members}


async def test_each_service_forgets_its_own_and_together_nothing_is_left(
        runtime: EmbeddedRuntime, redis_client: aioredis.Redis) -> None:
    assert runtime.info is not None
    for c in (GONE, KEPT):
        for key in _every_key(c):
            await redis_client.set(key, "v")
        for indexes in INDEXES.values():
            for index in indexes:
                await redis_client.sadd(index, c)
        await redis_client.set(request_key(f"req-{c}"), c)
    await redis_client.set(epoch_key(), "e")
    removed = {}
    for service in DELETE_OWNERS:
        r = aioredis.from_url(redis_acl.service_url(runtime.workdir, runtime.info.redis_url, service))
        try:
            removed[service] = await forget_cluster(r, GONE, service)
            assert await forget_cluster(r, GONE, service) == 0  # a redelivery finds nothing more
        finally:
            await r.aclose()
    assert all(n > 0 for n in removed.values()), removed
    assert [key async for key in redis_client.scan_iter(match=f"bke:{GONE}:*")] == []
    assert await redis_client.get(request_key(f"req-{GONE}")) is None
    for indexes in INDEXES.values():
        for index in indexes:
            assert not await redis_client.sismember(index, GONE) and await redis_client.sismember(index, KEPT)
    assert sorted([key async for key in redis_client.scan_iter(match=f"bke:{KEPT}:*")]) == sorted(set(_every_key(KEPT)))
    assert await redis_client.get(request_key(f"req-{KEPT}")) == KEPT and await redis_client.get(epoch_key()) == "e"
