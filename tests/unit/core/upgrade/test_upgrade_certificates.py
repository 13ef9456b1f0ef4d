"""The upgrade's certificate renewal, pure: which instances it renews (kubeadm's per-component
table), which renewed files ride in which node step, and the step composition with them."""
from __future__ import annotations

import base64
import hashlib
from dataclasses import replace

import pytest

from bke.contracts.agent_steps import NewFile, ReplaceFiles
from bke.core.state.nodefiles import NodeFile
from bke.core.upgrade import Change, change_of, expand_order, resolve_target
from bke.core.upgrade.certificates import CERT_STEPS, cert_files, node_cert_paths, renewed_instances
from bke.core.upgrade.node_commands import node_upgrade_steps

from tests.unit.upgrader.test_upgrader_requests import _renders
from ...upgrade_helpers import SEED, SPLIT, plan_of

K8S = Change(kubernetes=True, etcd=False, containerd=False, certificates=True)
ETCD = Change(kubernetes=False, etcd=True, containerd=False, certificates=True)


def test_a_kubernetes_change_renews_what_kubeadm_renews_per_component() -> None:
    p = plan_of(SEED)
    got = set(renewed_instances(p, expand_order(p, K8S)))
    masters = ("master1", "master2", "master3")
    want = {f"{row}@{m}" for m in masters for row in (
        "apiserver", "apiserver-kubelet-client", "front-proxy-client", "apiserver-etcd-client",
        "controller-manager.conf", "scheduler.conf", "admin.conf")}
    assert got == want  # no CA, no kubelet.conf, no etcd member certificate (etcd does not change)


def test_an_etcd_change_renews_each_members_own_certificates_only() -> None:
    p = plan_of(SPLIT)
    got = renewed_instances(p, expand_order(p, ETCD))
    members = {(c.name, m.hostname) for c in p.etcd_clusters for m in c.members}
    assert set(got) == {f"{c}-{kind}@{h}" for c, h in members for kind in ("server", "peer", "healthcheck-client")}


def test_nodes_left_out_keep_their_certificates() -> None:
    p = plan_of(SEED)
    got = renewed_instances(p, expand_order(p, K8S, left_out=["master3"]))
    assert got and not [i for i in got if i.endswith("@master3")]


def test_every_row_of_the_table_is_a_certificate_row() -> None:
    from bke.core.pki.table import by_name

    for step, rows in CERT_STEPS.items():
        for row in rows:
            assert by_name(row.format(group="etcd-data")) is not None, (step, row)


def _sealed_set(p, host: str) -> list[NodeFile]:
    """A node's file set as the certs service stores it: public files clear, secret ones sealed
    (a stand-in ciphertext here: only its passing through untouched matters)."""
    from bke.core.pki import node_file_refs

    out = []
    for ref in node_file_refs(p, [host])[host]:
        data = f"{ref.instance}:{ref.part}".encode()
        sha = hashlib.sha256(data).hexdigest()
        if ref.secret:
            out.append(NodeFile(path=ref.path, mode=ref.mode, sha256=sha, sealed_b64=base64.b64encode(b"sealed" + data).decode()))
        else:
            out.append(NodeFile(path=ref.path, mode=ref.mode, sha256=sha, content_b64=base64.b64encode(data).decode()))
    return out


def test_the_apiserver_step_carries_its_renewed_files_sealed_beside_its_manifest() -> None:
    p = plan_of(SEED)
    new, old, newf = _renders(p)
    renewed = renewed_instances(p, expand_order(p, replace(change_of(p, resolve_target(p, "1.34.1", "3.5.21")),
                                                           certificates=True)))
    certs = cert_files(p, "kube-apiserver", "", "master1", renewed, _sealed_set(p, "master1"))
    paths = [c.path for c in certs]
    assert "/etc/kubernetes/pki/apiserver.key" in paths and "/etc/kubernetes/pki/apiserver-etcd-client.crt" in paths
    assert not [x for x in paths if "controller-manager" in x or "admin" in x or x.endswith("ca.crt")]
    key = next(c for c in certs if c.path.endswith("apiserver.key"))
    assert key.sealed_b64 and key.content_b64 is None and key.mode == 0o600  # never opened here
    (step,) = node_upgrade_steps("kube-apiserver", "", p, new, "master1", old["master1"], newf["master1"], {},
                                 certs=certs)
    assert isinstance(step, ReplaceFiles)
    assert [f.path for f in step.files] == ["/etc/kubernetes/manifests/kube-apiserver.yaml", *paths]
    assert step.rollback  # the same backup restores the old certificates with the old manifest


def test_renewed_files_alone_still_go_through_replace_files() -> None:
    """A component whose manifest does not change still gets its renewed files (with a backup
    and probes), not only a health check."""
    p = plan_of(SPLIT)
    new, old, newf = _renders(p, etcd="3.5.1")  # etcd unchanged
    member = next(n for n in p.nodes if "etcd-events" in n.components).hostname
    cert = NewFile(path="/etc/kubernetes/pki/etcd-events/server.key", sealed_b64="c2VhbGVk", sha256="0" * 64, mode=0o600)
    (step,) = node_upgrade_steps("etcd", "etcd-events", p, new, member, old[member], newf[member], {}, certs=[cert])
    assert isinstance(step, ReplaceFiles) and step.files == [cert] and step.probes


def test_a_step_without_certificates_refuses_some() -> None:
    p = plan_of(SEED)
    new, old, newf = _renders(p)
    cert = NewFile(path="/etc/kubernetes/pki/apiserver.key", sealed_b64="c2VhbGVk", sha256="0" * 64)
    with pytest.raises(ValueError, match="carries no certificate"):
        node_upgrade_steps("workers", "", p, new, "node1", old["node1"], newf["node1"], {}, certs=[cert])


def test_a_renewed_file_missing_from_the_sealed_set_is_refused_naming_it() -> None:
    p = plan_of(SEED)
    renewed = ["scheduler.conf@master1"]
    files = [f for f in _sealed_set(p, "master1") if not f.path.endswith("scheduler.conf")]
    assert node_cert_paths(p, "kube-scheduler", "", "master1", renewed) == {"/etc/kubernetes/scheduler.conf"}
    with pytest.raises(ValueError, match="master1.*scheduler.conf"):
        cert_files(p, "kube-scheduler", "", "master1", renewed, files)
    assert cert_files(p, "kube-scheduler", "", "master2", renewed, files) == []  # not renewed there
