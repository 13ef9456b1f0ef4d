"""The configured keyAlgorithm is honoured for every key, for all five algorithms.

RSA-2048 and both curves issue a whole one-master cluster; RSA-3072 and RSA-4096 (0.1-3 s per
key) only a CA and one leaf.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.unit.core.pki.test_pki_support import NOW, openssl, plan_of

from bke.core.pki import IssueOptions, KeyAlgorithmError, Validity, desired_instances, ensure_pki, generate_key, issue, key_algorithm_of
from bke.core.spec.synth import synth_spec_text


def _check_key(pem: bytes, algorithm: str) -> None:
    key = serialization.load_pem_private_key(pem, None)
    assert key_algorithm_of(key) == algorithm
    if algorithm.startswith("RSA"):
        assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == int(algorithm[4:])
        assert key.public_key().public_numbers().e == 65537
    else:
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert key.curve.name == {"ECDSA-P256": "secp256r1", "ECDSA-P384": "secp384r1"}[algorithm]


@pytest.mark.parametrize("algorithm", ["RSA-2048", "ECDSA-P256", "ECDSA-P384"])
def test_whole_cluster_uses_the_configured_algorithm(algorithm: str, tmp_path: Path) -> None:
    plan = plan_of(synth_spec_text(2, masters=1, key_algorithm=algorithm))
    result = ensure_pki(plan, {}, NOW, IssueOptions(procs=2))
    assert len(result.report.issued) == len(result.materials) > 15
    for iid, m in result.materials.items():
        _check_key(m.key, algorithm)
        if iid == "sa":
            continue
        cert = x509.load_pem_x509_certificate(m.cert)
        assert key_algorithm_of(cert.public_key()) == algorithm
        ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
        assert ku.key_encipherment == algorithm.startswith("RSA"), iid  # only RSA keys encipher
        want = hashes.SHA384 if algorithm == "ECDSA-P384" else hashes.SHA256
        assert isinstance(cert.signature_hash_algorithm, want), iid
    (tmp_path / "ca.crt").write_bytes(result.materials["ca"].cert)
    (tmp_path / "leaf.crt").write_bytes(result.materials["apiserver@n0"].cert)
    res = openssl("verify", "-CAfile", str(tmp_path / "ca.crt"), "-purpose", "sslserver",
                  "-verify_hostname", "kubernetes.default.svc", str(tmp_path / "leaf.crt"))
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("algorithm", ["RSA-3072", "RSA-4096"])
def test_big_rsa_ca_and_one_leaf(algorithm: str, tmp_path: Path) -> None:
    plan = plan_of(synth_spec_text(1, masters=1, key_algorithm=algorithm))
    wanted = [i for i in desired_instances(plan) if i.id in ("etcd-ca", "etcd-n0-unused", "apiserver-etcd-client@n0")]
    assert [i.id for i in wanted] == ["etcd-ca", "apiserver-etcd-client@n0"]
    issued = issue(wanted, {}, Validity(NOW, 3650, 365, algorithm), IssueOptions(procs=1))
    for m in issued.values():
        _check_key(m.key, algorithm)
    (tmp_path / "ca.crt").write_bytes(issued["etcd-ca"].cert)
    (tmp_path / "leaf.crt").write_bytes(issued["apiserver-etcd-client@n0"].cert)
    res = openssl("verify", "-CAfile", str(tmp_path / "ca.crt"), "-purpose", "sslclient", str(tmp_path / "leaf.crt"))
    assert res.returncode == 0, res.stdout + res.stderr


def test_unknown_algorithm_is_a_typed_error() -> None:
    with pytest.raises(KeyAlgorithmError, match="ED25519"):
        generate_key("ED25519")
