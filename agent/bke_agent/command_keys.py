"""The command keys this agent trusts, held in memory and on disk (bke.core.secrets.command_keyring).

    <state dir>/command-keys.json   written by a TrustCommandKey step (atomically, fsynced,
                                    before the step answers); once present it is the agent's
                                    trust, ahead of BKE_AGENT_COMMAND_KEY and command.pub, which
                                    hold the key it was bootstrapped with

Why the file wins over the environment: the environment is written once, at bootstrap, and
still names the old key after a rollover; the file only ever changes through a command signed by
a key the agent trusted. Unless the agent was bootstrapped again with another key (the file
names the key its ring began from): the operator's bootstrap, from a channel BKE controls, is
then the newer word, and the ring starts again from that key (a node that missed a whole
rollover window is fixed that way). A file that does not parse stops the agent at start (it
would refuse every command or trust the wrong key), saying which file.

A TrustCommandKey step is taken only in a command of phase COMMAND_KEY_PHASE, so that no
command of another kind (an install's, an upgrade's) can change whom the agent trusts.
"""
from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import COMMAND_KEY_PHASE, TrustCommandKey
from bke.core.secrets.command_keyring import CommandKeyring
from bke.core.secrets.signing import CommandVerifyKey, SigningKeyError
from bke.contracts.statuses import StepResultStatus

from .backends.base import StepOutcome
from .errors import PermanentStepError
from .fsutil import write_atomic

__all__ = ["KEYRING_FILE", "AgentKeyring"]

log = logging.getLogger("bke.agent.command_keys")
KEYRING_FILE = "command-keys.json"


class AgentKeyring:
    """The ring in use; `path` None keeps it in memory only (a fleet without state dirs)."""

    def __init__(self, ring: CommandKeyring, path: Path | None = None, fsync: bool = True) -> None:
        self.ring, self.path, self.fsync = ring, path, fsync

    @classmethod
    def load(cls, bootstrapped: CommandVerifyKey, state_dir: Path | None, fsync: bool = True) -> AgentKeyring:
        """The ring in the state dir's file if there is one, else the bootstrapped key alone.
        SigningKeyError names the file when it does not parse."""
        path = None if state_dir is None else state_dir / KEYRING_FILE
        if path is not None and path.exists():
            ring = CommandKeyring.from_text(path.read_text(), str(path))
            if ring.origin == bootstrapped.key_id:
                return cls(ring, path, fsync)
            log.warning("bootstrapped again with command key %s: %s (begun from %s) no longer applies",
                        bootstrapped.key_id, path, ring.origin)
        return cls(CommandKeyring.of(bootstrapped), path, fsync)

    def verify_key(self, key_id: str, now: datetime) -> tuple[CommandVerifyKey | None, str | None]:
        return self.ring.verify_key(key_id, now)

    def trust(self, step: TrustCommandKey, cmd: AgentCommand, now: datetime) -> StepOutcome:
        """Carry out a TrustCommandKey step of `cmd` (verified by the loop before it ran)."""
        if cmd.phase != COMMAND_KEY_PHASE:
            raise PermanentStepError(f"a trust_command_key step runs only in a {COMMAND_KEY_PHASE!r} command, "
                                     f"not in {cmd.phase!r}")
        try:
            ring = self.ring.trust(step.public_line, cmd.key_id, step.signer_not_after, now)
        except SigningKeyError as exc:
            raise PermanentStepError(f"refused: {exc}") from None
        if ring.to_text() == self.ring.to_text():
            return StepOutcome(StepResultStatus.SKIPPED, stdout=f"command keys unchanged: {ring.describe()}")
        if self.path is not None:
            write_atomic(self.path, ring.to_text().encode(), 0o644, fsync=self.fsync)  # public keys only
        self.ring = ring  # after the file: a crash before it leaves the old trust, and the step runs again
        log.info("command keys changed: %s", ring.describe(),
                 extra={"cluster": cmd.cluster, "node": cmd.node, "command_id": cmd.command_id})
        return StepOutcome(StepResultStatus.SUCCEEDED, stdout=f"command keys: {ring.describe()}")
