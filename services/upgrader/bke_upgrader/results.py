"""An agent's answer to an upgrade command, recorded beside the run, and the pass that folds it
woken: at once when it completes the batch in flight, else the ordinary way (the runner's
coalescing window).

Whose answer it is, is the dispatcher's judgement, not this service's. Answers come from the
dispatcher (`bke.v1.node-commands.answered`), which heard each from an agent and believed it by
its rule before it sent it on (bke_dispatcher.results): it came on its node's subject, its
command id names that node, it comes from the node's accepted agent (learned from `certs.sealed`,
never from the agent's own claim), and it answers a command of the cluster's current incarnation.
Only the dispatcher may publish that subject: the channel names it alone as sender
(bke.contracts.node_commands), the bus permissions are derived from that
(bke.adapters.auth.permissions), and tests/security/test_bus_attacks.py::test_publish_matrix
holds it on a real server for every identity (a node's agent, the other services, the operator,
a dashboard). So this service does not check the agent again: that would read the dispatcher's
record of accepted agents, a key family it does not own, for a verdict the one service that hears
agents already gave when the answer arrived (a forged or misrouted result never reaches this
service: bke_dispatcher's tests hold that).

What is checked here is what this service judges from its own view when it records: that the
command id names the node the answer is from (`misrouted`), and that the answer is of the
cluster's current incarnation (`UpgradeStore.other_incarnations`; plan-meta, which this service
replaces with each upgrade's plan): an answer can wait in the commands' stream while this service
is down, and the cluster be deleted and made again under its name meanwhile. Answers come several
to a message and are handled at once, so a message's answers of a cluster cost one recording (at
most two round trips), not some per answer.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bke.contracts.agent import CommandResult
from bke.contracts.statuses import StepResultStatus
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
        failed = next((s for s in res.steps if s.status == StepResultStatus.FAILED), None)
        step = failed.id if failed else ""
        stderr = (failed.stderr or failed.stdout) if failed else ""
        # the incarnation's check and the write shared by the batch (15,000 results at 5,000 nodes)
        why = await up.store.record_if_current(res, step, stderr)
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
    `on_result`, bke_upgrader.ops.restore), with the upgrade's `store`: why it is not recorded
    ("" if it is), an answer of another incarnation counted as an upgrade's is."""
    return misrouted(res) or (await store.other_incarnations(res.cluster, [res]))[0]
