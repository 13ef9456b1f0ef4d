"""Per-node file sets in Redis: what the certs service and the renderer hand to the dispatcher
(the file type itself, `NodeFile`, is bke.core.state.nodefiles).

A set is stored per (cluster, source, node) so that the dispatcher reads one node's files
without loading a 5,000-node cluster. Secret files are never stored in clear: certs stores
them sealed to the node's agent (`sealed_b64`), so Redis only ever holds ciphertext.

The renderer's sets are signed per node with the `render` record-signing key
(bke.core.secrets.record_signing): `files:render:signatures` holds, per node, the render's digest
and the signature over the node's stored bytes bound to the cluster, the node and that digest.
A set read from the `render` source is checked before it is returned, and one whose signature is
missing or wrong raises RecordSignatureError (permanent) naming the cluster and the node: the
dispatcher then sends no command built from it. The certs source's secret files are sealed to
their agent, which opens only what was sealed to its key; its sets are not signed here.
"""
from __future__ import annotations

import json
from typing import Literal

from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from bke.core.secrets.record_signing import RecordSigner, RecordVerifier
from bke.core.state.nodefiles import NodeFile
from .keys.node_files import node_files_digest_key, node_files_key, node_files_signatures_key
from .keys.trust import record_signing_key
from .record_keys import RecordKeys, verifier_of

__all__ = ["RENDER_SIGNED_KIND", "RedisNodeFiles", "check_node_files", "sign_node_files"]

Source = Literal["render", "certs"]
RENDER_SIGNED_KIND = "rendered-files"  # the record kind a node's rendered files are signed as
_VERIFIERS_KEPT = 4  # the render key's stored forms kept (one, but for a key replaced meanwhile)


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def sign_node_files(signer: RecordSigner, cluster: str, node: str, digest: str, raw: str) -> str:
    """The stored signature of a node's rendered files (`raw`, as stored): "<digest> <signature>"."""
    return f"{digest} {signer.sign(RENDER_SIGNED_KIND, cluster, (node, digest), raw.encode())}"


def check_node_files(verifier: RecordVerifier, cluster: str, node: str, raw: object, stored: object) -> None:
    """Raise RecordSignatureError unless `stored` is the renderer's signature of `raw`."""
    digest, _, signature = ("" if stored is None else _text(stored)).partition(" ")
    record = f"the rendered files of {node} in {cluster} ({node_files_key(cluster, 'render')})"
    verifier.verify(record, RENDER_SIGNED_KIND, cluster, (node, digest), _text(raw).encode(), signature or None)


class RedisNodeFiles:
    def __init__(self, redis: Redis, keys: RecordKeys | None = None):
        self.redis = redis
        self.keys = keys or RecordKeys(redis)  # signs a `render` set only where the `render` key is given
        # the `render` key's stored form -> its verifier, which remembers the signatures it found
        # good (RecordVerifier): a node's files are read again in every phase, and checked again
        # only when their bytes, signature or key changed
        self._verifiers: dict[bytes | str, RecordVerifier] = {}

    def _verifier(self, key: bytes | str | None, cluster: str) -> RecordVerifier:
        found = self._verifiers.get(key) if key is not None else None
        if found is None:
            found = verifier_of("render", key, f"the rendered files of {cluster}")
            if len(self._verifiers) >= _VERIFIERS_KEPT:
                self._verifiers.clear()
            self._verifiers[key] = found  # type: ignore[index]  # not None: verifier_of raised
        return found

    @staticmethod
    def _key(cluster: str, source: Source) -> str:
        return node_files_key(cluster, source)

    async def put_many(self, cluster: str, source: Source, files: dict[str, list[NodeFile]], digest: str | None = None) -> None:
        """One hash field per node, written in one round trip; `digest` marks a complete set."""
        mapping: dict[FieldT, EncodableT] = {node: json.dumps([f.model_dump(by_alias=True, mode="json") for f in fs]) for node, fs in files.items()}
        signatures: dict[FieldT, EncodableT] = {}
        if source == "render" and mapping:
            signer = await self.keys.signer("render")
            signatures = {n: sign_node_files(signer, cluster, _text(n), digest or "", str(raw)) for n, raw in mapping.items()}
        async with self.redis.pipeline(transaction=True) as pipe:
            if mapping:
                pipe.hset(self._key(cluster, source), mapping=mapping)
            if signatures:
                pipe.hset(node_files_signatures_key(cluster, source), mapping=signatures)
            if digest is not None:
                pipe.set(node_files_digest_key(cluster, source), digest)
            await pipe.execute()

    async def get(self, cluster: str, source: Source, node: str) -> list[NodeFile] | None:
        return (await self.get_many(cluster, source, [node]))[node]

    async def get_many(self, cluster: str, source: Source, nodes: list[str]) -> dict[str, list[NodeFile] | None]:
        """The nodes' sets (None: none stored); a `render` set only once its signature is checked."""
        if not nodes:
            return {}
        if source != "render":
            raws = await self.redis.hmget(self._key(cluster, source), nodes)
        else:
            async with self.redis.pipeline(transaction=True) as pipe:  # the files, their signatures and key, consistent
                pipe.hmget(self._key(cluster, source), nodes)
                pipe.hmget(node_files_signatures_key(cluster, source), nodes)
                pipe.get(record_signing_key("render"))
                raws, signatures, key = await pipe.execute()
            if any(r is not None for r in raws):
                verifier = self._verifier(key, cluster)
                for node, raw, stored in zip(nodes, raws, signatures):
                    if raw is not None:
                        check_node_files(verifier, cluster, node, raw, stored)
        return {n: None if r is None else [NodeFile.model_validate(d) for d in json.loads(r)] for n, r in zip(nodes, raws)}

    async def nodes(self, cluster: str, source: Source) -> list[str]:
        """The nodes that have a file set from this source (names only)."""
        return sorted(k.decode() if isinstance(k, bytes) else k for k in await self.redis.hkeys(self._key(cluster, source)))

    async def count(self, cluster: str, source: Source) -> int:
        return int(await self.redis.hlen(self._key(cluster, source)))

    async def digest(self, cluster: str, source: Source) -> str | None:
        raw = await self.redis.get(node_files_digest_key(cluster, source))
        return raw.decode() if isinstance(raw, bytes) else raw
