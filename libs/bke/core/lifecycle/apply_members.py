"""An etcd cluster's membership changes as steps of a changed spec's run (the order is
bke.core.lifecycle.etcd_members.member_sequences'): one run step per membership step, each of group
"<etcd cluster>:<member>": the member added as a learner (a command to a member that stays), its
node joined (the join step, the dispatcher's, with the member's initial cluster), promoted, every
member's health waited for; removals the same way. Right after the cluster's snapshot, before
any roll (the rolls then see the new members). Pure: no I/O, no clock.

    member_steps(sequences) -> the run's steps      member_commands(step, ...) -> a node's agent steps
"""
from __future__ import annotations

from typing import Any

from bke.core.node_steps import health_steps
from bke.core.plan import Plan
from bke.core.upgrade.order import ExpandedStep
from bke.core.upgrade.steps import StepKind
from .etcd_members import MemberSequence, MemberStep, agent_step, member_sequences

__all__ = ["ETCD_ADD", "ETCD_HEALTH", "ETCD_PROMOTE", "ETCD_REMOVE", "MEMBER_NODE_STEPS", "member_commands",
           "member_group", "member_join", "member_steps", "parse_member_group"]

ETCD_ADD, ETCD_PROMOTE, ETCD_REMOVE, ETCD_HEALTH = (StepKind.ETCD_MEMBER_ADD, StepKind.ETCD_MEMBER_PROMOTE,
                                                    StepKind.ETCD_MEMBER_REMOVE, StepKind.ETCD_HEALTH)
# the membership steps that are commands to agents (a new member's start is the join step's)
MEMBER_NODE_STEPS = frozenset({ETCD_ADD, ETCD_PROMOTE, ETCD_REMOVE, ETCD_HEALTH})
# the kind of an etcd_members.MemberStep each step carries out (and back, for the node steps)
_MEMBER_STEP = {"add-learner": ETCD_ADD, "start-member": StepKind.JOIN_NODES, "promote": ETCD_PROMOTE,
                "check-health": ETCD_HEALTH, "remove-member": ETCD_REMOVE}
_MEMBER_KIND = {ETCD_ADD: "add-learner", ETCD_PROMOTE: "promote", ETCD_REMOVE: "remove-member"}


def member_group(etcd_cluster: str, member: str) -> str:
    return f"{etcd_cluster}:{member}"


def parse_member_group(group: str) -> tuple[str, str]:
    """(etcd cluster, member) of a membership step's group; ("", "") for another step's group."""
    cluster, _, member = group.partition(":")
    return (cluster, member) if member else ("", "")


def _member_step(old: Plan, new: Plan, group: str, kind: str) -> MemberStep:
    cluster, member = parse_member_group(group)
    seq = next((q for q in member_sequences(old, new) if q.etcd_cluster == cluster), None)
    found = next((m for m in seq.steps if m.kind == kind and m.member == member), None) if seq else None
    if found is None:
        raise KeyError(f"no {kind} of {member} in the membership changes of {cluster}")
    return found


def member_commands(step: str, group: str, old: Plan, new: Plan, host: str, health_timeout_s: float) -> list[Any]:
    """The agent steps of a membership step (MEMBER_NODE_STEPS) for `host`, from the same
    sequence `apply_run.apply_order` laid out (both plans in, deterministic): EtcdMemberAdd, -Promote or
    -Remove on the member asked, or every member's WaitHealth of that etcd cluster."""
    cluster, _ = parse_member_group(group)
    if step == ETCD_HEALTH:
        plan = new if host in new.node_index[1] else old
        return health_steps(plan, plan.node(host), (cluster,), health_timeout_s)
    kind = _MEMBER_KIND[StepKind(step)]
    ms = _member_step(old, new, group, kind)
    ec = old.etcd_cluster(cluster)  # the member asked stays: it is in both plans
    assert ec is not None and ms.run_on == host
    return [agent_step(ms, ec)]


def member_join(old: Plan, new: Plan, group: str) -> list[tuple[str, str, str]]:
    """(etcd cluster, member, initial cluster) of a new member's join, for each etcd cluster
    the node starts a member of (one join: `member_steps`): the member list each starts with
    (`--initial-cluster-state=existing`)."""
    first = _member_step(old, new, group, "start-member")
    starts = [m for seq in member_sequences(old, new) for m in seq.steps
              if m.kind == "start-member" and m.member == first.member]
    return [(m.etcd_cluster, m.member, m.initial_cluster) for m in starts]


def _expanded(m: MemberStep, group: str = "") -> ExpandedStep:
    hosts = m.healthy if m.kind == "check-health" else ((m.member,) if m.kind == "start-member" else (m.run_on,))
    return ExpandedStep(_MEMBER_STEP[m.kind], group or member_group(m.etcd_cluster, m.member), (tuple(hosts),))


def member_steps(sequences: list[MemberSequence]) -> list[ExpandedStep]:
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
