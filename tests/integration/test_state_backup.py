"""bke.adapters.state.backup against a real Redis: a round trip restores every key of every type (TTLs
kept, the epoch last); another key, a tampered file, another format are refused; a restore over
existing keys needs `force` and then leaves no key of the old state behind, except the trust
material (bke.adapters.state.restore_trust): an identity revoked and an agent provisioned again after the
backup stay so, unless `replace_trust`; a revocation only in the backup is kept too."""
from __future__ import annotations

import time

import pytest
import redis
import redis.asyncio as aioredis

from bke.adapters.auth.registry import IdentityRegistry
from bke.contracts.agent import ProvisionAgent
from bke.core.secrets.at_rest import DecryptError, SecretBox
from bke.core.secrets.signing import CommandSigner, ensure_command_key_sync
from bke.core.secrets.snapshot_key import ensure_snapshot_key_sync
from bke.adapters.state.backup import MAGIC, BackupError, backup_state, decode_backup, encode_backup, restore_state
from bke.adapters.state.epoch import read_epoch, write_epoch
from bke.adapters.state.keys.common import epoch_key
from bke.adapters.state.keys.plan import plan_key
from bke.adapters.state.keys.certs import certs_agents_key, pki_key, provisioned_agents_key
from bke.adapters.state.keys.dispatcher import accepted_agents_key, install_key
from bke.adapters.state.keys.shared import lease_key
from bke.adapters.state.keys.auth import auth_authority_key
from bke.adapters.state.keys.trust import command_signing_key, etcd_snapshot_key
from bke.adapters.state.restore_trust import TrustError
from bke_agent import AgentIdentity

pytestmark = pytest.mark.integration
NOW = "2026-12-01T03:00:00+00:00"
KEY = SecretBox(b"k" * 32)


async def _fill(r: aioredis.Redis) -> None:
    await write_epoch(r, "epoch-1")
    await r.set(plan_key("seed"), b"\x00\xffplan bytes")
    await r.hset(install_key("seed"), mapping={"status": "Running", "phase": "etcd"})
    await r.hset(pki_key("seed", "keys"), mapping={"ca": b"\x01encrypted"})
    await r.sadd("bke:installs", "seed", "other")
    await r.rpush("bke:seed:list", "a", "b", "a")
    await r.zadd("bke:seed:z", {"x": 1.5, "y": -2})
    await r.set(lease_key("seed", "etcd"), "owner", px=600_000)
    await r.set("not-bke", "left alone")


async def _snapshot(r: aioredis.Redis) -> dict:
    reads = {b"string": r.get, b"hash": r.hgetall, b"set": r.smembers,
             b"list": lambda k: r.lrange(k, 0, -1), b"zset": lambda k: r.zrange(k, 0, -1, withscores=True)}
    return {k: (t, await reads[t](k)) async for k in r.scan_iter(match="bke:*") for t in [await r.type(k)]}


async def test_round_trip_restores_every_key_type_ttl_and_epoch(redis_url: str, redis_client: aioredis.Redis) -> None:
    raw = aioredis.from_url(redis_url)  # bytes in, bytes out: what the CLI uses
    try:
        await _fill(raw)
        before = await _snapshot(raw)
        doc, summary = await backup_state(raw, now=NOW)
        assert summary.keys == len(before) and summary.epoch == "epoch-1"
        blob = encode_backup(doc, KEY)
        assert blob.startswith(MAGIC) and b"plan bytes" not in blob and b"Running" not in blob

        await raw.flushdb()
        restored = await restore_state(raw, decode_backup(blob, KEY))
        assert restored.keys == summary.keys
        assert await _snapshot(raw) == before
        assert await read_epoch(raw) == "epoch-1"
        assert 0 < await raw.pttl(lease_key("seed", "etcd")) <= 600_000
        assert await raw.get("not-bke") is None  # flushed by the test, never written by a restore
    finally:
        await raw.aclose()


async def test_restore_over_existing_keys_needs_force_and_replaces_them(redis_url: str, redis_client: aioredis.Redis) -> None:
    raw = aioredis.from_url(redis_url)
    try:
        await _fill(raw)
        doc, _ = await backup_state(raw, now=NOW)
        await raw.set(epoch_key(), "epoch-2")
        await raw.set(plan_key("newer"), "a cluster made after the backup")
        with pytest.raises(BackupError, match="--force"):
            await restore_state(raw, doc)
        assert await read_epoch(raw) == "epoch-2"  # refused: nothing touched
        await restore_state(raw, doc, force=True)
        assert await raw.exists(plan_key("newer")) == 0
        assert await read_epoch(raw) == "epoch-1"
        assert await raw.get("not-bke") == b"left alone"  # only bke: keys are BKE's
    finally:
        await raw.aclose()


async def test_wrong_key_tampered_file_and_other_format_are_refused(redis_url: str, redis_client: aioredis.Redis) -> None:
    raw = aioredis.from_url(redis_url)
    try:
        await _fill(raw)
        doc, _ = await backup_state(raw, now=NOW)
    finally:
        await raw.aclose()
    blob = encode_backup(doc, KEY)
    other = SecretBox(b"o" * 32)
    with pytest.raises(DecryptError, match=f"encrypted with key {KEY.key_id}.*configured key is {other.key_id}"):
        decode_backup(blob, other)
    tampered = bytearray(blob)
    tampered[len(blob) // 2] ^= 0x01
    with pytest.raises(DecryptError, match="authentication failed"):
        decode_backup(bytes(tampered), KEY)
    with pytest.raises(BackupError, match="format '2'"):
        decode_backup(b"BKESTATE2\n" + blob[len(MAGIC):], KEY)
    with pytest.raises(BackupError, match="not a BKE state backup"):
        decode_backup(b"{}", KEY)
    # a file re-encrypted with the right key but edited inside fails its digest
    edited = dict(doc, keys=doc["keys"][1:])
    with pytest.raises(BackupError, match="digest mismatch"):
        decode_backup(encode_backup(edited, KEY), KEY)


# -- trust material: an older backup never rolls it back -------------------------------------------

def _provisioned(node: str) -> tuple[str, str]:
    """(agent id, ProvisionAgent JSON) of a fresh agent key for `node` of cluster seed."""
    ident = AgentIdentity.ephemeral()
    req = ProvisionAgent(cluster="seed", node=node, agent_id=ident.agent_id, seal_public_key_b64=ident.public_key_b64)
    return ident.agent_id, req.model_dump_json(by_alias=True)


class Deployment:
    """A store with the trust material a running deployment has: the NATS authority and its
    identities, the signing and snapshot keys, each node's provisioned, registered and accepted key."""

    def __init__(self, redis_url: str) -> None:
        self.sync = redis.Redis.from_url(redis_url)
        self.registry = IdentityRegistry(self.sync, KEY, lambda: int(time.time()))

    def fill(self) -> None:
        self.sync.set(epoch_key(), "epoch-1")
        self.sync.set(plan_key("seed"), "the plan of the backup")
        for node in ("n1", "n2", "n3"):
            self.registry.issue("agent", "seed", node)
            self.provision(node)
        ensure_command_key_sync(self.sync, command_signing_key(), KEY)
        ensure_snapshot_key_sync(self.sync, etcd_snapshot_key(), KEY)

    def provision(self, node: str) -> str:
        """What `bke agent provision` and the certs service and dispatcher record for a node's key."""
        agent_id, record = _provisioned(node)
        self.sync.hset(provisioned_agents_key("seed"), node, record)
        self.sync.hset(certs_agents_key("seed"), node, f'{{"agentId": "{agent_id}"}}')
        self.sync.hset(accepted_agents_key("seed"), node, agent_id)
        return record

    def remove(self, node: str) -> None:
        """What a removal deletes (certs' RemovedNodes, the dispatcher's removals)."""
        for key in (provisioned_agents_key("seed"), certs_agents_key("seed"), accepted_agents_key("seed")):
            self.sync.hdel(key, node)

    def trust(self) -> dict:
        authority = self.registry.load_authority()
        assert authority is not None
        return {"revocations": authority.revocations, "account": authority.account.public,
                "identities": {r.name: (r.public, r.active) for r in self.registry.list()},
                "provisioned": self.sync.hgetall(provisioned_agents_key("seed")),
                "certs": self.sync.hgetall(certs_agents_key("seed")),
                "accepted": self.sync.hgetall(accepted_agents_key("seed")),
                "signing": self.sync.get(command_signing_key()), "snapshot": self.sync.get(etcd_snapshot_key())}

    def close(self) -> None:
        self.sync.close()


@pytest.fixture
async def deployment(redis_url: str, redis_client: aioredis.Redis):
    dep = Deployment(redis_url)
    await redis_client.flushdb()
    dep.fill()
    yield dep
    dep.close()


async def _backup_then_change(dep: Deployment, raw: aioredis.Redis) -> tuple[dict, dict, dict]:
    """Back up; then revoke n1, provision n2 again, remove n3, replace the signing key, make a
    plan. Returns (the backup, the trust before the changes, the trust after them)."""
    doc, _ = await backup_state(raw, now=NOW)
    before = dep.trust()
    dep.registry.revoke("agent.seed.n1")
    dep.provision("n2")
    dep.remove("n3")
    dep.sync.delete(command_signing_key())
    ensure_command_key_sync(dep.sync, command_signing_key(), KEY)
    dep.sync.set(plan_key("newer"), "a cluster made after the backup")
    after = dep.trust()
    assert after["identities"]["agent.seed.n1"][1] is False and after["provisioned"] != before["provisioned"]
    return doc, before, after


async def test_a_restore_keeps_a_revocation_and_a_new_agent_key_made_since_the_backup(
        redis_url: str, deployment: Deployment) -> None:
    raw = aioredis.from_url(redis_url)
    try:
        doc, before, after = await _backup_then_change(deployment, raw)
        summary = await restore_state(raw, doc, force=True, box=KEY)
        assert deployment.trust() == after  # every trust item as it was just before the restore
        # ... and everything else from the backup (positive control: it is a restore)
        assert await raw.get(plan_key("seed")) == b"the plan of the backup" and not await raw.exists(plan_key("newer"))
        assert await read_epoch(raw) == "epoch-1"
        n3 = b"n3"
        assert n3 in before["provisioned"] and n3 not in deployment.trust()["provisioned"]  # removed stays removed
        decided = {d.item: (d.source, d.detail) for d in summary.trust}
        assert decided["NATS authority"][0] == "current" and "1 revocations, 0 of them from the backup" in decided["NATS authority"][1]
        assert decided["command-signing key"] == ("current", "kept; the backup's differs and is not restored")
        assert decided["etcd snapshot key"] == ("current", "the same as the backup's")
        assert decided["agent keys of seed"][0] == "current" and "n2, n3" in decided["agent keys of seed"][1]
        # the revoked identity's creds are refused by the authority the restore kept
        authority = deployment.registry.load_authority()
        assert authority is not None and after["identities"]["agent.seed.n1"][0] in authority.revocations
    finally:
        await raw.aclose()


async def test_replace_trust_takes_the_backups(redis_url: str, deployment: Deployment) -> None:
    raw = aioredis.from_url(redis_url)
    try:
        doc, before, after = await _backup_then_change(deployment, raw)
        summary = await restore_state(raw, doc, force=True, box=KEY, replace_trust=True)
        assert deployment.trust() == before  # n1 active again, n2's old key, n3 back, the old signing key
        assert deployment.trust()["identities"]["agent.seed.n1"][1] is True
        [decision] = summary.trust
        assert decision.source == "backup" and "--replace-trust" in decision.detail
        assert "NATS authority" in decision.item and "agent keys of seed" in decision.item
    finally:
        await raw.aclose()


async def test_a_revocation_only_in_the_backup_is_kept_and_a_store_without_trust_gets_the_backups(
        redis_url: str, deployment: Deployment) -> None:
    """The other side of the union: a store whose authority lost a revocation (its copy came
    back from an older file) gets it from the backup; and a store emptied whole gets every
    trust item from the backup (positive control: the backup's trust is restorable)."""
    raw = aioredis.from_url(redis_url)
    try:
        revoked = deployment.registry.revoke("agent.seed.n3")
        doc, _ = await backup_state(raw, now=NOW)
        full = deployment.trust()
        authority = deployment.registry.load_authority()
        assert authority is not None
        del authority.revocations[revoked.public]
        deployment.registry.save_authority(authority)  # the revocation is gone from the store
        summary = await restore_state(raw, doc, force=True, box=KEY)
        restored = deployment.registry.load_authority()
        assert restored is not None and revoked.public in restored.revocations
        assert {d.item: d.source for d in summary.trust}["NATS authority"] == "merged"

        await raw.flushdb()
        summary = await restore_state(raw, doc, box=KEY)
        assert deployment.trust() == full
        assert {d.source for d in summary.trust} == {"backup"}
    finally:
        await raw.aclose()


async def test_a_current_authority_another_key_opens_refuses_the_restore_untouched(
        redis_url: str, deployment: Deployment) -> None:
    raw = aioredis.from_url(redis_url)
    try:
        doc, _ = await backup_state(raw, now=NOW)
        other = SecretBox(b"o" * 32)
        authority = deployment.registry.load_authority()
        assert authority is not None
        foreign = other.encrypt(authority.to_secret_json(), auth_authority_key().encode())
        await raw.set(auth_authority_key(), foreign)
        await raw.set(plan_key("newer"), "made after the backup")
        with pytest.raises(TrustError, match="current NATS authority.*does not open.*--replace-trust"):
            await restore_state(raw, doc, force=True, box=KEY)
        assert await raw.get(plan_key("newer")) == b"made after the backup"  # nothing was deleted
        await restore_state(raw, doc, force=True, box=KEY, replace_trust=True)  # positive control
        assert deployment.registry.load_authority() is not None
        assert CommandSigner.from_store(await raw.get(command_signing_key()), KEY)
    finally:
        await raw.aclose()
