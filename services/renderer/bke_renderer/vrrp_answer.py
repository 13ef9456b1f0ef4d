"""The renderer's answer to `bke.v1.vrrp-password.get` (bke.contracts.vrrp_password): the
cluster's VRRP password, which only the renderer keeps, sealed to the key the asker sent, so that
it crosses the bus readable by that process alone. It never makes a password: the render that
first needs one does (service_core.ensure_rendered)."""
from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from bke.adapters.bus.responder import Answer, typed_answer
from bke.contracts.status import StatusError
from bke.contracts.vrrp_password import GetVrrpPassword, VrrpPassword
from bke.core.secrets.sealing import SealedDataError, public_key_from_raw, seal

__all__ = ["vrrp_password_answer"]

log = logging.getLogger("bke.renderer")
StoredPassword = Callable[[str], Awaitable[str | None]]  # cluster -> its password, None if it has none


def vrrp_password_answer(stored: StoredPassword) -> Answer:
    """Bytes to bytes: a request that does not parse, or whose key is no X25519 public key, is
    answered Invalid naming its field; a store that cannot be read, Unavailable."""

    async def answer(req: GetVrrpPassword) -> VrrpPassword | StatusError:
        try:
            recipient = public_key_from_raw(base64.b64decode(req.reply_key_b64, validate=True))
        except (binascii.Error, SealedDataError) as exc:
            return StatusError(reason="Invalid", cluster=req.cluster,
                               message=f"reply_key_b64: not a base64 X25519 public key ({exc})")
        try:
            password = await stored(req.cluster)
        except RedisError as exc:
            log.warning("VRRP password not read: %s", exc, extra={"cluster": req.cluster})
            return StatusError(reason="Unavailable", cluster=req.cluster, message=f"the renderer's store: {exc}")
        sealed = None if password is None else base64.b64encode(seal(recipient, password.encode())).decode()
        return VrrpPassword(cluster=req.cluster, sealed_b64=sealed)

    return typed_answer(GetVrrpPassword, answer, lambda why: StatusError(reason="Invalid", message=why))
