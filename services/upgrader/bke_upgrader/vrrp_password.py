"""The cluster's VRRP password, asked of the renderer (bke.contracts.vrrp_password): the renderer
makes and keeps it; this service asks when a changed spec rolls the load balancers'
keepalived.conf, and never reads the renderer's keys.

Each request carries the public half of a key pair made for it; the reply is sealed to it and
opened here, and the private half is dropped with the call, so the password is in clear only in
this process's memory.

    OwnerUnavailable (bke.adapters.bus.asking)
    └── VrrpPasswordUnavailable   no renderer answered in time, it answered Unavailable, or its
                                  answer is not one this code reads or opens: retried after `delay`
"""
from __future__ import annotations

import base64

from bke.adapters.bus.asking import OwnerUnavailable, Request, ask_owner
from bke.contracts.vrrp_password import VRRP_PASSWORD_GET, GetVrrpPassword, parse_vrrp_password_reply
from bke.core.secrets.sealing import SealedDataError, generate_agent_key, open_sealed, public_key_to_raw

__all__ = ["VrrpPasswordClient", "VrrpPasswordUnavailable"]


class VrrpPasswordUnavailable(OwnerUnavailable):
    """The renderer did not tell the password: ask again later (see the module docstring)."""


class VrrpPasswordClient:
    def __init__(self, request: Request, timeout_s: float):
        self.request, self.timeout_s = request, timeout_s

    async def __call__(self, cluster: str) -> str | None:
        """`cluster`'s VRRP password, None when it has none. Raises VrrpPasswordUnavailable."""
        key = generate_agent_key()  # one request's key: see the module docstring
        body = GetVrrpPassword(cluster=cluster,
                               reply_key_b64=base64.b64encode(public_key_to_raw(key.public_key())).decode())
        reply = await ask_owner(self.request, VRRP_PASSWORD_GET, body.to_bytes(), self.timeout_s,
                                parse_vrrp_password_reply, VrrpPasswordUnavailable, "renderer", "VrrpPassword")
        if reply.sealed_b64 is None:
            return None
        try:
            return open_sealed(key, base64.b64decode(reply.sealed_b64)).decode()
        except (SealedDataError, ValueError) as exc:
            raise VrrpPasswordUnavailable(f"{VRRP_PASSWORD_GET}: a reply that does not open with this request's "
                                          f"key: {exc}") from exc
