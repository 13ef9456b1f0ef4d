"""Rendered file sets in Redis, in the format the dispatcher reads (bke.adapters.state.nodefiles).

Keys (names from bke.adapters.state.keys)::

    bke:<cluster>:files:render          hash  hostname -> JSON list of NodeFile (the dispatcher's contract)
    bke:<cluster>:files:render:digest   the RenderedCluster digest: marks a complete set
    bke:<cluster>:files:render:signatures  hash  hostname -> "<digest> <signature>": the renderer's
                                        signature of the node's files (bke.adapters.state.nodefiles)
    bke:<cluster>:addon-manifests       hash  addon name -> multi-document YAML (the dispatcher's addons phase)
    bke:<cluster>:render:meta           JSON: versions, tier, template sets, warnings, secret paths, and
                                        `schemaVersion`, the form of all these keys (bke.core.state.schema)
    bke:<cluster>:render:vrrp-password  the cluster's VRRP password, created once (SET NX)

Each node's files are signed with the `render` record-signing key, which only the renderer's
processes are given (bke.core.secrets.record_signing): the dispatcher checks the signature
before it builds a command from them.

A save replaces the whole set in one MULTI/EXEC (nodes that left the plan disappear with it), and
writes the digest in the same transaction, so a reader never sees a half-written set. A node whose
removal finished (`forget_nodes`, on remove-nodes.finished) leaves at once: its files, its place
in the meta (`nodes`, `secretPaths`) and the digest go in one transaction (the set is then no
plan's render: the next render of any plan, even the one before the removal, writes it whole).

Secret files: the only secret the renderer emits is keepalived.conf's VRRP PASS password, which
keepalived sends in clear text in every VRRP advertisement on the LAN and which is kept here
anyway to be reused; its files are therefore stored like the others (content_b64), and their
paths are listed in the meta so a load restores the `secret` flag.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from bke.core.render import NodeFiles, RenderedCluster, RenderedFile
from bke.adapters.state.keys.node_files import node_files_digest_key, node_files_key, node_files_signatures_key
from bke.adapters.state.keys.renderer import addon_manifests_key, render_meta_key, vrrp_password_key
from bke.adapters.state.nodefiles import sign_node_files
from bke.adapters.state.record_keys import RecordKeys
from bke.core.state.nodefiles import NodeFile
from bke.core.state.schema import SCHEMA_FIELD, check_readable, record_kind

__all__ = ["RedisRenderStore", "render_keys"]

RENDER_VERSION = record_kind("render").current  # in the meta: the version of every key above


def render_keys(cluster: str) -> dict[str, str]:
    return {
        "files": node_files_key(cluster, "render"),
        "digest": node_files_digest_key(cluster, "render"),
        "signatures": node_files_signatures_key(cluster, "render"),
        "addons": addon_manifests_key(cluster),
        "meta": render_meta_key(cluster),
        "vrrp": vrrp_password_key(cluster),
    }


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


def _node_json(node: NodeFiles) -> str:
    files = [NodeFile(path=f.path, mode=f.mode, sha256=f.sha256, content_b64=base64.b64encode(f.content).decode())
             for f in node.files]
    return json.dumps([f.model_dump(by_alias=True, mode="json") for f in files])


def _meta(cluster: str, raw: Any) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(_text(raw) or "{}")
    check_readable("render", meta.get(SCHEMA_FIELD), f"the rendered files of {cluster}")
    return meta


class RedisRenderStore:
    """The client is injected (created and closed by the caller); works with or without decode_responses."""

    def __init__(self, redis: Redis, keys: RecordKeys | None = None) -> None:
        self.redis = redis
        self.keys = keys or RecordKeys(redis)  # holds the `render` key (the renderer's wiring gives it)

    async def digest(self, cluster: str) -> str | None:
        return _text(await self.redis.get(render_keys(cluster)["digest"]))

    async def save(self, rendered: RenderedCluster) -> None:
        k = render_keys(rendered.cluster)
        meta = rendered.meta_json()
        meta["secretPaths"] = {n.hostname: [f.path for f in n.files if f.secret] for n in rendered.nodes
                               if any(f.secret for f in n.files)}
        meta[SCHEMA_FIELD] = RENDER_VERSION
        files = {n.hostname: _node_json(n) for n in rendered.nodes}
        signer = await self.keys.signer("render")
        signatures = {h: sign_node_files(signer, rendered.cluster, h, rendered.digest, raw) for h, raw in files.items()}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(k["files"], k["addons"], k["signatures"])
            pipe.hset(k["files"], mapping=files)
            pipe.hset(k["signatures"], mapping=signatures)
            if rendered.addons:
                pipe.hset(k["addons"], mapping={f.path.removesuffix(".yaml"): f.content.decode() for f in rendered.addons})
            pipe.set(k["meta"], json.dumps(meta, sort_keys=True))
            pipe.set(k["digest"], rendered.digest)
            await pipe.execute()

    async def forget_nodes(self, cluster: str, hosts: list[str]) -> str:
        """Drop the nodes' rendered files and their place in the meta; idempotent (a redelivery
        finds nothing to drop and changes nothing). The meta is rewritten under WATCH: a save
        racing it wins and this is tried again on what it wrote."""
        k = render_keys(cluster)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(k["meta"], k["files"])
                    raw_meta = await pipe.get(k["meta"])
                    present = [h for h, there in zip(hosts, await pipe.hmget(k["files"], hosts)) if there is not None]
                    meta = _meta(cluster, raw_meta) if raw_meta is not None else None
                    listed = meta is not None and (set(hosts) & (set(meta.get("nodes", [])) | set(meta.get("secretPaths", {}))))
                    if not present and not listed:
                        return "no rendered files left"
                    pipe.multi()
                    if present:
                        pipe.hdel(k["files"], *present)
                        pipe.hdel(k["signatures"], *present)
                    if meta is not None:
                        meta["nodes"] = [h for h in meta.get("nodes", []) if h not in hosts]
                        meta["secretPaths"] = {h: p for h, p in meta.get("secretPaths", {}).items() if h not in hosts}
                        pipe.set(k["meta"], json.dumps(meta, sort_keys=True))
                    pipe.delete(k["digest"])
                    await pipe.execute()
                    return f"{len(present)} rendered file set(s)"
                except WatchError:
                    continue

    async def load(self, cluster: str) -> RenderedCluster | None:
        k = render_keys(cluster)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(k["meta"]).hgetall(k["files"]).hgetall(k["addons"])
            raw_meta, raw_files, raw_addons = await pipe.execute()
        if raw_meta is None:
            return None
        meta = _meta(cluster, raw_meta)
        files = {_text(h): _text(v) for h, v in raw_files.items()}
        addons = {_text(n): _text(v) for n, v in raw_addons.items()}
        nodes = tuple(self._node(h, files[h], meta) for h in meta["nodes"] if h in files)
        rendered = RenderedCluster(
            cluster=meta["cluster"], kubernetes_version=meta["kubernetesVersion"], etcd_version=meta["etcdVersion"],
            containerd_version=meta["containerdVersion"], tier=meta["tier"], template_sets=tuple(meta["templateSets"]),
            nodes=nodes, addons=tuple(RenderedFile(f"{n}.yaml", 0o644, (addons[n] or "").encode()) for n in sorted(addons)),
            warnings=tuple(meta["warnings"]),
        )
        return rendered

    async def load_node(self, cluster: str, hostname: str) -> NodeFiles | None:
        k = render_keys(cluster)
        raw_meta, raw = await self.redis.get(k["meta"]), await self.redis.hget(k["files"], hostname)
        if raw_meta is None or raw is None:
            return None
        return self._node(hostname, _text(raw) or "[]", _meta(cluster, raw_meta))

    @staticmethod
    def _node(hostname: str, raw: str, meta: dict[str, Any]) -> NodeFiles:
        secret = set(meta.get("secretPaths", {}).get(hostname, []))
        files = [NodeFile.model_validate(d) for d in json.loads(raw)]
        return NodeFiles(hostname, tuple(RenderedFile(f.path, f.mode, base64.b64decode(f.content_b64 or ""), f.path in secret)
                                         for f in files))

    async def stored_vrrp_password(self, cluster: str) -> str | None:
        """The cluster's VRRP password if one was made, never making one (bke_renderer.vrrp_answer)."""
        return _text(await self.redis.get(render_keys(cluster)["vrrp"]))

    async def vrrp_password(self, cluster: str, new: Callable[[], str]) -> str:
        """The cluster's VRRP password: created once (SET NX), the same for every later call,
        also when two renderers race."""
        key = render_keys(cluster)["vrrp"]
        await self.redis.set(key, new(), nx=True)
        value = _text(await self.redis.get(key))
        assert value is not None
        return value
