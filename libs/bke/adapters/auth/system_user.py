"""The system-account user that pushes account updates (`sys.creds`): kept while it is good,
replaced only when it is not, and a replaced one of ours revoked.

Why: nats-server lets any user of the system account push account JWTs (revocations, limits)
and read every `$SYS` subject. A copy of such a creds file is as strong as the operator for the
bus; one minted at every start and never revoked would leave every earlier copy working.

What a `sys.creds` file is found to be (`inspect_system_creds`, a pure function):

    valid       a user JWT signed by this authority's system account, the seed beside it is
                the JWT's key, not expired, not revoked: kept as it is
    missing     no file, or no JWT in it: a user is minted
    foreign     a JWT not signed by this authority's system account (another lab's, a deleted
                authority's, a forged one): a user is minted. The old one needs no revocation:
                nats-server verifies a user JWT against its issuer account, and the only
                accounts it knows are the two this operator signed (operator mode,
                `server/jwt.go` validateTrustedOperators, `server/auth.go` processClientOrLeafAuthentication)
    mismatched  our JWT with a seed that is not its key (a damaged file): replaced, and the
    expired     JWT's key revoked on the system account (whoever holds the matching seed is
    revoked     refused), an expired or revoked one likewise (it is refused already)

Every minted user also moves the system account's `*` revocation to just before its own issue
time (`ensure_system_user`), and a kept one to just before its own: every system user minted
earlier, including those of older labs that minted one at each start without a trace, is
refused (nats-server `isRevoked`: a JWT issued at or before the time of an entry for its key or
for `*`). The caller saves the authority and sends the system account's JWT to a running
server (`bke.adapters.auth.push.push_system_account`) when `revocations_changed`; a server started
afterwards preloads it.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .authority import ALL_USERS, Authority, write_creds
from .jwt import decode_jwt, keypair_from_seed

__all__ = ["SystemUser", "Verdict", "creds_parts", "ensure_system_user", "inspect_system_creds"]

Verdict = Literal["valid", "missing", "foreign", "mismatched", "expired", "revoked"]
_JWT_BEGIN, _SEED_BEGIN = "-----BEGIN NATS USER JWT-----", "-----BEGIN USER NKEY SEED-----"


@dataclass(frozen=True)
class SystemUser:
    path: Path
    public: str
    status: Literal["kept", "made", "replaced"]
    found: Verdict  # what the file was
    revoked: str | None = None  # the replaced user's key, revoked on the system account
    revocations_changed: bool = False  # the system account's JWT changed: send it to a running server


def creds_parts(text: str) -> tuple[str | None, str | None]:
    """The user JWT and the seed of a creds file's text (None for a part that is not there)."""
    lines = [ln.strip() for ln in text.splitlines()]

    def after(marker: str) -> str | None:
        try:
            return lines[lines.index(marker) + 1] or None
        except (ValueError, IndexError):
            return None

    return after(_JWT_BEGIN), after(_SEED_BEGIN)


def inspect_system_creds(authority: Authority, text: str | None, now: int) -> tuple[Verdict, str | None, int]:
    """(verdict, the JWT's key if it names one, its issue time) of a sys.creds file's text."""
    token, seed = creds_parts(text) if text is not None else (None, None)
    if token is None:
        return "missing", None, 0
    try:
        claims = decode_jwt(token)  # the signature must be its issuer's
    except ValueError:
        return "foreign", None, 0
    public, iat = str(claims.get("sub", "")), int(claims.get("iat", 0))
    if claims.get("iss") != authority.system.public or (claims.get("nats") or {}).get("type") != "user":
        return "foreign", public, iat
    try:
        holds_key = seed is not None and keypair_from_seed(seed).public == public
    except Exception:  # noqa: BLE001 - nkeys raises several types for a malformed seed
        holds_key = False
    if not holds_key:
        return "mismatched", public, iat
    if claims.get("exp") is not None and int(claims["exp"]) <= now:
        return "expired", public, iat
    if authority.system_user_revoked(public, iat):
        return "revoked", public, iat
    return "valid", public, iat


def _older_refused(authority: Authority, iat: int) -> bool:
    """Move `*` to just before `iat` (never back); whether it moved."""
    if authority.system_revocations.get(ALL_USERS, -1) >= iat - 1:
        return False
    authority.revoke_system_user(ALL_USERS, iat - 1)
    return True


def ensure_system_user(authority: Authority, path: Path, now: int,
                       random: Callable[[int], bytes] = os.urandom) -> SystemUser:
    """Keep `path` if it is this authority's good system user, else write a new one (see the
    module docstring). Changes `authority`'s system revocations in place."""
    try:
        text: str | None = path.read_text()
    except FileNotFoundError:
        text = None
    found, public, iat = inspect_system_creds(authority, text, now)
    if found == "valid":
        assert public is not None
        return SystemUser(path, public, "kept", found, revocations_changed=_older_refused(authority, iat))
    ours = found in ("mismatched", "expired", "revoked") and public is not None
    if ours:
        assert public is not None
        authority.revoke_system_user(public, now)
    # issued after every `*` entry, even if the clock went back since the last one was written
    issued = max(now, authority.system_revocations.get(ALL_USERS, -1) + 1)
    user = authority.system_user(iat=issued, random=random)
    write_creds(path, user.creds)
    moved = _older_refused(authority, issued)
    return SystemUser(path, user.public, "replaced" if ours else "made", found,
                      revoked=public if ours else None, revocations_changed=ours or moved)
