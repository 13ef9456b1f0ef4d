"""Identities on the bus: NATS nkeys and JWTs, the permissions table, the identity registry."""
from __future__ import annotations

from .authority import ACCOUNT_NAME, Authority, IssuedUser, creds_text, new_authority, write_creds
from .jwt import KeyPair, decode_jwt, encode_jwt, keypair_from_seed, new_keypair
from .permissions import (
    ROLES,
    SERVICE_ROLES,
    Permissions,
    agent_deliver_subject,
    agent_permissions,
    identity_name,
    inbox_prefix,
    role_permissions,
)

__all__ = [
    "ACCOUNT_NAME", "ROLES", "SERVICE_ROLES", "Authority", "IssuedUser", "KeyPair", "Permissions",
    "agent_deliver_subject", "agent_permissions", "creds_text", "decode_jwt", "encode_jwt", "identity_name",
    "inbox_prefix", "keypair_from_seed", "new_authority", "new_keypair", "role_permissions", "write_creds",
]
