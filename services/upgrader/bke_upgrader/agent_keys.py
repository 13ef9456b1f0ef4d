"""A node's agent sealing key for the upgrader (bke.adapters.state.agent_keys: the provisioned key)."""
from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from redis.asyncio import Redis

from bke.adapters.state.agent_keys import Sealer, provisioned_seal_keys, sealer

__all__ = ["agent_seal_key", "sealer_for"]


async def agent_seal_key(redis: Redis, cluster: str, node: str) -> X25519PublicKey | None:
    return (await provisioned_seal_keys(redis, cluster, [node]))[node]


async def sealer_for(redis: Redis, cluster: str, node: str) -> Sealer:
    """A function sealing bytes to `node`'s agent; ValueError if none was provisioned."""
    key = await agent_seal_key(redis, cluster, node)
    if key is None:
        raise ValueError(f"no agent key was provisioned for {node} in cluster {cluster}: its secret files "
                         "cannot be sealed to it")
    return sealer(key)
