"""Identities expire and are renewed, against a real nats-server in operator mode and a real Redis:
an expired JWT is refused at connect, a renewal's new JWT connects while the old one (not revoked)
still serves until its own expiry, and `bke identities renew` renews only what is due."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from bke.adapters.auth import write_creds
from bke.adapters.auth.jwt import decode_jwt
from bke.adapters.auth.permissions import IDENTITY_TTL_S
from bke.adapters.auth.registry import IdentityRegistry
from bke.adapters.runtime import EmbeddedRuntime
from bke.core.secrets.at_rest import load_secret_box
from tests.bus_identity_helpers import _connect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
BKE = str(Path(sys.executable).parent / "bke")


def _registry(rt: EmbeddedRuntime, clock: list[int]) -> IdentityRegistry:
    """The runtime's own authority (what its server trusts), kept in the runtime's Redis."""
    assert rt.info is not None and rt.nats_auth is not None
    client = redis.Redis.from_url(rt.info.redis_url)
    registry = IdentityRegistry(client, load_secret_box(rt.nats_auth.key_file), lambda: clock[0])
    registry.save_authority(rt.nats_auth.authority)
    return registry


async def test_an_expired_identity_is_refused_and_a_renewal_overlaps(secure: EmbeddedRuntime, tmp_path: Path) -> None:
    ttl = IDENTITY_TTL_S["planner"]
    now = int(time.time())
    clock = [now - ttl - 60]  # issued a lifetime and a minute ago: expired a minute ago
    registry = _registry(secure, clock)
    expired = write_creds(tmp_path / "expired.creds", registry.issue("planner").creds)
    assert decode_jwt(expired.read_text().split("-----")[2].strip())["exp"] == now - 60
    with pytest.raises(Exception, match="(?i)authoriz|expired"):
        await _connect(secure, expired, "_INBOX_planner")

    clock[0] = now - ttl + 120  # expires in two minutes: due for renewal
    old = write_creds(tmp_path / "old.creds", registry.issue("planner").creds)
    clock[0] = now
    record = registry.get("planner")
    assert record is not None and record.due(now) and not record.due(record.issued_at)
    assert [r.name for r in registry.due(roles=("planner",))] == ["planner"]
    renewed = write_creds(tmp_path / "new.creds", registry.renew("planner").creds)
    fresh = registry.get("planner")
    assert fresh is not None and fresh.expires_at == now + ttl and fresh.previous == record.public
    assert not fresh.due(now) and registry.due(roles=("planner",)) == []
    for creds in (old, renewed):  # the renewal revoked nothing: both connect (positive control above)
        client = await _connect(secure, creds, "_INBOX_planner")
        assert client.nc.is_connected
        await client.nc.close()


def test_bke_identities_renew_renews_only_what_is_due(secure: EmbeddedRuntime, tmp_path: Path) -> None:
    assert secure.info is not None and secure.nats_auth is not None
    now = int(time.time())
    clock = [now - IDENTITY_TTL_S["certs"] + 3600]  # certs: due in an hour
    registry = _registry(secure, clock)
    registry.issue("certs")
    clock[0] = now
    registry.issue("renderer")  # fresh: not due
    key = tmp_path / "secret.key"
    key.write_bytes(secure.nats_auth.key_file.read_bytes())
    env = {**os.environ, "BKE_SECRET_KEY_FILE": str(key)}
    done = subprocess.run([BKE, "identities", "renew", "--out", str(tmp_path / "out"), "--redis", secure.info.redis_url,
                           "--role", "certs", "--role", "renderer"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out" / "creds").iterdir()) == ["certs.creds"]
    listed = subprocess.run([BKE, "identities", "list", "--redis", secure.info.redis_url, "-o", "json", "--role", "certs"],
                            capture_output=True, text=True, env=env, timeout=60)
    (row,) = json.loads(listed.stdout)
    assert row["expires_at"] > now + IDENTITY_TTL_S["certs"] - 120 and row["revoked_at"] is None
