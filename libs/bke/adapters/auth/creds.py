"""What a `.creds` file lets its holder publish, read from the user JWT inside it.

Why a holder asks: a publish the server refuses is lost silently (NATS reports a publish
permission violation asynchronously), so a holder that may or may not be allowed a subject (an
identity issued by an earlier release) asks its own JWT before it relies on one.

The claims are read, not verified: the server enforces them, and the holder only wants to know
what the server will accept from it. The rules are the server's (nats-server `server/client.go`,
`pubAllowed`): no allow list allows every subject, a deny entry wins over an allow entry, and a
pattern's `*` matches one token and a trailing `>` one or more.
"""
from __future__ import annotations

import base64
import json
from typing import Any

__all__ = ["creds_claims", "creds_parts", "may_publish", "subject_matches"]

_BEGIN = "-----BEGIN NATS USER JWT-----"
_SEED = "-----BEGIN USER NKEY SEED-----"


def creds_parts(text: str) -> tuple[str, str]:
    """The user JWT and the nkey seed of a creds file's text (an agent renewing its JWT keeps
    its seed: bke.contracts.identity); ValueError, naming no secret, if either is missing."""
    lines = [ln.strip() for ln in text.splitlines()]
    try:
        token, seed = lines[lines.index(_BEGIN) + 1], lines[lines.index(_SEED) + 1]
    except (ValueError, IndexError):
        raise ValueError("not a creds file: its JWT or its seed is missing") from None
    if token.count(".") != 2 or not seed.startswith("SU"):
        raise ValueError("not a creds file: its JWT or its seed is malformed")
    return token, seed


def creds_claims(text: str) -> dict[str, Any]:
    """The claims of the user JWT in a creds file's text; ValueError if it holds none."""
    lines = [ln.strip() for ln in text.splitlines()]
    try:
        token = lines[lines.index(_BEGIN) + 1]
        body = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"no user JWT in the creds file: {type(exc).__name__}") from None
    if not isinstance(claims, dict):
        raise ValueError("no user JWT in the creds file: its claims are not an object")
    return claims


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether the NATS subject pattern `pattern` covers the literal `subject`."""
    want, got = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(got) > i
        if i >= len(got) or (token != "*" and token != got[i]):
            return False
    return len(want) == len(got)


def may_publish(claims: dict[str, Any], subject: str) -> bool:
    """Whether a user with these JWT claims may publish on `subject`."""
    pub = (claims.get("nats") or {}).get("pub") or {}
    allow, deny = pub.get("allow") or [], pub.get("deny") or []
    if any(subject_matches(p, subject) for p in deny):
        return False
    return not allow or any(subject_matches(p, subject) for p in allow)
