"""NATS nkeys and JWTs (decentralised auth, "operator mode"), minted here with `nkeys`.

Why our own encoder rather than PyPI's `nats-jwt==0.2.2`: that package pulls in pycryptodome,
marshmallow, dataclasses-json and pytz for what is a JSON document and one ed25519 signature,
and it is not kept in step with the server's claim fields. The format below is the one of
nats-io/jwt v2 (`v2/header.go`: header `{"typ":"JWT","alg":"ed25519-nkey"}`; `v2/claims.go`:
`ClaimsData` with jti/iat/iss/name/sub and the `nats` object carrying `type` and `version: 2`;
the signature is ed25519 over `<header b64>.<claims b64>`, all base64url without padding).
The jti is the base32 of the sha256 of the claims (the server does not check how the jti was
made; nats-io/jwt uses sha512/256: either names one JWT). A real nats-server accepts these
tokens: tests/integration/test_bus_identities.py.

Keys are nkeys (`nkeys.encode_seed`): a seed "S?..." whose second letter says the role
(O operator, A account, U user) and a public key "O...", "A...", "U...".
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import nkeys
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

__all__ = ["KeyPair", "Role", "decode_jwt", "encode_jwt", "new_keypair", "keypair_from_seed", "verify_nkey"]

Role = Literal["operator", "account", "user"]
_PREFIX: dict[str, int] = {
    "operator": nkeys.PREFIX_BYTE_OPERATOR,
    "account": nkeys.PREFIX_BYTE_ACCOUNT,
    "user": nkeys.PREFIX_BYTE_USER,
}
HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}


@dataclass(frozen=True)
class KeyPair:
    """An nkey: the seed (secret) and its public key (the identity's name on the server)."""

    seed: str
    public: str

    def __repr__(self) -> str:  # never print a seed
        return f"KeyPair({self.public})"

    def sign(self, data: bytes) -> bytes:
        return bytes(nkeys.from_seed(self.seed.encode()).sign(data))


def keypair_from_seed(seed: str) -> KeyPair:
    kp = nkeys.from_seed(seed.encode())
    return KeyPair(seed, kp.public_key.decode())


def new_keypair(role: Role, random: Callable[[int], bytes] = os.urandom) -> KeyPair:
    """A fresh nkey of `role`; `random` is injected so that tests can make fixed keys."""
    seed = nkeys.encode_seed(random(32), _PREFIX[role]).decode()
    return keypair_from_seed(seed)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def encode_jwt(issuer: KeyPair, subject: str, name: str, nats: dict[str, Any], *, iat: int,
               exp: int | None = None) -> str:
    """Sign a v2 claim set: `nats` is the role's object (it must carry `type`)."""
    claims: dict[str, Any] = {"iat": iat, "iss": issuer.public, "name": name, "sub": subject,
                              "nats": {**nats, "version": 2}}
    if exp is not None:
        claims["exp"] = exp
    claims["jti"] = base64.b32encode(hashlib.sha256(_dumps(claims)).digest()).decode().rstrip("=")
    signing_input = f"{_b64(_dumps(HEADER))}.{_b64(_dumps(claims))}"
    return f"{signing_input}.{_b64(issuer.sign(signing_input.encode()))}"


def decode_jwt(token: str, *, verify: bool = True) -> dict[str, Any]:
    """The claims of a token; with `verify`, its signature must be the issuer's (ValueError)."""
    try:
        head, body, sig = token.split(".")
        header = json.loads(_unb64(head))
        claims: dict[str, Any] = json.loads(_unb64(body))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a NATS JWT: {exc}") from None
    if header != HEADER:
        raise ValueError(f"not a NATS v2 JWT header: {header}")
    if verify:
        _verify(str(claims.get("iss", "")), f"{head}.{body}".encode(), _unb64(sig))
    return claims


def _verify(public: str, data: bytes, sig: bytes) -> None:
    raw = base64.b32decode(public + "=" * (-len(public) % 8))
    try:
        VerifyKey(raw[1:-2]).verify(data, sig)
    except (BadSignatureError, ValueError) as exc:
        raise ValueError(f"bad signature for issuer {public}") from exc


def verify_nkey(public: str, data: bytes, sig: bytes) -> bool:
    """Whether `sig` is the ed25519 signature of `data` by the nkey whose public key is `public`
    (what an agent's renewal request carries, bke.contracts.identity)."""
    try:
        _verify(public, data, sig)
    except (ValueError, TypeError):
        return False
    return True
