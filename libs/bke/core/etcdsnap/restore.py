"""`bke etcd restore` as a pure plan: what stops, what each member's node does, what starts again.

etcd's disaster recovery (etcd-io/website content/en/docs/v3.5/op-guide/recovery.md at
c2faf916, "Restoring a cluster"; the same rule in content/en/docs/v3.6/op-guide/recovery.md on
main and etcd.io/docs/v3.4/op-guide/recovery: "all members should restore using the same
snapshot", each into a new data dir): every member is restored from the same snapshot file as a
member of a *new* cluster with `etcdutl snapshot restore <file> --name <member>
--initial-cluster <all members> --initial-cluster-token <new token>
--initial-advertise-peer-urls <its peer URL> --data-dir <new dir>`, then every member is started
on its new data dir. A new token keeps the restored members from ever joining the old cluster's
members by mistake. Before that, everything that writes to the cluster must stop: every
kube-apiserver uses every etcd cluster (split etcd: `--etcd-servers` and
`--etcd-servers-overrides`), so all of them stop, as the Kubernetes docs say for a restore
(kubernetes/website content/en/docs/tasks/administer-cluster/configure-upgrade-etcd.md,
"Restoring an etcd cluster": stop all API server instances, restore, restart them).

A static pod stops when its manifest leaves the kubelet's manifest directory and starts when it
comes back (kubeadm moves manifests the same way in its upgrade, cmd/kubeadm/app/phases/upgrade
/staticpods.go). The old data dir is moved aside, never deleted: the restore can be undone by
hand. The restore's stages, in order (`STAGES`, a table the CLI prints and the upgrader runs):

    verify-snapshot   the upgrader: the snapshot's record is from the agent BKE provisioned for
                      its node, and its bytes open and match the record's sha256
    stop-apiservers   every kube-apiserver node: manifest parked, its port closed
    stop-members      every member: manifest parked, its port closed
    restore-members   every member: snapshot fetched sealed to its agent, checked; old data dir
                      moved aside; `etcdutl snapshot restore` (the member's manifest keeps its old
                      --initial-cluster-* flags: etcd reads them only to bootstrap an empty data
                      dir, and the restored one is not empty)
    start-members     every member: manifest back, then its /health, which answers true only
                      once the new cluster has a leader (so: quorum), all members at once
    start-apiservers  every kube-apiserver node: manifest back, then its /livez

`node_steps` gives the agent steps of one node in one stage (bke.contracts.agent_steps).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bke.contracts.agent_steps import ParkStaticPod, RestoreEtcdMember, Step, WaitHealth
from bke.core.node_steps import health_steps
from bke.core.paths import MANIFESTS_DIR
from bke.core.plan.models import Plan

__all__ = ["STAGES", "RestorePlan", "StageDef", "node_steps", "restore_plan"]

Where = Literal["upgrader", "apiservers", "members"]


@dataclass(frozen=True)
class StageDef:
    name: str
    where: Where
    summary: str


STAGES: tuple[StageDef, ...] = (
    StageDef("verify-snapshot", "upgrader", "open the stored snapshot: its record from the node's provisioned agent, "
                                            "its sha256 and etcd's own hash"),
    StageDef("stop-apiservers", "apiservers", "stop every kube-apiserver (manifest parked) and wait until it is gone"),
    StageDef("stop-members", "members", "stop every member (manifest parked) and wait until it is gone"),
    StageDef("restore-members", "members", "deliver the snapshot sealed to each member's agent; move the old data dir "
                                           "aside; etcdutl snapshot restore as a member of a new cluster"),
    StageDef("start-members", "members", "start every member (manifest back); wait until each is healthy (quorum)"),
    StageDef("start-apiservers", "apiservers", "start every kube-apiserver (manifest back); wait until each is live"),
)


@dataclass(frozen=True)
class RestorePlan:
    cluster: str
    etcd_cluster: str
    snapshot_id: str
    token: str  # the new cluster's --initial-cluster-token
    apiservers: tuple[str, ...]
    members: tuple[str, ...]
    data_dir: str
    aside_dir: str  # where each member's old data dir is kept

    def stops(self) -> list[str]:
        """What a person is told will stop, one line each."""
        return ([f"kube-apiserver on {n}" for n in self.apiservers]
                + [f"{self.etcd_cluster} member on {n}" for n in self.members])

    def nodes(self, stage: StageDef) -> tuple[str, ...]:
        return {"upgrader": (), "apiservers": self.apiservers, "members": self.members}[stage.where]


def restore_plan(plan: Plan, etcd_cluster: str, snapshot_id: str) -> RestorePlan:
    """The restore of `etcd_cluster` from `snapshot_id`; KeyError if the plan has no such cluster."""
    ec = plan.etcd_cluster(etcd_cluster)
    if ec is None:
        raise KeyError(f"cluster {plan.cluster} has no etcd cluster {etcd_cluster!r} "
                       f"(it has {', '.join(c.name for c in plan.etcd_clusters)})")
    # the same snapshot gives the same token and aside dir: a restore asked for again (after a
    # failure was fixed) keeps the first aside dir, which holds the data from before any restore
    token = f"{plan.cluster}-{etcd_cluster}-{snapshot_id}"[:120]
    return RestorePlan(plan.cluster, etcd_cluster, snapshot_id, token,
                       tuple(n.hostname for n in plan.nodes_running("kube-apiserver")),
                       tuple(m.hostname for m in ec.members), ec.data_dir,
                       f"{ec.data_dir}.before-restore-{snapshot_id}")


def _health(plan: Plan, host: str, component: str, timeout_s: float) -> WaitHealth:
    node = plan.node(host)
    found = [s for s in health_steps(plan, node, (component,), timeout_s) if isinstance(s, WaitHealth)]
    if not found:
        raise KeyError(f"{host} runs no {component}")
    return found[0]


def node_steps(plan: Plan, rp: RestorePlan, stage: str, host: str, *, restore_id: str, sha256: str, size: int,
               timeout_s: float = 300.0) -> list[Step]:
    """The agent steps of `host` in `stage`; KeyError for a stage the upgrader runs itself."""
    ec = plan.etcd_cluster(rp.etcd_cluster)
    assert ec is not None
    api = f"{MANIFESTS_DIR}/kube-apiserver.yaml"
    etcd = f"{MANIFESTS_DIR}/{ec.manifest}"
    if stage == "stop-apiservers":
        probe = _health(plan, host, "kube-apiserver", timeout_s)
        return [ParkStaticPod(id="park:kube-apiserver", manifest=api, parked=True, port_url=probe.url,
                              timeout_s=timeout_s)]
    if stage == "stop-members":
        probe = _health(plan, host, rp.etcd_cluster, timeout_s)
        # the metrics port serves /health: closed once the member's process is gone
        return [ParkStaticPod(id=f"park:{rp.etcd_cluster}", manifest=etcd, parked=True, port_url=probe.url,
                              timeout_s=timeout_s)]
    if stage == "restore-members":
        member = ec.member(host)
        if member is None:
            raise KeyError(f"{host} is no member of {rp.etcd_cluster}")
        return [RestoreEtcdMember(id=f"restore:{rp.etcd_cluster}", restore_id=restore_id,
                                  etcd_cluster=rp.etcd_cluster, member=host, initial_cluster=ec.initial_cluster,
                                  token=rp.token, peer_url=member.peer_url, data_dir=rp.data_dir,
                                  aside_dir=rp.aside_dir, sha256=sha256, size=size)]
    if stage == "start-members":
        return [ParkStaticPod(id=f"unpark:{rp.etcd_cluster}", manifest=etcd, parked=False),
                _health(plan, host, rp.etcd_cluster, timeout_s)]
    if stage == "start-apiservers":
        return [ParkStaticPod(id="unpark:kube-apiserver", manifest=api, parked=False),
                _health(plan, host, "kube-apiserver", timeout_s)]
    raise KeyError(f"stage {stage!r} sends no agent steps")
