"""The dispatcher's sealers for a secret rendered file (keepalived.conf), on real Redis: each
node's provisioned agent key (`bke:<c>:agents:provisioned`), read in one HMGET; a node without
one is waited for (TemporaryError naming it), never sent the file in clear."""
from __future__ import annotations

import base64

import pytest
from redis import asyncio as aioredis

from bke.contracts.agent import ProvisionAgent
from bke.core.errors import TemporaryError
from bke.core.secrets.sealing import generate_agent_key, open_sealed, public_key_to_raw
from bke.adapters.state.keys.certs import provisioned_agents_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke_dispatcher.phases import agent_sealers

pytestmark = pytest.mark.integration


async def test_each_node_s_sealer_is_its_provisioned_key_and_a_missing_one_is_waited_for(
        redis_client: aioredis.Redis) -> None:
    key = generate_agent_key()
    await redis_client.hset(provisioned_agents_key("seal"), "m1", ProvisionAgent(
        cluster="seal", node="m1", agent_id="agent-m1",
        seal_public_key_b64=base64.b64encode(public_key_to_raw(key.public_key())).decode()).to_bytes())
    files = RedisNodeFiles(redis_client)
    seals = await agent_sealers(files, "seal", ["m1"])
    sealed = seals["m1"](b"auth_pass Vr7pQ2xZ")  # type: ignore[misc]
    assert b"Vr7pQ2xZ" not in sealed and open_sealed(key, sealed) == b"auth_pass Vr7pQ2xZ"
    with pytest.raises(TemporaryError, match="no agent key provisioned for m2"):
        await agent_sealers(files, "seal", ["m1", "m2"])
