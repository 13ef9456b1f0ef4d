"""One reconcile pass of a cluster's run of the upgrade record, under the cluster's "upgrade" lease:
the agents' answers folded into the record, then every decision that needs no answer carried out
by its step's carrier (carriers.py), the record saved and the whole view published.

    reconcile_upgrade(cluster) -> Outcome: done | wait(delay) | failed(reason)

Each step of a pass returns early: no lease (another replica's pass runs), no running run, the
decisions taken until one waits for answers; a pass that finds the run ended releases the
cluster's operation slot. An error that is no outage fails the run naming its step and node
(bke.core.upgrade.failure); an outage is the runner's to try again (bke.adapters.runner).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bke.adapters.runner import Outcome
from bke.adapters.state.lease import claim_lease, release_lease
from bke.adapters.state.operation_slot import release_operation
from bke.core.plan import Plan
from bke.core.state.schema import StoredVersionError
from bke.core.upgrade.failure import AtNode, abort_run, error_text, is_transient
from bke.core.upgrade.node_versions import settled, stopped_batch_ids
from bke.core.upgrade.run import UpgradeRun, awaited_ids, decide, finish, fold_results

from .batches import RENDERED_STEPS
from .carriers import Carry, carry_out
from .stored_plan import succeed, unswap
from .targets import plans_of

if TYPE_CHECKING:
    from .operation import Upgrades

__all__ = ["LEASE", "reconcile_upgrade"]

log = logging.getLogger("bke.upgrader")
LEASE = "upgrade"
WAIT_S = 5.0  # re-check a batch in flight this often even without a result
# Answers recorded by another replica (or before a restart) are read from Redis this often
# while a batch waits; this process's own are known at once (UpgradeStore.results).
RESULTS_READ_EVERY_S = 1.0
DECISIONS_PER_PASS = 64  # every decision that needs no answer is taken in one pass


async def reconcile_upgrade(up: Upgrades, cluster: str) -> Outcome:
    st = up.settings
    if not await claim_lease(up.store.r, cluster, LEASE, st.owner, st.lease_ms):
        return Outcome("wait", 1.0, "another upgrader holds the lease")
    try:
        out = await _reconcile(up, cluster)
        if out.status != "wait":  # the upgrade has ended (or there is none): its slot goes
            await up.release_if_over(cluster)
        return out
    except BaseException:
        up.store.forget(cluster)  # the record object may hold facts that were not saved
        raise
    finally:
        await release_lease(up.store.r, cluster, LEASE, st.owner)


async def _reconcile(up: Upgrades, cluster: str) -> Outcome:
    try:
        run = await up.store.load(cluster)
    except StoredVersionError as exc:  # a record this code must not read: no pass can succeed
        log.error("upgrade record unreadable: %s", exc, extra={"cluster": cluster})
        return Outcome("failed", reason=str(exc))
    if run is None or run.status != "Running":
        return Outcome("done")
    hosts: list[tuple[str, ...]] = [()]  # the batch the pass is serving, for a failure's reason
    try:
        return await _pass(up, run, hosts)
    except Exception as exc:
        if is_transient(exc):
            raise  # the runner waits and resumes from the record
        node, cause = (exc.node, exc.cause) if isinstance(exc, AtNode) else ("", exc)
        reason = abort_run(run, error_text(cause), up.ts(), node=node, hosts=hosts[0])
        log.error("upgrade failed: %s", reason, exc_info=cause,
                  extra={"cluster": cluster, "request_id": run.request_id, "node": node or None})
        await save(up, run)
        await up.changed(run)
        return Outcome("failed", reason=reason)


async def _pass(up: Upgrades, run: UpgradeRun, hosts: list[tuple[str, ...]]) -> Outcome:
    cluster = run.cluster
    answers = await up.store.results(cluster, awaited_ids(run), RESULTS_READ_EVERY_S)
    changed = fold_results(run, answers, up.settings.now().timestamp(), up.settings.answer_deadline_s)
    old, new = await plans_of(up, run)
    if any(st.name in RENDERED_STEPS and st.status != "Succeeded" for st in run.steps):
        up.commands.renders.start(run.request_id, old, new)  # in the background, while the first steps run
    changed = await _decide_and_carry(up, run, old, new, hosts) or changed
    if changed:
        await save(up, run)
        await up.changed(run)
    waiting = awaited_ids(run) if run.status == "Running" else []
    unanswered = up.store.unanswered(cluster, waiting)
    if unanswered:
        up.unanswered[cluster] = unanswered
    else:
        up.unanswered.pop(cluster, None)
    if run.status == "Failed":
        return Outcome("failed", reason=run.message)
    return Outcome("done") if run.status == "Succeeded" else Outcome("wait", WAIT_S)


async def _decide_and_carry(up: Upgrades, run: UpgradeRun, old: Plan, new: Plan, hosts: list[tuple[str, ...]]) -> bool:
    """Every decision that needs no answer, carried out; whether any was."""
    changed = False
    for _ in range(DECISIONS_PER_PASS):
        d = decide(run)
        if d.action in ("wait", "done"):
            break
        changed = True
        if d.action == "succeed":
            await succeed(up, run, new)
            break
        if d.action == "fail":
            finish(run, False, up.ts(), d.reason)
            log.warning("upgrade failed: %s", d.reason, extra={"cluster": run.cluster, "request_id": run.request_id})
            break
        assert d.step is not None
        hosts[0] = d.hosts
        await carry_out(Carry(up, run, old, new, d.action), d.step)
        if d.action == "send":
            break  # answers come later; saved by the pass
        if d.action in ("local", "drain"):
            # a slow fact (an addon apply, a drain through the API) is kept as soon as it is
            # one; the quick ones (uncordon, send) are saved once, at the end of the pass:
            # redone after a crash, each is idempotent (bke.core.upgrade.run)
            await up.store.save(run)
    return changed


async def save(up: Upgrades, run: UpgradeRun) -> None:
    """The record; a finished run with its nodes' versions (bke.core.upgrade.node_versions)."""
    if run.status == "Running":
        await up.store.save(run)
        return
    if run.is_apply:
        if run.status == "Failed":
            await unswap(up, run)
        # a changed spec changes no version: the nodes' version records (`bke retry`'s
        # input for an upgrade) stay as the last upgrade left them
        await up.store.save_end(run, {})
        return
    answers = await up.store.results(run.cluster, stopped_batch_ids(run))
    previous = await up.store.node_versions(run.cluster)
    await up.store.save_end(run, settled(run, answers, previous))
    # ended: the cluster's operation slot (an upgrade's: a changed spec's returned above) goes
    # before the end is announced (whoever sees it may start the next operation at once); a
    # crash in between heals at the next pass
    await release_operation(up.store.r, run.cluster, "upgrade", run.request_id)
