"""A cluster's VRRP password, asked of the renderer (core NATS request/reply on
`VRRP_PASSWORD_GET`), sealed to a key the asker made for this one question.

    GetVrrpPassword   upgrader -> renderer   a cluster, and the public half of an X25519 key
                                             pair the asker made for this request
    VrrpPassword      the reply              `sealed_b64`: the password sealed to that key
                                             (bke.core.secrets.sealing); None when the cluster has
                                             none (no load balancer was ever rendered for it)
    StatusError       the reply              Invalid (the request does not parse: its field), or
                                             Unavailable (the renderer's store is away: ask again)

Why a request, and why sealed: the renderer makes the password once per cluster and keeps it; the
upgrader needs it to render keepalived.conf when a changed spec rolls the load balancers. Reading
the renderer's key would make the upgrader a reader of another service's records; sending it in
clear would put a secret on the bus, where a monitor or a trace could keep it. Sealed to a key that
lives only in the asker's memory for one request, the reply opens in that process alone.
"""
from __future__ import annotations

from typing import Annotated, Final, Literal, Union

from pydantic import Field, TypeAdapter

from .base import Message
from .channel import Channel
from .status import StatusError

__all__ = ["CHANNELS", "VRRP_PASSWORD_GET", "VRRP_PASSWORD_QUEUE", "VRRP_PASSWORD_VERSION", "GetVrrpPassword",
           "VrrpPassword", "parse_vrrp_password_reply"]

VRRP_PASSWORD_GET = "bke.v1.vrrp-password.get"
VRRP_PASSWORD_QUEUE = "renderer-vrrp-password"  # renderer replicas share the requests
VRRP_PASSWORD_VERSION: Final = "bke.v1/VrrpPassword"


class GetVrrpPassword(Message):
    """Request: `cluster`'s VRRP password, sealed to `reply_key_b64`."""

    cluster: str = Field(min_length=1, max_length=253)
    # X25519 public key, raw 32 bytes, base64 (44 characters)
    reply_key_b64: str = Field(min_length=44, max_length=44)


class VrrpPassword(Message):
    api_version: Literal["bke.v1/VrrpPassword"] = VRRP_PASSWORD_VERSION
    cluster: str
    sealed_b64: str | None = None  # None: the cluster has no VRRP password


VrrpPasswordReply = Annotated[Union[VrrpPassword, StatusError], Field(discriminator="api_version")]
_REPLY: TypeAdapter[VrrpPassword | StatusError] = TypeAdapter(VrrpPasswordReply)


def parse_vrrp_password_reply(data: bytes) -> VrrpPassword | StatusError:
    return _REPLY.validate_json(data)


CHANNELS: tuple[Channel, ...] = (
    Channel(VRRP_PASSWORD_GET, GetVrrpPassword, "request", "A cluster's VRRP password, sealed to the X25519 key the asker made for this request (queue group renderer-vrrp-password; core NATS, not stored); the upgrader asks when a changed spec rolls the load balancers' keepalived.conf.", ("upgrader",), ("renderer",), (VrrpPassword, StatusError)),
)
