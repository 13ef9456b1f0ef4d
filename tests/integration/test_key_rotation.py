"""`bke keys`: each at-rest kind rotated against the real Redis of the session runtime, with the
records its owners write (bke.core.secrets.key_kinds, bke.adapters.state.rekey).

For each kind: a record is read before the rotation by a process holding the key file (and by a
copy of the old keys: the positive control), while it is rotated by the process reading the
file again (both keys), and after; a holder still encrypting with the old file between the
rotation and the retirement (a straggler) is re-encrypted by the retirement; after it, the old
keys alone open nothing (the negative control)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from bke.adapters.auth.registry import IdentityRegistry
from bke.core.errors import PermanentError
from bke.core.pki import IssueOptions
from bke.adapters.pki.api_credentials import read_api_credential, write_api_credentials
from bke.core.pki.operations import ensure_cluster_pki
from bke.adapters.pki.store_redis import RedisPkiStore
from bke.core.plan import plan_spec_text
from bke.core.secrets.at_rest import Keyring, SecretBox, load_keyring, load_secret_box
from bke.core.secrets.key_kinds import KIND_NAMES, KeyringFile, key_file_env
from bke.core.errors import TemporaryError
from bke.core.secrets.signing import CommandSigner, ensure_command_key
from bke.core.secrets.snapshot_key import (
    SnapshotKey, ensure_snapshot_key, read_snapshot_recipient, split_stored, stored_public_b64,
)
from bke.core.spec.synth import synth_spec_text
from bke.adapters.state.backup import decode_backup
from bke.adapters.state.keys.trust import command_signing_key, etcd_snapshot_key, record_signing_key
from bke.adapters.state.record_keys import RecordKeys
from bke.core.secrets.record_signing import RecordSigner
from bke.adapters.state.state_init import ensure_state
from bke.adapters.state.rekey import census, reencrypt_kind
from bke_cli.main import main as bke

pytestmark = pytest.mark.integration
PLAN = plan_spec_text(synth_spec_text(1, name="rekey", masters=1)).plan
NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)


async def cli(*argv: str) -> int:
    return await asyncio.to_thread(bke, list(argv))  # the CLI runs its own event loop


def _sync(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


# each kind: what its owner writes, and what a holder of the key reads back (the value compared)
async def _write_pki(r: aioredis.Redis, url: str, box: SecretBox) -> None:
    assert PLAN is not None
    await ensure_cluster_pki(PLAN, RedisPkiStore(r), NOW, box, IssueOptions(procs=1))


async def _read_pki(r: aioredis.Redis, url: str, box: SecretBox) -> Any:
    snap = await RedisPkiStore(r).load("rekey", box)
    assert snap is not None
    return sorted((i, m.key) for i, m in snap.materials.items() if m.key)


async def _write_api(r: aioredis.Redis, url: str, box: SecretBox) -> None:
    assert PLAN is not None
    pki = SecretBox(b"p" * 32)  # the `pki` key: another kind, untouched here
    await ensure_cluster_pki(PLAN, RedisPkiStore(r), NOW, pki, IssueOptions(procs=1))
    await write_api_credentials(r, PLAN, RedisPkiStore(r), pki, box)


async def _read_api(r: aioredis.Redis, url: str, box: SecretBox) -> Any:
    return [await read_api_credential(r, "rekey", name, box) for name in ("admin", "super-admin")]


async def _write_signing(r: aioredis.Redis, url: str, box: SecretBox) -> None:
    await ensure_command_key(r, command_signing_key(), box)


async def _read_signing(r: aioredis.Redis, url: str, box: SecretBox) -> Any:
    return CommandSigner.from_store(await r.get(command_signing_key()), box).verify_key.public_line


async def _write_snapshot(r: aioredis.Redis, url: str, box: SecretBox) -> None:
    await ensure_snapshot_key(r, etcd_snapshot_key(), box)


async def _read_snapshot(r: aioredis.Redis, url: str, box: SecretBox) -> Any:
    key = SnapshotKey.from_store(await r.get(etcd_snapshot_key()), box)
    return key.public_b64, key.open(key.seal(b"etcd"))


async def _write_authority(r: aioredis.Redis, url: str, box: SecretBox) -> None:
    client = _sync(url)
    try:
        IdentityRegistry(client, box, lambda: int(time.time())).ensure_authority()
    finally:
        client.close()


async def _read_authority(r: aioredis.Redis, url: str, box: SecretBox) -> Any:
    client = _sync(url)
    try:
        authority = IdentityRegistry(client, box, lambda: int(time.time())).load_authority()
    finally:
        client.close()
    assert authority is not None
    return authority.account.public


def _record_key_steps(writer: str) -> tuple[Step, Step]:
    """A record writer's signing key (bke.adapters.state.record_keys): made, then signed with."""
    async def write(r: aioredis.Redis, url: str, box: SecretBox) -> None:
        await RecordKeys(r, {writer: lambda: box}).signer(writer)

    async def read(r: aioredis.Redis, url: str, box: SecretBox) -> Any:
        signer = RecordSigner.from_store(writer, await r.get(record_signing_key(writer)), box)
        signer.verifier.verify("r", writer, "rekey", ("1",), b"x", signer.sign(writer, "rekey", ("1",), b"x"))
        return signer.key_id

    return write, read


Step = Callable[[aioredis.Redis, str, SecretBox], Awaitable[Any]]
OWNERS: dict[str, tuple[Step, Step]] = {
    "pki": (_write_pki, _read_pki),
    "api": (_write_api, _read_api),
    "signing": (_write_signing, _read_signing),
    "snapshot": (_write_snapshot, _read_snapshot),
    "authority": (_write_authority, _read_authority),
    "plan": _record_key_steps("plan"),
    "render": _record_key_steps("render"),
}


@pytest.fixture
async def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_client: aioredis.Redis) -> Path:
    """A key file per kind (`bke keys init`), each named by its own variable; no shared file."""
    folder = tmp_path / "keys"
    monkeypatch.delenv("BKE_SECRET_KEY_FILE", raising=False)
    monkeypatch.delenv("BKE_REDIS_URL", raising=False)
    assert await cli("keys", "init", str(folder)) == 0
    for kind in KIND_NAMES:
        monkeypatch.setenv(key_file_env(kind), str(folder / f"{kind}.key"))
    return folder


@pytest.mark.parametrize("kind", sorted(OWNERS))
async def test_rotation_keeps_every_record_readable_and_retirement_shuts_the_old_key_out(
        kind: str, keys: Path, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    write, read = OWNERS[kind]
    path = keys / f"{kind}.key"
    holder = KeyringFile(path)  # a running process of the kind: reads its file again when it changes
    old_only = load_secret_box(path)  # a process that never gets another file
    r = aioredis.from_url(redis_url)
    try:
        await write(r, redis_url, holder.box())
        value = await read(r, redis_url, holder.box())
        assert await read(r, redis_url, old_only) == value  # before: the old key opens it (positive control)

        assert await cli("keys", "add", kind) == 0  # staged: decrypts, does not encrypt yet
        staged = load_keyring(path)
        assert staged.next is not None and holder.box().key_id == old_only.key_id
        assert await cli("keys", "rotate", kind, "--redis", redis_url) == 0
        said = capsys.readouterr().out
        ring = load_keyring(path)
        new = ring.box().key_id
        assert ring.current == staged.next and ring.previous == (staged.current,)
        assert holder.box().key_id == new and old_only.key_id in holder.box().key_ids  # during: both keys
        counted = await census(r, kind)
        assert counted.blobs and set(counted.by_key) == {new}, said  # every record re-encrypted
        assert await read(r, redis_url, holder.box()) == value

        # a holder still on the old file writes under the old key until it gets the new one: the
        # holders with both keys read it, and the retirement re-encrypts it
        lagging = Keyring(staged.current, None, (ring.current,)).box()
        assert (await reencrypt_kind(r, kind, lagging)).rewritten == counted.blobs
        assert await read(r, redis_url, holder.box()) == value
        assert await cli("keys", "retire", kind, "--redis", redis_url) == 0
        assert f"retired {old_only.key_id}" in capsys.readouterr().out
        assert load_keyring(path) == Keyring(ring.current)
        assert set((await census(r, kind)).by_key) == {new}
        assert await read(r, redis_url, holder.box()) == value  # after: the new key opens it
        with pytest.raises(PermanentError, match=f"encrypted with key {new}"):
            await read(r, redis_url, old_only)  # and the old one alone no longer does (negative control)
        assert await cli("keys", "retire", kind, "--redis", redis_url) == 0  # again: nothing to retire
        assert "no previous key to retire" in capsys.readouterr().out
    finally:
        await r.aclose()


async def test_backups_are_re_encrypted_and_shut_out_of_the_old_key(keys: Path, tmp_path: Path, redis_url: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = keys / "backup.key"
    old_only = load_secret_box(path)
    file = tmp_path / "state.bke"
    assert await cli("state", "backup", str(file), "--redis", redis_url) == 0
    epoch = decode_backup(file.read_bytes(), old_only)["epoch"]  # positive control
    assert await cli("keys", "rotate", "backup", "--backup", str(file)) == 0
    assert "1 record(s), 1 re-encrypted now" in capsys.readouterr().out
    assert decode_backup(file.read_bytes(), load_secret_box(path))["epoch"] == epoch
    assert file.stat().st_mode & 0o077 == 0
    assert await cli("keys", "retire", "backup", "--backup", str(file)) == 0
    assert "backups taken before this" in capsys.readouterr().err
    with pytest.raises(PermanentError, match="encrypted with key"):
        decode_backup(file.read_bytes(), old_only)  # negative control
    assert await cli("state", "restore", str(file), "--force", "--redis", redis_url) == 0


async def test_a_kind_leaves_the_shared_key_by_a_rotation_into_its_own_file(
        redis_client: aioredis.Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A single-key deployment (BKE_SECRET_KEY_FILE for every kind) gives `pki` a file of its own
    without downtime; the shared file is never rewritten, and the other kinds keep reading it."""
    for kind in KIND_NAMES:
        monkeypatch.delenv(key_file_env(kind), raising=False)
    monkeypatch.delenv("BKE_REDIS_URL", raising=False)
    assert await cli("keys", "init", str(tmp_path / "one")) == 0
    shared = tmp_path / "one" / "pki.key"
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(shared))
    before = shared.read_bytes()
    r = aioredis.from_url(redis_url)
    try:
        box = load_secret_box(shared)
        await _write_pki(r, redis_url, box)
        await _write_signing(r, redis_url, box)
        value = await _read_pki(r, redis_url, box)
        assert await cli("keys", "rotate", "pki", "--redis", redis_url) == 2  # never the shared file
        assert "BKE_KEY_FILE_PKI is not set" in capsys.readouterr().err
        own = tmp_path / "pki.key"
        monkeypatch.setenv("BKE_KEY_FILE_PKI", str(own))
        assert await cli("keys", "add", "pki") == 0  # a new file: the shared keys, and one staged
        assert load_keyring(own).current == load_keyring(shared).current
        assert await cli("keys", "rotate", "pki", "--redis", redis_url) == 0
        assert await cli("keys", "retire", "pki", "--redis", redis_url) == 0
        assert shared.read_bytes() == before
        assert await _read_pki(r, redis_url, load_secret_box(own)) == value
        with pytest.raises(PermanentError):
            await _read_pki(r, redis_url, box)  # the shared key no longer opens a CA key
        await _read_signing(r, redis_url, box)  # the other kinds are still under the shared key
        assert await cli("keys", "list", "--redis", redis_url) == 0
        listed = capsys.readouterr().out
        assert f"pki        {own} (BKE_KEY_FILE_PKI)" in listed
        assert f"signing    {shared} (BKE_SECRET_KEY_FILE, shared with other kinds)" in listed
    finally:
        await r.aclose()


async def test_the_dispatcher_reads_the_snapshot_recipient_without_the_key(
        redis_client: aioredis.Redis, redis_url: str) -> None:
    """The record carries its public half (bke.core.secrets.snapshot_key); an older record is
    rewritten by `bke state init` (the same key) and read by the dispatcher only then."""
    r = aioredis.from_url(redis_url)
    box = SecretBox(b"s" * 32)
    try:
        key = SnapshotKey.generate()
        await r.set(etcd_snapshot_key(), split_stored(key.seal_for_store(box))[1])  # the older form
        with pytest.raises(TemporaryError, match="bke state init"):
            await read_snapshot_recipient(r, etcd_snapshot_key())
        client = _sync(redis_url)
        try:
            assert ensure_state(client, box).snapshot_key_id == key.key_id
        finally:
            client.close()
        assert await read_snapshot_recipient(r, etcd_snapshot_key()) == key.public_b64
        assert stored_public_b64(await r.get(etcd_snapshot_key())) == key.public_b64
    finally:
        await r.aclose()
