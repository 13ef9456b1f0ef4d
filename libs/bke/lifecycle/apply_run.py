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

A kind without a handler refuses the whole apply, naming it (`NOT_BUILT`): an apply never does
half of a change. The helpers building joins, etcd membership, certificate re-issue and removals
add their handler to `HANDLERS` and drop the kind from `NOT_BUILT`. Pure: no I/O, no clock.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from ..plan import Plan
from ..spec.roles import is_master
from ..upgrade.order import MAX_UNAVAILABLE, MEMBER_BY_MEMBER, ORDER, ExpandedStep, parse_max_unavailable
from .diff import Action, ClusterDiff, Refusal, component_of

__all__ = ["APPLY_STEPS", "HANDLERS", "LABELS_STEP", "NOT_BUILT", "ApplyOrder", "StepWork", "apply_order"]

LABELS_STEP = "labels"
# The run's steps, in order: the upgrade's node steps (ORDER) between the record conversion
# (pre-checks, local) and the two cluster-wide steps done through the API.
APPLY_STEPS: tuple[str, ...] = ("pre-checks", "etcd-snapshots", "etcd", "kube-apiserver", "kube-controller-manager",
                                "kube-scheduler", "masters-runtime", "workers", "addons", LABELS_STEP)
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


# action kind -> handler. Kept in the order the diff emits kinds (bke.lifecycle.diff.diff_plans).
HANDLERS: dict[str, Handler] = {
    "roll": _roll,
    "apply-addons": _addons,
    "set-labels-taints": _labels,
}
# Kinds the diff knows that this build cannot carry out yet: the apply is refused with this text.
NOT_BUILT: Mapping[str, str] = {
    "etcd-add-learner": "adding etcd members is not supported by this build yet",
    "etcd-promote": "adding etcd members is not supported by this build yet",
    "reissue-certificates": "re-issuing certificates whose names change is not supported by this build yet",
    "join": "adding nodes is not supported by this build yet",
    "etcd-remove-member": "removing etcd members is not supported by this build yet",
    "drain": "removing nodes is not supported by this build yet",
    "remove-node": "removing nodes is not supported by this build yet",
    "reset": "removing nodes is not supported by this build yet",
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
    return ApplyOrder(steps=tuple(_expand(desired, work, max_unavailable)))


def _expand(desired: Plan, work: list[StepWork], max_unavailable: str | None) -> list[ExpandedStep]:
    rank = {n.hostname: i for i, n in enumerate(desired.nodes)}
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
            row = _ROW[name]
            size = parse_max_unavailable(max_unavailable, len(hosts)) if row.batching == MAX_UNAVAILABLE else 1
            assert row.batching in (MAX_UNAVAILABLE, MEMBER_BY_MEMBER) or size == 1
            out.append(ExpandedStep(name, group, _chunks(hosts, size), row.drain))
    return out
