"""The bus's trust chain and the identities issued on it (bke.adapters.auth.registry): written by
the admin side; the renewer reads the authority and records the identities it renews.

    bke:auth:authority                   string  NATS operator/account seeds, encrypted (bke.adapters.auth)
    bke:auth:identities                  hash    identity name -> issued record  (bke.adapters.auth)
"""
from __future__ import annotations

from .common import PREFIX

__all__ = ["auth_authority_key", "auth_identities_key"]


def auth_authority_key() -> str:
    """The NATS trust chain's seeds and revocations, encrypted at rest (bke.adapters.auth.registry)."""
    return f"{PREFIX}:auth:authority"


def auth_identities_key() -> str:
    """Every identity ever issued on the bus: name -> JSON record (bke.adapters.auth.registry)."""
    return f"{PREFIX}:auth:identities"
