"""bke.core.pki.der writes leaf certificates by hand: here they must equal cryptography's own.

For the same serial, key, names, validity and extensions, the TBSCertificate bytes must be the
ones ``x509.CertificateBuilder`` produces; RSA PKCS#1 v1.5 signatures are deterministic, so for an
RSA CA the whole certificate and its PEM must match too. The ECDSA signature is checked against
the CA's public key.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.unit.core.pki.test_pki_support import NOW, node_doc, openssl, plan_of

from bke.core.pki import CaIntegrityError, IssueOptions, cert_info, der, ensure_pki
from bke.core.pki.issuance import _ca_pem, _key_usage, _name, _signer
from bke.core.pki.keys import generate_key, private_key_pem, public_key_pem, signature_hash
from bke.core.spec.synth import synth_docs

ALGORITHMS = ["ECDSA-P256", "ECDSA-P384", "RSA-2048"]
SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _ca(algorithm: str, now: datetime = NOW, days: int = 3650) -> tuple[bytes, bytes]:
    key = generate_key(algorithm)
    cert = _ca_pem(key, "etcd-ca", (), ("etcd-ca",), (), now, now + timedelta(days=days), algorithm.startswith("RSA"))
    return cert, private_key_pem(key)


def _builder_leaf(ca_pem: bytes, ca_key_pem: bytes, serial: int, public: object, cn: str, o: tuple[str, ...],
                  dns: tuple[str, ...], ips: tuple[str, ...], usage: str, not_before: datetime,
                  not_after: datetime, rsa_key: bool) -> x509.Certificate:
    """The reference: the same leaf the way cryptography's builder makes it."""
    signer = _signer(ca_pem, ca_key_pem)
    eku = {"server": [ExtendedKeyUsageOID.SERVER_AUTH], "client": [ExtendedKeyUsageOID.CLIENT_AUTH],
           "server+client": [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]}[usage]
    ski = signer.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (x509.CertificateBuilder().issuer_name(signer.cert.subject).subject_name(_name(cn, o))
               .public_key(public).serial_number(serial)  # type: ignore[arg-type]
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(_key_usage(False, rsa_key), critical=True)
               .add_extension(x509.ExtendedKeyUsage(eku), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier(ski.digest, None, None), critical=False))
    if dns or ips:
        from ipaddress import ip_address
        names = [*(x509.DNSName(d) for d in dns), *(x509.IPAddress(ip_address(i)) for i in ips)]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer.key, signer.hash)


CASES = [
    # (cn, o, dns, ips, usage)
    ("kube-apiserver", (), ("m1", "kubernetes", "kubernetes.default.svc.cluster.local"),
     ("10.96.0.1", "192.168.0.10", "127.0.0.1", "fd00::1"), "server"),
    ("kube-apiserver-kubelet-client", ("kubeadm:cluster-admins",), (), (), "client"),
    ("system:node:" + "w" * 63, ("system:nodes",), (), (), "client"),  # CN over RFC 5280's 64
    ("m1", ("a", "b"), ("m1", "localhost"), ("10.0.0.1", "127.0.0.1", "::1"), "server+client"),
    ("x" * 200, (), tuple(f"name-{i}.example.com" for i in range(40)), (), "server"),  # long-form lengths
]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0][:20])
def test_leaf_bytes_equal_the_builders(algorithm: str, case: tuple) -> None:
    cn, o, dns, ips, usage = case
    ca_pem, ca_key_pem = _ca(algorithm)
    rsa_key = algorithm.startswith("RSA")
    key = generate_key(algorithm)
    serial = x509.random_serial_number()
    not_before, not_after = NOW - timedelta(minutes=5), NOW + timedelta(days=365)
    ours = _signer(ca_pem, ca_key_pem).leaves(not_before, not_after, rsa_key).sign(
        serial, der.name(cn, o), key.public_key().public_bytes(*SPKI), usage, der.san(dns, ips) if dns or ips else b"")
    mine = x509.load_der_x509_certificate(ours)
    if len(cn) <= 64:
        ref = _builder_leaf(ca_pem, ca_key_pem, serial, key.public_key(), cn, o, dns, ips, usage,
                            not_before, not_after, rsa_key)
        assert mine.tbs_certificate_bytes == ref.tbs_certificate_bytes
        assert mine.signature_algorithm_oid == ref.signature_algorithm_oid
        if rsa_key:
            assert ours == ref.public_bytes(serialization.Encoding.DER)
            assert der.pem(ours) == ref.public_bytes(serialization.Encoding.PEM)
    ca = x509.load_pem_x509_certificate(ca_pem)
    pub = ca.public_key()
    if isinstance(pub, ec.EllipticCurvePublicKey):
        pub.verify(mine.signature, mine.tbs_certificate_bytes, ec.ECDSA(signature_hash(_signer(ca_pem, ca_key_pem).key)))
    else:
        pub.verify(mine.signature, mine.tbs_certificate_bytes, padding.PKCS1v15(), mine.signature_hash_algorithm)  # type: ignore[call-arg, arg-type]
    info = cert_info(der.pem(ours))
    assert (info.cn, info.o, info.dns, info.serial) == (cn, o, dns, serial)
    assert mine.issuer == ca.subject and mine.not_valid_after_utc == not_after.replace(microsecond=0)


def test_times_after_2049_are_generalized_and_match_the_builder() -> None:
    """RFC 5280: UTCTime through 2049, GeneralizedTime from 2050 on (a CA made in 2045)."""
    start = datetime(2045, 6, 1, 8, 30, 15, 123456, tzinfo=timezone.utc)
    ca_pem, ca_key_pem = _ca("ECDSA-P256", start, 3650)
    key = generate_key("ECDSA-P256")
    not_after = datetime(2051, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    ours = _signer(ca_pem, ca_key_pem).leaves(start, not_after, False).sign(
        7, der.name("c"), key.public_key().public_bytes(*SPKI), "client")
    ref = _builder_leaf(ca_pem, ca_key_pem, 7, key.public_key(), "c", (), (), (), "client", start, not_after, False)
    assert x509.load_der_x509_certificate(ours).tbs_certificate_bytes == ref.tbs_certificate_bytes
    assert b"\x18\x0f20510102030405Z" in ours and b"\x17\x0d450601083015Z" in ours


def test_primitive_encodings() -> None:
    assert der.integer(0) == b"\x02\x01\x00"
    assert der.integer(127) == b"\x02\x01\x7f"
    assert der.integer(128) == b"\x02\x02\x00\x80"
    assert der.integer(256) == b"\x02\x02\x01\x00"
    assert der.tlv(0x04, b"x" * 127)[:2] == b"\x04\x7f"
    assert der.tlv(0x04, b"x" * 128)[:3] == b"\x04\x81\x80"
    assert der.tlv(0x04, b"x" * 256)[:4] == b"\x04\x82\x01\x00"
    assert der.tlv(0x04, b"x" * 70000)[:5] == b"\x04\x83\x01\x11\x70"
    assert der.oid("1.2.840.113549.1.1.11") == bytes.fromhex("06092a864886f70d01010b")
    assert der.name("kube-apiserver", ("o1", "o2")) == _name("kube-apiserver", ("o1", "o2")).public_bytes()
    with pytest.raises(ValueError):
        der.name("")
    with pytest.raises(ValueError):  # DNS SANs are A-labels: IDNs must be converted first
        der.san(("bücher.example",), ())


def test_an_expired_ca_refuses_to_sign_with_a_clear_error() -> None:
    ca_pem, ca_key_pem = _ca("ECDSA-P256", NOW - timedelta(days=20), 10)
    with pytest.raises(CaIntegrityError, match="expired on .*rotate"):
        _signer(ca_pem, ca_key_pem).leaves(NOW, NOW + timedelta(days=365), False)


def test_a_63_character_hostname_gets_its_kubelet_credentials(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """system:node:<63 chars> is 75 characters: over the builder's cap, fine for Kubernetes."""
    docs = synth_docs(1)
    host = "n" * 63
    docs.append(node_doc(host, "127.0.9.9", ["node"]))
    import yaml
    result = ensure_pki(plan_of(yaml.safe_dump_all(docs)), {}, NOW, IssueOptions(procs=1))
    kubelet = result.materials[f"kubelet.conf@{host}"]
    assert cert_info(kubelet.cert).cn == f"system:node:{host}"
    (tmp_path / "ca.crt").write_bytes(result.materials["ca"].cert)
    (tmp_path / "leaf.crt").write_bytes(kubelet.cert)
    res = openssl("verify", "-CAfile", str(tmp_path / "ca.crt"), "-purpose", "sslclient", str(tmp_path / "leaf.crt"))
    assert res.returncode == 0 and res.stdout.strip().endswith(": OK"), res.stdout + res.stderr


@pytest.mark.parametrize("algorithm", ["ECDSA-P256", "ECDSA-P384"])
def test_key_file_and_public_key_read_from_pkcs8_equal_cryptographys(algorithm: str) -> None:
    for _ in range(20):
        key = generate_key(algorithm)
        pkcs8 = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
        assert der.ec_spki_from_pkcs8(pkcs8) == key.public_key().public_bytes(*SPKI)
        assert der.pem(pkcs8, "PRIVATE KEY") == private_key_pem(key)
        assert der.pem(der.ec_spki_from_pkcs8(pkcs8), "PUBLIC KEY") == public_key_pem(key)  # sa.pub


def test_pkcs8_without_a_public_key_or_truncated_is_refused() -> None:
    key = generate_key("ECDSA-P256")
    sec1 = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())
    # RFC 5915 ECPrivateKey with parameters but no public key, wrapped as PKCS#8 by hand.
    _, body, end = der._element(sec1, 0)
    parts, pos = [], body
    while pos < end:
        tag, _, nxt = der._element(sec1, pos)
        if tag != 0xA1:
            parts.append(sec1[pos:nxt])
        pos = nxt
    no_pub = der.tlv(0x30, b"".join(parts))
    alg = der.tlv(0x30, der.oid("1.2.840.10045.2.1") + der.oid("1.2.840.10045.3.1.7"))
    pkcs8 = der.tlv(0x30, der.integer(0) + alg + der.tlv(0x04, no_pub))
    with pytest.raises(ValueError, match="no public key"):
        der.ec_spki_from_pkcs8(pkcs8)
    good = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with pytest.raises(ValueError):
        der.ec_spki_from_pkcs8(good[:60])


def test_a_naive_time_is_utc_like_the_builders() -> None:
    naive = datetime(2030, 1, 2, 3, 4, 5)
    assert der.time(naive) == der.time(naive.replace(tzinfo=timezone.utc)) == b"\x17\x0d300102030405Z"
