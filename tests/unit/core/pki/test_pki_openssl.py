"""Every certificate of the table for the split-etcd example, checked like the issue asks.

Chains verify with the system `openssl verify` (-purpose sslserver/sslclient, -verify_hostname
for every DNS SAN, -verify_ip for every IP SAN), and the negative cases fail; CN, O, SANs, key
usages, validity, key algorithm and signature hash are exactly what the table and spec say.
"""
from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.unit.core.pki.test_pki_support import NOW, openssl, split_issued, split_plan

from bke.core.pki import Instance, cert_info, desired_instances
from bke.core.pki.issuance import BACKDATE
from bke.core.pki.kubeconfig import embedded_material

PURPOSES = {"server": ["sslserver"], "client": ["sslclient"], "server+client": ["sslserver", "sslclient"]}
INSTANCES = desired_instances(split_plan())
LEAVES = [i for i in INSTANCES if i.spec.kind in ("leaf", "kubeconfig")]
CAS = [i for i in INSTANCES if i.spec.kind == "ca"]


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each instance's certificate as <id>.crt (the client cert for kubeconfigs)."""
    d = tmp_path_factory.mktemp("pems")
    for iid, m in split_issued().materials.items():
        (d / f"{iid}.crt").write_bytes(m.cert)
    return d


def _verify(pems: Path, ca: str, leaf: str, *extra: str) -> tuple[bool, str]:
    res = openssl("verify", "-CAfile", str(pems / f"{ca}.crt"), *extra, str(pems / f"{leaf}.crt"))
    return res.returncode == 0 and res.stdout.strip().endswith(": OK"), res.stdout + res.stderr


@pytest.mark.parametrize("inst", LEAVES, ids=lambda i: i.id)
def test_leaf_chain_purpose_and_names_verify_with_openssl(pems: Path, inst: Instance) -> None:
    for purpose in PURPOSES[inst.spec.usage]:
        ok, out = _verify(pems, inst.spec.ca, inst.id, "-purpose", purpose)
        assert ok, out
    if "sslserver" in PURPOSES[inst.spec.usage]:
        for name in inst.dns:
            ok, out = _verify(pems, inst.spec.ca, inst.id, "-purpose", "sslserver", "-verify_hostname", name)
            assert ok, out
        for ip in inst.ips:
            ok, out = _verify(pems, inst.spec.ca, inst.id, "-purpose", "sslserver", "-verify_ip", ip)
            assert ok, out
    else:  # a client certificate is no server certificate
        ok, out = _verify(pems, inst.spec.ca, inst.id, "-purpose", "sslserver")
        assert not ok and "unsuitable certificate purpose" in out, out


NO_ISSUER = "unable to get local issuer certificate"


@pytest.mark.parametrize(("ca", "leaf", "extra", "why"), [
    ("etcd-events-peer-ca", "etcd-data-peer@etcd1", (), NO_ISSUER),  # peer CAs are per etcd cluster
    ("etcd-data-peer-ca", "etcd-events-peer@events1", (), NO_ISSUER),
    ("etcd-data-peer-ca", "etcd-pods-peer@pods1", (), NO_ISSUER),
    ("etcd-ca", "etcd-data-peer@etcd1", (), NO_ISSUER),  # the client CA does not vouch for peers
    ("etcd-data-peer-ca", "etcd-data-server@etcd1", (), NO_ISSUER),
    ("ca", "apiserver-etcd-client@m1", (), NO_ISSUER),
    ("front-proxy-ca", "kubelet.conf@worker1", (), NO_ISSUER),
    ("ca", "apiserver@m1", ("-purpose", "sslserver", "-verify_hostname", "m2"), "hostname mismatch"),
    ("ca", "apiserver@m1", ("-purpose", "sslserver", "-verify_ip", "127.0.20.2"), "IP address mismatch"),
    ("etcd-ca", "etcd-data-server@etcd1", ("-purpose", "sslserver", "-verify_ip", "127.0.20.12"), "IP address mismatch"),
])
def test_wrong_ca_or_name_is_rejected_by_openssl(pems: Path, ca: str, leaf: str, extra: tuple[str, ...],
                                                 why: str) -> None:
    ok, out = _verify(pems, ca, leaf, *extra)
    assert not ok and why in out, out


@pytest.mark.parametrize("inst", CAS, ids=lambda i: i.id)
def test_cas_are_self_signed_ten_year_cas(pems: Path, inst: Instance) -> None:
    ok, out = _verify(pems, inst.id, inst.id)
    assert ok, out
    cert = x509.load_pem_x509_certificate((pems / f"{inst.id}.crt").read_bytes())
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert bc.critical and bc.value.ca
    assert ku.key_cert_sign and ku.digital_signature and not ku.key_encipherment  # ECDSA: no keyEncipherment
    assert cert.not_valid_after_utc - NOW == timedelta(days=3650)
    assert cert.subject == cert.issuer and cert_info((pems / f"{inst.id}.crt").read_bytes()).cn == inst.cn


@pytest.mark.parametrize("inst", LEAVES, ids=lambda i: i.id)
def test_leaf_subject_sans_usages_validity_and_key(inst: Instance) -> None:
    materials = split_issued().materials
    m = materials[inst.id]
    info = cert_info(m.cert)
    ca = cert_info(materials[inst.spec.ca].cert)
    assert (info.cn, info.o) == (inst.cn, inst.o)
    assert set(info.dns) == set(inst.dns) and set(info.ips) == set(inst.ips)
    assert info.usages == set(inst.spec.usage.split("+"))
    assert not info.is_ca and info.aki == ca.ski and info.issuer_cn == ca.cn
    assert info.not_before == NOW - BACKDATE
    assert info.not_after == NOW + timedelta(days=365)
    cert = x509.load_pem_x509_certificate(m.cert)
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.digital_signature and not ku.value.key_encipherment and not ku.value.key_cert_sign
    assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)
    key = serialization.load_pem_private_key(m.key, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"  # keyAlgorithm: ECDSA-P256
    assert key.public_key() == cert.public_key()


def test_sa_key_pair_matches() -> None:
    m = split_issued().materials["sa"]
    key = serialization.load_pem_private_key(m.key, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert serialization.load_pem_public_key(m.cert) == key.public_key()


# the placed ones; super-admin.conf (on no node) is rendered by cluster_kubeconfig, see test_pki_cli
@pytest.mark.parametrize("inst", [i for i in LEAVES if i.spec.kind == "kubeconfig" and i.owner], ids=lambda i: i.id)
def test_kubeconfigs_are_complete(inst: Instance) -> None:
    from bke.core.pki import render_files
    from bke.core.pki.instances import node_file_refs

    r = split_issued()
    refs = [f for f in node_file_refs(split_plan())[inst.owner] if f.instance == inst.id]
    (nf,) = render_files(refs, r.materials, r.manifest.entries, "big")
    doc = yaml.safe_load(nf.content)
    assert nf.secret and nf.mode == 0o600
    assert doc["clusters"][0]["cluster"]["server"] == inst.server
    assert base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]) == r.materials["ca"].cert
    assert doc["users"][0]["name"] == inst.cn and doc["current-context"] == f"{inst.cn}@big"
    assert embedded_material(nf.content) == r.materials[inst.id]
