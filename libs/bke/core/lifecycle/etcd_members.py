"""The ordered membership steps that take one etcd cluster from its members in one plan to another's.

Why this order (each rule from upstream):
- adds before removals, so that the cluster never has fewer members than either plan asks for
  (kubeadm adds a control-plane member before anything is removed; `diff.py` refuses a removal
  that would lose quorum under the same assumption);
- each new member joins as a learner, then is started, then promoted, then the cluster's health
  is checked, before the next one is added: etcd allows one learner at a time by default
  (`--experimental-max-learners=1`, etcd v3.5 server/etcdserver/api/membership), a learner does
  not count towards the quorum until promoted (https://etcd.io/docs/v3.5/learning/design-learner/),
  and kubeadm joins etcd members as learners by default since v1.29 (its EtcdLearnerMode gate);
- each joining member starts with `--initial-cluster-state=existing` and an `--initial-cluster` of
  exactly the members at that moment plus itself (etcd's runtime reconfiguration guide,
  https://etcd.io/docs/v3.5/op-guide/runtime-configuration/): `etcd_joins` gives those lists to
  the renderer (`RenderInputs.etcd_joins`);
- a node that joins several etcd clusters at once (a new node with `etcd` and `etcd-event`)
  is joined once, with its start in each of them (the dispatcher renders and starts all of its
  members in one join): such nodes come after the other additions of each cluster, in the
  plan's order, so that the apply runner can add the node as a learner in every cluster it
  joins, join it once, then promote it in each (`joint_members`);
- removals one at a time, an unhealthy member first, each refused if it would leave fewer healthy
  members than a quorum of the new size (`diff.removal_refusal`, the rule `bke apply` shows);
- the member asked to change the membership is a healthy member that stays (a removed member
  stops serving as soon as it applies its own removal).
Pure: plans and the last health round in, steps or refusals out; nothing is asked of etcd here.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from bke.contracts.agent_steps import EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove, TlsFiles
from bke.core.plan import Plan
from bke.core.plan.models import EtcdClusterPlan, EtcdMember
from bke.core.render.context import EtcdJoin
from .diff import EtcdChange, Refusal, Unhealthy, etcd_changes, removal_order, removal_refusal, unhealthy_in

__all__ = ["MemberSequence", "MemberStep", "agent_step", "etcd_joins", "joint_members", "member_sequences"]

Kind = Literal["add-learner", "start-member", "promote", "check-health", "remove-member"]


@dataclass(frozen=True)
class MemberStep:
    """One membership step. `run_on`: the node that runs it (an existing healthy member that
    stays, or the new member itself for `start-member`); `initial_cluster`: the list a joining
    member starts with (`start-member`); `healthy`: the members that must answer healthy
    (`check-health`: every member the cluster has at that point)."""

    kind: Kind
    etcd_cluster: str
    member: str
    run_on: str
    peer_url: str = ""
    initial_cluster: str = ""
    healthy: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemberSequence:
    etcd_cluster: str
    steps: tuple[MemberStep, ...] = ()
    refusals: tuple[Refusal, ...] = ()


def _asked(members: list[EtcdMember], staying: set[str], unhealthy: frozenset[str]) -> str | None:
    """The member every membership request goes to: the first healthy member that stays."""
    return next((m.hostname for m in members if m.hostname in staying and m.hostname not in unhealthy), None)


def _sequence(change: EtcdChange, before: EtcdClusterPlan, after: EtcdClusterPlan,
              unhealthy: frozenset[str], joint: tuple[str, ...] = ()) -> MemberSequence:
    by_host = {m.hostname: m for m in (*before.members, *after.members)}
    members = list(before.members)
    staying = set(change.after)
    asked = _asked(members, staying, unhealthy)
    if asked is None:
        return MemberSequence(change.cluster, refusals=(Refusal(
            "EtcdHealthyMember", f"{change.cluster}: no healthy member that stays to ask for the changes "
                                 f"(members {', '.join(change.before)}, unhealthy {', '.join(sorted(unhealthy)) or 'none'})"),))
    steps: list[MemberStep] = []
    # the nodes that also join another etcd cluster last, in the order `joint` gives
    added = [h for h in change.added if h not in joint] + [h for h in joint if h in change.added]
    for host in added:
        m = by_host[host]
        members.append(m)
        initial = ",".join(f"{x.hostname}={x.peer_url}" for x in members)
        steps += [
            MemberStep("add-learner", change.cluster, host, asked, peer_url=m.peer_url),
            MemberStep("start-member", change.cluster, host, host, peer_url=m.peer_url, initial_cluster=initial),
            MemberStep("promote", change.cluster, host, asked, peer_url=m.peer_url),
            MemberStep("check-health", change.cluster, host, asked,
                       healthy=tuple(x.hostname for x in members if x.hostname not in unhealthy)),
        ]
    for host in removal_order(change, unhealthy):
        m = by_host[host]
        members.remove(m)
        steps += [
            MemberStep("remove-member", change.cluster, host, asked, peer_url=m.peer_url),
            MemberStep("check-health", change.cluster, host, asked,
                       healthy=tuple(x.hostname for x in members if x.hostname not in unhealthy)),
        ]
    return MemberSequence(change.cluster, steps=tuple(steps))


def member_sequences(current: Plan, desired: Plan, unhealthy_by: Unhealthy = ()) -> list[MemberSequence]:
    """Per etcd cluster whose members change, its ordered steps, or why it may not change
    (`diff.removal_refusal`, the rule `bke apply` shows, or no healthy member to ask).
    `unhealthy_by`: the members the last health round found unhealthy, per etcd cluster
    (`etcd_health.unhealthy_etcd_members`) or as bare hostnames."""
    out = []
    changes = etcd_changes(current, desired)
    joint = joint_members(changes, desired)
    for ch in changes:
        unhealthy = unhealthy_in(ch.cluster, unhealthy_by)
        refusal = removal_refusal(ch, unhealthy)
        before, after = current.etcd_cluster(ch.cluster), desired.etcd_cluster(ch.cluster)
        assert before is not None and after is not None  # etcd_changes compares clusters in both plans
        out.append(MemberSequence(ch.cluster, refusals=(refusal,)) if refusal is not None
                   else _sequence(ch, before, after, unhealthy, joint))
    return out


def joint_members(changes: list[EtcdChange], desired: Plan) -> tuple[str, ...]:
    """The nodes added to more than one etcd cluster by these changes, in the plan's order."""
    count: dict[str, int] = {}
    for ch in changes:
        for h in ch.added:
            count[h] = count.get(h, 0) + 1
    return tuple(n.hostname for n in desired.nodes if count.get(n.hostname, 0) > 1)


def etcd_joins(current: Plan, desired: Plan) -> tuple[EtcdJoin, ...]:
    """What the renderer needs to render each joining member's manifest (`RenderInputs.etcd_joins`)."""
    return tuple(EtcdJoin(s.etcd_cluster, s.member, s.initial_cluster)
                 for seq in member_sequences(current, desired) for s in seq.steps if s.kind == "start-member")


def _step_id(kind: str, step: MemberStep) -> str:
    """Unique within a command, at most 128 characters (the step contract's limit)."""
    text = f"{kind}/{step.etcd_cluster}/{step.member}"
    return text if len(text) <= 128 else f"{text[:111]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def agent_step(step: MemberStep, plan: EtcdClusterPlan, *, promote_timeout_s: float = 120.0) -> (
        EtcdMemberAdd | EtcdMemberPromote | EtcdMemberRemove | None):
    """The agent step for `add-learner`, `promote` and `remove-member`, run on `step.run_on`
    (`plan`: the etcd cluster of either plan: `run_on` is in both, it stays). None for
    `start-member` (the member's files: its render with `etcd_joins`) and `check-health`
    (WaitHealth of each member): those are the apply runner's own steps. The member is asked on
    its own client URL with the node's healthcheck-client certificate, as the snapshot step does
    (bke.core.etcdsnap.step)."""
    if step.kind in ("start-member", "check-health"):
        return None
    asked = plan.member(step.run_on)
    if asked is None:
        raise KeyError(f"{step.run_on} is no member of {plan.name}")
    d = plan.cert_dir
    common = {"endpoint": asked.client_url, "etcd_cluster": step.etcd_cluster, "member": step.member,
              "peer_url": step.peer_url,
              "tls": TlsFiles(ca=f"{d}/ca.crt", cert=f"{d}/healthcheck-client.crt", key=f"{d}/healthcheck-client.key")}
    if step.kind == "add-learner":
        return EtcdMemberAdd(id=_step_id("etcd-member-add", step), **common)
    if step.kind == "promote":
        return EtcdMemberPromote(id=_step_id("etcd-member-promote", step),
                                 timeout_s=promote_timeout_s, **common)
    return EtcdMemberRemove(id=_step_id("etcd-member-remove", step), **common)
