"""The agent renews its own bus identity: a new JWT for the nkey it holds, never a new seed.

In the last third of its JWT's life (the same rule as the services', bke.adapters.auth.registry
`IdentityRecord.due`), the agent asks on its own node's renewal subject, signing the request
with its nkey (bke.contracts.identity). The owner of the authority answers with a JWT for the
same key (bke.adapters.auth.agent_renewal). The agent checks the answer before it keeps it (signed
by the issuer of the JWT it has, for its own key and name, expiring later), replaces its creds
file atomically (the same seed, the new JWT, 0600) and reconnects: nats-py reads the creds file
at every connect, restores the subscriptions (its push consumer's too) and sends what was
buffered meanwhile; a running command goes on and its result is sent after the reconnect.

Outcomes of one check, in order: not due; unanswered (no renewer listens now, or it was slow:
asked again at the next check, the old JWT still serves); refused (revoked, another key: said in
the log, nothing changes); unwritable (the creds file is on a read-only mount, such as a compose
secret: the node must be provisioned again); renewed.

A creds file that cannot be replaced in place (`creds_unwritable`: on a read-only mount, or
mounted on its own as a secret) is found before anything is asked: the agent says so in one line at its start and
never asks, since a JWT it cannot keep would only be issued again every hour. The operator
provisions such a node again before its expiry (docs/bus-identities.md).
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from pydantic import ValidationError

from bke.adapters.auth.authority import creds_text, write_private
from bke.adapters.auth.creds import creds_parts
from bke.adapters.auth.jwt import decode_jwt, keypair_from_seed
from bke.contracts.identity import AgentIdentityRenewed, RenewAgentIdentity, renew_identity_subject

__all__ = ["IdentityRenewal", "creds_unwritable", "due"]

log = logging.getLogger("bke.agent.renewal")
REQUEST_TIMEOUT_S = 10.0


def due(claims: dict[str, Any], now: int) -> bool:
    """In the last third of the JWT's life (never, for a JWT that does not expire)."""
    exp, iat = claims.get("exp"), claims.get("iat")
    if not isinstance(exp, int) or not isinstance(iat, int):
        return False
    return now >= exp - (exp - iat) // 3


def creds_unwritable(path: Path) -> str | None:
    """Why `path` cannot be replaced the way `write_private` replaces it (None: it can), found
    without changing anything: the new file is made in its folder, which must be writable (a
    read-only mount is not, even for root), and renamed over it, which fails for a mount point
    (a compose secret is a file bind-mounted on its own)."""
    if not os.access(path.parent, os.W_OK):
        return f"its folder {path.parent} is not writable"
    try:
        own_device = path.stat().st_dev != path.parent.stat().st_dev
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    if own_device:
        return "it is mounted on its own, as a secret is, and cannot be replaced"
    return None


class IdentityRenewal:
    """One node's renewals; `clock` gives unix seconds, `unwritable` the creds file check (injected)."""

    def __init__(self, nc: Any, creds: Path, cluster: str, node: str, clock: Callable[[], float] = time.time,
                 unwritable: Callable[[Path], str | None] = creds_unwritable) -> None:
        self.nc, self.creds, self.cluster, self.node, self.clock = nc, creds, cluster, node, clock
        self.unwritable = unwritable
        self.ids = {"cluster": cluster, "node": node}

    def _cannot_keep(self, why: str, expires: object) -> None:
        log.warning("the creds file %s cannot be replaced (%s): this agent does not renew its own identity; "
                    "provision this node again (bke identities provision agent) before its JWT expires at %s",
                    self.creds, why, expires, extra=self.ids)

    def _request(self, claims: dict[str, Any], seed: str, now: int) -> RenewAgentIdentity:
        key = keypair_from_seed(seed)
        if key.public != claims.get("sub"):
            raise ValueError("the creds file's seed is not the key of its JWT")
        unsigned = RenewAgentIdentity(cluster=self.cluster, node=self.node, public_key=key.public,
                                      jti=str(claims.get("jti", "")), at=now, signature="-")
        signature = base64.b64encode(key.sign(unsigned.signed_bytes())).decode()
        return unsigned.model_copy(update={"signature": signature})

    def _checked(self, answer: AgentIdentityRenewed, claims: dict[str, Any]) -> str | None:
        """Why this answer's JWT is not kept (None: it is)."""
        try:
            fresh = decode_jwt(answer.jwt, verify=True)  # signed by the key it names as issuer
        except ValueError as exc:
            return str(exc)
        for field in ("sub", "iss", "name"):
            if fresh.get(field) != claims.get(field):
                return f"the new JWT's {field} is not the one of the JWT it renews"
        if not isinstance(fresh.get("exp"), int) or fresh["exp"] <= claims.get("exp", 0):
            return "the new JWT does not expire later"
        return None

    async def renew_once(self) -> str:
        """Check the JWT and renew it if due; the outcome (see the module docstring)."""
        token, seed = creds_parts(self.creds.read_text())
        claims = decode_jwt(token, verify=False)  # our own file: the server verifies it
        now = int(self.clock())
        if not due(claims, now):
            return "not due"
        if (why := self.unwritable(self.creds)) is not None:  # a JWT it cannot keep is not asked for
            self._cannot_keep(why, claims.get("exp"))
            return "unwritable"
        req = self._request(claims, seed, now)
        try:
            msg = await self.nc.request(renew_identity_subject(self.cluster, self.node), req.to_bytes(),
                                        timeout=REQUEST_TIMEOUT_S)
            answer = AgentIdentityRenewed.model_validate_json(msg.data)
        except (NoRespondersError, NatsTimeout, asyncio.TimeoutError):
            log.info("identity due for renewal (expires %s); no renewer answered, asking again later",
                     claims.get("exp"), extra=self.ids)
            return "unanswered"
        except ValidationError:
            log.warning("renewal: the answer is malformed; not kept", extra=self.ids)
            return "refused: malformed answer"
        if not answer.ok:
            log.error("renewal refused: %s (the JWT expires at %s)", answer.reason, claims.get("exp"), extra=self.ids)
            return f"refused: {answer.reason}"
        if (problem := self._checked(answer, claims)) is not None:
            log.error("renewal answer not kept: %s", problem, extra=self.ids)
            return f"refused: {problem}"
        try:
            write_private(self.creds, creds_text(answer.jwt, seed).encode())
        except OSError as exc:
            log.error("renewed, but the creds file cannot be replaced (%s): provision this node again before %s",
                      exc.strerror, claims.get("exp"), extra=self.ids)
            return "unwritable"
        log.info("identity renewed until %s (same key); reconnecting with it", answer.expires_at, extra=self.ids)
        await self.nc.force_reconnect()  # the next connect reads the new file
        return "renewed"

    async def run(self, stop: asyncio.Event, every_s: float) -> None:
        """Check at start and then every `every_s` seconds until `stop`; never, said once at the
        start, when the creds file cannot be replaced (nor after a renewal it could not keep)."""
        if (why := self.unwritable(self.creds)) is not None:
            try:
                expires: object = decode_jwt(creds_parts(self.creds.read_text())[0], verify=False).get("exp")
            except (OSError, ValueError):
                expires = "an unknown time (the file does not read)"
            self._cannot_keep(why, expires)
            return
        while not stop.is_set():
            try:
                if await self.renew_once() == "unwritable":
                    return  # said in its log line; asking again would only issue another JWT
            except (OSError, ValueError) as exc:  # the creds file unreadable or not ours: said, tried again
                log.warning("renewal check failed: %s", exc, extra=self.ids)
            try:
                await asyncio.wait_for(stop.wait(), every_s)
            except asyncio.TimeoutError:
                pass
