"""The sealing key BKE provisioned for a node's agent (`bke:<c>:agents:provisioned`, written
by `bke agent provision`): what a file for that node is sealed to. The provisioned key, never
the one an agent announces on the bus, so a forged announcement cannot redirect a secret."""
from __future__ import annotations

import base64
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from bke.contracts.agent import ProvisionAgent
from bke.secrets.sealing import public_key_from_raw, seal
from bke.state.keys import provisioned_agents_key

__all__ = ["agent_seal_key", "sealer_for"]


async def agent_seal_key(redis: object, cluster: str, node: str) -> X25519PublicKey | None:
    raw = await redis.hget(provisioned_agents_key(cluster), node)  # type: ignore[attr-defined]
    if raw is None:
        return None
    prov = ProvisionAgent.model_validate_json(raw)
    return public_key_from_raw(base64.b64decode(prov.seal_public_key_b64))


async def sealer_for(redis: object, cluster: str, node: str) -> Callable[[bytes], bytes]:
    """A function sealing bytes to `node`'s agent; ValueError if none was provisioned."""
    key = await agent_seal_key(redis, cluster, node)
    if key is None:
        raise ValueError(f"no agent key was provisioned for {node} in cluster {cluster}: its secret files "
                         "cannot be sealed to it")
    return lambda data: seal(key, data)
