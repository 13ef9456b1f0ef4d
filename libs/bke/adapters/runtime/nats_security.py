"""What the embedded nats-server needs for authentication and TLS, kept under ``<workdir>/auth``
and ``<workdir>/tls``.

    auth/authority.enc   the operator/account seeds and revocations, encrypted with the operator's
                         key file (bke.core.secrets.at_rest); the lab mirrors it into Redis
                         (bke.adapters.auth.registry) so that `bke state backup` has it
    auth/sys.creds       a system-account user (0600): pushes account updates (revocations).
                         Kept across starts while it is this authority's and good; replaced
                         otherwise, and a replaced one of ours revoked (bke.adapters.auth.system_user)
    auth/jwt/            the `full` resolver's directory (written by nats-server)
    tls/ca.pem, tls/server.pem, tls/server.key (0600)
                         a CA made here and a server certificate for 127.0.0.1 / localhost

Why the seeds are on disk (encrypted) and not only in Redis: nats.conf must name the operator
and preload the accounts before the server starts, and Redis may not be up yet (or may need
its own credentials); the file is the runtime's, the Redis copy is for backups.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bke.adapters.auth.authority import Authority, new_authority, write_creds, write_private
from bke.adapters.auth.push import push_system_account
from bke.adapters.auth.system_user import SystemUser, ensure_system_user
from bke.core.secrets.at_rest import create_key_file, load_secret_box
from .declare import run_blocking

__all__ = ["AUTHORITY_AAD", "RuntimeAuth", "RuntimeTls", "ensure_runtime_auth", "ensure_runtime_tls",
           "load_runtime_authority", "publish_system_revocations", "save_runtime_authority"]

AUTHORITY_AAD = b"bke:runtime:authority"


@dataclass(frozen=True)
class RuntimeAuth:
    authority: Authority
    conf: str  # the operator-mode part of nats.conf
    system_creds: Path
    authority_file: Path
    key_file: Path
    system_user: SystemUser | None = None  # what became of sys.creds at this start


def ensure_runtime_auth(workdir: Path, key_file: Path | None, now: int | None = None) -> RuntimeAuth:
    """Load (or make once) the authority of this runtime; keep or replace sys.creds; return the
    conf part (its system account JWT carries the system users' revocations)."""
    auth_dir = workdir / "auth"
    (auth_dir / "jwt").mkdir(parents=True, exist_ok=True)
    key_file = key_file or workdir / "secret.key"
    if not key_file.exists():
        create_key_file(key_file)
    path = auth_dir / "authority.enc"
    if path.exists():
        authority = load_runtime_authority(path, key_file)
    else:
        authority = new_authority()
        save_runtime_authority(path, key_file, authority)
    iat = int(time.time()) if now is None else now
    creds = auth_dir / "sys.creds"
    system = ensure_system_user(authority, creds, iat)
    if system.revocations_changed:
        save_runtime_authority(path, key_file, authority)
    return RuntimeAuth(authority, authority.server_conf(iat, auth_dir / "jwt"), creds, path, key_file, system)


def publish_system_revocations(auth: RuntimeAuth, nats_url: str, tls_ca: str | None, now: int | None = None) -> bool:
    """Send the system account's JWT to the running server when this start changed its
    revocations (a server started now preloaded it already; a reused one learns it here, and
    cuts a replaced system user's live connections). Whether it was sent."""
    if auth.system_user is None or not auth.system_user.revocations_changed:
        return False
    iat = int(time.time()) if now is None else now
    run_blocking(push_system_account(nats_url, auth.system_creds, auth.authority, iat=iat,
                                     tls_ca=Path(tls_ca) if tls_ca else None))
    return True


def load_runtime_authority(path: Path, key_file: Path) -> Authority:
    """authority.enc, decrypted (DecryptError for another key file)."""
    return Authority.from_secret_json(load_secret_box(key_file).decrypt(path.read_bytes(), AUTHORITY_AAD))


def save_runtime_authority(path: Path, key_file: Path, authority: Authority) -> None:
    """Rewrite authority.enc (after a revocation: the next start preloads the same account)."""
    write_private(path, load_secret_box(key_file).encrypt(authority.to_secret_json(), AUTHORITY_AAD))


@dataclass(frozen=True)
class RuntimeTls:
    ca: Path
    cert: Path
    key: Path

    def conf(self) -> str:
        return f'tls {{\n  cert_file: "{self.cert}"\n  key_file: "{self.key}"\n  timeout: 2\n}}\n'


def ensure_runtime_tls(workdir: Path, host: str) -> RuntimeTls:
    """A CA and a server certificate for `host` (kept across restarts, made once)."""
    d = workdir / "tls"
    tls = RuntimeTls(d / "ca.pem", d / "server.pem", d / "server.key")
    if tls.ca.exists() and tls.cert.exists() and tls.key.exists():
        return tls
    d.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bke-embedded-nats-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(host))]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bke-embedded-nats")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=825))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    write_creds(tls.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()).decode())
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return tls
