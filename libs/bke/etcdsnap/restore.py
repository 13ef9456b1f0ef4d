"""`bke etcd restore` as a pure plan: what stops, what is restored where, what starts again.

etcd's disaster recovery (etcd-io/website content/en/docs/v3.5/op-guide/recovery.md at
c2faf916, "Restoring a cluster"): every member is restored from the same snapshot file as a
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
hand. Steps, in order (one `RestoreAction` each, `node` says where it runs):

    stop-apiserver      every kube-apiserver node: manifest moved to the parking dir
    stop-member         every member of the etcd cluster: manifest moved to the parking dir
    put-snapshot        every member: the clear snapshot file written, 0600
    restore-member      every member: old data dir moved aside, `etcdutl snapshot restore`
                        (the member's manifest keeps its old --initial-cluster-* flags: etcd reads
                        them only to bootstrap an empty data dir, and the restored one is not empty)
    start-member        every member: manifest back; then every member's health is waited for
    start-apiserver     every kube-apiserver node: manifest back; then its health
    remove-snapshot     every member: the clear snapshot file removed

`run_restore` runs such a plan over a `RestorePort` (how a file moves or a program runs on a
node): the lab's port acts on the node trees (bke_cli.etcd_lab_restore); a port over agent
commands is not built. Every port operation is idempotent (a move whose source is gone and
whose target exists is done), so a restore cut short can be run again.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ..paths import MANIFESTS_DIR
from ..plan.models import Plan

__all__ = ["PARKING_DIR", "SNAPSHOT_DIR", "RestoreAction", "RestorePlan", "RestorePort", "restore_plan", "run_restore"]

PARKING_DIR = "/etc/kubernetes/bke-restore-parked"  # manifests taken away while the restore runs
SNAPSHOT_DIR = "/var/lib/bke-agent/restore"  # where each member's node receives the snapshot
Kind = Literal["stop-apiserver", "stop-member", "put-snapshot", "restore-member", "start-member", "start-apiserver",
               "remove-snapshot"]


@dataclass(frozen=True)
class RestoreAction:
    kind: Kind
    node: str
    summary: str
    argv: tuple[str, ...] = ()  # the program run on the node, for restore-member
    moves: tuple[tuple[str, str], ...] = ()  # (from, to) file moves on the node
    path: str = ""  # the snapshot file on the node (put-snapshot, restore-member, remove-snapshot)


@dataclass(frozen=True)
class RestorePlan:
    cluster: str
    etcd_cluster: str
    snapshot_id: str
    token: str  # the new cluster's --initial-cluster-token
    apiservers: tuple[str, ...]
    members: tuple[str, ...]
    actions: tuple[RestoreAction, ...]

    def stops(self) -> list[str]:
        """What a person is told will stop, one line each."""
        return ([f"kube-apiserver on {n}" for n in self.apiservers]
                + [f"{self.etcd_cluster} member on {n}" for n in self.members])


def restore_plan(plan: Plan, etcd_cluster: str, snapshot_id: str, *, etcdutl: str = "/usr/local/bin/etcdutl",
                 token: str | None = None) -> RestorePlan:
    """The restore of `etcd_cluster` from `snapshot_id`; KeyError if the plan has no such cluster."""
    ec = plan.etcd_cluster(etcd_cluster)
    if ec is None:
        raise KeyError(f"cluster {plan.cluster} has no etcd cluster {etcd_cluster!r} "
                       f"(it has {', '.join(c.name for c in plan.etcd_clusters)})")
    token = token or f"{plan.cluster}-{etcd_cluster}-{snapshot_id}"[:120]
    apiservers = tuple(n.hostname for n in plan.nodes_running("kube-apiserver"))
    members = tuple(m.hostname for m in ec.members)
    api_manifest = f"{MANIFESTS_DIR}/kube-apiserver.yaml"
    etcd_manifest = f"{MANIFESTS_DIR}/{ec.manifest}"
    parked_api = f"{PARKING_DIR}/kube-apiserver.yaml"
    parked_etcd = f"{PARKING_DIR}/{ec.manifest}"
    snapshot_file = f"{SNAPSHOT_DIR}/{etcd_cluster}-{snapshot_id}.db"
    aside = f"{ec.data_dir}.before-restore-{snapshot_id}"
    actions: list[RestoreAction] = []
    actions += [RestoreAction("stop-apiserver", n, f"stop kube-apiserver on {n}", moves=((api_manifest, parked_api),))
                for n in apiservers]
    actions += [RestoreAction("stop-member", m, f"stop the {etcd_cluster} member on {m}",
                              moves=((etcd_manifest, parked_etcd),)) for m in members]
    actions += [RestoreAction("put-snapshot", m, f"put snapshot {snapshot_id} on {m} at {snapshot_file}",
                              path=snapshot_file) for m in members]
    for m in ec.members:
        argv = (etcdutl, "snapshot", "restore", snapshot_file, "--name", m.hostname,
                "--initial-cluster", ec.initial_cluster, "--initial-cluster-token", token,
                "--initial-advertise-peer-urls", m.peer_url, "--data-dir", ec.data_dir)
        actions.append(RestoreAction("restore-member", m.hostname,
                                     f"move {ec.data_dir} aside to {aside}; restore {m.hostname} into {ec.data_dir}",
                                     argv=argv, moves=((ec.data_dir, aside),), path=snapshot_file))
    actions += [RestoreAction("start-member", m, f"start the {etcd_cluster} member on {m}; wait until healthy",
                              moves=((parked_etcd, etcd_manifest),)) for m in members]
    actions += [RestoreAction("start-apiserver", n, f"start kube-apiserver on {n}; wait until healthy",
                              moves=((parked_api, api_manifest),)) for n in apiservers]
    actions += [RestoreAction("remove-snapshot", m, f"remove the snapshot file from {m}", path=snapshot_file)
                for m in members]
    return RestorePlan(plan.cluster, etcd_cluster, snapshot_id, token, apiservers, members, tuple(actions))


class RestorePort(Protocol):
    """How a restore acts on nodes. Each operation is idempotent and raises to fail the restore."""

    def move(self, node: str, src: str, dst: str) -> None: ...

    def put_snapshot(self, node: str, path: str) -> None: ...

    def remove(self, node: str, path: str) -> None: ...

    def restore_member(self, node: str, argv: Sequence[str], data_dir: str, aside: str) -> None: ...

    def wait_stopped(self, pods: Sequence[tuple[str, str]]) -> None:
        """Every (node, manifest) pod has stopped (the manifest is parked at the given path)."""

    def wait_running(self, pods: Sequence[tuple[str, str]]) -> None:
        """Every (node, manifest) pod runs and is ready."""


def run_restore(rp: RestorePlan, port: RestorePort, on_action: Callable[[int, RestoreAction], None]) -> None:
    """Run the plan's actions in order; after each group of stops or starts, wait for all of the
    group (a new etcd cluster is healthy only once enough members run, so no member is waited for
    alone). The first error stops the restore where it is, and is raised."""
    pending: list[tuple[str, str]] = []
    for i, action in enumerate(rp.actions, 1):
        on_action(i, action)
        if action.kind in ("stop-apiserver", "stop-member", "start-member", "start-apiserver"):
            for src, dst in action.moves:
                port.move(action.node, src, dst)
                pending.append((action.node, dst))
        elif action.kind == "put-snapshot":
            port.put_snapshot(action.node, action.path)
        elif action.kind == "restore-member":
            (data_dir, aside), = action.moves
            port.restore_member(action.node, action.argv, data_dir, aside)
        elif action.kind == "remove-snapshot":
            port.remove(action.node, action.path)
        following = rp.actions[i].kind if i < len(rp.actions) else None
        if pending and following != action.kind:
            if action.kind.startswith("stop"):
                port.wait_stopped(pending)
            else:
                port.wait_running(pending)
            pending = []
