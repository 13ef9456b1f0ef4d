"""Redis adapter of the PKI store (redis.asyncio), for the certs service and `bke certs --cluster`.

Keys (names from bke.adapters.state.keys)::

    bke:<cluster>:pki:manifest   JSON manifest (no secrets)
    bke:<cluster>:pki:certs      hash  instance id -> certificate PEM (public, in clear)
    bke:<cluster>:pki:keys       hash  instance id -> base64(AES-256-GCM blob): every private key,
                                       encrypted with the operator's key, AAD "<cluster>/<id>"
    bke:<cluster>:pki:version    counter, bumped by every save that changes something
    bke:pki-clusters             set   every cluster saved here (the certs service's index)

Why so: one HGETALL loads a 5,000-node cluster; HMGET serves one node's bundle; saves are one
WATCH/MULTI transaction on the version, so two racing ensures cannot mix their CAs (the loser gets
StoreConflict, a TemporaryError: on redelivery it reuses what the winner stored). Works with
clients created with or without ``decode_responses``.
"""
from __future__ import annotations

import base64
from collections.abc import Collection
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError
from redis.typing import EncodableT, FieldT

from bke.core.pki import Manifest, Material, Snapshot, StoreConflict, StoreError
from bke.core.pki.store import key_aad
from bke.core.secrets import DecryptError, SecretBox
from bke.adapters.state.keys.certs import pki_index, pki_key

__all__ = ["RedisPkiStore", "pki_keys"]


def pki_keys(cluster: str) -> dict[str, str]:
    return {part: pki_key(cluster, part) for part in ("manifest", "certs", "keys", "version")}


def _bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


def _field(value: bytes | str) -> str:
    """A hash field name (never None, unlike a missing key's value)."""
    return value.decode() if isinstance(value, bytes) else value


class RedisPkiStore:
    """A PkiStore in Redis; the client is injected (created and closed by the caller)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def load(self, cluster: str, box: SecretBox | None,
                   ids: Collection[str] | None = None) -> Snapshot | None:
        k = pki_keys(cluster)
        wanted = None if ids is None else list(ids)
        async with self.redis.pipeline(transaction=True) as pipe:  # one consistent read
            pipe.get(k["version"])
            pipe.get(k["manifest"])
            if wanted is None:
                pipe.hgetall(k["certs"])
                if box is not None:
                    pipe.hgetall(k["keys"])
            elif wanted:
                pipe.hmget(k["certs"], wanted)
                if box is not None:
                    pipe.hmget(k["keys"], wanted)
            res = await pipe.execute()
        version, raw_manifest = _text(res[0]), _bytes(res[1])
        if raw_manifest is None:
            return None
        manifest = Manifest.from_json(raw_manifest)
        if manifest.cluster != cluster:
            raise StoreError(f"{k['manifest']} holds cluster {manifest.cluster!r}")
        certs, keys = self._pairs(res[2:], wanted, box is not None)
        materials = {}
        for iid, cert in certs.items():
            blob = keys.get(iid)
            key = None
            if blob is not None and box is not None:
                try:
                    key = box.decrypt(base64.b64decode(blob), key_aad(cluster, iid))
                except (DecryptError, ValueError) as exc:
                    raise StoreError(f"{k['keys']}[{iid}]: {exc}") from None
            materials[iid] = Material(cert, key)
        return Snapshot(manifest, materials, version)

    @staticmethod
    def _pairs(res: list[Any], wanted: list[str] | None, with_keys: bool) -> tuple[dict[str, bytes], dict[str, bytes]]:
        if wanted is not None and not wanted:
            return {}, {}
        if wanted is None:
            certs = {_text(i): _bytes(v) for i, v in res[0].items()}
            keys = {_text(i): _bytes(v) for i, v in res[1].items()} if with_keys else {}
        else:
            certs = {i: _bytes(v) for i, v in zip(wanted, res[0]) if v is not None}
            keys = {i: _bytes(v) for i, v in zip(wanted, res[1]) if v is not None} if with_keys else {}
        return certs, keys  # type: ignore[return-value]

    async def save(self, snapshot: Snapshot, changed: Collection[str], box: SecretBox,
                   expected_version: str | None) -> None:
        cluster = snapshot.manifest.cluster
        k = pki_keys(cluster)
        raw = snapshot.manifest.to_json()
        changed = [i for i in changed if i in snapshot.materials]
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(k["version"])
            if _text(await pipe.get(k["version"])) != expected_version:
                raise StoreConflict(f"PKI of {cluster} changed since it was loaded; retry", delay=0.5)
            old_raw = _bytes(await pipe.get(k["manifest"]))
            stored = {_field(i) for i in await pipe.hkeys(k["certs"])}
            removed = sorted(stored - set(snapshot.materials))
            if not changed and not removed and old_raw == raw:
                return  # nothing to write: a repeated ensure leaves every byte (and the version) alone
            pipe.multi()
            pipe.set(k["manifest"], raw)
            if changed:
                certs: dict[FieldT, EncodableT] = {i: snapshot.materials[i].cert for i in changed}
                pipe.hset(k["certs"], mapping=certs)
                enc: dict[FieldT, EncodableT] = {i: base64.b64encode(box.encrypt(m.key, key_aad(cluster, i)))
                       for i in changed if (m := snapshot.materials[i]).key is not None}
                if enc:
                    pipe.hset(k["keys"], mapping=enc)
            if removed:
                pipe.hdel(k["certs"], *removed)
                pipe.hdel(k["keys"], *removed)
            pipe.incr(k["version"])
            pipe.sadd(pki_index(), cluster)  # the clusters the certs service lists (dashboard, metrics)
            try:
                await pipe.execute()
            except WatchError:
                raise StoreConflict(f"PKI of {cluster} changed while saving; retry", delay=0.5) from None

    async def forget_nodes(self, cluster: str, hosts: Collection[str]) -> tuple[str, ...]:
        """Remove what the PKI holds of nodes that left the cluster: the instances they own
        (certificates and encrypted private keys) and their place in the manifest (one
        WATCH/MULTI on the version, as `save`). The removed instance ids; () when nothing of
        them is left (idempotent) or the cluster has no PKI."""
        k = pki_keys(cluster)
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(k["version"], k["manifest"])
            raw = _bytes(await pipe.get(k["manifest"]))
            if raw is None:
                return ()
            old = Manifest.from_json(raw)
            new, removed = old.without_nodes(hosts)
            if not removed and new.to_json() == raw:
                return ()
            pipe.multi()
            pipe.set(k["manifest"], new.to_json())
            if removed:
                pipe.hdel(k["certs"], *removed)
                pipe.hdel(k["keys"], *removed)
            pipe.incr(k["version"])  # readers' caches (the certs service's) reload
            try:
                await pipe.execute()
            except WatchError:
                raise StoreConflict(f"PKI of {cluster} changed while forgetting nodes; retry", delay=0.5) from None
        return removed
