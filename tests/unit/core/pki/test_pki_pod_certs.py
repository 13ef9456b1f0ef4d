"""bke.core.pki.pod_certs: a static pod's manifest carries the names of the certificates it reads, so
new names restart it and nothing else does."""
from __future__ import annotations

from bke.core.pki.pod_certs import NAMES_ANNOTATION, POD_CERTS, names_digest, pod_of
from bke.core.render.context import RenderInputs
from bke.core.render.render import render_cluster

from ...upgrade_helpers import SEED, plan_of

SANS = "      apiServer: {certSANs: [api.seed.example.com]}\n"
CERTS = "      certificates: {keyAlgorithm: ECDSA-P256}\n"


def test_new_apiserver_names_change_only_the_apiserver_digest_and_per_node():
    a, b = plan_of(SEED), plan_of(SEED, extra=(CERTS, CERTS + SANS))
    for pod in POD_CERTS:
        group = "etcd-data" if pod == "etcd" else ""
        same = names_digest(a, "master1", pod, group) == names_digest(b, "master1", pod, group)
        assert same == (pod != "kube-apiserver"), pod
    assert names_digest(a, "master1", "kube-apiserver") != names_digest(a, "master2", "kube-apiserver")
    assert names_digest(a, "master1", "kube-apiserver") == names_digest(plan_of(SEED), "master1", "kube-apiserver")


def test_the_rendered_manifest_carries_the_digest():
    a, b = plan_of(SEED), plan_of(SEED, extra=(CERTS, CERTS + SANS))
    inputs = RenderInputs(vrrp_password="x")
    ra, rb = render_cluster(a, inputs).node("master1"), render_cluster(b, inputs).node("master1")
    path = "/etc/kubernetes/manifests/kube-apiserver.yaml"
    fa, fb = ra.file(path), rb.file(path)
    assert fa is not None and fb is not None
    assert f'{NAMES_ANNOTATION}: "{names_digest(a, "master1", "kube-apiserver")}"'.encode() in fa.content
    assert fa.content != fb.content
    kcm = "/etc/kubernetes/manifests/kube-controller-manager.yaml"
    assert ra.file(kcm) == rb.file(kcm)


def test_which_pod_reads_a_row():
    assert pod_of("apiserver", ()) == ("kube-apiserver", "")
    assert pod_of("etcd-events-peer", ("etcd-data", "etcd-events")) == ("etcd", "etcd-events")
    assert pod_of("kubelet.conf", ("etcd-data",)) is None and pod_of("ca", ()) is None
