"""The NATS trust chain BKE owns: operator -> accounts -> users (nats-server "operator mode").

    operator (self-signed)        names the system account; signs both account JWTs
    ├─ SYS account                nats-server's own; one user of it pushes account updates
    └─ BKE account                JetStream on; its *signing key* signs every user JWT
        └─ users                  one per agent, service, operator CLI, dashboard

Why this shape (see nats-server `server/jwt.go` and `server/accounts.go`): a user JWT signed by
an account signing key listed in the account JWT is verified by the server from the JWT alone,
so adding the 10,000th agent changes nothing on the server. Revoking a user is an entry in the
account JWT's `revocations` map (`server/accounts.go` `isRevoked`: a JWT issued at or before the
revocation time is refused); the re-signed account JWT is pushed to the running server on
`$SYS.REQ.CLAIMS.UPDATE` (`server/events.go` accClaimsReqSubj) by a system-account user, and the
server closes the revoked user's live connections at once (`updateAccountClaimsWithRefresh`:
`closeConnection(Revocation)`). The system account's JWT carries revocations the same way
(`system_revocations`): a system user that was replaced connects no more. Its `"*"` entry
(nats-io/jwt `All`) refuses every user of the account issued at or before its time. The `full` resolver (`server/opts.go`, type FULL) keeps the
pushed JWT in its directory across restarts; `resolver_preload` seeds it at first start.

Times and randomness are injected (`iat`, `random`), so minting is deterministic in tests.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jwt import KeyPair, decode_jwt, encode_jwt, keypair_from_seed, new_keypair
from .permissions import Permissions

__all__ = ["ACCOUNT_NAME", "ALL_USERS", "Authority", "IssuedUser", "creds_text", "new_authority", "write_creds",
           "write_private"]

ACCOUNT_NAME = "BKE"
ALL_USERS = "*"  # a revocations key meaning every user of the account (nats-io/jwt `All`)
_UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
              "conn": -1, "leaf": -1}
# JetStream is on for an account when its storage limits are not 0 (nats-io/jwt v2
# `JetStreamLimits`; nats-server enables JetStream for the account from these limits).
_JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


@dataclass(frozen=True)
class IssuedUser:
    name: str
    public: str
    jwt: str
    seed: str
    jti: str
    iat: int

    def __repr__(self) -> str:
        return f"IssuedUser({self.name}, {self.public})"

    @property
    def creds(self) -> str:
        return creds_text(self.jwt, self.seed)


@dataclass
class Authority:
    """The four keys of the chain (secrets) and both accounts' revocations (public)."""

    operator: KeyPair
    system: KeyPair
    account: KeyPair
    signing: KeyPair
    revocations: dict[str, int] = field(default_factory=dict)  # user public key -> unix time
    system_revocations: dict[str, int] = field(default_factory=dict)  # of the system account's users

    def __repr__(self) -> str:
        return f"Authority(operator={self.operator.public}, account={self.account.public})"

    # -- (de)serialisation: the caller encrypts this (bke.core.secrets.at_rest) ---------------------
    def to_secret_json(self) -> bytes:
        doc: dict[str, Any] = {"operator": self.operator.seed, "system": self.system.seed, "account": self.account.seed,
                               "signing": self.signing.seed, "revocations": self.revocations}
        if self.system_revocations:  # absent otherwise: the same bytes as before there were any
            doc["systemRevocations"] = self.system_revocations
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_secret_json(cls, raw: bytes) -> Authority:
        doc = json.loads(raw)
        return cls(keypair_from_seed(doc["operator"]), keypair_from_seed(doc["system"]),
                   keypair_from_seed(doc["account"]), keypair_from_seed(doc["signing"]),
                   revocations={str(k): int(v) for k, v in doc.get("revocations", {}).items()},
                   system_revocations={str(k): int(v) for k, v in doc.get("systemRevocations", {}).items()})

    def merge_revocations(self, other: Authority) -> int:
        """Take every revocation of `other` too (each key at the later of the two times): a
        revocation is never undone by merging. Returns how many entries changed."""
        changed = 0
        for mine, theirs in ((self.revocations, other.revocations),
                             (self.system_revocations, other.system_revocations)):
            for public, at in theirs.items():
                if at > mine.get(public, -1):
                    mine[public] = at
                    changed += 1
        return changed

    # -- JWTs ----------------------------------------------------------------------------------
    def operator_jwt(self, iat: int) -> str:
        return encode_jwt(self.operator, self.operator.public, "bke-operator",
                          {"type": "operator", "system_account": self.system.public}, iat=iat)

    def system_account_jwt(self, iat: int) -> str:
        nats: dict[str, Any] = {"type": "account", "limits": dict(_UNLIMITED)}
        if self.system_revocations:
            nats["revocations"] = dict(sorted(self.system_revocations.items()))
        return encode_jwt(self.operator, self.system.public, "SYS", nats, iat=iat)

    def account_jwt(self, iat: int) -> str:
        nats: dict[str, Any] = {"type": "account", "limits": {**_UNLIMITED, **_JETSTREAM},
                                "signing_keys": [self.signing.public]}
        if self.revocations:
            nats["revocations"] = dict(sorted(self.revocations.items()))
        return encode_jwt(self.operator, self.account.public, ACCOUNT_NAME, nats, iat=iat)

    def user(self, name: str, perms: Permissions, *, iat: int, expires: int | None = None,
             random: Callable[[int], bytes] = os.urandom) -> IssuedUser:
        """A new user of the BKE account: a fresh key, a JWT signed by the account signing key
        (refused by the server after `expires`, a Unix time, when given)."""
        key = new_keypair("user", random)
        token = self.user_jwt(name, key.public, perms, iat=iat, expires=expires)
        return IssuedUser(name, key.public, token, key.seed, str(decode_jwt(token)["jti"]), iat)

    def user_jwt(self, name: str, public: str, perms: Permissions, *, iat: int, expires: int | None = None) -> str:
        """A user JWT for a key someone else holds (a new one at `user`, the same one at an
        agent's renewal, bke.adapters.auth.agent_renewal): the seed is never needed to sign it."""
        nats = {"type": "user", "issuer_account": self.account.public, "subs": perms.subs, "data": -1,
                "payload": perms.payload, **perms.claims()}
        return encode_jwt(self.signing, public, name, nats, iat=iat, exp=expires)

    def system_user(self, *, iat: int, random: Callable[[int], bytes] = os.urandom) -> IssuedUser:
        """A user of the system account (no permission limits): it pushes account updates."""
        key = new_keypair("user", random)
        token = encode_jwt(self.system, key.public, "bke-sys", {"type": "user", "subs": -1, "data": -1,
                                                                "payload": -1}, iat=iat)
        return IssuedUser("bke-sys", key.public, token, key.seed, str(decode_jwt(token)["jti"]), iat)

    def revoke(self, public: str, at: int) -> None:
        """Refuse every JWT of `public` issued at or before `at` (the user's key is never reused:
        a rotation mints a new key, so revoking the old one never touches the new JWT)."""
        self.revocations[public] = max(at, self.revocations.get(public, 0))

    def revoke_system_user(self, public: str, at: int) -> None:
        """The same for a user of the system account (`public` may be ALL_USERS)."""
        self.system_revocations[public] = max(at, self.system_revocations.get(public, 0))

    def system_user_revoked(self, public: str, iat: int) -> bool:
        """Whether the server refuses a system user JWT of `public` issued at `iat` (nats-server
        `isRevoked`: an entry for the key or for ALL_USERS at or after `iat`)."""
        return any(self.system_revocations.get(k, -1) >= iat for k in (public, ALL_USERS))

    def server_conf(self, iat: int, resolver_dir: Path, account_jwt: str | None = None) -> str:
        """The operator-mode part of nats.conf (full resolver, both accounts preloaded)."""
        preload: Mapping[str, str] = {self.system.public: self.system_account_jwt(iat),
                                      self.account.public: account_jwt or self.account_jwt(iat)}
        lines = [
            f"operator: {self.operator_jwt(iat)}",
            f"system_account: {self.system.public}",
            "resolver: {",
            "  type: full",
            f'  dir: "{resolver_dir}"',
            "  allow_delete: false",
            "  interval: \"2m\"",
            "}",
            "resolver_preload: {",
            *(f"  {pub}: {tok}" for pub, tok in preload.items()),
            "}",
        ]
        return "\n".join(lines) + "\n"


def new_authority(random: Callable[[int], bytes] = os.urandom) -> Authority:
    return Authority(new_keypair("operator", random), new_keypair("account", random),
                     new_keypair("account", random), new_keypair("account", random))


def creds_text(token: str, seed: str) -> str:
    """A NATS `.creds` file (the format nats-py's `user_credentials` and the `nats` CLI read)."""
    return ("-----BEGIN NATS USER JWT-----\n" f"{token}\n" "------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            "-----BEGIN USER NKEY SEED-----\n" f"{seed}\n" "------END USER NKEY SEED------\n\n"
            "*************************************************************\n")


def write_private(path: Path, data: bytes) -> Path:
    """Replace `path` atomically with a file of mode 0600 from the start (never readable by
    others, not even briefly): creds files, the runtime's encrypted authority."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


def write_creds(path: Path, text: str) -> Path:
    """Write a creds file (mode 0600, see `write_private`)."""
    return write_private(path, text.encode())
