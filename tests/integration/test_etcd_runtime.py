"""A real single-member etcd with client mTLS: the helpers in bke.adapters.runtime.etcd work end to end."""
from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bke.adapters.runtime import (
    EtcdRequestError,
    ManagedProcess,
    etcd_put_get,
    free_port,
    start_etcd,
    wait_etcd_healthy,
)

pytestmark = pytest.mark.integration

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)  # fixed, well before the test machine's clock


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_crt: Path
    server_key: Path
    client_crt: Path
    client_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> None:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.with_suffix(".key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))


def _issue(cn: str, ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name,
           usage: list[x509.ObjectIdentifier]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                       x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(NOW).not_valid_after(NOW + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
            .add_extension(san, critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(NOW).not_valid_after(NOW + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A throwaway CA plus server and client leaves (ECDSA P-256: keygen is instant)."""
    ca, ca_key = _ca("bke-test-etcd-ca")
    _write(tmp_path / "ca", ca)
    _write(tmp_path / "server", *_issue("etcd-server", ca_key, ca.subject,
                                        [ExtendedKeyUsageOID.SERVER_AUTH,
                                         ExtendedKeyUsageOID.CLIENT_AUTH]))
    _write(tmp_path / "client", *_issue("bke-etcd-client", ca_key, ca.subject,
                                        [ExtendedKeyUsageOID.CLIENT_AUTH]))
    return Pki(tmp_path / "ca.crt", tmp_path / "server.crt", tmp_path / "server.key",
               tmp_path / "client.crt", tmp_path / "client.key")


@pytest.fixture
def etcd(pki: Pki, tmp_path: Path) -> Iterator[tuple[str, ManagedProcess]]:
    """A single-member etcd with client mTLS on free loopback ports; stopped by PID."""
    client, peer, metrics = free_port(), free_port(), free_port()
    client_url, peer_url = f"https://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    proc = start_etcd([
        "--name", "t1", "--data-dir", str(tmp_path / "etcd-data"),
        "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"t1={peer_url}", "--initial-cluster-state", "new",
        "--initial-cluster-token", "bke-test", "--listen-metrics-urls", f"http://127.0.0.1:{metrics}",
        "--cert-file", str(pki.server_crt), "--key-file", str(pki.server_key),
        "--trusted-ca-file", str(pki.ca), "--client-cert-auth",
        "--log-level", "warn", "--logger", "zap",
    ], tmp_path / "etcd.log")
    try:
        yield client_url, proc
    finally:
        proc.stop()
    assert not proc.alive()


def test_client_cert_can_write_and_read(pki: Pki, etcd: tuple[str, ManagedProcess]) -> None:
    client_url, proc = etcd
    wait_etcd_healthy(client_url, pki.ca, pki.client_crt, pki.client_key, timeout=30, process=proc)
    value = etcd_put_get(client_url, pki.ca, pki.client_crt, pki.client_key,
                         "/registry/bke/smoke", "apiserver")
    assert value == "apiserver"


def test_client_cert_from_another_ca_is_refused(pki: Pki, etcd: tuple[str, ManagedProcess],
                                                tmp_path: Path) -> None:
    client_url, proc = etcd
    wait_etcd_healthy(client_url, pki.ca, pki.client_crt, pki.client_key, timeout=30, process=proc)
    rogue_ca, rogue_key = _ca("rogue-ca")
    _write(tmp_path / "rogue", *_issue("rogue-client", rogue_key, rogue_ca.subject,
                                       [ExtendedKeyUsageOID.CLIENT_AUTH]))
    with pytest.raises(EtcdRequestError, match=client_url):
        etcd_put_get(client_url, pki.ca, tmp_path / "rogue.crt", tmp_path / "rogue.key", "/k", "v")
