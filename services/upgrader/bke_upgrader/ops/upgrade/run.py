"""One pass of a run of the upgrade record on the one loop (bke.adapters.operation), the hooks the
loop calls: the pass takes the cluster's "upgrade" lease, folds the answers in, decides
(`decide.next_step`) and carries out each decision by its step's row of the carriers table
(carriers.py: a local step; batches.py: a drain, a batch of commands, an uncordon), then the
end (stored_plan.py), saves and publishes the whole view.

    folded     the answers of the batch in flight (most known without asking Redis), folded in
    decider    the plans the run goes between (targets.py), its renders begun; `next_step`
    carry      a decision carried out by its step's row; a slow fact (an addon apply, a drain
               through the API) kept as soon as it is one
    waited     which commands of the batch in flight have no answer known here: the result
               path wakes the pass at once when the last of them comes (results.py)
    ending     the end of a run that succeeded: its plan stored, its files asked for
    failure    an error that is no outage ends the run naming its step and node
               (bke.core.upgrade.failure); an outage is the runner's to try again
    save       the record; a finished run with its nodes' versions (bke.core.upgrade.node_versions)
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from bke.adapters.operation import Carrier
from bke.core.operation import Act, Decision, Fail, OperationStatus, RunStatus, Succeed, Wait
from bke.core.upgrade.failure import AtNode, abort_run, error_text, is_transient
from bke.core.upgrade.node_versions import settled, stopped_batch_ids
from bke.core.upgrade.run import UpgradeRun, awaited_ids, fold_results
from bke.core.upgrade.steps import LOCAL_STEPS

from ...batches import RENDERED_STEPS
from ...carriers import Carry, carry_out
from ...stored_plan import succeed, unswap
from ...targets import plans_of
from .decide import NODE_STAGES, next_step

if TYPE_CHECKING:
    from ...operation import Upgrades

__all__ = ["RESULTS_READ_EVERY_S", "carriers", "decider", "ending", "failure", "folded", "save", "waited"]

log = logging.getLogger("bke.upgrader")
# Answers recorded by another replica (or before a restart) are read from Redis this often
# while a batch waits; this process's own are known at once (UpgradeStore.results).
RESULTS_READ_EVERY_S = 1.0


async def folded(up: Upgrades, run: UpgradeRun) -> bool:
    up.serving[run.cluster] = ()  # a new pass: no batch served yet
    answers = await up.store.results(run.cluster, awaited_ids(run), RESULTS_READ_EVERY_S)
    return fold_results(run, answers, up.settings.now().timestamp(), up.settings.answer_deadline_s)


async def decider(up: Upgrades, run: UpgradeRun) -> Callable[[UpgradeRun], Decision]:
    old, new = await plans_of(up, run)
    if any(st.name in RENDERED_STEPS and st.status != RunStatus.SUCCEEDED for st in run.steps):
        up.commands.renders.start(run.request_id, old, new)  # in the background, while the first steps run
    return next_step


def carriers(up: Upgrades) -> dict[str, Carrier[UpgradeRun]]:
    """The loop's table: every local step by its kind, a node step's batch by its stage; each
    row is its step's row of carriers.CARRIERS, given what it needs (`carry`)."""
    return {action: lambda run, d: carry(up, run, d) for action in (*map(str, LOCAL_STEPS), *NODE_STAGES)}


async def carry(up: Upgrades, run: UpgradeRun, d: Act) -> Decision | None:
    step = run.step_now()
    assert step is not None, d
    stage = d.action if d.action in NODE_STAGES else "local"
    up.serving[run.cluster] = d.nodes if stage != "local" else ()  # the batch a failure names
    _, _, old, new = up.targets[run.cluster]  # the pass's plans (decider)
    await carry_out(Carry(up, run, old, new, stage), step)
    if stage in ("local", "drain"):
        # a slow fact (an addon apply, a drain through the API) is kept as soon as it is one;
        # the quick ones (uncordon, send) are saved once, at the end of the pass: redone after
        # a crash, each is idempotent (bke.core.upgrade.run)
        await up.store.save(run)
    return None


def waited(up: Upgrades, run: UpgradeRun, wait: Wait) -> bool:
    unanswered = up.store.unanswered(run.cluster, awaited_ids(run))
    if unanswered:
        up.unanswered[run.cluster] = unanswered
    else:
        up.unanswered.pop(run.cluster, None)
    return False


async def ending(up: Upgrades, run: UpgradeRun, end: Succeed | Fail) -> None:
    up.unanswered.pop(run.cluster, None)
    if isinstance(end, Succeed):
        _, _, _, new = up.targets[run.cluster]
        await succeed(up, run, new)
    else:
        log.warning("upgrade failed: %s", end.reason, extra={"cluster": run.cluster, "request_id": run.request_id})


def failure(up: Upgrades, run: UpgradeRun, exc: Exception) -> Fail:
    if is_transient(exc):
        raise exc  # the runner waits and resumes from the record
    up.unanswered.pop(run.cluster, None)
    node, cause = (exc.node, exc.cause) if isinstance(exc, AtNode) else ("", exc)
    reason = abort_run(run, error_text(cause), up.ts(), node=node, hosts=up.serving.get(run.cluster, ()))
    log.error("upgrade failed: %s", reason, exc_info=cause,
              extra={"cluster": run.cluster, "request_id": run.request_id, "node": node or None})
    return Fail(reason, (node,) if node else ())


async def save(up: Upgrades, run: UpgradeRun) -> None:
    if run.running:
        await up.store.save(run)
        return
    if run.is_apply:
        if run.status != OperationStatus.SUCCEEDED:
            await unswap(up, run)
        # a changed spec changes no version: the nodes' version records (`bke retry`'s
        # input for an upgrade) stay as the last upgrade left them
        await up.store.save_end(run, {})
        return
    answers = await up.store.results(run.cluster, stopped_batch_ids(run))
    previous = await up.store.node_versions(run.cluster)
    await up.store.save_end(run, settled(run, answers, previous))
