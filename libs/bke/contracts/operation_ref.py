"""Which operation an agent command belongs to, typed: the command carries it (signed, with the
rest of its body), the agent echoes it in its result, and the dispatcher, the one service that
hears agents, routes the result by it to the operation's owner.

Why typed: before, each service told its results from the others' by looking for its marks
(`/upgrade@`, `/restore@`) inside the command id, and read the shared result subject with
filters of its own. A kind says whose an answer is without reading any id.

    kind   the operation (OperationKind): who runs it follows from it (`owner`)
    id     the operation's request id ("" for the install's phases, a health round's number...)
    step   the phase, step or stage the command is part of ("" when the operation has none)

An agent of an earlier release forbids unknown fields: it is sent commands without it
(bke.core.secrets.binding, `OPERATION_REFS`), and its results, which carry none, are routed by
the operation their command id names (bke.core.operation_refs.ref_of_command_id), for one
release.
"""
from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .base import Message

__all__ = ["OperationKind", "OperationRef", "UPGRADER_KINDS", "owner"]


class OperationKind(StrEnum):
    """The operations that send commands to agents."""

    INSTALL = "install"  # an install's phases (and a retry's)
    HEALTH = "health"  # a periodic health round
    COMMAND_KEY = "command-key"  # a command-key rollover's announcement
    ROTATION = "rotation"
    RESET = "reset"  # a reset, or a delete's resets
    JOIN = "join"
    REMOVAL = "removal"
    UPGRADE = "upgrade"  # an upgrade, its retry, or a changed spec's run (`bke apply`)
    ETCD_RESTORE = "etcd-restore"


# The kinds the upgrader runs: their results go to it (bke.v1.node-commands.answered)
UPGRADER_KINDS = frozenset({OperationKind.UPGRADE, OperationKind.ETCD_RESTORE})


def owner(kind: OperationKind) -> str:
    """The service that runs operations of this kind."""
    return "upgrader" if kind in UPGRADER_KINDS else "dispatcher"


class OperationRef(Message):
    kind: OperationKind
    id: str = Field("", max_length=128)
    step: str = Field("", max_length=128)
