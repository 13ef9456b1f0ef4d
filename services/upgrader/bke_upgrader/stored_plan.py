"""The end of a run: its plan becomes the stored one (compare-and-swap on the digest the run started
from), and the renderer is asked to store that plan's files (what a later `bke retry` or node
replacement sends).

    succeed(run, new)        an upgrade's plan stored; a retry's only when it completes the plan;
                             a changed spec's (swapped in already by a join, or now); then the
                             loop ends the run Succeeded (ops/upgrade/run.py `ending`)
    store_plan(run, new)     a changed spec's plan in place of the one its run started from (a
                             join and the certificates' re-issue need it stored before the end)
    unswap(run)              a changed spec's run that failed: the plan it started from back
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bke.adapters.state import plan_digest
from bke.adapters.state.keys.upgrader import upgrade_results_key
from bke.contracts.render import RENDER_MANIFESTS, RenderManifests
from bke.core.errors import PermanentError, TemporaryError
from bke.core.plan import Plan
from bke.core.upgrade.run import UpgradeRun
from bke.core.upgrade.run_request import ApplyRequest, UpgradeRequest

from .targets import BASE_PLAN_FIELD, runs_at

if TYPE_CHECKING:
    from .operation import Upgrades

__all__ = ["store_plan", "succeed", "unswap"]

log = logging.getLogger("bke.upgrader")


async def succeed(up: Upgrades, run: UpgradeRun, new: Plan) -> None:
    if run.retry_of and not await _retry_completes_plan(up, run, new):
        log.info("upgrade retry succeeded", extra={"cluster": run.cluster, "request_id": run.request_id})
        return
    if run.is_apply:  # its plan replaces the one the run started from
        await store_plan(up, run, new, keep_base=False)
        await _render_files(up, run, "apply")
        log.info("apply succeeded", extra={"cluster": run.cluster, "request_id": run.request_id})
        return
    pj = new.to_json()
    stored = await up.records.plan_store.upgrade(new, pj, plan_digest(pj), run.plan_digest, run.request_id, up.ts())
    if not stored and (await up.records.plans.load(run.cluster)).kubernetes_version != new.kubernetes_version:
        raise TemporaryError("the stored plan changed during the upgrade; not replaced", delay=5.0)
    await _render_files(up, run, "upgrade")
    log.info("upgrade succeeded", extra={"cluster": run.cluster, "request_id": run.request_id})


async def store_plan(up: Upgrades, run: UpgradeRun, new: Plan, keep_base: bool = True) -> str:
    """A changed spec's plan in place of the one its run started from (compare-and-swap on
    that digest; already ours after a crash or an earlier join step: nothing to do); its digest.
    Before a join (`keep_base`), the plan it replaces is kept beside the run's answers (cleared
    when a run starts): the rolls after the join compare the new plan's files with those the
    nodes run, and a failure puts it back (`unswap`)."""
    pj = new.to_json()
    digest = plan_digest(pj)
    if keep_base and await up.plan_digest(run.cluster) == run.plan_digest:
        base = await up.records.plans.load(run.cluster)
        await up.store.r.hsetnx(upgrade_results_key(run.cluster), BASE_PLAN_FIELD, base.to_json())
    stored = await up.records.plan_store.upgrade(new, pj, digest, run.plan_digest, run.request_id, up.ts())
    if not stored and await up.plan_digest(run.cluster) != digest:
        raise PermanentError("the stored plan changed while the changed spec was carried out; not replaced")
    return digest


async def unswap(up: Upgrades, run: UpgradeRun) -> None:
    """A changed spec's run that failed after a join swapped its plan in: the plan it started
    from goes back (compare-and-swap from the run's plan), so that applying the spec again
    sees the difference again and finishes it (every step is idempotent: a member already
    added is skipped, a node's phases ensure what is there). Its files are rendered again."""
    assert isinstance(run.request, ApplyRequest)
    desired = run.request.desired_digest
    raw = await up.store.r.hget(upgrade_results_key(run.cluster), BASE_PLAN_FIELD)
    if raw is None or await up.plan_digest(run.cluster) != desired:
        return  # never swapped (or already back)
    base = await asyncio.to_thread(Plan.model_validate_json, raw)
    text = raw.decode() if isinstance(raw, bytes) else raw
    if await up.records.plan_store.upgrade(base, text, plan_digest(text), desired, run.request_id, up.ts()):
        log.warning("apply failed after its plan was swapped in: the plan it started from is back",
                    extra={"cluster": run.cluster, "request_id": run.request_id})
        await _render_files(up, run, "apply-undo")


async def _render_files(up: Upgrades, run: UpgradeRun, why: str) -> None:
    """Ask the renderer to store the stored plan's files, once per run and `why` (the request id
    and the message id are fixed: asking again after a crash is the same request)."""
    ask = RenderManifests(request_id=f"{why}-{run.request_id}", cluster=run.cluster)
    await up.commands.publish(ask.to_bytes(), RENDER_MANIFESTS,
                              {"Nats-Msg-Id": f"render:{why}:{run.cluster}:{run.request_id}"})


async def _retry_completes_plan(up: Upgrades, run: UpgradeRun, new: Plan) -> bool:
    """Whether a retry's success makes the target plan the stored one: only when it is not
    already (the upgrade it completes failed) and no node is left behind after it."""
    if runs_at(await up.records.plans.load(run.cluster), run.target):
        return False
    mine = set(run.request.nodes if isinstance(run.request, UpgradeRequest) else ())
    behind = [h for h, v in (await up.store.node_versions(run.cluster)).items() if v.behind and h not in mine]
    return not behind
