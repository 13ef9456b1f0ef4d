"""The registry of bus identities, and the NATS authority, in Redis (what `bke state backup` saves).

    bke:auth:authority    the operator/account seeds + revocations, AES-GCM (bke.core.secrets.at_rest,
                          aad = the key name): useless without the operator's key file
    bke:auth:identities   name -> {name, role, cluster, node, public, jti, inbox, issued_at,
                          revoked_at, previous}: public facts only; a user's seed lives only in
                          its creds file (0600), where the process that uses it reads it

Issuing is not idempotent on purpose (a new key each time: a user seed is never stored, so it
cannot be handed out twice); callers that keep the creds file make it idempotent
(bke.lab.identities.LabIdentities.ensure issues only when the file is not the live key).
Revoking marks the record and adds the key to the authority's revocations; the caller then
pushes the account JWT to the server (`bke.adapters.auth.push.push_account`).
"""
from __future__ import annotations

import builtins
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass

import redis

from bke.core.secrets.at_rest import SecretBox
from bke.adapters.state.keys.auth import auth_authority_key, auth_identities_key
from .authority import ALL_USERS, Authority, IssuedUser, new_authority
from .jwt import decode_jwt
from .permissions import IDENTITY_TTL_S, ROLES, agent_permissions, identity_name, inbox_prefix, role_permissions

__all__ = ["IdentityRecord", "IdentityRegistry", "UnknownIdentity"]


class UnknownIdentity(LookupError):
    """No identity of that name was ever issued."""


@dataclass(frozen=True)
class IdentityRecord:
    name: str
    role: str
    public: str
    jti: str
    inbox: str
    issued_at: int
    cluster: str | None = None
    node: str | None = None
    revoked_at: int | None = None
    previous: str | None = None  # the key this one replaced (a rotation or a renewal)
    expires_at: int | None = None  # its JWT's `exp` (None: issued before identities expired)

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def due(self, now: int) -> bool:
        """In the last third of its lifetime (or past it, or with no expiry at all): renew it."""
        if self.expires_at is None:
            return True
        return now >= self.expires_at - (self.expires_at - self.issued_at) // 3

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class IdentityRegistry:
    """Issue, list, rotate and revoke identities; `clock` gives unix seconds (injected)."""

    def __init__(self, client: redis.Redis, box: SecretBox, clock: Callable[[], int],
                 random: Callable[[int], bytes] = os.urandom) -> None:
        self.redis, self.box, self.clock, self.random = client, box, clock, random

    # -- authority -----------------------------------------------------------------------------
    def load_authority(self) -> Authority | None:
        blob = self.redis.get(auth_authority_key())
        if blob is None:
            return None
        raw = blob if isinstance(blob, bytes) else str(blob).encode()
        return Authority.from_secret_json(self.box.decrypt(raw, auth_authority_key().encode()))

    def save_authority(self, authority: Authority) -> None:
        self.redis.set(auth_authority_key(), self.box.encrypt(authority.to_secret_json(), auth_authority_key().encode()))

    def ensure_authority(self, candidate: Authority | None = None) -> Authority:
        """The stored authority; else store `candidate` (or a new one). SETNX: two callers racing
        end with one authority."""
        found = self.load_authority()
        if found is not None:
            return found
        fresh = candidate or new_authority(self.random)
        blob = self.box.encrypt(fresh.to_secret_json(), auth_authority_key().encode())
        self.redis.set(auth_authority_key(), blob, nx=True)
        stored = self.load_authority()
        assert stored is not None
        return stored

    # -- identities ----------------------------------------------------------------------------
    def get(self, name: str) -> IdentityRecord | None:
        raw = self.redis.hget(auth_identities_key(), name)
        return None if raw is None else IdentityRecord(**json.loads(raw))

    def list(self, *, role: str | None = None, cluster: str | None = None) -> builtins.list[IdentityRecord]:
        records = [IdentityRecord(**json.loads(v)) for v in self.redis.hvals(auth_identities_key())]
        return sorted((r for r in records if (role is None or r.role == role) and (cluster is None or r.cluster == cluster)),
                      key=lambda r: r.name)

    def issue(self, role: str, cluster: str | None = None, node: str | None = None, *,
              revoke_old: bool = True) -> IssuedUser:
        """Mint a new identity, valid IDENTITY_TTL_S of its role. A live one of the same name is
        revoked (a rotation), unless `revoke_old` is false (a renewal: the old one serves until
        it expires, so that a process still holding it is not cut off)."""
        if role not in ROLES:
            raise ValueError(f"role: unknown role {role!r}; known: {', '.join(sorted(ROLES))}")
        name = identity_name(role, cluster, node)
        authority = self.ensure_authority()
        if role == "agent":
            assert cluster is not None and node is not None
            perms = agent_permissions(cluster, node)
        else:
            perms = role_permissions(role, name)
        now = self.clock()
        old = self.get(name)
        expires = now + IDENTITY_TTL_S[role]
        user = authority.user(name, perms, iat=now, expires=expires, random=self.random)
        if old is not None and old.active and revoke_old:
            authority.revoke(old.public, now)
            self.save_authority(authority)
        record = IdentityRecord(name, role, user.public, user.jti, inbox_prefix(name), now, cluster, node,
                                previous=old.public if old is not None else None, expires_at=expires)
        self.redis.hset(auth_identities_key(), name, record.to_json())
        return user

    def renew(self, name: str) -> IssuedUser:
        """A new JWT and key for a live identity, the old one left to expire (see `issue`)."""
        record = self.get(name)
        if record is None or not record.active:
            raise UnknownIdentity(f"identity {name!r}: never issued, or revoked")
        return self.issue(record.role, record.cluster, record.node, revoke_old=False)

    def renew_same_key(self, name: str, public: str) -> tuple[IdentityRecord, str]:
        """A new JWT for the key `name` holds now (an agent's own renewal, bke.adapters.auth.
        agent_renewal): the record keeps its key and gets the new jti and expiry. Nothing is
        revoked (the old JWT expires on its own) and no seed is made. UnknownIdentity when the
        identity is unknown, revoked (in the registry or the authority), or holds another key."""
        record = self.get(name)
        authority = self.load_authority()
        if record is None or not record.active or authority is None:
            raise UnknownIdentity(f"identity {name!r}: never issued, or revoked")
        if record.public != public:
            raise UnknownIdentity(f"identity {name!r}: holds another key")
        # nats-server refuses only the JWTs issued at or before a revocation's time: a JWT issued
        # after it would connect, so a key with any revocation gets none
        if public in authority.revocations or ALL_USERS in authority.revocations:
            raise UnknownIdentity(f"identity {name!r}: its key is revoked")
        now = self.clock()
        if record.role == "agent":
            assert record.cluster is not None and record.node is not None
            perms = agent_permissions(record.cluster, record.node)
        else:
            perms = role_permissions(record.role, name)
        expires = now + IDENTITY_TTL_S[record.role]
        token = authority.user_jwt(name, public, perms, iat=now, expires=expires)
        renewed = IdentityRecord(**{**asdict(record), "jti": str(decode_jwt(token)["jti"]), "issued_at": now,
                                    "expires_at": expires})
        self.redis.hset(auth_identities_key(), name, renewed.to_json())
        return renewed, token

    def due(self, *, now: int | None = None, roles: tuple[str, ...] | None = None) -> builtins.list[IdentityRecord]:
        """Live identities in the last third of their lifetime (of `roles`, if given)."""
        at = self.clock() if now is None else now
        return [r for r in self.list() if r.active and r.due(at) and (roles is None or r.role in roles)]

    def revoke(self, name: str) -> IdentityRecord:
        record = self.get(name)
        if record is None:
            raise UnknownIdentity(f"identity {name!r}: never issued")
        if not record.active:
            return record
        now = self.clock()
        authority = self.ensure_authority()
        authority.revoke(record.public, now)
        self.save_authority(authority)
        revoked = IdentityRecord(**{**asdict(record), "revoked_at": now})
        self.redis.hset(auth_identities_key(), name, revoked.to_json())
        return revoked

    def revoke_cluster(self, cluster: str) -> builtins.list[IdentityRecord]:
        """Every live identity of a cluster's nodes (a cluster goes)."""
        return [self.revoke(r.name) for r in self.list(cluster=cluster) if r.active]
