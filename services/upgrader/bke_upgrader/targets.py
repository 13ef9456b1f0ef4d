"""The two plans a pass carries its run between: the one the cluster runs (old) and the one it
leads to (new), by the run's kind.

    an upgrade      the stored plan -> the stored plan's spec placed again at the target versions
    a retry         the stored plan at the versions its nodes run -> at the target versions (the
                    stored plan may be the target already: the upgrade it completes succeeded
                    without its nodes)
    a changed spec  the stored plan (or, once a join swapped the spec's plan in, the plan the run
                    started from, kept aside: `base_plan`) -> the spec it carries, placed again

Placing a 5,000-node plan again takes a second or two, so the plans are kept while the stored
plan is the same object (PlanCache re-reads only a changed digest). After a crash between
storing the target plan and saving the run as Succeeded, the stored plan is the target already:
the target plan of it is the same, and the run ends.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bke.adapters.state.keys.upgrader import upgrade_results_key
from bke.core.errors import PermanentError
from bke.core.plan import Plan, plan_spec_text
from bke.core.upgrade.paths import resolve_target
from bke.core.upgrade.run import UpgradeRun
from bke.core.upgrade.run_request import ApplyRequest
from bke.core.upgrade.target_plan import target_plan

from .requests import versions_of

if TYPE_CHECKING:
    from .operation import Upgrades

__all__ = ["BASE_PLAN_FIELD", "base_plan", "plans_of", "runs_at"]

# The field of the run's answers hash that keeps the plan a changed spec's run started from,
# once the run swapped in its own plan (a join needs the stored plan to name the new nodes).
BASE_PLAN_FIELD = "apply:base-plan"


async def plans_of(up: Upgrades, run: UpgradeRun) -> tuple[Plan, Plan]:
    """(old, new) of the run's pass (the module docstring)."""
    stored = await up.records.plans.load(run.cluster)
    hit = up.targets.get(run.cluster)
    if hit is not None and hit[0] == run.request_id and hit[1] is stored:
        return hit[2], hit[3]
    if isinstance(run.request, ApplyRequest):
        # placement is deterministic: the same plan, whose digest the request recorded
        new = await asyncio.to_thread(_placed, run.request.spec)
        old = await base_plan(up, run) if await up.plan_digest(run.cluster) == run.request.desired_digest \
            else stored
    elif run.retry_of:
        old = stored if runs_at(stored, run.current) else _plan_at(stored, run.current)
        new = stored if runs_at(stored, run.target) else _plan_at(stored, run.target)
    else:
        old, new = stored, _plan_at(stored, run.target)
    up.targets[run.cluster] = (run.request_id, stored, old, new)
    return old, new


async def base_plan(up: Upgrades, run: UpgradeRun) -> Plan:
    """The plan a changed spec's run started from, kept aside when its own was swapped in."""
    raw = await up.store.r.hget(upgrade_results_key(run.cluster), BASE_PLAN_FIELD)
    if raw is None:
        raise PermanentError("the plan this changed spec's run started from was not kept; not carried on")
    return await asyncio.to_thread(Plan.model_validate_json, raw)


def runs_at(plan: Plan, versions: dict[str, str]) -> bool:
    """`plan` is at `versions` (kubernetes, etcd, containerd)."""
    return versions_of(plan).model_dump() == versions


def _placed(spec: str) -> Plan:
    outcome = plan_spec_text(spec, "spec")
    if outcome.plan is None:  # it was placed when the request was accepted: a bug or another BKE version
        raise PermanentError("the run's spec no longer places: " + "; ".join(str(e) for e in outcome.errors[:5]))
    return outcome.plan


def _plan_at(plan: Plan, versions: dict[str, str]) -> Plan:
    """The plan's own spec at `versions`, placed again (bke.core.upgrade.target_plan)."""
    return target_plan(plan, resolve_target(plan, versions["kubernetes"], versions["etcd"], versions["containerd"]))
