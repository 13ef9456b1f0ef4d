"""Certificate expiry of a cluster, asked of the certs service (core NATS request/reply), so that
`bke certs check-expiration --cluster` never reads the certs service's storage."""
from __future__ import annotations

from typing import Annotated, Final, Literal, Union

from pydantic import Field, TypeAdapter

from .base import Message
from .channel import Channel
from .status import StatusError

__all__ = [
    "CHANNELS",
    "EXPIRATION_GET",
    "EXPIRATION_QUEUE",
    "CertExpiration",
    "ExpiryItem",
    "GetExpiration",
    "parse_expiration_reply",
]

EXPIRATION_GET = "bke.v1.certs.expiration.get"
EXPIRATION_QUEUE = "certs-expiration"  # certs replicas share the requests
CERT_EXPIRATION_VERSION: Final = "bke.v1/CertExpiration"
MAX_LIMIT = 5000  # rows per reply: 5,000 rows stay far below NATS' 1 MiB payload


class GetExpiration(Message):
    cluster: str = Field(min_length=1)
    offset: int = Field(0, ge=0)
    limit: int = Field(2000, ge=1, le=MAX_LIMIT)


class ExpiryItem(Message):
    instance: str  # e.g. apiserver@m1
    name: str  # the certificate table's row
    is_ca: bool
    not_after: str  # ISO 8601, UTC
    residual_s: float  # seconds left at `now` (negative: expired)
    ca: str | None = None
    nodes: list[str] = []


class CertExpiration(Message):
    """One page of the cluster's certificates, CAs first; `next_offset` pages on (None: the last)."""

    api_version: Literal["bke.v1/CertExpiration"] = CERT_EXPIRATION_VERSION
    cluster: str
    now: str
    total: int
    rows: list[ExpiryItem]
    next_offset: int | None = None


ExpirationReply = Annotated[Union[CertExpiration, StatusError], Field(discriminator="api_version")]
_REPLY: TypeAdapter[CertExpiration | StatusError] = TypeAdapter(ExpirationReply)


def parse_expiration_reply(data: bytes) -> CertExpiration | StatusError:
    return _REPLY.validate_json(data)


CHANNELS: tuple[Channel, ...] = (
    Channel(EXPIRATION_GET, GetExpiration, "request", "The expiry of a cluster's certificates, paged, served by the certs service (queue group certs-expiration; core NATS, not stored); the upgrader asks it before an upgrade.", ("cli", "upgrader"), ("certs",), (CertExpiration, StatusError), reads=True),
)
