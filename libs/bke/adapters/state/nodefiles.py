"""Per-node file sets in Redis: what the certs service and the renderer hand to the dispatcher
(the file type itself, `NodeFile`, is bke.core.state.nodefiles).

A set is stored per (cluster, source, node) so that the dispatcher reads one node's files
without loading a 5,000-node cluster. Secret files are never stored in clear: certs stores
them sealed to the node's agent (`sealed_b64`), so Redis only ever holds ciphertext.
"""
from __future__ import annotations

import json
from typing import Literal

from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from bke.core.state.nodefiles import NodeFile
from .keys import node_files_digest_key, node_files_key

__all__ = ["RedisNodeFiles"]

Source = Literal["render", "certs"]


class RedisNodeFiles:
    def __init__(self, redis: Redis):
        self.redis = redis

    @staticmethod
    def _key(cluster: str, source: Source) -> str:
        return node_files_key(cluster, source)

    async def put_many(self, cluster: str, source: Source, files: dict[str, list[NodeFile]], digest: str | None = None) -> None:
        """One hash field per node, written in one round trip; `digest` marks a complete set."""
        mapping: dict[FieldT, EncodableT] = {node: json.dumps([f.model_dump(by_alias=True, mode="json") for f in fs]) for node, fs in files.items()}
        async with self.redis.pipeline(transaction=True) as pipe:
            if mapping:
                pipe.hset(self._key(cluster, source), mapping=mapping)
            if digest is not None:
                pipe.set(node_files_digest_key(cluster, source), digest)
            await pipe.execute()

    async def get(self, cluster: str, source: Source, node: str) -> list[NodeFile] | None:
        raw = await self.redis.hget(self._key(cluster, source), node)
        if raw is None:
            return None
        return [NodeFile.model_validate(d) for d in json.loads(raw)]

    async def get_many(self, cluster: str, source: Source, nodes: list[str]) -> dict[str, list[NodeFile] | None]:
        if not nodes:
            return {}
        raws = await self.redis.hmget(self._key(cluster, source), nodes)
        return {n: None if r is None else [NodeFile.model_validate(d) for d in json.loads(r)] for n, r in zip(nodes, raws)}

    async def nodes(self, cluster: str, source: Source) -> list[str]:
        """The nodes that have a file set from this source (names only)."""
        return sorted(k.decode() if isinstance(k, bytes) else k for k in await self.redis.hkeys(self._key(cluster, source)))

    async def count(self, cluster: str, source: Source) -> int:
        return int(await self.redis.hlen(self._key(cluster, source)))

    async def digest(self, cluster: str, source: Source) -> str | None:
        raw = await self.redis.get(node_files_digest_key(cluster, source))
        return raw.decode() if isinstance(raw, bytes) else raw
