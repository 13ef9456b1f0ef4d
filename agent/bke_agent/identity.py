"""The agent's identity: one X25519 key pair, made once when the node is provisioned.

Why X25519: the services seal every private file a node receives to this key
(`bke.core.secrets.sealing`), so only this agent can open it; the public half travels in
`AgentRegistered`, the private half never leaves `<state>/agent.key` (0600). The agent id on
every result is the key's fingerprint (`agent_key_id`), so a result names the key that made it.

Creation is race-free: `bke agent bootstrap` runs `bke-agent init` right after starting the
daemon, and both may create the key at once. The key is written to a private temporary file
and hard-linked into place (atomic, fails if the name exists); the loser reads the winner's key.
"""
from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from bke.core.secrets.sealing import (
    agent_key_id,
    generate_agent_key,
    open_sealed,
    private_key_from_pem,
    private_key_to_pem,
    public_key_to_raw,
)
from bke.core.secrets.snapshot_key import record_mac

from .fsutil import fsync_dir

__all__ = ["AgentIdentity", "KEY_FILE", "PUBLIC_KEY_PREFIX"]

KEY_FILE = "agent.key"
PUBLIC_KEY_PREFIX = "bke-agent-x25519"  # `bke-agent init` prints "<prefix> <base64 raw key>"


def _mtime(path: Path) -> datetime:
    """When the key file was written: it is written once, never rewritten."""
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


@dataclass(frozen=True, repr=False)
class AgentIdentity:
    """Key pair + id. `repr` shows only the id: the private key must never reach a log."""

    _key: X25519PrivateKey
    agent_id: str
    public_key_b64: str
    # when the key was made (its file's mtime; None for a key kept in memory): an unbound command
    # issued before it cannot be for this key (bke.core.secrets.binding)
    made_at: datetime | None = None

    def __repr__(self) -> str:
        return f"AgentIdentity(agent_id={self.agent_id})"

    @classmethod
    def from_key(cls, key: X25519PrivateKey, made_at: datetime | None = None) -> AgentIdentity:
        public = key.public_key()
        return cls(key, agent_key_id(public), base64.b64encode(public_key_to_raw(public)).decode(), made_at)

    @classmethod
    def ephemeral(cls) -> AgentIdentity:
        """A key pair kept in memory only: for fleets of benchmark agents and tests."""
        return cls.from_key(generate_agent_key())

    @classmethod
    def load_or_create(cls, state_dir: Path) -> tuple[AgentIdentity, bool]:
        """The identity in `state_dir`, created if missing; True if this call created it."""
        path = state_dir / KEY_FILE
        if path.exists():
            return cls.load(state_dir), False
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = generate_agent_key()
        tmp = state_dir / f".{KEY_FILE}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(private_key_to_pem(key))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return cls.load(state_dir), False
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(state_dir)
        return cls.from_key(key, _mtime(path)), True

    @classmethod
    def load(cls, state_dir: Path) -> AgentIdentity:
        path = state_dir / KEY_FILE
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise PermissionError(f"{path} is readable by others (mode {mode:o}); it must be 0600")
        return cls.from_key(private_key_from_pem(path.read_bytes()), _mtime(path))

    def open_sealed(self, blob: bytes) -> bytes:
        """Decrypt a blob sealed to this agent (errors name key ids only, never content)."""
        return open_sealed(self._key, blob)

    def snapshot_record_mac(self, snapshot_public: X25519PublicKey, data: bytes) -> str:
        """This agent's MAC over an etcd snapshot record (bke.core.secrets.snapshot_key.record_mac)."""
        return record_mac(self._key, snapshot_public, data)

    @property
    def public_line(self) -> str:
        """What `bke-agent init` prints: `bke-agent-x25519 <base64 of the raw 32-byte key>`."""
        return f"{PUBLIC_KEY_PREFIX} {self.public_key_b64}"
