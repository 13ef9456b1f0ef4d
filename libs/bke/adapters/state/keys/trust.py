"""Keys recorded by BKE, never learned from the bus: made by the admin side (and the command-signing
key by the first dispatcher that needs it), read by the services that sign, seal or check with them.

    bke:command-signing-key              string  the dispatcher's Ed25519 key, encrypted at rest (deployment)
    bke:command-signing-key:next         string  the next one during a rollover, encrypted at rest (admin:
                                                 bke.adapters.state.command_key_rotation)
    bke:command-key-rollover             string  the rollover in progress, public values only (admin)
    bke:etcd-snapshot-key                string  the X25519 key etcd snapshots are sealed to, encrypted at rest
                                                 (admin: bke.adapters.state.state_init)
    bke:<writer>-signing-key             string  the plan or render writer's Ed25519 key: public half in clear,
                                                 private half encrypted at rest (admin: bke.adapters.state.state_init)
"""
from __future__ import annotations

from .common import PREFIX

__all__ = ["command_key_rollover_key", "command_signing_key", "command_signing_next_key", "etcd_snapshot_key",
           "record_signing_key"]


def command_signing_key() -> str:
    """The dispatcher replicas' one command-signing key (bke.core.secrets.signing), per deployment."""
    return f"{PREFIX}:command-signing-key"


def command_signing_next_key() -> str:
    """The key a rollover switches the signers to (bke.adapters.state.command_key_rotation): sealed
    as the current one is, so that the switch copies its bytes."""
    return f"{PREFIX}:command-signing-key:next"


def command_key_rollover_key() -> str:
    """The command-key rollover in progress (bke.core.secrets.command_key_rollover): public values."""
    return f"{PREFIX}:command-key-rollover"


def etcd_snapshot_key() -> str:
    """The deployment's one etcd snapshot key (bke.core.secrets.snapshot_key): agents seal to its
    public half, only BKE opens a snapshot."""
    return f"{PREFIX}:etcd-snapshot-key"


def record_signing_key(writer: str) -> str:
    """A record writer's signing key (bke.core.secrets.record_signing): `plan` or `render`. Two
    parts, like every global key: no cluster's key pattern (`bke:*:plan`) can match it."""
    return f"{PREFIX}:{writer}-signing-key"
