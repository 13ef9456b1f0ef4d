"""The command keys an agent trusts, and how a rollover of the command-signing key changes them.

Why a keyring and not one pinned key: the signing key must be replaceable without bootstrapping
every agent again, and with thousands of agents some are down or slow at any moment, so the new
key cannot replace the old one everywhere at the same instant. As TUF's root rotation and
kubeadm's CA rollover do, trust moves in an overlap:

    1. the agent is bootstrapped with one key (pinned by the operator: command_key_pin), no end
    2. a TrustCommandKey step (bke.contracts.agent_steps), in a command signed by that key, names the
       next key and the end of the signer's overlap: both are trusted, the old one until its end
    3. the signers switch to the next key; commands under either key run during the overlap
    4. after the end (the agent's clock), or at once on a TrustCommandKey signed by the new key
       itself (a signed retire), the old key is refused

The next key is learnt only from a command the agent already trusts (never from a bus answer or
a field nobody signed). An overlap's end only moves earlier: a replayed or forged-by-an-old-key
announcement cannot keep a key alive longer than the first one said.

The check per command is one dict lookup and one comparison of times (the agent verifies every
command). Pure: no file or clock of its own; the agent stores `to_text()` and passes `now`.

Errors (permanent: the same input gives the same answer)::

    PermanentError
     └─ SigningKeyError (bke.core.secrets.signing)   a keyring text or a step that does not parse
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from .binding import aware_time
from .signing import CommandVerifyKey, SigningKeyError, parse_public_line

__all__ = ["CommandKeyring", "TrustedKey"]

_FORM = 1  # the keyring text's form


@dataclass(frozen=True)
class TrustedKey:
    key: CommandVerifyKey
    not_after: datetime | None  # None: trusted until a later step says otherwise


class CommandKeyring:
    """Immutable: `trust` returns a new ring. `origin`: the id of the key the agent was
    bootstrapped with when this ring began (an agent bootstrapped again with another key starts
    from that key, not from a ring grown from an older bootstrap: agent/bke_agent/command_keys.py)."""

    def __init__(self, keys: tuple[TrustedKey, ...], origin: str | None = None) -> None:
        if not keys:
            raise SigningKeyError("a command keyring needs at least one key")
        self.keys, self.origin = keys, origin
        self._by_id = {t.key.key_id: t for t in keys}

    @classmethod
    def of(cls, key: CommandVerifyKey) -> CommandKeyring:
        """The ring of a freshly bootstrapped agent: its pinned key, no end."""
        return cls((TrustedKey(key, None),), key.key_id)

    def key_ids(self) -> list[str]:
        return [t.key.key_id for t in self.keys]

    def verify_key(self, key_id: str, now: datetime) -> tuple[CommandVerifyKey | None, str | None]:
        """The key a command names, if trusted at `now`; else (None, why not)."""
        held = self._by_id.get(key_id)
        if held is None:
            return None, f"signed by key {key_id!r}, not the dispatcher key this agent trusts"
        if held.not_after is not None and now > held.not_after:
            return None, f"signed by key {key_id!r}, retired at {held.not_after.isoformat()} (its overlap ended)"
        return held.key, None

    def trust(self, public_line: str, signer_id: str, signer_not_after: str, now: datetime) -> CommandKeyring:
        """The ring after a TrustCommandKey step (`public_line`, `signer_not_after`) in a command
        signed by `signer_id` (already verified and trusted at `now`): the new key without end,
        the signer until the earlier of its current end and `signer_not_after`; nothing else."""
        new = parse_public_line(public_line)
        end = aware_time(signer_not_after)
        if end is None:
            raise SigningKeyError(f"signerNotAfter: {signer_not_after!r} is not an ISO 8601 time")
        signer, why = self.verify_key(signer_id, now)
        if signer is None:
            raise SigningKeyError(why or "untrusted signer")
        keys = [TrustedKey(new, None)]
        if signer.key_id != new.key_id:
            held = self._by_id[signer_id].not_after
            keys.append(TrustedKey(signer, end if held is None else min(held, end)))
        return CommandKeyring(tuple(keys), self.origin)

    def describe(self) -> str:
        """One line for logs and step output: key ids and ends (public values only)."""
        return ", ".join(f"{t.key.key_id} until {t.not_after.isoformat() if t.not_after else 'replaced'}"
                         for t in self.keys)

    def to_text(self) -> str:
        doc = {"form": _FORM, "origin": self.origin, "keys": [{"publicLine": t.key.public_line,
                                        "notAfter": t.not_after.isoformat() if t.not_after else None}
                                       for t in self.keys]}
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_text(cls, text: str, source: str) -> CommandKeyring:
        """The ring `to_text` wrote; SigningKeyError naming `source` and the field otherwise."""
        try:
            doc = json.loads(text)
            if doc.get("form") != _FORM:
                raise SigningKeyError(f"{source}: form {doc.get('form')!r}, expected {_FORM}")
            keys = []
            for i, item in enumerate(doc["keys"]):
                end = item.get("notAfter")
                when = None if end is None else aware_time(end)
                if end is not None and when is None:
                    raise SigningKeyError(f"{source}: keys[{i}].notAfter {end!r} is not an ISO 8601 time")
                try:
                    keys.append(TrustedKey(parse_public_line(item["publicLine"]), when))
                except SigningKeyError as exc:
                    raise SigningKeyError(f"{source}: keys[{i}].publicLine: {exc}") from None
            if not keys:
                raise SigningKeyError(f"{source}: no keys")
            origin = doc.get("origin")
            return cls(tuple(keys), None if origin is None else str(origin))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SigningKeyError(f"{source}: not a command keyring ({type(exc).__name__}: {exc})") from None
