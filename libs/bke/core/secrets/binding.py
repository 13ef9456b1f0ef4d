"""Commands bound to their receiver: the agent's provisioned key and the cluster's incarnation.

A signature (bke.core.secrets.signing) says that BKE made a command for a cluster and node *name*.
Names outlive what they name: `bke agent provision` gives a node a new agent key (a new host,
a wiped state directory), and `bke delete` then a new install makes a cluster of the same name.
A command captured from the bus (the agent stream keeps commands for their 7-day validity)
would run again on either. So every command also names, inside the signed bytes:

    agentId      the fingerprint of the receiving agent's provisioned X25519 key
                 (bke.core.secrets.sealing.agent_key_id), read by the signer from what the operator
                 provisioned (`bke:<c>:agents:provisioned`), never from an agent's announcement
    incarnation  the cluster's incarnation: a random id the planner makes when it first stores
                 the cluster's plan (`incarnation` in plan-meta, bke.adapters.state.plans). A re-plan of a
                 failed install, an apply or an upgrade keep it; `bke delete` removes plan-meta
                 with the cluster, so a cluster made again under the same name gets a new one.
                 Its form is `<UTC time, microseconds>Z-<16 hex>`: incarnations of one name are
                 ordered by the time they were made (`newer_incarnation`). "" names a cluster
                 planned before incarnations existed, older than any other.

How the agent learns the incarnation, and why that is safe. It cannot be given at provisioning:
agents are provisioned before the cluster is installed, and one agent key serves every later
install of the node. So the agent learns it from the commands themselves: it remembers the
newest incarnation among the commands it took with its current key (`Served`, kept in its
state directory) and refuses a command of an older one. Think of an attacker who can publish on
an agent's command subject and holds every command ever signed (a leaked identity, a copy of
the stream); without the signing key it can only replay them:

  * a command for an earlier key of the node: its `agentId` is not this agent's: refused.
    Checked before the journal, so a replay is not even answered from it;
  * a command of a deleted cluster of the same name, once the agent took any command of the
    new one: an older incarnation: refused, before the journal too. (Answering it from the
    journal would hand the new install an old result under the same command id.) The journal
    itself is kept per incarnation, so the new install's commands, which reuse the old ids,
    run rather than being answered with the old results;
  * the first incarnation an agent remembers: every command bound to this agent's key was
    signed after the key was provisioned, so the first one names an incarnation that existed
    while this key did, and a newer one replaces it at the next command of the new install.
    An attacker cannot make the agent keep an old incarnation (any newer command moves it on)
    nor skip one (only BKE signs a newer id). What remains: between a delete and the first
    command of the new install reaching this agent, a command of the old incarnation that
    this agent never ran (it was never delivered to it) could still run, within its validity,
    and one it ran is answered from its journal. Commands reach an agent in stream order, so a
    replay published after the new install's first command arrives after it and is refused.
    The answer to such a replay names the old incarnation (`CommandResult.incarnation`, the
    incarnation of the command it answers), so the new install's dispatcher or upgrader, which
    reuse the old command ids, drop it (`result_refusal`) rather than count it;
  * a replay of a command this agent ran: answered from the journal, which keeps each result
    until a day after its command expired (agent journal), after which `fresh` refuses it;
  * an unbound command (signed by a BKE before binding, or for an agent whose heartbeats say
    it reads none): taken only by an agent that never took a bound command with its key (an
    agent updated from an older release answers the update command it was restarted by), and
    only if it was issued after this agent's key was made, so nothing captured before a
    re-provisioning runs after it. Once an agent took a bound command, unbound ones are refused.

The incarnation's order rests on the planner's clock: a cluster made again after a delete gets a
later time unless the planner's clock went back by more than the time between the two (then the
new install's commands are refused, saying so, until the agent is provisioned again).

Which agents are sent bound commands: those whose heartbeats do not say they are older than
binding (`AgentRuntime.command_binding`, recorded by the dispatcher; an agent of the previous
release forbids unknown fields and would refuse a bound command as malformed). An agent that
reported no runtime is sent bound commands. Whoever forges a heartbeat saying "no binding" only
gets unbound commands sent to an agent that refuses them: a denial of service, never a replay.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from bke.contracts.agent import CLOCK_SKEW_S, AgentCommand

__all__ = [
    "Binding",
    "AGENT_COMMAND_FORM",
    "COMMAND_BINDING",
    "OPERATION_REFS",
    "INCARNATION_PATTERN",
    "Served",
    "aware_time",
    "binding_for",
    "new_incarnation",
    "newer_incarnation",
    "receiver_refusal",
    "result_refusal",
    "served_after",
    "unbound_refusal",
]

COMMAND_BINDING = 1  # the form of binding this code signs and checks (agentId + incarnation)
# The command form that also carries the operation it is part of (AgentCommand.operation,
# bke.contracts.operation_ref), echoed in the result. An agent reports the newest form it reads
# (`AGENT_COMMAND_FORM`, in AgentRuntime.command_binding); one older than this is sent commands
# without it (it forbids unknown fields).
OPERATION_REFS = 2
AGENT_COMMAND_FORM = OPERATION_REFS  # what this code's agent reads
INCARNATION_PATTERN = r"^(\d{8}T\d{12}Z-[0-9a-f]{16})?$"  # "" for a cluster planned before incarnations
_INCARNATION = re.compile(INCARNATION_PATTERN)
_TIME_FORMAT = "%Y%m%dT%H%M%S%fZ"
_TIME_LEN = 22  # the time part of an incarnation, fixed width: ids of one name sort by it


def new_incarnation(now: datetime, token: str) -> str:
    """A cluster's incarnation made at `now` (UTC) with `token` (16 hex digits, random)."""
    inc = f"{now.astimezone(timezone.utc).strftime(_TIME_FORMAT)}-{token}"
    if not _INCARNATION.match(inc):
        raise ValueError(f"not an incarnation: {inc!r} (the token must be 16 hex digits)")
    return inc


def newer_incarnation(new: str, old: str) -> bool:
    """Whether `new` was made after `old` ("" is older than any). Two different ids made at the
    same microsecond are neither: they cannot both be one name's."""
    return new != old and new[:_TIME_LEN] > old[:_TIME_LEN]


@dataclass(frozen=True)
class Binding:
    """What a signer puts into a command for one node."""

    agent_id: str
    incarnation: str
    # whether the agent reads AgentCommand.operation (OPERATION_REFS): the form of the body, not
    # what it is bound to, so two bindings to the same agent and incarnation are equal
    operation_refs: bool = field(default=True, compare=False)


def binding_for(provisioned_agent_id: str | None, incarnation: str | None, runtime_binding: int | None) -> Binding | None:
    """The binding of a command to a node (None: sent unbound). `provisioned_agent_id`: the
    node's provisioned key id (None: no key provisioned, nothing to bind to); `incarnation`:
    the cluster's (None: planned before incarnations, bound as ""); `runtime_binding`: the
    binding its agent's heartbeats report (None: no runtime recorded)."""
    if provisioned_agent_id is None:
        return None
    if runtime_binding is not None and runtime_binding < COMMAND_BINDING:
        return None  # an agent older than binding refuses a body with fields it does not know
    return Binding(provisioned_agent_id, incarnation or "", runtime_binding is None or runtime_binding >= OPERATION_REFS)


@dataclass(frozen=True)
class Served:
    """What an agent remembers: the newest incarnation it took a bound command of, and with
    which of its keys (a new key starts afresh)."""

    agent_id: str
    incarnation: str


def _mine(served: Served | None, agent_id: str) -> Served | None:
    return served if served is not None and served.agent_id == agent_id else None


def receiver_refusal(cmd: AgentCommand, agent_id: str, served: Served | None) -> str | None:
    """Why a signed command is not for this agent's key and cluster incarnation (checked before
    the journal), None if it may be."""
    if cmd.agent_id is None:
        return None  # unbound: `unbound_refusal` decides, after the journal
    if cmd.agent_id != agent_id:
        return (f"bound to agent key {cmd.agent_id}, not this agent's {agent_id} "
                f"(signed before the node's agent was provisioned again)")
    inc, mine = cmd.incarnation or "", _mine(served, agent_id)
    if mine is None or inc == mine.incarnation or newer_incarnation(inc, mine.incarnation):
        return None
    return (f"for incarnation {inc or '(none)'} of cluster {cmd.cluster!r}, not {mine.incarnation or '(none)'} "
            f"which this agent serves (a deleted cluster of the same name)")


def aware_time(text: str) -> datetime | None:
    """An ISO time as an aware datetime (a naive one is UTC); None if it is not a time."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def unbound_refusal(cmd: AgentCommand, agent_id: str, served: Served | None, key_made_at: datetime | None) -> str | None:
    """Why an unbound command is refused (checked after the journal: a redelivery of one this
    agent ran is still answered), None if it may run or is bound."""
    if cmd.agent_id is not None:
        return None
    mine = _mine(served, agent_id)
    if mine is not None:
        return (f"not bound to this agent (no agentId/incarnation), and this agent takes only bound commands "
                f"since it took one of incarnation {mine.incarnation or '(none)'}")
    issued = aware_time(cmd.issued_at)
    if key_made_at is not None and issued is not None and issued < key_made_at - timedelta(seconds=CLOCK_SKEW_S):
        return f"not bound to this agent and issued at {cmd.issued_at}, before this agent's key was made"
    return None


def served_after(cmd: AgentCommand, agent_id: str, served: Served | None) -> Served | None:
    """What the agent remembers once it takes `cmd` (it passed `receiver_refusal`); None when
    that is unchanged (an unbound command, or the incarnation it remembers)."""
    if cmd.agent_id is None:
        return None
    inc, mine = cmd.incarnation or "", _mine(served, agent_id)
    if mine is not None and mine.incarnation == inc:
        return None
    return Served(agent_id, inc)


def result_refusal(result_incarnation: str | None, current: str | None) -> str | None:
    """Why a result is not counted for its cluster as it is now (None if it may be): it answers a
    command of `result_incarnation`, not of the cluster's `current` one (None: the cluster has no
    plan, so no incarnation is current). A result without one (an unbound command's, or from an
    agent older than the field) is judged by its command id and agent alone."""
    if result_incarnation is None or result_incarnation == current:
        return None
    return (f"it answers a command of incarnation {result_incarnation or '(none)'} of its cluster, "
            f"not the current {'(no plan)' if current is None else current or '(none)'}")
