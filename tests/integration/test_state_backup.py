"""bke.state.backup against a real Redis: a round trip restores every key of every type (TTLs
kept, the epoch last); another key, a tampered file, another format are refused; a restore over
existing keys needs `force` and then leaves no key of the old state behind."""
from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bke.secrets.at_rest import DecryptError, SecretBox
from bke.state.backup import MAGIC, BackupError, backup_state, decode_backup, encode_backup, restore_state
from bke.state.epoch import read_epoch, write_epoch
from bke.state.keys import epoch_key, install_key, lease_key, pki_key, plan_key

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
