"""Is this command BKE's, for this node, and fresh? Checked before anything runs.

Why these checks, in this order (the loop adds "not replayed" between them: a command whose id
the journal holds is answered from the journal and never runs again):
    1. signed, by a command key this agent trusts now (`key_id` looked up in its keyring,
       command_keys.py: the key it was provisioned with, or the keys a rollover gave it, each
       until its end), then the Ed25519 signature over `AgentCommand.signing_bytes()`: anyone
       can publish on the bus, only the dispatcher and the upgrader hold the key
       (bke.core.secrets.signing)
    2. for this agent's cluster and node: a command signed for another node is not ours, even
       if it reached our subject
    3. fresh: `issued_at - CLOCK_SKEW_S <= now <= expires_at`, and a validity no longer than
       COMMAND_VALIDITY_S (the window is justified in bke.contracts.agent)

The provisioned key: `BKE_AGENT_COMMAND_KEY` (the public line or bare base64), else the file
`<state dir>/command.pub` written at provisioning (the lab supervisor; `bke agent bootstrap`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bke.contracts.agent import CLOCK_SKEW_S, COMMAND_VALIDITY_S, AgentCommand
from bke.core.secrets.binding import aware_time
from bke.core.secrets.signing import CommandVerifyKey, SigningKeyError, parse_public_line, signed_part

from .command_keys import AgentKeyring

__all__ = ["COMMAND_KEY_FILE", "CommandVerifier", "NoCommandKey", "load_command_key"]

COMMAND_KEY_FILE = "command.pub"


class NoCommandKey(RuntimeError):
    """This agent was not provisioned with the dispatcher's public key: it would run nothing."""


def load_command_key(env_value: str | None, state_dir: Path) -> CommandVerifyKey:
    """The provisioned dispatcher key (env first, then the state dir's file)."""
    path = state_dir / COMMAND_KEY_FILE
    text = env_value or (path.read_text() if path.exists() else "")
    if not text.strip():
        raise NoCommandKey(f"no command key: set BKE_AGENT_COMMAND_KEY or write {path} at provisioning")
    try:
        return parse_public_line(text)
    except SigningKeyError as exc:
        raise NoCommandKey(f"the provisioned command key is unusable: {exc}") from None


@dataclass(frozen=True)
class CommandVerifier:
    """`key`: the key the agent was provisioned with; `keys`: the keyring in use (the loop's
    TrustCommandKey steps change it), by default that key alone."""

    key: CommandVerifyKey
    cluster: str
    node: str
    keys: AgentKeyring = field(default=None)  # type: ignore[assignment]  # set in __post_init__

    def __post_init__(self) -> None:
        if self.keys is None:
            object.__setattr__(self, "keys", AgentKeyring.load(self.key, None))

    def authentic(self, cmd: AgentCommand, body: bytes | None = None, now: datetime | None = None) -> str | None:
        """Checks 1 and 2: None if a key this agent trusts at `now` signed this command for this
        node, else why not. `body`: the bytes `cmd` was read from as they are (no form
        conversion); when the signer sent its canonical bytes as they are
        (bke.core.secrets.signing.signed_command_bytes), those bytes are verified without
        serialising `cmd` again."""
        if not cmd.signature_b64:
            return "unsigned command"
        key, why = self.keys.verify_key(cmd.key_id, now or datetime.now(timezone.utc))
        if key is None:
            return why
        signed = signed_part(body, cmd.signature_b64) if body is not None else None
        if not key.verify(cmd.signing_bytes() if signed is None else signed, cmd.signature_b64):
            return "bad signature"
        if (cmd.cluster, cmd.node) != (self.cluster, self.node):
            return f"for node {cmd.node!r} of cluster {cmd.cluster!r}, not this agent's"
        return None

    def fresh(self, cmd: AgentCommand, now: datetime) -> str | None:
        """Check 3: None if `now` is within the command's validity, else why not."""
        issued, expires = aware_time(cmd.issued_at), aware_time(cmd.expires_at)
        if issued is None or expires is None:
            return "no valid issuedAt/expiresAt"
        if expires - issued > timedelta(seconds=COMMAND_VALIDITY_S):
            return f"validity longer than {COMMAND_VALIDITY_S}s"
        if now < issued - timedelta(seconds=CLOCK_SKEW_S):
            return f"not valid before {cmd.issued_at}"
        if now > expires:
            return f"expired at {cmd.expires_at}"
        return None
