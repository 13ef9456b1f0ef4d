"""The sealing keys BKE provisioned for nodes' agents (`bke:<c>:agents:provisioned`, written at
`bke agent provision`): what a secret file for a node is sealed to. The provisioned key, never
the one an agent announces on the bus, so a forged announcement cannot redirect a secret."""
from __future__ import annotations

import base64
from collections.abc import Callable, Sequence

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from redis.asyncio import Redis

from bke.contracts.agent import ProvisionAgent
from bke.core.secrets.sealing import public_key_from_raw, seal
from .keys.certs import provisioned_agents_key

__all__ = ["Sealer", "provisioned_seal_keys", "sealer"]

Sealer = Callable[[bytes], bytes]  # clear bytes -> sealed to one node's agent


async def provisioned_seal_keys(redis: Redis, cluster: str, nodes: Sequence[str]) -> dict[str, X25519PublicKey | None]:
    """Each node's provisioned sealing key, None where none was provisioned (one HMGET)."""
    if not nodes:
        return {}
    raws = await redis.hmget(provisioned_agents_key(cluster), list(nodes))
    out: dict[str, X25519PublicKey | None] = {}
    for node, raw in zip(nodes, raws):
        out[node] = None if raw is None else public_key_from_raw(
            base64.b64decode(ProvisionAgent.model_validate_json(raw).seal_public_key_b64))
    return out


def sealer(key: X25519PublicKey) -> Sealer:
    return lambda data: seal(key, data)
