"""A join's wait for its new nodes' agents, with a deadline: the pure part of step 5 of
`join.next_step` (no Redis, no bus, no clock: `now` is the caller's).

Why a deadline: a join waits for each new node's bundle to be sealed to its agent, which needs
the agent started and its key provisioned. An agent never started or never provisioned would
hold the join, and the cluster's one operation slot, for ever; past the deadline the join fails
naming those nodes and how to provision them.

    agents_wait(...) -> AgentsWait(failed, reason, since)   since: the wait's start, to record once
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["AGENTS_DEADLINE_S", "AgentsWait", "agents_wait"]

# The default of the dispatcher's setting `join_agents_timeout_s`.
AGENTS_DEADLINE_S = 900.0


@dataclass(frozen=True)
class AgentsWait:
    failed: bool
    reason: str
    since: str = ""  # when the wait began, if the join has not recorded it yet ("" otherwise)


def agents_wait(cluster: str, total: int, unsealed: list[str], since: str, now: datetime,
                deadline_s: float = AGENTS_DEADLINE_S) -> AgentsWait:
    """Wait for the agents of `unsealed` (of `total` new nodes) since `since` (ISO time; "" =
    the wait starts now), or fail once they have had `deadline_s` to register."""
    waited = (now - datetime.fromisoformat(since)).total_seconds() if since else 0.0
    if waited >= deadline_s:
        names = ", ".join(unsealed[:10]) + (f" and {len(unsealed) - 10} more" if len(unsealed) > 10 else "")
        return AgentsWait(True, (
            f"the agents of {names} never registered within {deadline_s:.0f} s (their bundles were not sealed): "
            f"start each node's agent and record its key (`bke agent bootstrap`, or `bke-agent init` on the node "
            f"then `bke agent provision 'bke-agent-x25519 <key>' --cluster {cluster} --node NODE`), then join again"))
    return AgentsWait(False, (f"waiting for the agents of {', '.join(unsealed[:5])} to register "
                              f"({total - len(unsealed)}/{total} sealed; {max(0.0, deadline_s - waited):.0f} s left)"),
                      "" if since else now.isoformat())
