"""`bke state init` / `backup` / `restore` as an operator runs them against a deployment
(`--redis URL` with the admin user, BKE_SECRET_KEY_FILE): an init makes the epoch, the etcd
snapshot key and the command-signing key once and keeps them after (the last one's public line
in --command-key-out); round trip, a backup never overwrites a file, a restore
over live keys needs --force, another key is refused with exit 2 and an ERROR line, and no
password is printed; a restore names the trust material it kept and --replace-trust takes the
backup's."""
from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from bke.core.secrets.at_rest import create_key_file
from bke.core.secrets import load_secret_box
from bke.core.secrets.signing import ensure_command_key_sync
from bke.core.secrets.snapshot_key import read_snapshot_key
from bke.adapters.state.client import sync_redis_client
from bke.adapters.state.keys.common import epoch_key
from bke.adapters.state.keys.plan import plan_key
from bke.adapters.state.keys.trust import command_signing_key, etcd_snapshot_key
from bke_cli.main import main as bke

pytestmark = pytest.mark.integration


async def run(argv: list[str]) -> int:
    return await asyncio.to_thread(bke, argv)  # the CLI runs its own event loop


async def test_backup_and_restore_from_the_command_line(redis_url: str, redis_client: aioredis.Redis, tmp_path,
                                                         monkeypatch, capsys) -> None:
    key = tmp_path / "secret.key"
    create_key_file(key)
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(key))
    monkeypatch.delenv("BKE_REDIS_URL", raising=False)
    await redis_client.set(plan_key("seed"), "the plan")
    await redis_client.set("bke:epoch", "e1")
    out = tmp_path / "state.bke"
    args = ["--redis", redis_url]

    assert await run(["state", "backup", str(out), *args]) == 0
    assert "backed up 2 keys (epoch e1" in capsys.readouterr().out
    assert out.stat().st_mode & 0o077 == 0
    assert await run(["state", "backup", str(out), *args]) == 2  # never overwrites a backup
    assert "exists" in capsys.readouterr().err

    assert await run(["state", "restore", str(out), *args]) == 2  # the keys are there: --force or nothing
    assert "pass --force" in capsys.readouterr().err
    await redis_client.flushdb()
    assert await run(["state", "restore", str(out), *args]) == 0
    printed = capsys.readouterr().out
    assert "restored 2 keys (epoch e1" in printed
    password = redis_url.split("@")[0].rsplit(":", 1)[1]
    assert password not in printed
    assert await redis_client.get(plan_key("seed")) == "the plan"

    other = tmp_path / "other.key"
    create_key_file(other)
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(other))
    assert await run(["state", "restore", str(out), "--force", *args]) == 2
    assert capsys.readouterr().err.startswith(f"ERROR {out}: encrypted with key")
    monkeypatch.delenv("BKE_SECRET_KEY_FILE")
    assert await run(["state", "backup", str(tmp_path / "b2"), *args]) == 2
    assert "neither BKE_KEY_FILE_BACKUP nor BKE_SECRET_KEY_FILE is set" in capsys.readouterr().err


async def test_init_makes_the_epoch_and_the_snapshot_key_once(redis_url: str, redis_client: aioredis.Redis, tmp_path,
                                                             monkeypatch, capsys) -> None:
    key = tmp_path / "secret.key"
    create_key_file(key)
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(key))
    await redis_client.delete(epoch_key())  # a store no init ran on
    args = ["--redis", redis_url]
    pub = tmp_path / "deploy" / "command-key.pub"
    assert await run(["state", "init", *args, "--command-key-out", str(pub)]) == 0
    first = capsys.readouterr().out
    epoch = await redis_client.get(epoch_key())
    admin = sync_redis_client(redis_url)  # bytes: the snapshot key is a sealed blob
    try:
        stored = admin.get(etcd_snapshot_key())
        snapshot_key = read_snapshot_key(admin, etcd_snapshot_key(), load_secret_box(key))
        signer = ensure_command_key_sync(admin, command_signing_key(), load_secret_box(key))  # reads the one made
    finally:
        admin.close()
    assert epoch and stored and f"epoch {epoch} (made now)" in first
    assert snapshot_key is not None and f"etcd snapshot key {snapshot_key.key_id} (made now)" in first
    public = signer.verify_key
    assert f"command-signing key {public.fingerprint} (made now): {public.public_line}" in first
    assert pub.read_text() == public.public_line + "\n" and pub.stat().st_mode & 0o777 == 0o644
    password = redis_url.split("@")[0].rsplit(":", 1)[1]
    assert password not in first

    assert await run(["state", "init", *args]) == 0  # again: everything kept
    again = capsys.readouterr().out
    assert f"epoch {epoch} (kept), etcd snapshot key {snapshot_key.key_id} (kept)" in again
    assert f"command-signing key {public.fingerprint} (kept)" in again
    admin = sync_redis_client(redis_url)
    try:
        assert admin.get(epoch_key()) == epoch.encode() and admin.get(etcd_snapshot_key()) == stored
    finally:
        admin.close()

    monkeypatch.delenv("BKE_SECRET_KEY_FILE")
    assert await run(["state", "init", *args]) == 2  # the snapshot key is sealed with the `snapshot` key
    assert "neither BKE_KEY_FILE_SNAPSHOT nor BKE_SECRET_KEY_FILE is set" in capsys.readouterr().err


async def test_restore_names_the_trust_it_kept_and_the_flag_that_takes_the_backups(
        redis_url: str, redis_client: aioredis.Redis, tmp_path, monkeypatch, capsys) -> None:
    key = tmp_path / "secret.key"
    box = create_key_file(key)
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(key))
    admin = sync_redis_client(redis_url)
    try:
        ensure_command_key_sync(admin, command_signing_key(), box)
        out, args = tmp_path / "state.bke", ["--redis", redis_url]
        assert await run(["state", "backup", str(out), *args]) == 0
        old_key = admin.get(command_signing_key())
        admin.delete(command_signing_key())  # the key is replaced after the backup
        ensure_command_key_sync(admin, command_signing_key(), box)
        new_key = admin.get(command_signing_key())
        capsys.readouterr()

        assert await run(["state", "restore", str(out), "--force", *args]) == 0
        printed = capsys.readouterr().out
        assert "trust material kept as it is now (--replace-trust takes the backup's instead):" in printed
        assert "  command-signing key: current: kept; the backup's differs and is not restored" in printed
        assert admin.get(command_signing_key()) == new_key

        assert await run(["state", "restore", str(out), "--force", "--replace-trust", *args]) == 0
        printed = capsys.readouterr().out
        assert "trust material replaced with the backup's (--replace-trust): command-signing key" in printed
        assert admin.get(command_signing_key()) == old_key
    finally:
        admin.close()
