"""The steps of a run as a table: each step kind's carrier, the async function that carries the
pass's decision about that step one fact further and reports it on the record
(bke.core.upgrade.run's `mark_*`). The decision says which step (`decide`); the table says how.

    CARRIERS[StepKind] -> carrier(carry, step)

A local step's carrier does the work here (the checks, a request to the certs service or the
dispatcher, an API call); every node step shares one carrier, its batch drained, sent or
uncordoned (batches.py). A carrier that has asked another service and waits for its answer
raises TemporaryError after its facts are kept (the pass ends and is tried again); one that
cannot carry the step out fails it with the reason, or raises (the run fails naming the step:
bke.core.upgrade.failure).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from bke.adapters.state.migrate import needs_conversion
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.core.state.schema import StoredVersionError, record_kind
from bke.core.upgrade.certificates import rbac_before_renewal
from bke.core.upgrade.run import StepRun, UpgradeRun, mark_local, mark_local_batch
from bke.core.upgrade.steps import NODE_STEPS, StepKind

from .batches import drained, node_batch
from .stored_plan import store_plan

if TYPE_CHECKING:
    from .operation import Upgrades

__all__ = ["CARRIERS", "Carrier", "Carry", "carry_out"]

T = TypeVar("T")

# the records an upgrade reads and writes, checked (never converted) by its pre-checks step
RECORDS_RELIED_ON = tuple(record_kind(k) for k in ("plan", "upgrade", "etcd-restore"))


@dataclass(frozen=True)
class Carry:
    """One decision of a pass, with what its carrier needs: the upgrader's ports, the run, and the
    plans it goes from and to (targets.py)."""

    up: Upgrades
    run: UpgradeRun
    old: Plan
    new: Plan
    action: str  # the decision: "local" (a local step), "drain", "send" or "uncordon" (a node step's batch)


Carrier = Callable[[Carry, StepRun], Awaitable[None]]


async def carry_out(c: Carry, step: StepRun) -> None:
    """The decision carried out by its step's row (a step this code does not know fails the run)."""
    await CARRIERS[StepKind(step.name)](c, step)


async def _pre_checks(c: Carry, step: StepRun) -> None:
    # the checks ran when the request was accepted; what is left is the seed's "stored-data
    # conversion", which is the admin's (`bke state migrate`: this service may write no other
    # service's record): the records it relies on must be in their current form before anything moves
    try:
        stale = await needs_conversion(c.up.store.r, c.run.cluster, RECORDS_RELIED_ON)
    except StoredVersionError as exc:
        mark_local(step, False, str(exc))
        return
    mark_local(step, not stale, "" if not stale else (
        "stored records of an older BKE: " + ", ".join(f"{r.kind} v{r.found}" for r in stale)
        + f"; run `bke state migrate {c.run.cluster}` (the admin's), then upgrade again"))


async def _certificates(c: Carry, step: StepRun) -> None:
    run, old, new = c.run, c.old, c.new
    if run.is_apply:  # certificates whose names change (bke.core.lifecycle.apply_run: `_reissue`)
        await _waiting(c, c.up.certs.reissue(run, step, new, partial(store_plan, c.up)))
        return
    if rbac_before_renewal(old.kubernetes_version, new.kubernetes_version):
        # the target release's bootstrap RBAC before any certificate it re-issues with fewer
        # groups reaches an apiserver (apiserver-kubelet-client, bke.core.pki.subjects): else
        # `kubectl logs/exec` are Forbidden until the addons step, as after `kubeadm upgrade
        # apply v1.35.5` (kubernetes/kubeadm#3310)
        renders = await c.up.commands.renders.get(run.request_id, old, new)
        why = await c.up.api.addons.apply(old, new, renders.new_addons, only="rbac")
        if why:
            mark_local(step, False, why)
            return
    await _waiting(c, c.up.certs.renew(run, step, old))


async def _waiting(c: Carry, asking: Awaitable[T], keep: bool = False) -> T:
    """A step that asks another service (or waits for the cluster): while it waits for the answer
    (TemporaryError), the steps done so far are published to followers (and the record kept
    first, `keep`)."""
    try:
        return await asking
    except TemporaryError:
        if keep:
            await c.up.store.save(c.run)
        await c.up.announce(c.run)
        raise


async def _labels(c: Carry, step: StepRun) -> None:
    # the nodes both plans name: a new node is labelled by its join (the last step)
    kept = {n.hostname for n in c.old.nodes}
    plan = c.new.model_copy(update={"nodes": [n for n in c.new.nodes if n.hostname in kept]})
    labels = c.up.api.labels
    why = await labels.apply(plan) if labels is not None else "no labels adapter in this upgrader"
    mark_local(step, not why, why)


async def _drain_nodes(c: Carry, step: StepRun) -> None:
    # nodes whose kubelet stops registering: drained before a join or roll touches them
    if await drained(c, step):
        mark_local_batch(step)


async def _delete_node_objects(c: Carry, step: StepRun) -> None:
    # their kubelets run standalone now (the runtime's roll) and the cleanup took kubelet.conf
    # away: nothing puts the Node objects back (a node with none is fine)
    await c.up.api.drainer.delete_nodes(c.new, step.current())
    mark_local_batch(step)


async def _membership(c: Carry, step: StepRun) -> None:
    # asked, waiting for the dispatcher: kept, and followers see it
    await _waiting(c, c.up.membership.carry(c.run, step, c.old, c.new, partial(store_plan, c.up)), keep=True)


async def _addons(c: Carry, step: StepRun) -> None:
    renders = await c.up.commands.renders.get(c.run.request_id, c.old, c.new)
    # kept while the addons roll out (calico's DaemonSet, a pod at a time on every node): else
    # the pass that finished the workers is lost on each wait, its last batch uncordoned again
    # every few seconds and the workers shown running until the rollout ends
    why = await _waiting(c, c.up.api.addons.apply(c.old, c.new, renders.new_addons), keep=True)
    mark_local(step, not why, why)


CARRIERS: dict[StepKind, Carrier] = {
    StepKind.PRE_CHECKS: _pre_checks,
    StepKind.CERTIFICATES: _certificates,
    StepKind.DRAIN_NODES: _drain_nodes,
    StepKind.ADDONS: _addons,
    StepKind.LABELS: _labels,
    StepKind.DELETE_NODE_OBJECTS: _delete_node_objects,
    StepKind.REMOVE_NODES: _membership,
    StepKind.JOIN_NODES: _membership,
    **{kind: node_batch for kind in NODE_STEPS},
}
