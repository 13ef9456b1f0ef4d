"""Short leases in Redis: one owner at a time may drive a cluster's operation (an install
phase, a rotation, an upgrade); a crashed owner's lease lapses after its TTL."""
from __future__ import annotations

from redis.asyncio import Redis

from .keys.shared import lease_key

__all__ = ["claim_key", "claim_lease", "release_lease"]

_CLAIM = """
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]); return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


async def claim_lease(redis: Redis, cluster: str, slug: str, owner: str, ttl_ms: int) -> bool:
    """Take (or extend) the lease; False while another owner holds it."""
    return await claim_key(redis, lease_key(cluster, slug), owner, ttl_ms)


async def claim_key(redis: Redis, key: str, owner: str, ttl_ms: int) -> bool:
    """`claim_lease` on a key of the caller's own (a service whose Redis user may write only
    its own keys)."""
    return bool(await redis.eval(_CLAIM, 1, key, owner, ttl_ms))


async def release_lease(redis: Redis, cluster: str, slug: str, owner: str) -> None:
    await redis.eval(_RELEASE, 1, lease_key(cluster, slug), owner)
