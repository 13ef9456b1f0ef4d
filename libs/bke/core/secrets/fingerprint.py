"""The fingerprint of the cluster CA a node holds, which the agent reports when it registers.

Why: if BKE's state is lost and a cluster is started over, the certs service would make a new CA
while the nodes keep the old one. The agent reads its own `etc/kubernetes/pki/ca.crt` (under its
root) and reports that CA's fingerprint in `AgentRegistered.ca_fingerprint`. The certs service
never seals a bundle of another CA to that node (bke_certs.ca_guard).

Fingerprint: "sha256:" + the hex SHA-256 of the certificate's DER, as `openssl x509 -fingerprint
-sha256` computes it (without the colons).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

__all__ = ["CA_CERT_PATH", "cert_fingerprint", "held_ca_fingerprint"]

CA_CERT_PATH = "etc/kubernetes/pki/ca.crt"  # relative to a node's root


def cert_fingerprint(pem: bytes) -> str:
    """Raises ValueError if `pem` holds no certificate."""
    cert = x509.load_pem_x509_certificate(pem)
    return "sha256:" + hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


def held_ca_fingerprint(root: Path) -> str | None:
    """The fingerprint of the CA under `root`, or None if the node holds none (or an unreadable one:
    a node that cannot say which CA it holds must not block its install)."""
    try:
        return cert_fingerprint((Path(root) / CA_CERT_PATH).read_bytes())
    except (OSError, ValueError):
        return None
