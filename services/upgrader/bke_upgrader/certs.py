"""The upgrade's certificate renewal, the adapters: ask the certs service, record its answer,
and hand each node step its renewed files (which certificates, and where they go: the pure
bke.core.upgrade.certificates).

    certificates step  -> `RenewCerts` (origin upgrade: every instance the upgrade renews) on
                          the certs service's existing renewal path; the step waits
                          (TemporaryError) until its answer is recorded
    certificates step  -> of a changed spec's run (`reissue`): the run's plan stored first
      (apply)             (compare-and-swap, the plan it started from kept aside), then
                          `IssueCerts` (purpose apply): the certs service ensures the PKI for
                          the stored plan, re-issuing the leaves whose names change
    certs issued       -> recorded like a renewal if it answers this run's re-issue: the
                          re-issued instances, each with its node
    certs renewed      -> recorded (`bke:<c>:upgrade:certs`) if it answers this run's renewal
    certs failed       -> recorded as the failure (a renewal refused, or a node whose bundle
                          could not be re-sealed: its files would be the old ones); a failure
                          is never overwritten by the `certs renewed` that follows it
    a node step        -> that node's renewed files of the step, from the bundle the certs
                          service re-sealed to the node's agent (`bke:<c>:files:certs`, the
                          hand-off it keeps for whoever delivers files): keys stay sealed, only
                          the agent opens them

A certs service that does not answer within the service answer deadline (answer_deadline.py,
BKE_UPGRADER_SERVICE_ANSWER_TIMEOUT_S) fails the step naming it.

Why the certs service's path and not a key made here: only the certs service holds CA keys
(encrypted at rest) and agents' sealing keys; the upgrader never sees a private key in clear.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bke.contracts.statuses import RunStatus
from bke.contracts.agent_steps import NewFile
from bke.contracts.certs import ISSUE_CERTS, RENEW_CERTS, CertsFailed, CertsIssued, CertsRenewed, IssueCerts, RenewCerts
from bke.core.errors import TemporaryError
from bke.core.pki.instances import split_instance_id
from bke.core.plan import Plan
from bke.adapters.state.keys.upgrader import upgrade_certs_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.core.upgrade.certificates import cert_files, cert_rows, renewed_by_node, renewed_instances
from bke.core.upgrade.order import ExpandedStep
from bke.core.upgrade.run import StepRun, UpgradeRun, mark_local
from bke.adapters.bus.handler import Publish

from .answer_deadline import DEFAULT_TIMEOUT_S, AnswerDeadline, silent_service
from .store import UpgradeStore

__all__ = ["UpgradeCerts", "renewal_id"]

log = logging.getLogger("bke.upgrader.certs")
StorePlan = Callable[[UpgradeRun, Plan], Awaitable[str]]
STEP = "certificates"
WAIT_S = 5.0  # ask again this often while the certs service has not answered (a kick comes first)


def renewal_id(upgrade_request_id: str) -> str:
    """The renewal's request id: fixed per upgrade, so asking again is answered, not renewed again."""
    rid = f"upgrade-{upgrade_request_id}"
    return rid if len(rid) <= 128 else "upgrade-" + hashlib.sha256(upgrade_request_id.encode()).hexdigest()[:40]


def _expanded(run: UpgradeRun) -> list[ExpandedStep]:
    return [ExpandedStep(s.name, s.group, tuple(tuple(b) for b in s.batches)) for s in run.steps]


class UpgradeCerts:
    def __init__(self, store: UpgradeStore, publish: Publish, kick: Callable[[str], None] = lambda c: None,
                 answer_timeout_s: float = DEFAULT_TIMEOUT_S, now: Callable[[], float] = time.time):
        self.store, self.publish, self.kick = store, publish, kick
        self.deadline = AnswerDeadline(store, answer_timeout_s, now)
        self.files = RedisNodeFiles(store.r)

    async def _answer(self, cluster: str) -> dict[str, Any] | None:
        raw = await self.store.r.get(upgrade_certs_key(cluster))
        return None if raw is None else json.loads(raw)

    async def _answer_of(self, run: UpgradeRun) -> dict[str, Any] | None:
        doc = await self._answer(run.cluster)
        return doc if doc is not None and doc.get("requestId") == renewal_id(run.request_id) else None

    # the local step ---------------------------------------------------------
    async def _settled(self, run: UpgradeRun, step: StepRun, what: str) -> bool:
        """Whether the certs service answered this run: the step marked done or failed with its
        reason ("certificate <what> failed: ..."), or failed for want of an answer past the
        deadline; False while it may still answer."""
        answer = await self._answer_of(run)
        if answer is None:
            waited = await self.deadline.overdue(run, step)
            if waited is None:
                return False
            why = silent_service("certs service", f"certificate {what} request {renewal_id(run.request_id)}", waited,
                                 "run the operation again")
            log.warning("%s", why, extra={"cluster": run.cluster, "request_id": run.request_id})
            mark_local(step, False, why)
            return True
        ok = answer["status"] == "Renewed"
        mark_local(step, ok, "" if ok else f"certificate {what} failed: {answer.get('reason', '')}"[:2000])
        return True

    async def renew(self, run: UpgradeRun, step: StepRun, plan: Plan) -> None:
        """Carry the certificates step one pass further: done (succeeded or failed with the
        certs service's reason), or asked and waiting (TemporaryError)."""
        if await self._settled(run, step, "renewal"):
            return
        names = renewed_instances(plan, _expanded(run))
        if not names:
            mark_local(step, True)  # no step of this upgrade carries a certificate
            return
        rid = renewal_id(run.request_id)
        # the target release: a subject kubeadm changed on the way (apiserver-kubelet-client's
        # group, bke.core.pki.subjects) is re-issued as that release issues it
        ask = RenewCerts(request_id=rid, cluster=run.cluster, names=names, origin="upgrade",
                         kubernetes_version=run.target.get("kubernetes") or None)
        # the same id every pass: JetStream drops a repeat within its window, and the certs
        # service answers a known request id from its record instead of renewing again
        await self.publish(ask.to_bytes(), RENEW_CERTS, {"Nats-Msg-Id": f"renew:{run.cluster}:{rid}"})
        log.info("renewal of %d certificate(s) asked", len(names), extra={"cluster": run.cluster,
                                                                          "request_id": run.request_id})
        raise TemporaryError(f"waiting for the certs service to renew {len(names)} certificate(s)", delay=WAIT_S)

    async def reissue(self, run: UpgradeRun, step: StepRun, new: Plan, store_plan: StorePlan) -> None:
        """A changed spec's certificates step, one pass further: done (with the certs service's
        answer), or asked and waiting (TemporaryError). The certs service issues the names of the
        plan it stores, so the run's plan is stored first (`store_plan`: kept aside and put back
        if the run fails, as before a join); asking again is answered from the same ensure."""
        if await self._settled(run, step, "re-issue"):
            return
        await store_plan(run, new)
        rid = renewal_id(run.request_id)
        ask = IssueCerts(request_id=rid, cluster=run.cluster, purpose="apply")
        await self.publish(ask.to_bytes(), ISSUE_CERTS, {"Nats-Msg-Id": f"issue:{run.cluster}:{rid}"})
        log.info("re-issue of the certificates whose names change asked", extra={"cluster": run.cluster,
                                                                                  "request_id": run.request_id})
        raise TemporaryError("waiting for the certs service to re-issue the certificates whose names change", delay=WAIT_S)

    # the answers --------------------------------------------------------------
    async def _record(self, cluster: str, doc: dict[str, Any]) -> None:
        run = await self.store.load(cluster)
        if run is None or not run.running or renewal_id(run.request_id) != doc["requestId"]:
            return  # another upgrade's, or one that ended
        current = await self._answer(cluster)
        if current is not None and current.get("requestId") == doc["requestId"] and current["status"] == RunStatus.FAILED:
            # the first failure of this renewal is its reason: a node that was not re-sealed is
            # reported before the `certs renewed` that follows, which must not hide it
            return
        await self.store.r.set(upgrade_certs_key(cluster), json.dumps(doc))
        self.kick(cluster)

    async def on_renewed(self, ev: CertsRenewed) -> None:
        if ev.origin != "upgrade":
            return
        await self._record(ev.cluster, {"requestId": ev.request_id, "status": "Renewed",
                                        "certificates": {c.instance: c.nodes for c in ev.certificates}})

    async def on_issued(self, ev: CertsIssued) -> None:
        """A changed spec's re-issue answered: each re-issued leaf with the node it is placed on
        (a cluster-wide leaf has none: no node step carries it, see `files_for`)."""
        if not ev.request_id.startswith("upgrade-"):
            return  # an install's, a retry's or a join's
        owners = {iid: split_instance_id(iid)[1] for iid in ev.reissued}
        await self._record(ev.cluster, {"requestId": ev.request_id, "status": "Renewed",
                                        "certificates": {iid: [o] if o else [] for iid, o in owners.items()}})

    async def on_failed(self, ev: CertsFailed) -> None:
        # an upgrade's renewal, or a changed spec's re-issue (an ensure: operation install)
        if ev.operation not in ("renewal", "install") or not ev.request_id.startswith("upgrade-"):
            return
        node = f"node {ev.node}: " if ev.node and ev.node not in ev.reason else ""
        await self._record(ev.cluster, {"requestId": ev.request_id, "status": RunStatus.FAILED, "reason": node + ev.reason})

    # the node steps -------------------------------------------------------------
    async def files_for(self, run: UpgradeRun, step: str, group: str, hosts: list[str],
                        plan: Plan) -> dict[str, list[NewFile]] | str:
        """host -> the renewed files step `step` carries to it ({} when it carries none), or why
        they cannot be sent (the step then fails before anything is sent)."""
        if not cert_rows(step, group) or not any(s.name == STEP for s in run.steps):
            return {}
        answer = await self._answer_of(run)
        if answer is None or answer["status"] != "Renewed":
            return "the certificates step has no renewal to deliver"
        by_node = renewed_by_node(answer["certificates"])
        wanted = [h for h in hosts if by_node.get(h)]
        sets = await self.files.get_many(run.cluster, "certs", wanted)
        out: dict[str, list[NewFile]] = {}
        try:
            for h in wanted:
                out[h] = cert_files(plan, step, group, h, by_node[h], sets.get(h))
        except ValueError as exc:
            return str(exc)
        return out
