"""bke_certs.ca_guard and bke.core.secrets.fingerprint: a node that holds another CA gets no bundle,
with a reason naming both fingerprints; a new node (no CA) or the same CA is sealed to."""
from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from bke.contracts.agent import AgentRegistered
from bke.core.pki import NodeFile
from bke.core.secrets.fingerprint import CA_CERT_PATH, cert_fingerprint, held_ca_fingerprint
from bke_certs.ca_guard import ca_conflict


def _ca_pem(cn: str) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(Encoding.PEM)


def _reg(fp: str | None) -> AgentRegistered:
    return AgentRegistered(cluster="seed", node="master1", agent_id="a", seal_public_key_b64=base64.b64encode(b"k" * 32).decode(),
                           backend="lab", version="t", at="2026-01-01T00:00:00+00:00", ca_fingerprint=fp)


def _bundle(ca: bytes) -> list[NodeFile]:
    return [NodeFile(path="/" + CA_CERT_PATH, mode=0o644, content=ca, secret=False)]


def test_another_ca_is_refused_naming_both_fingerprints(tmp_path) -> None:
    old, new = _ca_pem("old"), _ca_pem("new")
    (tmp_path / CA_CERT_PATH).parent.mkdir(parents=True)
    (tmp_path / CA_CERT_PATH).write_bytes(old)
    held = held_ca_fingerprint(tmp_path)
    assert held == cert_fingerprint(old) and held.startswith("sha256:") and held != cert_fingerprint(new)
    why = ca_conflict(_bundle(new), _reg(held))
    assert why is not None
    assert f"holds CA {held}" in why and f"the store has {cert_fingerprint(new)}" in why and "bke state restore" in why
    assert "node master1" in why


def test_same_ca_or_a_new_node_is_sealed_to(tmp_path) -> None:
    ca = _ca_pem("ca")
    assert ca_conflict(_bundle(ca), _reg(cert_fingerprint(ca))) is None
    assert held_ca_fingerprint(tmp_path) is None  # a node that holds no CA yet
    assert ca_conflict(_bundle(ca), _reg(None)) is None
    (tmp_path / CA_CERT_PATH).parent.mkdir(parents=True)
    (tmp_path / CA_CERT_PATH).write_bytes(b"not a certificate")
    assert held_ca_fingerprint(tmp_path) is None  # unreadable: reported as none, never a crash
