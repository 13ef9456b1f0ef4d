"""Workers removed from a cluster, forgotten by the certs service.

Why: a removal (bke_dispatcher.ops.removal.run) drains, deletes, resets and forgets a node in the
dispatcher's own records, but the certs service kept its own: the key BKE provisioned for the
node's agent, the registration it accepted, the node's sealed bundle, and the node's private
keys and certificates in the PKI. A node that left BKE must leave no key behind, and an agent
key recorded for a node that no longer exists must not be trusted again if a node of that
name joins later (it gets a new key, provisioned anew). Each service removes what it owns
(bke.adapters.forgetting), so the certs service listens to the removal's end:

    remove-nodes.finished  -> for each node that reached the end of its removal (Succeeded):
                              agents:provisioned, certs:agents and files:certs lose the node;
                              the PKI loses the instances the node owns and the node's place
                              in the manifest (RedisPkiStore.forget_nodes)

Idempotent: a redelivery finds nothing left. A removal that failed forgets only the nodes it
finished (a node stopped half-way still has its agent, and may be removed again). Errors: a
PKI changed meanwhile (StoreConflict, a TemporaryError) is redelivered; Redis away is held.
"""
from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from bke.adapters.forgetting import on_nodes_removed
from bke.adapters.pki.store_redis import RedisPkiStore
from bke.adapters.state.keys.certs import certs_agents_key, provisioned_agents_key
from bke.adapters.state.keys.node_files import node_files_key

__all__ = ["RemovedNodes"]


@dataclass
class RemovedNodes:
    redis: Redis
    store: RedisPkiStore

    def __post_init__(self) -> None:
        self.on_removed = on_nodes_removed("certs service", self.forget)

    async def forget(self, c: str, hosts: list[str]) -> str:
        async with self.redis.pipeline(transaction=True) as pipe:
            for key in (provisioned_agents_key(c), certs_agents_key(c), node_files_key(c, "certs")):
                pipe.hdel(key, *hosts)
            await pipe.execute()
        removed = await self.store.forget_nodes(c, hosts)
        return f"{len(removed)} PKI instance(s)"
