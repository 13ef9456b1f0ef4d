"""What a changed spec's run does, as data: each action kind of `bke.lifecycle.diff` has a
handler that turns its actions into node steps of the upgrader's run, or says why it cannot.

The run reuses the upgrade's machinery (`bke.upgrade.run`: fixed command ids, one record moved
forward only, pause between passes, `ReplaceFiles` with automatic rollback on the agent, drains,
the stored plan swapped by compare-and-swap at the end), so a roll here is exactly an upgrade
step restricted to the nodes where that component's files change. Steps run in the upgrade's
order (`bke.upgrade.order.ORDER`: etcd member by member, then each apiserver, controller-manager
and scheduler one node at a time, then containerd and kubelet on masters before workers), then
the addons, then labels and taints (through the API: a label needs a registered Node).

    apply_order(current, desired, diff) -> ApplyOrder(steps, refusals)

Workers join and leave through the dispatcher (`JoinNodes`, `RemoveNodes`, sent by the run
with `partOf` so they run inside its operation slot): removals first, while the stored plan
still names the nodes (the dispatcher reads their roles and agents from it), then the new plan
is swapped in and the new workers join (the dispatcher joins nodes the stored plan names), as
the run's last two steps. So an apply that only adds workers sends no command to any other node.

A kind without a handler refuses the whole apply, naming it (`NOT_BUILT`): an apply never does
half of a change. Pure: no I/O, no clock.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from ..plan import Plan
from ..plan.models import NodePlan
from ..spec.roles import is_master
from ..upgrade.order import MAX_UNAVAILABLE, MEMBER_BY_MEMBER, ORDER, ExpandedStep, parse_max_unavailable
from .diff import Action, ClusterDiff, Refusal, component_of

__all__ = ["APPLY_STEPS", "HANDLERS", "JOIN_STEP", "LABELS_STEP", "MEMBERSHIP_BATCH", "NOT_BUILT", "REMOVE_STEP",
           "ApplyOrder", "StepWork", "apply_order"]

LABELS_STEP = "labels"
REMOVE_STEP = "remove-nodes"
JOIN_STEP = "join-nodes"
# The run's steps, in order: the upgrade's node steps (ORDER) between the record conversion
# (pre-checks, local) and the two cluster-wide steps done through the API, then the removals
# and the joins (each a request to the dispatcher).
APPLY_STEPS: tuple[str, ...] = ("pre-checks", "etcd-snapshots", "etcd", "kube-apiserver", "kube-controller-manager",
                                "kube-scheduler", "masters-runtime", "workers", "addons", LABELS_STEP, REMOVE_STEP,
                                JOIN_STEP)
MEMBERSHIP_BATCH = 1000  # nodes per JoinNodes / RemoveNodes (the contract's MAX_NODES)
_ROW = {s.name: s for s in ORDER}
_STATIC_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
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
        if gone:  # ReplaceFiles writes files; taking one away is not one of its moves
            refusals.append(Refusal("NotBuilt", f"removing {', '.join(gone)} from {a.host} is not supported by this build yet"))
        elif comp in etcd_of:
            work.append(StepWork("etcd", etcd_of[comp], (a.host,)))
            work.append(StepWork("etcd-snapshots", etcd_of[comp]))  # the cluster's snapshot first, as an upgrade does
        elif comp in _STATIC_PODS:
            work.append(StepWork(comp, "", (a.host,)))
        elif comp in _RUNTIME:
            side = is_master(node.roles) or not node.registers  # masters and etcd-only nodes first
            work.append(StepWork("masters-runtime" if side else "workers", "", (a.host,)))
        else:  # haproxy, keepalived (its VRRP secret), certificates and kubeconfigs (sealed files)
            refusals.append(Refusal("NotBuilt", f"rolling {comp} on {a.host} is not supported by this build yet"))
    return refusals or work


def _labels(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    return [StepWork(LABELS_STEP)]


def _addons(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    return [StepWork("addons")]


_CONTROL = ("etcd-data", "etcd-events", "etcd-pods", *_STATIC_PODS)


def _control_plane(node: NodePlan) -> str:
    """What makes a node more than a worker ("" for a worker): its etcd or control-plane parts."""
    parts = [c for c in node.components if c in _CONTROL]
    return ", ".join(parts) or ("master" if is_master(node.roles) else "")


def _workers_only(plan: Plan, actions: tuple[Action, ...], step: str, what: str) -> list[StepWork] | list[Refusal]:
    hosts = list(dict.fromkeys(a.host for a in actions))
    refused = [f"{h} ({parts})" for h in hosts if (parts := _control_plane(plan.node(h)))]
    if refused:
        return [Refusal("NotBuilt", f"{what} etcd members and control-plane nodes ({', '.join(refused[:10])}) "
                                    "is not supported by this build yet: only workers")]
    return [StepWork(step, "", tuple(hosts))]


def _join(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    return _workers_only(desired, actions, JOIN_STEP, "adding")


def _remove(current: Plan, desired: Plan, diff: ClusterDiff, actions: tuple[Action, ...]) -> list[StepWork] | list[Refusal]:
    # drain, remove-node and reset of a node: the dispatcher's RemoveNodes does all three
    return _workers_only(current, actions, REMOVE_STEP, "removing")


# action kind -> handler. Kept in the order the diff emits kinds (bke.lifecycle.diff.diff_plans).
HANDLERS: dict[str, Handler] = {
    "join": _join,
    "roll": _roll,
    "apply-addons": _addons,
    "set-labels-taints": _labels,
    "drain": _remove,
    "remove-node": _remove,
    "reset": _remove,
}
# Kinds the diff knows that this build cannot carry out yet: the apply is refused with this text.
NOT_BUILT: Mapping[str, str] = {
    "etcd-add-learner": "adding etcd members is not supported by this build yet",
    "etcd-promote": "adding etcd members is not supported by this build yet",
    "reissue-certificates": "re-issuing certificates whose names change is not supported by this build yet",
    "etcd-remove-member": "removing etcd members is not supported by this build yet",
}


def _chunks(hosts: list[str], size: int) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(hosts[i:i + size]) for i in range(0, len(hosts), size))


def apply_order(current: Plan, desired: Plan, diff: ClusterDiff, max_unavailable: str | None = None) -> ApplyOrder:
    """The run's steps for `diff` (whose refusals the caller has already answered), or every
    reason it cannot run: kinds not built, roles changed, components that cannot be rolled."""
    refusals: list[Refusal] = []
    if diff.roles_changed:
        refusals.append(Refusal("NotBuilt", "changing a node's roles (" + ", ".join(sorted(diff.roles_changed))
                                + ") is not supported by this build yet"))
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
    if refusals:
        return ApplyOrder(refusals=tuple(dict.fromkeys(refusals)))
    if not work:
        return ApplyOrder()
    return ApplyOrder(steps=tuple(_expand(current, desired, work, max_unavailable)))


def _expand(current: Plan, desired: Plan, work: list[StepWork], max_unavailable: str | None) -> list[ExpandedStep]:
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
            if name == "etcd-snapshots":
                cluster = desired.etcd_cluster(group)
                assert cluster is not None
                out.append(ExpandedStep(name, group, ((cluster.members[0].hostname,),)))
                continue
            hosts = sorted(wanted[key], key=lambda h: rank[h])
            if not hosts:  # a cluster-wide step: the addons, the labels
                out.append(ExpandedStep(name, group, ()))
                continue
            if name in (REMOVE_STEP, JOIN_STEP):  # one dispatcher request per batch, every node at once
                out.append(ExpandedStep(name, group, _chunks(hosts, MEMBERSHIP_BATCH)))
                continue
            row = _ROW[name]
            size = parse_max_unavailable(max_unavailable, len(hosts)) if row.batching == MAX_UNAVAILABLE else 1
            assert row.batching in (MAX_UNAVAILABLE, MEMBER_BY_MEMBER) or size == 1
            out.append(ExpandedStep(name, group, _chunks(hosts, size), row.drain))
    return out
