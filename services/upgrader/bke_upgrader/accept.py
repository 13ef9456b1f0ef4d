"""An upgrade request accepted or rejected (`bke.v1.cluster.upgrade`): the live facts gathered, the
request decided (requests.decide_request, pure), the answer given and, accepted, the run stored
once the cluster's operation slot is claimed.

    accept_upgrade(req) -> [] (a redelivery) | [UpgradeAccepted (+ UpgradeChanged: the run started)]
                           | [UpgradeRejected]
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bke.adapters.bus.handler import Out
from bke.contracts.agent import AGENT_VERSION
from bke.contracts.status import StatusError
from bke.contracts.upgrade import (
    UPGRADE_ACCEPTED,
    UPGRADE_REJECTED,
    UpgradeAccepted,
    UpgradeChanged,
    UpgradeCluster,
    UpgradeRejected,
    upgrade_subject,
)
from bke.core.errors import MalformedMessage
from bke.core.plan import Plan
from bke.core.upgrade.run import UpgradeRun, new_run
from bke.core.upgrade.run_request import UpgradeRequest

from .agent_release import ReleaseError
from .batches import RENDERED_STEPS
from .requests import Decided, decide_request, parse_request, status_refusal
from .views import view

if TYPE_CHECKING:
    from .operation import Upgrades

__all__ = ["accept_upgrade", "refuse_upgrade_bytes", "upgrade_rejected"]

log = logging.getLogger("bke.upgrader")


def upgrade_rejected(req: UpgradeRejected, what: str = "upgrade") -> list[Out]:
    """The rejection of a request (an upgrade's or its retry's), logged: the CLI waits for it."""
    log.warning("%s refused: %s", what, req.message, extra={"cluster": req.cluster, "request_id": req.request_id})
    return [Out(req, UPGRADE_REJECTED, f"upgrade-rejected:{req.request_id}")]


def refuse_upgrade_bytes(body: bytes) -> list[Out]:
    """The answer to bytes that are no UpgradeCluster (`typed`'s `refuse`): a rejection
    naming each wrong field, never a dead letter (the CLI waits for an answer)."""
    req = parse_request(body)
    if not isinstance(req, UpgradeRejected):
        # valid as is but not in the form its header named: that is typed's dead letter
        raise MalformedMessage("an UpgradeCluster that does not read in the form its bke-schema header names")
    log.warning("upgrade request refused: %s", req.message, extra={"request_id": req.request_id})
    return [Out(req, UPGRADE_REJECTED, f"upgrade-rejected:{req.request_id}" if req.request_id else None)]


async def accept_upgrade(up: Upgrades, req: UpgradeCluster) -> list[Out]:
    def rejected(message: str) -> list[Out]:
        return upgrade_rejected(UpgradeRejected(request_id=req.request_id, cluster=req.cluster, message=message))

    current = await up.store.load(req.cluster)
    if current is not None and current.request_id == req.request_id:
        up.kick(req.cluster)  # a redelivery: that upgrade exists already
        return []
    status = await up.records.facts.status(req.cluster)
    if isinstance(status, StatusError):
        return rejected(status_refusal(req.cluster, status))
    # one operation per cluster (bke.adapters.state.operation_slot): a quick answer naming the
    # operation that runs, for a dry run too; the claim (`_start`) is the atomic one
    busy = await up.busy(req.cluster, "upgrade", req.request_id)
    if busy:
        return rejected(busy)
    plan = await up.records.plans.load(req.cluster)
    decided = decide_request(req, plan, await up.records.facts.gather(plan, status))
    answer = decided.answer
    if isinstance(answer, UpgradeRejected):
        return upgrade_rejected(answer)
    if req.dry_run:
        return [Out(answer, UPGRADE_ACCEPTED, f"upgrade-accepted:{req.request_id}")]
    agent_version, why = await _agent_version(up, req.cluster, plan, answer)
    if why:
        return rejected(why)
    run = new_run(req.request_id, req.cluster, answer.current.model_dump(), answer.target.model_dump(),
                  list(decided.order), [n.hostname for n in plan.nodes], up.ts(),
                  request=UpgradeRequest.accepted(req, await up.plan_digest(req.cluster)),
                  left_out=list(answer.left_out), agent_version=agent_version)
    why = await _start(up, run, plan, decided)
    if why:
        return rejected(why)
    log.info("upgrade accepted: %s -> %s", answer.current.kubernetes, answer.target.kubernetes,
             extra={"cluster": req.cluster, "request_id": req.request_id})
    up.kick(req.cluster)
    return [Out(answer, UPGRADE_ACCEPTED, f"upgrade-accepted:{req.request_id}"),
            Out(UpgradeChanged(cluster=req.cluster, at=up.ts(), upgrade=view(run)), upgrade_subject(req.cluster))]


async def _agent_version(up: Upgrades, cluster: str, plan: Plan, answer: UpgradeAccepted) -> tuple[str, str]:
    """The version every agent must report in the agents step: this BKE's, or the release's it
    installs, whose wheels every node the upgrade reaches must have before anything runs; and
    why the upgrade cannot have it ("" if it can)."""
    release = up.commands.release
    if release is None:
        return AGENT_VERSION, ""
    try:
        version = (await release.get()).version
        reached = [n.hostname for n in plan.nodes if n.hostname not in answer.left_out]
        if why := (await release.updates(cluster, reached)).refusal():
            return "", f"the agent release: {why}"
    except ReleaseError as exc:
        return "", f"the agent release: {exc}"
    return version, ""


async def _start(up: Upgrades, run: UpgradeRun, plan: Plan, decided: Decided) -> str:
    """Claim the slot and store the run (the refusal, "" when started); its renders begun."""

    def refuse(cur: UpgradeRun | None) -> str:
        if cur is not None and cur.running:
            return f"upgrade {cur.request_id} of {run.cluster} is still running (step {cur.step_now().name if cur.step_now() else '-'})"
        return ""

    why = await up.start_claimed(run, refuse)
    if why:
        return why
    assert decided.new_plan is not None
    # the target plan the checks placed is the one targets.plans_of would place again from the
    # same stored plan and versions (target_plan reads only the versions): kept for the passes,
    # which saves the first one a placement (a second or two at 5,000 nodes)
    up.targets[run.cluster] = (run.request_id, plan, plan, decided.new_plan)
    if any(st.name in RENDERED_STEPS for st in run.steps):
        # begun now rather than by the first pass: at 5,000 nodes the render process ends
        # about when the agents step does, and the etcd step waits for it
        up.commands.renders.start(run.request_id, plan, decided.new_plan)
    return ""
