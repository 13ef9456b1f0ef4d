"""An agent's answer to an upgrade command, recorded beside the run if it is believed, and the pass
that folds it woken: at once when it completes the batch in flight, else the ordinary way (the
runner's coalescing window).

It comes from the dispatcher (`bke.v1.node-commands.answered`), which heard it from the agent and
believed it by its rule (its results.py): it came on its node's subject, its command id names
that node, it comes from the node's accepted agent (learned from `certs.sealed`, never from the
agent's own claim), and it answers a command of the cluster's current incarnation
(bke.core.secrets.binding). The last three are checked here again where it is recorded
(`UpgradeStore.record_if_accepted`; an etcd restore's, which the restore records itself:
`untrusted_result`): the run's record does not rest on another service's check alone. Answers
come several to a message and are handled at once, so that check costs the whole message's
answers of a cluster one recording (three round trips), not some per answer.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.dispatcher import accepted_agents_key
from bke.contracts.statuses import RunStatus
from bke.adapters.state.plans import INCARNATION_READ, incarnation_of
from bke.contracts.agent import CommandResult
from bke.core.secrets.binding import result_refusal
from bke.core.upgrade.run import is_upgrade_command

if TYPE_CHECKING:
    from .operation import Upgrades
    from .store import UpgradeStore

__all__ = ["misrouted", "record_result", "untrusted_result"]

log = logging.getLogger("bke.upgrader")


async def record_result(up: Upgrades, res: CommandResult) -> None:
    if not is_upgrade_command(res.command_id):
        return  # an install's, a rotation's or a health round's: the dispatcher's
    why = misrouted(res)
    if not why:
        failed = next((s for s in res.steps if s.status == RunStatus.FAILED), None)
        step = failed.id if failed else ""
        stderr = (failed.stderr or failed.stdout) if failed else ""
        # the accepted-agent check and the write in one round trip (15,000 results at 5,000 nodes)
        why = await up.store.record_if_accepted(res, step, stderr)
    if why:
        log.warning("upgrade result dropped: %s", why, extra={"cluster": res.cluster, "node": res.node,
                                                             "command_id": res.command_id, "rate_key": "upgrade-untrusted"})
        return
    left = up.unanswered.get(res.cluster)
    if left is not None:
        left.discard(res.command_id)
        if not left:  # the batch's last answer: the pass that folds it may run now
            del up.unanswered[res.cluster]
            up.kick_at_once(res.cluster)
            return
    up.kick(res.cluster)


def misrouted(res: CommandResult) -> str:
    """Why a result is not believed from where it came ("" if it may be): its command id names
    another node than the subject it came on."""
    if res.command_id.split("/")[2:3] != [res.node]:
        return "its command id names another node"
    return ""


async def untrusted_result(store: UpgradeStore, res: CommandResult) -> str:
    """The same rule for a result of the upgrader's other operation (an etcd restore: its loop's
    `on_result`, bke_upgrader.ops.restore), with the upgrade's `store`: why it is not believed ("" if it is). A result that answers
    a command of another incarnation of its cluster is not either (counted, as
    `UpgradeStore.record_if_accepted` counts an upgrade's)."""
    why = misrouted(res)
    if why:
        return why
    async with store.r.pipeline(transaction=False) as pipe:
        pipe.hget(accepted_agents_key(res.cluster), res.node)
        if res.incarnation is not None:  # an answer to a bound command: of the cluster's current incarnation?
            pipe.hmget(plan_meta_key(res.cluster), INCARNATION_READ)
        accepted, *meta = await pipe.execute()
    accepted = accepted.decode() if isinstance(accepted, bytes) else accepted
    if accepted is None:
        return "no agent of this node was accepted"
    if accepted != res.agent_id:
        return f"agent {res.agent_id} is not the node's accepted agent"
    why = result_refusal(res.incarnation, incarnation_of(meta[0])) if meta else None
    if why:
        store.other_incarnation.dropped(res, why, log_it=False)  # its caller logs what it drops
    return why or ""
