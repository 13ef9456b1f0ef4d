"""What a changed spec's run does, as data: each action kind of `bke.core.lifecycle.diff` has a
handler that turns its actions into node steps of the upgrader's run, or says why it cannot.

The run reuses the upgrade's machinery (`bke.core.upgrade.run`: fixed command ids, one record moved
forward only, pause between passes, `ReplaceFiles` with automatic rollback on the agent, drains,
the stored plan swapped by compare-and-swap at the end), so a roll here is exactly an upgrade
step restricted to the nodes where that component's files change. Steps run in the upgrade's
order (`bke.core.upgrade.order.ORDER`: etcd member by member, then each apiserver, controller-manager
and scheduler one node at a time, then containerd and kubelet on masters before workers), then
the addons, then labels and taints (through the API: a label needs a registered Node).

    apply_order(current, desired, diff) -> ApplyOrder(steps, refusals)

Nodes join and leave through the dispatcher (`JoinNodes`, `RemoveNodes`, sent by the run
with `partOf` so they run inside its operation slot): removals first, while the stored plan
still names the nodes (the dispatcher reads their roles and agents from it), then the new plan
is swapped in and the new nodes join (the dispatcher joins nodes the stored plan names), as
the run's last two steps. So an apply that only adds workers sends no command to any other node.
An etcd cluster whose members change gets its membership steps right after its snapshot, a new
member's node joining between its learner add and its promotion (`member_sequences`); a
control-plane component moved between masters starts where it goes before it stops where it
leaves. A master joining or leaving a cluster with a VIP endpoint changes the load balancer on
every master (`LB_STEP`): a leaving master's haproxy and keepalived stop first, then each other
master's roll, one at a time.

A kind without a handler refuses the whole apply, naming it (`NOT_BUILT`): an apply never does
half of a change. Pure: no I/O, no clock.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from bke.core.pki.instances import split_instance_id
from bke.core.pki.pod_certs import pod_of
from bke.core.plan import Plan
from bke.core.plan.models import NodePlan
from bke.core.spec.roles import CONTROL_PLANE_ROLES, is_master
from bke.core.upgrade.node_commands import stops_registering
from bke.core.upgrade.order import ExpandedStep
from .apply_members import (
    ETCD_ADD, ETCD_HEALTH, ETCD_PROMOTE, ETCD_REMOVE, MEMBER_NODE_STEPS, member_commands, member_group, member_join,
    parse_member_group,
)
from .apply_steps import (
    APPLY_STEPS, CERTS_STEP, CLEANUP_STEP, DRAIN_STEP, JOIN_STEP, LABELS_STEP, LB_STEP, MEMBERSHIP_BATCH, REMOVE_STEP,
    STATIC_PODS, UNREGISTER_STEP, StepWork, expand_work, node_runs,
)
from .diff import Action, ClusterDiff, Refusal, component_of
from .etcd_members import member_sequences

# the run's vocabulary (apply_steps, apply_members) with the handlers: what the upgrader imports
__all__ = ["APPLY_STEPS", "CLEANUP_STEP", "ETCD_ADD", "ETCD_HEALTH", "ETCD_PROMOTE", "ETCD_REMOVE", "HANDLERS", "JOIN_STEP",
           "LABELS_STEP", "LB_STEP", "MEMBER_NODE_STEPS", "MEMBERSHIP_BATCH", "NOT_BUILT", "REMOVE_STEP", "DRAIN_STEP", "UNREGISTER_STEP",
           "ApplyOrder", "StepWork",
           "apply_order", "member_commands", "member_group", "member_join", "parse_member_group", "role_change"]

_LB = ("haproxy", "keepalived")
MANIFESTS = "/etc/kubernetes/manifests"
_RUNTIME = ("kubelet", "containerd", "node-env")


@dataclass(frozen=True)
class ApplyOrder:
    steps: tuple[ExpandedStep, ...] = ()
    refusals: tuple[Refusal, ...] = ()


Handler = Callable[[Plan, Plan, ClusterDiff, tuple[Action, ...]], "list[StepWork] | list[Refusal]"]


def _removed_paths(diff: ClusterDiff, host: str) -> tuple[str, ...]:
    return next((d.removed for d in diff.files if d.hostname == host), ())


def _roll(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    """A component whose files change on a node: that component's upgrade step on that node."""
    etcd_of = {c.manifest.removesuffix(".yaml"): c.name for c in desired.etcd_clusters}
    work: list[StepWork] = []
    refusals: list[Refusal] = []
    for a in actions:
        comp, node = a.detail, desired.node(a.host)
        gone = [p for p in _removed_paths(diff, a.host) if component_of(p) == comp]
        # a node that runs less: its load balancer's and etcd members' files go in their own
        # steps, the node environment's it no longer needs (crictl's, the pod network's sysctls
        # on a node that stops registering) in the cleanup step
        sheds = (comp in _LB or comp in etcd_of or comp in _RUNTIME) and a.host in diff.roles_changed \
            and role_change(current, desired, a.host) in ("sheds", "moves")
        if gone and not (comp in STATIC_PODS and gone == [f"{MANIFESTS}/{comp}.yaml"]) and not sheds:
            # a control-plane component that leaves a master (its manifest removed: the kubelet
            # stops the static pod) is a move; any other file taken away is not built
            refusals.append(Refusal("NotBuilt", f"removing {', '.join(gone)} from {a.host} is not supported by this build yet"))
        elif comp in etcd_of and sheds and not node_runs(desired, a.host, etcd_of[comp]):
            continue  # a member that leaves its cluster: taken away by the cleanup step, once removed
        elif comp in etcd_of:
            work.append(StepWork("etcd", etcd_of[comp], (a.host,)))
            work.append(StepWork("etcd-snapshots", etcd_of[comp]))  # the cluster's snapshot first, as an upgrade does
        elif comp in STATIC_PODS:
            work.append(StepWork(comp, "", (a.host,)))
        elif comp in _RUNTIME:
            side = is_master(node.roles) or not node.registers  # masters and etcd-only nodes first
            work.append(StepWork("masters-runtime" if side else "workers", "", (a.host,)))
        elif comp in _LB:
            work.append(StepWork(LB_STEP, "", (a.host,)))
        else:  # certificates and kubeconfigs (sealed files: _reissue's)
            refusals.append(Refusal("NotBuilt", f"rolling {comp} on {a.host} is not supported by this build yet"))
    return refusals or work


def _reissue(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    """Certificates whose names change (an `apiServer.certSANs` entry added): re-issued by the
    certs service in the run's certificates step, each delivered with its static pod's roll on
    its node (the pod's manifest carries its certificates' names, bke.core.pki.pod_certs, so the same
    change rolls it). A certificate no static pod reads (kubelet.conf, admin.conf, a CA) would
    need a delivery of its own: not built. The certs service issues the stored plan's names, so
    the run stores its plan at that step, before any removal: a removal (which needs the stored
    plan to still name its nodes) in the same apply is refused."""
    rolled = {(a.host, a.detail) for a in diff.actions if a.kind == "roll"}
    manifest_of = {c.name: c.manifest.removesuffix(".yaml") for c in desired.etcd_clusters}
    etcd_names = tuple(manifest_of)
    refusals: list[Refusal] = []
    for a in actions:
        for iid in a.detail.split(", "):
            row, owner = split_instance_id(iid)
            pod = pod_of(row, etcd_names)
            carried = pod is not None and owner is not None and \
                (owner, manifest_of[pod[1]] if pod[0] == "etcd" else pod[0]) in rolled
            if not carried:
                refusals.append(Refusal("NotBuilt", f"re-issuing {iid} with its new names is not supported by this "
                                                    "build yet: only the certificates a static pod reads, rolled with it"))
    if diff.nodes_removed:
        refusals.append(Refusal("NotBuilt", "re-issuing certificates in the same apply as removing nodes ("
                                + ", ".join(diff.nodes_removed[:10]) + ") is not supported by this build yet: "
                                  "apply the removal first, then the new names"))
    return refusals or [StepWork(CERTS_STEP, "")]


def _labels(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    return [StepWork(LABELS_STEP)]


def _addons(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    return [StepWork("addons")]


_ETCD = ("etcd-data", "etcd-events", "etcd-pods")
_CONTROL = (*_ETCD, *STATIC_PODS)


def _control_plane(node: NodePlan) -> str:
    """What makes a node more than a worker ("" for a worker): its etcd or control-plane parts."""
    parts = [c for c in node.components if c in _CONTROL]
    return ", ".join(parts) or ("master" if is_master(node.roles) else "")


def _members_changing(diff: ClusterDiff, host: str, added: bool) -> bool:
    """Every etcd cluster `host` is a member of gains it (added) or loses it in this diff."""
    return any(host in (ch.added if added else ch.removed) for ch in diff.etcd)


def _node_change(plan: Plan, diff: ClusterDiff, actions: tuple[Action, ...], step: str,
                 added: bool) -> list[StepWork] | list[Refusal]:
    """Nodes that join (`added`) or leave: workers, etcd members and masters alike. What else
    changes with them is each other action's own: an etcd member's membership steps (below), the
    rolls of files that list them (an apiserver's --etcd-servers, haproxy's backends, keepalived's
    peers), certificates whose names change (a re-issue, or refused by name where not built), so a
    control-plane scale out or in is carried out only when nothing else it touches is refused."""
    hosts = list(dict.fromkeys(a.host for a in actions))
    if added:  # a new etcd member joins inside its cluster's membership steps, between add and promote
        hosts = [h for h in hosts if not (_control_plane(plan.node(h)) and _members_changing(diff, h, True))]
    return [StepWork(step, "", tuple(hosts))] if hosts else []


def _join(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    return _node_change(desired, diff, actions, JOIN_STEP, added=True)


def _remove(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    # drain, remove-node and reset of a node: the dispatcher's RemoveNodes does all three (an
    # etcd member's after the membership steps took it out of its cluster). A leaving master
    # that runs the load balancer stops it first, in the load-balancer step before the others'
    # roll: its keepalived gives the VIP up while the other masters still list it as a peer.
    out = _node_change(current, diff, actions, REMOVE_STEP, added=False)
    leaving = tuple(dict.fromkeys(a.host for a in actions if any(node_runs(current, a.host, c) for c in _LB)))
    return [*out, StepWork(LB_STEP, "", leaving)] if leaving and out else out


def _members(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    """An etcd cluster whose members change: a snapshot of it first, then its membership steps."""
    out: list[StepWork] = []
    for cluster in dict.fromkeys(a.detail for a in actions):
        out += [StepWork("etcd-snapshots", cluster), StepWork("etcd-members", cluster)]
    return out


# action kind -> handler. Kept in the order the diff emits kinds (bke.core.lifecycle.diff.diff_plans).
HANDLERS: dict[str, Handler] = {
    "etcd-add-learner": _members,
    "etcd-promote": _members,
    "join": _join,
    "roll": _roll,
    "reissue-certificates": _reissue,
    "apply-addons": _addons,
    "set-labels-taints": _labels,
    "drain": _remove,
    "remove-node": _remove,
    "reset": _remove,
    "etcd-remove-member": _members,
}
# Kinds the diff knows that this build cannot carry out yet: the apply is refused with this text.
NOT_BUILT: Mapping[str, str] = {}


_MOVABLE = frozenset(CONTROL_PLANE_ROLES.values())
# what a node may lose in place: a master's static pods and load balancer, its etcd members;
# and what goes with its Node object when its kubelet stops registering (a DaemonSet's pods)
_SHED = frozenset({*STATIC_PODS, *_LB, *_ETCD})
_NODE_OBJECT = frozenset({"kube-proxy"})
# the steps that roll a node's own files (a node that joins again gets them from its join)
_ROLLS = frozenset({"etcd", *STATIC_PODS, LB_STEP, "masters-runtime", "workers"})
# those of them that take a shedding master's parts away (their manifests, its load balancer)
_TAKES_AWAY = frozenset({*STATIC_PODS, LB_STEP})


def role_change(current: Plan, desired: Plan, host: str) -> str:
    """What a node's changed roles change in what it runs:
    - "same": nothing beyond control-plane components moved between masters (`_roll`'s moves)
      and how it is marked and configured (`master/node` -> `master`: its taint and kubelet
      configuration): rolls and the labels step, like any other changed file or mark;
    - "sheds": it runs less: a master that stops being one (its static pods and load balancer
      taken away: `_roll`, the load-balancer step), a member that leaves an etcd cluster
      (removed from it in the membership steps, then its pod and data taken away:
      `CLEANUP_STEP`), a node whose kubelet stops registering (a worker that is an etcd member
      becoming etcd-only: drained, its kubelet rolled to run standalone, its Node object deleted
      through the API: `UNREGISTER_STEP`; kube-proxy, a DaemonSet, leaves with the Node), or
      several of these; then the files it no longer needs (`CLEANUP_STEP`), after the certs
      service sealed its bundle again for the plan without them (the certificates step);
    - "gains": it keeps everything it runs and runs more (a worker becoming a master, a node
      becoming a member of an etcd cluster, of another one too, an etcd-only node whose kubelet
      starts registering): it joins again with its new roles (`_rejoin`);
    - "moves": it sheds parts as above and gains others (an etcd-data member moving to
      etcd-events, an etcd-only node becoming a worker, a worker becoming etcd-only, a master
      becoming a worker that is an etcd member, an etcd member becoming a master): both of the
      above. It joins again (inside the membership steps of a cluster it joins, else at the
      end), drained before (DRAIN_STEP) if its kubelet stops registering; its static pods and
      load balancer are taken away by their own steps as a shedding master's (`_rejoin` keeps
      them), the members it leaves are removed from their clusters after those clusters'
      additions, then the cleanup step;
    - "other": it would lose something no role change takes away (its kubelet, containerd):
      cannot happen with today's roles, refused if it ever does."""
    a, b = current.node(host), desired.node(host)
    if not ((set(a.components) ^ set(b.components)) - _MOVABLE) and a.registers == b.registers \
            and is_master(a.roles) == is_master(b.roles):
        return "same"
    lost, added = set(a.components) - set(b.components), set(b.components) - set(a.components)
    master_kept = is_master(a.roles) == is_master(b.roles)
    may_lose = _SHED | (_NODE_OBJECT if a.registers and not b.registers else frozenset())
    if not added and lost <= may_lose and a.registers >= b.registers and (master_kept or is_master(a.roles)):
        return "sheds"
    if not lost and b.registers >= a.registers and is_master(b.roles) >= is_master(a.roles):
        return "gains"
    if lost <= may_lose:
        return "moves"
    return "other"


def _rejoin(desired: Plan, diff: ClusterDiff, work: list[StepWork], gained: tuple[str, ...],
            shedding: frozenset[str] = frozenset()) -> list[StepWork]:
    """Nodes whose new roles add parts join again, as a new node would, through the dispatcher
    (its phases are ensures: the files a node has already are left alone, the new ones written,
    its certificates issued and sealed for the plan that names its new roles, its new
    components waited healthy, its labels applied): the join, or its start inside the
    membership steps of an etcd cluster it becomes a member of. So none of its own files is
    rolled as well, except what a node that also sheds parts (`shedding`, "moves") stops running:
    its static pods' and load balancer's steps take them away (a join never does); the other
    nodes' rolls (an apiserver's --etcd-servers, haproxy's backends) stay, before the join as for
    a new node."""
    drop = set(gained)
    out = [StepWork(w.name, w.group, tuple(h for h in w.hosts if h not in drop
                                           or (h in shedding and w.name in _TAKES_AWAY)))
           if w.name in _ROLLS else w for w in work]
    out = [w for w in out if not (w.name in _ROLLS and not w.hosts)]
    joining = tuple(h for h in gained if not _members_changing(diff, h, True))
    return out + [StepWork(JOIN_STEP, "", joining)] if joining else out


def apply_order(current: Plan, desired: Plan, diff: ClusterDiff, max_unavailable: str | None = None) -> ApplyOrder:
    """The run's steps for `diff`, or every reason it cannot run: kinds not built, roles
    changed, components that cannot be rolled. A diff with refusals of its own has no order
    (they are the caller's to answer: a split etcd added, say)."""
    if diff.refused:
        return ApplyOrder()
    refusals: list[Refusal] = []
    kinds = {h: role_change(current, desired, h) for h in diff.roles_changed}
    fixed = sorted(h for h, k in kinds.items() if k == "other")
    gained = tuple(h for h in (n.hostname for n in desired.nodes) if kinds.get(h) in ("gains", "moves"))
    shed = tuple(h for h in (n.hostname for n in desired.nodes) if kinds.get(h) in ("sheds", "moves"))
    if shed and diff.nodes_removed:  # the certificates step stores the plan, which the removal must not see yet
        refusals.append(Refusal("NotBuilt", f"a node that runs less in place ({', '.join(shed)}) in the same apply as "
                                            f"removing nodes ({', '.join(diff.nodes_removed[:10])}) is not supported "
                                            "by this build yet: apply the removal first"))
    if fixed:  # a part no role change takes away: the roles table grew a kind this code does not know
        refusals.append(Refusal("NotBuilt", "changing a node's roles (" + ", ".join(fixed)
                                + ") so that it stops running its kubelet or container runtime is not supported "
                                  "by this build: apply the spec without the node (it is drained, removed and "
                                  "reset), then with its new roles"))
    by_kind: dict[str, list[Action]] = {}
    for a in diff.actions:
        by_kind.setdefault(a.kind, []).append(a)
    work: list[StepWork] = []
    for kind, actions in by_kind.items():
        handler = HANDLERS.get(kind)
        if handler is None:
            message = NOT_BUILT.get(kind, f"action {kind!r} is not supported by this build yet")
            hosts = sorted({a.host for a in actions if a.host})
            refusals.append(Refusal("NotBuilt", f"{kind} ({', '.join(hosts[:10]) or 'the cluster'}): {message}"))
            continue
        out = handler(current, desired, diff, tuple(actions))
        if out and isinstance(out[0], Refusal):
            refusals += [r for r in out if isinstance(r, Refusal)]
        else:
            work += [w for w in out if isinstance(w, StepWork)]
    sequences = {seq.etcd_cluster: seq for seq in member_sequences(current, desired)}
    refusals += [r for seq in sequences.values() for r in seq.refusals]
    if refusals:
        return ApplyOrder(refusals=tuple(dict.fromkeys(refusals)))
    if gained:
        work = _rejoin(desired, diff, work, gained, frozenset(h for h, k in kinds.items() if k == "moves"))
    if shed:  # its bundle sealed again without what it no longer runs, then those files taken away
        work += [StepWork(CERTS_STEP, ""), StepWork(CLEANUP_STEP, "", shed)]
        unregistered = tuple(h for h in shed if stops_registering(current, desired, h))
        if unregistered:  # drained first; its runtime rolled standalone; its Node deleted last
            work += [StepWork(DRAIN_STEP, "", unregistered), StepWork("masters-runtime", "", unregistered),
                     StepWork(UNREGISTER_STEP, "", unregistered)]
    if not work:
        return ApplyOrder()
    return ApplyOrder(steps=tuple(expand_work(current, desired, work, max_unavailable, sequences)))
