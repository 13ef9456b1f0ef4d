"""The difference between a cluster's stored plan and a changed spec's plan, and what it takes.

kubeadm and Cluster API change a running cluster one kind of change at a time; so does this:
- versions go to the upgrader (`bke upgrade`), never mixed with a topology or flag change in
  the same apply (the upgrade's checks and rollback assume an otherwise unchanged cluster);
- refused outright: a non-split etcd becoming split or back (the seed's rule), a changed
  control-plane endpoint or load-balancer kind (every certificate and kubeconfig names it), a
  changed pod or service network or DNS domain (baked into running workloads and the apiserver's
  service IP), a node whose hostname stays but whose address changes (remove it, add a new one),
  and an etcd removal that would leave a cluster without quorum or without members;
- everything else becomes per-node actions: etcd members joined as learners and promoted one at
  a time (kubeadm's default since 1.29), then removed one at a time; certificates re-issued where
  their names change; new nodes joined (no command to any other node unless a file of theirs
  changes); components rolled one node at a time where their files change; labels and taints set
  through the API; removed nodes drained, removed and reset.
Files come from rendering both plans (`bke.core.render`): a component is rolled on a node exactly when
one of its files differs there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from bke.core.paths import first_match
from bke.core.plan import Plan
from bke.core.plan.models import NodePlan, quorum
from bke.core.pki.instances import Instance, desired_instances
from bke.core.render.result import NodeDiff

__all__ = ["Action", "ClusterDiff", "EtcdChange", "Refusal", "component_of", "diff_plans", "etcd_changes", "quorum",
           "removal_order", "removal_refusal", "render_diff", "unhealthy_in", "Unhealthy"]


@dataclass(frozen=True)
class Refusal:
    name: str
    message: str


@dataclass(frozen=True)
class Action:
    """One thing the change does, in order. `host` "" is cluster-wide (the API, an addon)."""

    kind: str
    host: str
    detail: str = ""


@dataclass(frozen=True)
class EtcdChange:
    cluster: str
    before: tuple[str, ...]
    after: tuple[str, ...]

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(h for h in self.after if h not in self.before)

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(h for h in self.before if h not in self.after)


@dataclass(frozen=True)
class ClusterDiff:
    cluster: str
    refusals: tuple[Refusal, ...] = ()
    versions: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # what -> (current, desired)
    nodes_added: tuple[str, ...] = ()
    nodes_removed: tuple[str, ...] = ()
    roles_changed: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    etcd: tuple[EtcdChange, ...] = ()
    certificates: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # instance id -> what changed
    files: tuple[NodeDiff, ...] = ()  # only the nodes (and addons, host "") whose files change
    actions: tuple[Action, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.refusals or self.versions or self.actions)

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    @property
    def upgrade_only(self) -> bool:
        """Only versions change: the whole change is the upgrader's."""
        return bool(self.versions) and not self.refusals and not self.actions

    def touched_hosts(self) -> list[str]:
        """Every existing or new node that some action sends something to."""
        return sorted({a.host for a in self.actions if a.host})


# A file's component on a node: what gets rolled (and probed) when it changes there.
_COMPONENT_OF: tuple[tuple[str, str], ...] = (
    ("/etc/kubernetes/manifests/*.yaml", "<stem>"),
    ("/etc/haproxy/*", "haproxy"),
    ("/etc/keepalived/*", "keepalived"),
    ("/etc/kubernetes/pki/*", "certificates"),
    ("/etc/kubernetes/*.conf", "kubeconfigs"),
    ("/var/lib/kubelet/*", "kubelet"),
    ("/etc/systemd/system/kubelet.service*", "kubelet"),
    ("/etc/containerd/*", "containerd"),
)


def component_of(path: str) -> str:
    component = first_match(path, _COMPONENT_OF, "node-env")
    return path.rsplit("/", 1)[1].removesuffix(".yaml") if component == "<stem>" else component


def _etcd_members(plan: Plan) -> dict[str, tuple[str, ...]]:
    return {c.name: tuple(m.hostname for m in c.members) for c in plan.etcd_clusters}


def _structural_refusals(cur: Plan, new: Plan) -> list[Refusal]:
    out: list[Refusal] = []
    if cur.cluster != new.cluster:
        out.append(Refusal("SameCluster", f"the spec names cluster {new.cluster!r}, the stored plan {cur.cluster!r}"))
    a, b = sorted(_etcd_members(cur)), sorted(_etcd_members(new))
    if a != b:
        out.append(Refusal("SplitUnchanged", f"etcd clusters {a} would become {b}: a running cluster's etcd split "
                                             "(etcd-events, etcd-pods) cannot be added or removed"))
    if cur.control_plane_endpoint != new.control_plane_endpoint or cur.load_balancer != new.load_balancer:
        out.append(Refusal("EndpointUnchanged", f"controlPlaneEndpoint {cur.control_plane_endpoint} "
                                                f"(load balancer {cur.load_balancer}) would become "
                                                f"{new.control_plane_endpoint} (load balancer {new.load_balancer}): every "
                                                "certificate and kubeconfig names it; build a new cluster instead"))
    n0, n1 = cur.spec.config.networking, new.spec.config.networking
    for fld in ("service_subnet", "pod_subnet", "dns_domain"):
        if getattr(n0, fld) != getattr(n1, fld):
            out.append(Refusal("NetworkUnchanged", f"networking.{fld} {getattr(n0, fld)} would become "
                                                   f"{getattr(n1, fld)}: running workloads and Services keep the old one"))
    old_ip = {n.hostname: n.ip for n in cur.nodes}
    for n in new.nodes:
        if n.hostname in old_ip and old_ip[n.hostname] != n.ip:
            out.append(Refusal("AddressUnchanged", f"node {n.hostname}: address {old_ip[n.hostname]} would become {n.ip}: "
                                                   "remove the node and add it under a new name"))
    return out


def _versions(cur: Plan, new: Plan) -> dict[str, tuple[str, str]]:
    pairs = {"kubernetes": (cur.kubernetes_version, new.kubernetes_version), "etcd": (cur.etcd_version, new.etcd_version),
             "containerd": (cur.containerd_version, new.containerd_version)}
    # "v3.6.6" and "3.6.6" name one release: the spec accepts both spellings.
    return {k: v for k, v in pairs.items() if v[0].lstrip("v") != v[1].lstrip("v")}


def removal_order(change: EtcdChange, unhealthy: frozenset[str] = frozenset()) -> list[str]:
    return sorted(change.removed, key=lambda h: (h not in unhealthy, h))


Unhealthy = Iterable[str] | Mapping[str, Iterable[str]]


def unhealthy_in(cluster: str, unhealthy: Unhealthy) -> frozenset[str]:
    """The hosts whose member of `cluster` is unhealthy: `unhealthy` names them per etcd cluster
    (`etcd_health.unhealthy_etcd_members`), or as bare hosts meaning any member they run."""
    if isinstance(unhealthy, Mapping):
        return frozenset(unhealthy.get(cluster, ()))
    return frozenset(unhealthy)


def removal_refusal(change: EtcdChange, unhealthy: frozenset[str] = frozenset()) -> Refusal | None:
    """Why `change` may not remove its members, or None. Adds run first, then removals, one
    member at a time, an unhealthy member first (it only takes from the quorum's margin): each
    removal must leave a cluster whose healthy members still make a quorum of its new size."""
    if not change.after:
        return Refusal("EtcdQuorum", f"{change.cluster}: removing every member would end the cluster")
    members = list(change.before) + list(change.added)
    for host in removal_order(change, unhealthy):
        members.remove(host)
        healthy = sum(1 for m in members if m not in unhealthy)
        if healthy < quorum(len(members)):
            return Refusal("EtcdQuorum", f"{change.cluster}: removing {host} leaves {healthy} healthy of "
                                         f"{len(members)} members, below a quorum of {quorum(len(members))}")
    return None


def etcd_changes(cur: Plan, new: Plan) -> list[EtcdChange]:
    """The etcd clusters (in both plans) whose members change."""
    before, after = _etcd_members(cur), _etcd_members(new)
    changes = [EtcdChange(name, before[name], after[name]) for name in sorted(before.keys() & after.keys())]
    return [ch for ch in changes if ch.added or ch.removed]


def _etcd_changes(cur: Plan, new: Plan, unhealthy: Unhealthy) -> tuple[list[EtcdChange], list[Refusal]]:
    changes = etcd_changes(cur, new)
    return changes, [r for ch in changes if (r := removal_refusal(ch, unhealthy_in(ch.cluster, unhealthy))) is not None]


def _cert_changes(cur: Plan, new: Plan) -> dict[str, tuple[str, ...]]:
    """Instances on nodes present in both plans whose names change (their SANs, subject), by id.

    Both sides at the current Kubernetes release: a subject kubeadm changes between releases
    (bke.core.pki.subjects) is the upgrader's to re-issue (its certificates step), so a version
    change alone stays an upgrade and is not mistaken for a certificate change to apply."""
    keep = {n.hostname for n in cur.nodes} & {n.hostname for n in new.nodes}
    release = cur.kubernetes_version
    a: dict[str, Instance] = {i.id: i for i in desired_instances(cur) if i.owner is None or i.owner in keep}
    b: dict[str, Instance] = {i.id: i for i in desired_instances(new, kubernetes=release)
                              if i.owner is None or i.owner in keep}
    out: dict[str, tuple[str, ...]] = {}
    for iid in sorted(a.keys() & b.keys()):
        x, y = a[iid], b[iid]
        what = [name for name, was, now in (("dns", x.dns, y.dns), ("ips", x.ips, y.ips), ("subject", (x.cn, x.o), (y.cn, y.o)),
                                        ("server", x.server, y.server)) if was != now]
        if what:
            out[iid] = tuple(what)
    return out


def _node_meta(n: NodePlan) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    return dict(n.labels), sorted((t.key, t.value, t.effect) for t in n.taints)


def _file_actions(changed: Iterable[NodeDiff], added: tuple[str, ...], removed: tuple[str, ...]) -> list[Action]:
    """The rolls of the components whose files change on a node that stays, and the addons'."""
    actions: list[Action] = []
    added_set = set(added)
    for d in sorted(changed, key=lambda d: d.hostname):
        if d.hostname in added_set or d.hostname in removed:
            continue  # a new node gets everything with its join; a removed one is reset
        comps = sorted({component_of(p) for p in (*d.added, *d.changed, *d.removed)})
        if d.hostname == "":
            actions.append(Action("apply-addons", "", ", ".join(d.added + d.changed)))
            continue
        for comp in comps:
            actions.append(Action("roll", d.hostname, comp))
    return actions


def diff_plans(current: Plan, desired: Plan, files: Iterable[NodeDiff] = (),
               unhealthy_etcd_members: Unhealthy = ()) -> ClusterDiff:
    """What applying `desired` over `current` changes. `files`: `diff_rendered` of both plans'
    renders (the caller renders; empty: no file changes known). `unhealthy_etcd_members`: the
    members the latest health round found unhealthy, per etcd cluster (or bare hostnames), for
    the quorum rule."""
    if not isinstance(unhealthy_etcd_members, Mapping):
        unhealthy_etcd_members = frozenset(unhealthy_etcd_members)  # read once per etcd cluster
    refusals = _structural_refusals(current, desired)
    versions = _versions(current, desired)
    old = {n.hostname: n for n in current.nodes}
    new = {n.hostname: n for n in desired.nodes}
    added = tuple(h for h in new if h not in old)
    removed = tuple(h for h in old if h not in new)
    roles = {h: (tuple(old[h].roles), tuple(new[h].roles)) for h in old.keys() & new.keys()
             if sorted(old[h].roles) != sorted(new[h].roles)}
    etcd, etcd_refusals = _etcd_changes(current, desired, unhealthy_etcd_members)
    if not any(r.name == "SplitUnchanged" for r in refusals):
        refusals += etcd_refusals
    certs = _cert_changes(current, desired)
    changed_files = tuple(d for d in files if not d.empty)

    actions: list[Action] = []
    for ch in etcd:
        for h in ch.added:
            actions.append(Action("etcd-add-learner", h, ch.cluster))
            actions.append(Action("etcd-promote", h, ch.cluster))
    owners: dict[str, list[str]] = {}
    for iid in certs:
        owner = iid.split("@", 1)[1] if "@" in iid else ""
        owners.setdefault(owner, []).append(iid)
    for owner in sorted(owners):
        actions.append(Action("reissue-certificates", owner, ", ".join(sorted(owners[owner]))))
    for h in added:
        actions.append(Action("join", h, ",".join(new[h].roles)))
    actions += _file_actions(changed_files, added, removed)
    for h in sorted(old.keys() & new.keys()):
        if _node_meta(old[h]) != _node_meta(new[h]):
            actions.append(Action("set-labels-taints", h))
    for ch in etcd:
        for h in removal_order(ch, unhealthy_in(ch.cluster, unhealthy_etcd_members)):
            actions.append(Action("etcd-remove-member", h, ch.cluster))
    for h in removed:
        actions += [Action("drain", h), Action("remove-node", h), Action("reset", h)]

    if versions and (actions or roles):
        refusals.append(Refusal("VersionsAlone", "versions change ("
                                + ", ".join(f"{k} {a} -> {b}" for k, a, b in ((k, *v) for k, v in versions.items()))
                                + ") together with other changes: upgrade first (`bke upgrade apply`), then apply the rest"))
    return ClusterDiff(cluster=desired.cluster, refusals=tuple(refusals), versions=versions, nodes_added=added,
                       nodes_removed=removed, roles_changed=roles, etcd=tuple(etcd), certificates=certs,
                       files=changed_files, actions=tuple(actions))


# Both sides of a diff share one VRRP password: keepalived.conf then differs only by real changes
# (the real one is the renderer's secret; a diff never shows file contents anyway).
_DIFF_ONLY_PASSWORD = "diffonly"


def render_diff(current: Plan, desired: Plan) -> list[NodeDiff]:
    """Both plans rendered (`bke.core.render`, pure and CPU-bound) and compared per node."""
    from bke.core.render.context import RenderInputs
    from bke.core.render.render import render_cluster
    from bke.core.render.result import diff_rendered

    inputs = RenderInputs(vrrp_password=_DIFF_ONLY_PASSWORD)
    return diff_rendered(render_cluster(current, inputs), render_cluster(desired, inputs))
