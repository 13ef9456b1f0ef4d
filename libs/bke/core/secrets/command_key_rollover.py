"""A rollover of the command-signing key, as a record and the commands that carry it to agents.

The steps (bke.core.secrets.command_keyring says what an agent does with each):

    start     a next key is made and stored sealed beside the current one; the record names its
              public half and the end of the current key's overlap (`previous_not_after` =
              start + overlap)
    announce  each accepted agent is sent `announcement(...)` by the dispatcher
              (bke_dispatcher.command_key), signed by the CURRENT key: a TrustCommandKey naming
              the next key, the current one trusted until `previous_not_after`; its answer is
              recorded as the node's acknowledgement
    switch    the next key becomes the current one; every signer reads it again (RELOAD_S,
              bke.adapters.state.command_signing) and signs with it from then on
    finish    the record goes; each node may be sent `retirement(...)`, signed by the NEW key,
              which drops the old key at once instead of at `previous_not_after`

Why the switch is the operator's command and not automatic: `bke keys command-key switch`
waits until every accepted agent acknowledged, but only the operator can decide to leave a node
behind (`--force`: a node down for the whole window trusts the old key alone and must be
bootstrapped again). The switch must come before `previous_not_after`: after it, an
agent that took the announcement refuses what the old key still signs.

Pure: times are passed in; the record's JSON is what Redis holds (bke.adapters.state.command_key_rotation).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import COMMAND_KEY_PHASE, TrustCommandKey
from bke.contracts.operation_ref import OperationKind, OperationRef
from bke.core.errors import PermanentError

from .binding import aware_time

__all__ = ["MIN_OVERLAP_S", "Rollover", "RolloverError", "acked_key_id", "announcement", "parse_overlap", "retirement"]

MIN_OVERLAP_S = 600.0  # below this, the announcement cannot reach a fleet before the old key ends
_FORM = 1
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class RolloverError(PermanentError):
    """A rollover step that cannot be taken now (none in progress, one already, not switched)."""


def parse_overlap(text: str, minimum_s: float = MIN_OVERLAP_S) -> float:
    """`90m`, `24h`, `7d`, `3600s` (or bare seconds) -> seconds; RolloverError naming --overlap."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if m is None:
        raise RolloverError(f"--overlap: {text!r} is not a duration (e.g. 24h, 90m, 2d)")
    seconds = float(m[1]) * _UNITS[m[2] or "s"]
    if seconds < minimum_s:
        raise RolloverError(f"--overlap: {text} is shorter than {minimum_s:g}s, too short to reach every agent")
    return seconds


@dataclass(frozen=True)
class Rollover:
    next_public_line: str  # public: what agents are told to trust
    next_key_id: str
    previous_key_id: str  # the key being replaced
    previous_not_after: datetime  # the end of its overlap, as agents are told
    started_at: datetime
    switched_at: datetime | None = None

    @property
    def stage(self) -> Literal["announcing", "switched"]:
        return "announcing" if self.switched_at is None else "switched"

    def switched(self, now: datetime) -> Rollover:
        return replace(self, switched_at=now)

    def seconds_left(self, now: datetime) -> float:
        """Until the old key's end (negative: ended)."""
        return (self.previous_not_after - now).total_seconds()

    def to_json(self) -> str:
        return json.dumps({
            "form": _FORM, "nextPublicLine": self.next_public_line, "nextKeyId": self.next_key_id,
            "previousKeyId": self.previous_key_id, "previousNotAfter": self.previous_not_after.isoformat(),
            "startedAt": self.started_at.isoformat(),
            "switchedAt": self.switched_at.isoformat() if self.switched_at else None}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Rollover:
        try:
            doc = json.loads(text)
            if doc.get("form") != _FORM:
                raise RolloverError(f"command-key rollover record: form {doc.get('form')!r}, expected {_FORM}")
            end, started = aware_time(doc["previousNotAfter"]), aware_time(doc["startedAt"])
            switched = None if doc.get("switchedAt") is None else aware_time(doc["switchedAt"])
            if end is None or started is None or (doc.get("switchedAt") is not None and switched is None):
                raise RolloverError("command-key rollover record: previousNotAfter, startedAt, switchedAt must be times")
            return cls(str(doc["nextPublicLine"]), str(doc["nextKeyId"]), str(doc["previousKeyId"]), end, started,
                       switched)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RolloverError(f"command-key rollover record unreadable ({type(exc).__name__}: {exc})") from None


def _trust(public_line: str, signer_not_after: datetime, cluster: str, node: str, issued_at: datetime,
           command_id: str) -> AgentCommand:
    step = TrustCommandKey(id="trust-command-key", public_line=public_line,
                           signer_not_after=signer_not_after.isoformat())
    return AgentCommand(command_id=command_id, cluster=cluster, node=node, phase=COMMAND_KEY_PHASE,
                        issued_at=issued_at.isoformat(), steps=[step],
                        operation=OperationRef(kind=OperationKind.COMMAND_KEY))


def _command_id(cluster: str, node: str, key_id: str, retire: bool) -> str:
    """`<cluster>/command-key/<node>/<n>`, the form of every command id (the dispatcher parses the
    last part as a number): `n` from the key's id, even for its announcement, odd for its retire."""
    return f"{cluster}/{COMMAND_KEY_PHASE}/{node}/{int(key_id, 16) * 2 + int(retire)}"


def acked_key_id(gen: int) -> str | None:
    """The key an announcement of command number `gen` (`_command_id`) named; None for a retire."""
    return None if gen % 2 else format(gen // 2, "016x")


def announcement(rollover: Rollover, cluster: str, node: str, issued_at: datetime) -> AgentCommand:
    """The command (to be signed by the current key) that gives `node` the next key. Its id is
    the same for every send of this rollover to this node: a redelivery is answered from the
    agent's journal."""
    return _trust(rollover.next_public_line, rollover.previous_not_after, cluster, node, issued_at,
                  _command_id(cluster, node, rollover.next_key_id, retire=False))


def retirement(current_public_line: str, current_key_id: str, cluster: str, node: str,
               issued_at: datetime) -> AgentCommand:
    """The command (to be signed by the current key, the rollover's new one) that drops every
    other key on `node` now: its signer trusted without end, no other."""
    return _trust(current_public_line, issued_at - timedelta(seconds=1), cluster, node, issued_at,
                  _command_id(cluster, node, current_key_id, retire=True))
