"""Push the account JWT to a running nats-server: how a revocation takes effect without a reload.

A system-account user publishes the operator-signed account JWT on `$SYS.REQ.CLAIMS.UPDATE`
(nats-server `server/events.go` accClaimsReqSubj; `server/accounts.go` respondToUpdate answers
`{"data": {"code": 200, "message": "jwt updated"}}` or an `error` object). With the `full`
resolver the server also stores it (it survives a restart). The system account's JWT goes the
same way (`push_system_account`): how a replaced system user's revocation reaches a server that
keeps running (bke.adapters.auth.system_user).
"""
from __future__ import annotations

import json
from pathlib import Path

import nats

from bke.adapters.bus.connect import BusAccess, connect_options
from bke.core.errors import PermanentError, TemporaryError
from .authority import Authority

__all__ = ["CLAIMS_UPDATE", "push_account", "push_system_account"]

CLAIMS_UPDATE = "$SYS.REQ.CLAIMS.UPDATE"


async def push_account(url: str, system_creds: Path, authority: Authority, *, iat: int,
                       tls_ca: Path | None = None, timeout: float = 5.0) -> None:
    """Send the current account JWT (its revocations included); raise if the server refused it."""
    await _push(url, system_creds, authority.account_jwt(iat), tls_ca, timeout)


async def push_system_account(url: str, system_creds: Path, authority: Authority, *, iat: int,
                              tls_ca: Path | None = None, timeout: float = 5.0) -> None:
    """Send the system account's JWT (its users' revocations included); raise if refused."""
    await _push(url, system_creds, authority.system_account_jwt(iat), tls_ca, timeout)


async def _push(url: str, system_creds: Path, token: str, tls_ca: Path | None, timeout: float) -> None:
    opts = connect_options(BusAccess(url, system_creds, None, tls_ca), name="bke-auth-push")
    opts["max_reconnect_attempts"] = 1
    nc = await nats.connect(**opts)
    try:
        try:
            reply = await nc.request(CLAIMS_UPDATE, token.encode(), timeout=timeout)
        except TimeoutError as exc:
            raise TemporaryError(f"nats-server did not answer {CLAIMS_UPDATE} within {timeout:.0f}s") from exc
    finally:
        await nc.close()
    doc = json.loads(reply.data)
    if "error" in doc or doc.get("data", {}).get("code") != 200:
        raise PermanentError(f"nats-server refused the account update: {doc.get('error') or doc.get('data')}")
