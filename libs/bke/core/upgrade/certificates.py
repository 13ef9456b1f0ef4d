"""Which certificates an upgrade renews, and which renewed files ride with which node step.

kubeadm renews certificates while it upgrades, unless `kubeadm upgrade apply
--certificate-renewal=false` (kubernetes/kubernetes, cmd/kubeadm/app/phases/upgrade/staticpods.go,
`upgradeComponent` -> `renewCertsByComponent`, read at 3e78459f and a later fork of it): each
static pod component's own certificates are renewed just before its new manifest moves in -
etcd: etcd-server, etcd-peer, etcd-healthcheck-client; kube-apiserver: apiserver,
apiserver-kubelet-client, front-proxy-client, apiserver-etcd-client; kube-controller-manager:
controller-manager.conf; kube-scheduler: scheduler.conf - and `StaticPodControlPlane` renews
admin.conf once every control-plane component is done. CAs are never renewed, nor kubelet.conf
(the kubelet's own client certificate rotation is kubeadm's answer for it; BKE's automatic
renewal is, see bke_certs.autorenew).

The same table here, in BKE's certificate rows (bke.core.pki.table): one row per upgrade step, the
rows it renews. An etcd step renews the member rows of its own etcd cluster; admin.conf goes
with `masters-runtime`, the step after the control plane on every master. The renewed files
reach a node inside that step's `ReplaceFiles`, beside its manifest, so a rollback puts the
previous certificates back together with the previous manifest.

Pure: the certs service renews (bke.core.pki), the upgrader asks it for `renewed_instances`.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from bke.contracts.agent_steps import NewFile
from bke.core.pki import node_file_refs
from bke.core.pki.instances import FileRef
from bke.core.pki.pod_certs import POD_CERTS
from bke.core.pki.table import CERTS
from bke.core.plan import Plan
from bke.core.state.nodefiles import NodeFile
from .order import ExpandedStep

__all__ = ["CERT_STEPS", "cert_files", "cert_rows", "node_cert_paths", "rbac_before_renewal", "renewed_by_node",
           "renewed_instances"]

# upgrade step -> the certificate rows it renews (kubeadm's renewCertsByComponent, in BKE rows):
# each static pod's own (bke.core.pki.pod_certs, whose names its manifest carries), admin.conf last
CERT_STEPS: dict[str, tuple[str, ...]] = {**POD_CERTS, "masters-runtime": ("admin.conf",)}


def cert_rows(step: str, group: str = "") -> tuple[str, ...]:
    """The certificate rows upgrade step `step` (of etcd cluster `group`) renews; () for none."""
    return tuple(r.format(group=group) for r in CERT_STEPS.get(step, ()))


def rbac_before_renewal(current: str, target: str) -> bool:
    """True when the upgrade from `current` to `target` (Kubernetes releases) re-issues some
    certificate with other organisations (bke.core.pki.subjects): the target's bootstrap RBAC (which
    grants the group-less certificate its rights by name, bke.core.rbac) must be applied before the
    renewed certificate reaches an apiserver, not in the addons step at the end."""
    return any(r.o_for(current) != r.o_for(target) for r in CERTS if r.o_rule)


def _instances_of(refs: Iterable[FileRef], rows: tuple[str, ...], host: str) -> set[str]:
    wanted = {f"{r}@{host}" for r in rows}
    return {ref.instance for ref in refs if ref.instance in wanted}


def renewed_instances(plan: Plan, expanded: Iterable[ExpandedStep]) -> list[str]:
    """Every certificate instance (`apiserver@m1`) the upgrade renews: each step's rows on each
    node of its batches that holds them. Nodes left out (in no batch) keep theirs. Sorted."""
    wanted: dict[str, set[str]] = {}  # host -> rows
    for e in expanded:
        rows = cert_rows(e.step, e.group)
        if not rows:
            continue
        for batch in e.batches:
            for host in batch:
                wanted.setdefault(host, set()).update(rows)
    refs = node_file_refs(plan, wanted)
    out: set[str] = set()
    for host, names in wanted.items():
        out |= _instances_of(refs.get(host, ()), tuple(names), host)
    return sorted(out)


def node_cert_paths(plan: Plan, step: str, group: str, host: str, renewed: Iterable[str]) -> set[str]:
    """The node paths of the files of `host` that step `step` carries: those of its rows'
    instances on that node that were renewed (a set of instance ids)."""
    rows = cert_rows(step, group)
    if not rows:
        return set()
    refs = node_file_refs(plan, [host]).get(host, [])
    mine = _instances_of(refs, rows, host) & set(renewed)
    return {ref.path for ref in refs if ref.instance in mine}


def cert_files(plan: Plan, step: str, group: str, host: str, renewed: Iterable[str],
               files: Iterable[NodeFile] | None) -> list[NewFile]:
    """The NewFiles of `host`'s renewed certificates that step `step` carries, from the node's
    file set as the certs service stored it (keys sealed to the node's agent: they stay sealed
    here). ValueError when one is missing (the set was not re-sealed: nothing is sent)."""
    paths = node_cert_paths(plan, step, group, host, renewed)
    if not paths:
        return []
    by_path = {f.path: f for f in files or ()}
    missing = sorted(paths - set(by_path))
    if missing:
        raise ValueError(f"node {host}: no renewed certificate file {missing[0]} in its sealed set")
    return [NewFile(path=p, mode=by_path[p].mode, sha256=by_path[p].sha256, content_b64=by_path[p].content_b64,
                    sealed_b64=by_path[p].sealed_b64) for p in sorted(paths)]


def renewed_by_node(renewed: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """node -> the instance ids renewed on it, from CertsRenewed's instance -> nodes."""
    out: dict[str, set[str]] = {}
    for instance, nodes in renewed.items():
        for n in nodes:
            out.setdefault(n, set()).add(instance)
    return out
