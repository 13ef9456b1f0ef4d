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
from typing import Any, Callable, Mapping

from bke.core.pki.instances import split_instance_id
from bke.core.pki.pod_certs import pod_of
from bke.core.plan import Plan
from bke.core.plan.models import NodePlan
from bke.core.node_steps import health_steps
from bke.core.spec.roles import CONTROL_PLANE_ROLES, is_master
from bke.core.upgrade.node_commands import CLEANUP_STEP, LB_STEP, stops_registering
from bke.core.upgrade.order import MAX_UNAVAILABLE, MEMBER_BY_MEMBER, ONE_AT_A_TIME, ORDER, ExpandedStep, Step, parse_max_unavailable
from bke.core.upgrade.run import DRAIN_STEP, UNREGISTER_STEP
from .diff import Action, ClusterDiff, Refusal, component_of
from .etcd_members import MemberSequence, MemberStep, agent_step, member_sequences

__all__ = ["APPLY_STEPS", "CLEANUP_STEP", "ETCD_ADD", "ETCD_HEALTH", "ETCD_PROMOTE", "ETCD_REMOVE", "HANDLERS", "JOIN_STEP",
           "LABELS_STEP", "LB_STEP", "MEMBER_NODE_STEPS", "MEMBERSHIP_BATCH", "NOT_BUILT", "REMOVE_STEP", "DRAIN_STEP", "UNREGISTER_STEP",
           "ApplyOrder", "StepWork",
           "apply_order", "member_commands", "member_group", "member_join", "parse_member_group"]

LABELS_STEP = "labels"
CERTS_STEP = "certificates"
REMOVE_STEP = "remove-nodes"
JOIN_STEP = "join-nodes"
# The run's steps, in order: the upgrade's node steps (ORDER) between the record conversion
# (pre-checks, local) and the two cluster-wide steps done through the API, then the removals
# and the joins (each a request to the dispatcher).
# A node whose kubelet stops registering is cordoned and drained before anything touches it
# (DRAIN_STEP: a join inside the membership steps may write its standalone configuration); a node
# that runs less in place (`role_change` "sheds") is cleaned up once its components are rolled
# (CLEANUP_STEP: a standalone kubelet no longer reads kubelet.conf), and the Node object of one
# whose kubelet stopped registering is deleted after that (UNREGISTER_STEP).
APPLY_STEPS: tuple[str, ...] = ("pre-checks", "etcd-snapshots", CERTS_STEP, DRAIN_STEP, "etcd-members", "etcd", "kube-apiserver", "kube-controller-manager",
                                "kube-scheduler", LB_STEP, "masters-runtime", "workers", CLEANUP_STEP, UNREGISTER_STEP,
                                "addons", LABELS_STEP, REMOVE_STEP, JOIN_STEP)
MEMBERSHIP_BATCH = 1000  # nodes per JoinNodes / RemoveNodes (the contract's MAX_NODES)
# An etcd cluster's membership changes (bke.core.lifecycle.etcd_members.member_sequences), one run
# step per membership step, each of group "<etcd cluster>:<member>": the member added as a
# learner (a command to a member that stays), its node joined (JOIN_STEP, the dispatcher's, with
# the member's initial cluster), promoted, every member's health waited for; removals the same
# way. Right after the cluster's snapshot, before any roll (the rolls then see the new members).
ETCD_ADD, ETCD_PROMOTE, ETCD_REMOVE, ETCD_HEALTH = "etcd-member-add", "etcd-member-promote", "etcd-member-remove", "etcd-health"
MEMBER_NODE_STEPS = frozenset({ETCD_ADD, ETCD_PROMOTE, ETCD_REMOVE, ETCD_HEALTH})
_MEMBER_STEP = {"add-learner": ETCD_ADD, "start-member": JOIN_STEP, "promote": ETCD_PROMOTE,
                "check-health": ETCD_HEALTH, "remove-member": ETCD_REMOVE}


def member_group(etcd_cluster: str, member: str) -> str:
    return f"{etcd_cluster}:{member}"


def parse_member_group(group: str) -> tuple[str, str]:
    """(etcd cluster, member) of a membership step's group; ("", "") for another step's group."""
    cluster, _, member = group.partition(":")
    return (cluster, member) if member else ("", "")
# The control-plane load balancer (haproxy + keepalived on every master, for a VIP endpoint):
# haproxy.cfg lists every apiserver and keepalived.conf every master (its unicast peers, and
# priorities that depend on how many there are), so a master joining or leaving changes both on
# every master. One master at a time, like the static pods: the VIP and the other masters'
# haproxy keep serving while one restarts. Before the removals (a leaving master's apiserver
# leaves every load balancer before it stops) and before the joins (a backend that is not there
# yet is only marked down by haproxy's check until it answers).
_LB_ROW = Step(LB_STEP, "haproxy and keepalived on every master whose backends or VRRP peers change, one at a time",
               ONE_AT_A_TIME, lambda p: p.nodes_running("keepalived"), lambda c: False)
# A master that stops being one (`role_change` "sheds"): once its static pods and load balancer
# are gone, the certificates and kubeconfigs only a master holds (the apiserver's keys, the
# service-account key, admin.conf, ...) are taken off it, one node at a time.
_CLEANUP_ROW = Step(CLEANUP_STEP, "the files a master held and a worker does not, taken away, one node at a time",
                    ONE_AT_A_TIME, lambda p: [], lambda c: False)
_ROW = {**{s.name: s for s in ORDER}, LB_STEP: _LB_ROW, CLEANUP_STEP: _CLEANUP_ROW}
_LB = ("haproxy", "keepalived")
_STATIC_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
MANIFESTS = "/etc/kubernetes/manifests"
_RUNTIME = ("kubelet", "containerd", "node-env")


@dataclass(frozen=True)
class StepWork:
    """Part of a step: these hosts (in the plan's order) take step `name` (of etcd cluster `group`)."""

    name: str
    group: str = ""
    hosts: tuple[str, ...] = ()


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
        if gone and not (comp in _STATIC_PODS and gone == [f"{MANIFESTS}/{comp}.yaml"]) and not sheds:
            # a control-plane component that leaves a master (its manifest removed: the kubelet
            # stops the static pod) is a move; any other file taken away is not built
            refusals.append(Refusal("NotBuilt", f"removing {', '.join(gone)} from {a.host} is not supported by this build yet"))
        elif comp in etcd_of and sheds and not _runs(desired, a.host, etcd_of[comp]):
            continue  # a member that leaves its cluster: taken away by the cleanup step, once removed
        elif comp in etcd_of:
            work.append(StepWork("etcd", etcd_of[comp], (a.host,)))
            work.append(StepWork("etcd-snapshots", etcd_of[comp]))  # the cluster's snapshot first, as an upgrade does
        elif comp in _STATIC_PODS:
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


def _runs(plan: Plan, host: str, component: str) -> bool:
    node = plan.node_index[1].get(host)
    return node is not None and node.runs(component)


def _labels(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    return [StepWork(LABELS_STEP)]


def _addons(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    return [StepWork("addons")]


_ETCD = ("etcd-data", "etcd-events", "etcd-pods")
_CONTROL = (*_ETCD, *_STATIC_PODS)


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
    leaving = tuple(dict.fromkeys(a.host for a in actions if any(_runs(current, a.host, c) for c in _LB)))
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
_SHED = frozenset({*_STATIC_PODS, *_LB, *_ETCD})
_NODE_OBJECT = frozenset({"kube-proxy"})
# the steps that roll a node's own files (a node that joins again gets them from its join)
_ROLLS = frozenset({"etcd", *_STATIC_PODS, LB_STEP, "masters-runtime", "workers"})
# those of them that take a shedding master's parts away (their manifests, its load balancer)
_TAKES_AWAY = frozenset({*_STATIC_PODS, LB_STEP})


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


def _chunks(hosts: list[str], size: int) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(hosts[i:i + size]) for i in range(0, len(hosts), size))


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
    return ApplyOrder(steps=tuple(_expand(current, desired, work, max_unavailable, sequences)))


def _member_step(old: Plan, new: Plan, group: str, kind: str) -> MemberStep:
    cluster, member = parse_member_group(group)
    seq = next((q for q in member_sequences(old, new) if q.etcd_cluster == cluster), None)
    found = next((m for m in seq.steps if m.kind == kind and m.member == member), None) if seq else None
    if found is None:
        raise KeyError(f"no {kind} of {member} in the membership changes of {cluster}")
    return found


def member_commands(step: str, group: str, old: Plan, new: Plan, host: str, health_timeout_s: float) -> list[Any]:
    """The agent steps of a membership step (MEMBER_NODE_STEPS) for `host`, from the same
    sequence `apply_order` laid out (both plans in, deterministic): EtcdMemberAdd, -Promote or
    -Remove on the member asked, or every member's WaitHealth of that etcd cluster."""
    cluster, _ = parse_member_group(group)
    if step == ETCD_HEALTH:
        plan = new if host in new.node_index[1] else old
        return health_steps(plan, plan.node(host), (cluster,), health_timeout_s)
    kind = {ETCD_ADD: "add-learner", ETCD_PROMOTE: "promote", ETCD_REMOVE: "remove-member"}[step]
    ms = _member_step(old, new, group, kind)
    ec = old.etcd_cluster(cluster)  # the member asked stays: it is in both plans
    assert ec is not None and ms.run_on == host
    return [agent_step(ms, ec)]


def member_join(old: Plan, new: Plan, group: str) -> list[tuple[str, str, str]]:
    """(etcd cluster, member, initial cluster) of a new member's join, for each etcd cluster
    the node starts a member of (one join: `_member_steps`): the member list each starts with
    (`--initial-cluster-state=existing`)."""
    first = _member_step(old, new, group, "start-member")
    starts = [m for seq in member_sequences(old, new) for m in seq.steps
              if m.kind == "start-member" and m.member == first.member]
    return [(m.etcd_cluster, m.member, m.initial_cluster) for m in starts]


def _expanded(m: MemberStep, group: str = "") -> ExpandedStep:
    hosts = m.healthy if m.kind == "check-health" else ((m.member,) if m.kind == "start-member" else (m.run_on,))
    return ExpandedStep(_MEMBER_STEP[m.kind], group or member_group(m.etcd_cluster, m.member), (tuple(hosts),))


def _member_steps(sequences: list[MemberSequence]) -> list[ExpandedStep]:
    """Every etcd cluster's membership steps, cluster after cluster; a node that joins several
    of them (`etcd_members.joint_members`: last among each cluster's additions) is added as a
    learner in each, joined once (its join step names the first cluster's group, and the join
    carries its start in every one: `member_join`), then promoted and checked in each, before
    any cluster's removals."""
    starts = [m.member for seq in sequences for m in seq.steps if m.kind == "start-member"]
    joint = {h for h in starts if starts.count(h) > 1}
    if not joint:
        return [_expanded(m) for seq in sequences for m in seq.steps]
    out: list[ExpandedStep] = []
    for seq in sequences:  # everything before the first joint member's learner
        for m in seq.steps:
            if m.member in joint or m.kind == "remove-member":
                break
            out.append(_expanded(m))
    order = [h for h in dict.fromkeys(m.member for seq in sequences for m in seq.steps if m.member in joint)]
    for host in order:
        mine = [(seq, [m for m in seq.steps if m.member == host and m.kind != "remove-member"]) for seq in sequences]
        mine = [(seq, steps) for seq, steps in mine if steps]
        out += [_expanded(m) for _, steps in mine for m in steps if m.kind == "add-learner"]
        first = member_group(mine[0][0].etcd_cluster, host)
        out += [_expanded(m, first) for m in mine[0][1] if m.kind == "start-member"]
        out += [_expanded(m) for _, steps in mine for m in steps if m.kind in ("promote", "check-health")]
    for seq in sequences:  # then each cluster's removals
        start = next((i for i, m in enumerate(seq.steps) if m.kind == "remove-member"), len(seq.steps))
        out += [_expanded(m) for m in seq.steps[start:]]
    return out


def _expand(current: Plan, desired: Plan, work: list[StepWork], max_unavailable: str | None,
            sequences: Mapping[str, MemberSequence]) -> list[ExpandedStep]:
    # the plan's order; a removed node (only in the current plan) after the others
    rank = {n.hostname: i for i, n in enumerate(desired.nodes)}
    rank.update({n.hostname: len(rank) + i for i, n in enumerate(current.nodes) if n.hostname not in rank})
    wanted: dict[tuple[str, str], set[str]] = {}
    for w in work:
        wanted.setdefault((w.name, w.group), set()).update(w.hosts)
    out = [ExpandedStep("pre-checks", "", ())]  # the stored records in their current form first
    etcd_order = {c.name: i for i, c in enumerate(desired.etcd_clusters)}
    for name in APPLY_STEPS[1:]:
        keys = sorted((k for k in wanted if k[0] == name), key=lambda k: etcd_order.get(k[1], -1))
        for key in keys:
            group = key[1]
            if name == "etcd-snapshots":  # taken from a member of the cluster as it runs now
                cluster = current.etcd_cluster(group)
                assert cluster is not None
                out.append(ExpandedStep(name, group, ((cluster.members[0].hostname,),)))
                continue
            if name == "etcd-members":  # every cluster's at once (a node may join several)
                if keys[0] == key:
                    out += _member_steps([sequences[k[1]] for k in keys])
                continue
            hosts = sorted(wanted[key], key=lambda h: rank[h])
            if not hosts:  # a cluster-wide step: the addons, the labels
                out.append(ExpandedStep(name, group, ()))
                continue
            if name in (REMOVE_STEP, JOIN_STEP, DRAIN_STEP, UNREGISTER_STEP):  # one request per batch, every node at once
                out.append(ExpandedStep(name, group, _chunks(hosts, MEMBERSHIP_BATCH)))
                continue
            if name in _STATIC_PODS:  # a moved component starts where it goes before it stops where it leaves
                hosts.sort(key=lambda h: (h in current.node_index[1] and not _runs(desired, h, name), rank[h]))
            if name == LB_STEP:  # the load balancers that stop go before the others change
                hosts.sort(key=lambda h: (_runs(desired, h, "keepalived") or _runs(desired, h, "haproxy"), rank[h]))
            row = _ROW[name]
            size = parse_max_unavailable(max_unavailable, len(hosts)) if row.batching == MAX_UNAVAILABLE else 1
            assert row.batching in (MAX_UNAVAILABLE, MEMBER_BY_MEMBER) or size == 1
            out.append(ExpandedStep(name, group, _chunks(hosts, size), row.drain))
    return out
