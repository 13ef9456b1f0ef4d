"""The state's deploy step as its container runs it (`python -m bke.adapters.state.deploy_init`,
docker-compose's `state-init`, the `bke-state-init` Job) against a real Redis: the first run makes
the state, a second changes nothing and exits 0, a store holding another epoch keeps it, a stored
key the given at-rest keys do not open is refused with exit 2 and left as it was, an unreachable
Redis exits 1 (the Job retries), and nothing it logs or prints holds a secret."""
from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bke.core.secrets.at_rest import create_key_file
from bke.adapters.state.client import sync_redis_client
from bke.adapters.state.deploy_init import run
from bke.adapters.state.keys.common import epoch_key
from bke.adapters.state.keys.trust import command_signing_key, etcd_snapshot_key

pytestmark = pytest.mark.integration


def _env(redis_url: str, tmp_path: Path, name: str = "keys") -> dict[str, str]:
    keys = tmp_path / name
    keys.mkdir(exist_ok=True)
    for kind in ("snapshot", "signing", "plan", "render"):
        if not (keys / f"{kind}.key").exists():
            create_key_file(keys / f"{kind}.key")
    return {"BKE_REDIS_URL": redis_url, "BKE_KEY_FILE_SNAPSHOT": str(keys / "snapshot.key"),
            "BKE_KEY_FILE_SIGNING": str(keys / "signing.key"), "BKE_KEY_FILE_PLAN": str(keys / "plan.key"),
            "BKE_KEY_FILE_RENDER": str(keys / "render.key")}


def _stored(redis_url: str) -> dict[str, object]:
    admin = sync_redis_client(redis_url)
    try:
        return {k: admin.get(k) for k in (epoch_key(), etcd_snapshot_key(), command_signing_key())}
    finally:
        admin.close()


async def test_a_second_run_changes_nothing(redis_url: str, redis_client: aioredis.Redis, tmp_path: Path) -> None:
    await redis_client.delete(epoch_key())  # a store no init ran on
    env = _env(redis_url, tmp_path)
    code, first = run(env)
    assert code == 0 and first is not None
    assert first.epoch_made and first.snapshot_key_made and first.command_key_made
    before = _stored(redis_url)
    assert all(before.values()) and before[epoch_key()] == first.epoch.encode()

    code, second = run(env)
    assert code == 0 and second is not None
    assert not (second.epoch_made or second.snapshot_key_made or second.command_key_made)
    assert second.epoch == first.epoch and second.command_key is not None and first.command_key is not None
    assert second.command_key.public_line == first.command_key.public_line
    assert _stored(redis_url) == before  # byte for byte


async def test_a_state_of_another_epoch_is_kept(redis_url: str, redis_client: aioredis.Redis, tmp_path: Path) -> None:
    await redis_client.set(epoch_key(), "epoch-of-an-earlier-init")
    code, done = run(_env(redis_url, tmp_path))
    assert code == 0 and done is not None and not done.epoch_made
    assert await redis_client.get(epoch_key()) == "epoch-of-an-earlier-init"


async def test_keys_that_do_not_open_the_stored_state_are_refused(redis_url: str, redis_client: aioredis.Redis,
                                                                  tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    assert run(_env(redis_url, tmp_path, "ours"))[0] == 0
    before = _stored(redis_url)
    with caplog.at_level(logging.ERROR):
        code, done = run(_env(redis_url, tmp_path, "others"))
    assert (code, done) == (2, None)
    assert caplog.records and caplog.records[-1].levelno == logging.ERROR
    assert _stored(redis_url) == before  # refused, never replaced


def test_settings_missing_and_redis_unreachable(tmp_path: Path) -> None:
    env = _env("redis://bke-admin:pw@127.0.0.1:1/0", tmp_path)
    assert run({k: v for k, v in env.items() if k != "BKE_REDIS_URL"}) == (2, None)
    assert run({k: v for k, v in env.items() if k != "BKE_KEY_FILE_SIGNING"}) == (2, None)
    assert run(env) == (1, None)  # nothing listens on port 1: the Job tries again


async def test_the_container_entry_point_prints_the_public_line_and_no_secret(
        redis_url: str, redis_client: aioredis.Redis, tmp_path: Path) -> None:
    env = _env(redis_url, tmp_path)
    done = subprocess.run([sys.executable, "-m", "bke.adapters.state.deploy_init"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith("bke-command-ed25519 ")
    password = redis_url.split("@")[0].rsplit(":", 1)[1] if "@" in redis_url else None
    for key_file in (env["BKE_KEY_FILE_SNAPSHOT"], env["BKE_KEY_FILE_SIGNING"]):
        secret = Path(key_file).read_text().split()[-1]
        assert secret not in done.stdout + done.stderr
    if password:
        assert password not in done.stdout + done.stderr
    assert "made now" in done.stderr
