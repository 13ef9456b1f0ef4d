"""The cluster's VRRP password, asked of the renderer (bke.contracts.vrrp_password): the renderer
makes and keeps it; this service asks when a changed spec rolls the load balancers'
keepalived.conf, and never reads the renderer's keys.

Each request carries the public half of a key pair made for it; the reply is sealed to it and
opened here, and the private half is dropped with the call, so the password is in clear only in
this process's memory.

    TemporaryError
    └── VrrpPasswordUnavailable   no renderer answered in time, it answered Unavailable, or its
                                  answer is not one this code reads or opens: retried after `delay`
"""
from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from bke.contracts.status import StatusError
from bke.contracts.vrrp_password import VRRP_PASSWORD_GET, GetVrrpPassword, parse_vrrp_password_reply
from bke.core.errors import TemporaryError
from bke.core.secrets.sealing import SealedDataError, generate_agent_key, open_sealed, public_key_to_raw

__all__ = ["VrrpPasswordClient", "VrrpPasswordUnavailable"]

Request = Callable[[str, bytes, float], Awaitable[bytes]]  # subject, payload, timeout -> reply
RETRY_S = 5.0


class VrrpPasswordUnavailable(TemporaryError):
    """The renderer did not tell the password: ask again later (see the module docstring)."""

    def __init__(self, message: str, delay: float = RETRY_S):
        super().__init__(message, delay)


class VrrpPasswordClient:
    def __init__(self, request: Request, timeout_s: float):
        self.request, self.timeout_s = request, timeout_s

    async def __call__(self, cluster: str) -> str | None:
        """`cluster`'s VRRP password, None when it has none. Raises VrrpPasswordUnavailable."""
        key = generate_agent_key()  # one request's key: see the module docstring
        body = GetVrrpPassword(cluster=cluster,
                               reply_key_b64=base64.b64encode(public_key_to_raw(key.public_key())).decode())
        try:
            reply = parse_vrrp_password_reply(await self.request(VRRP_PASSWORD_GET, body.to_bytes(), self.timeout_s))
        except ValidationError as exc:
            raise VrrpPasswordUnavailable(f"{VRRP_PASSWORD_GET}: an answer that is no VrrpPassword "
                                          f"({exc.error_count()} error(s))") from exc
        except Exception as exc:  # noqa: BLE001 - no renderer answered in time: ask again later
            raise VrrpPasswordUnavailable(f"no answer on {VRRP_PASSWORD_GET}: {type(exc).__name__}") from exc
        if isinstance(reply, StatusError):
            raise VrrpPasswordUnavailable(f"{VRRP_PASSWORD_GET}: the renderer answered {reply.reason}: {reply.message}")
        if reply.sealed_b64 is None:
            return None
        try:
            return open_sealed(key, base64.b64decode(reply.sealed_b64)).decode()
        except (SealedDataError, ValueError) as exc:
            raise VrrpPasswordUnavailable(f"{VRRP_PASSWORD_GET}: a reply that does not open with this request's "
                                          f"key: {exc}") from exc
