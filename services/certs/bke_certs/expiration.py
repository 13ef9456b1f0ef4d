"""The certs service answers `bke.v1.certs.expiration.get`: its own store, read for a client.

Pure `expiration_page` over the rows; the responder turns every failure into an error reply,
never an exception, so a bad request cannot stop the subscription.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Callable

from pydantic import ValidationError

from bke.contracts.expiration import CertExpiration, ExpiryItem, GetExpiration
from bke.contracts.status import StatusError, invalid_request
from bke.core.pki import PkiStore
from bke.core.pki.errors import PkiNotReady
from bke.core.pki.expiry import ExpiryRow
from bke.core.pki.operations import check_expiration

__all__ = ["ExpirationResponder", "expiration_page"]

log = logging.getLogger("bke.certs.expiration")


def expiration_page(cluster: str, rows: list[ExpiryRow], now: datetime, offset: int, limit: int) -> CertExpiration:
    page = rows[offset : offset + limit]
    more = offset + limit < len(rows)
    return CertExpiration(
        cluster=cluster, now=now.isoformat(), total=len(rows), next_offset=offset + limit if more else None,
        rows=[ExpiryItem(instance=r.instance, name=r.name, is_ca=r.is_ca, not_after=r.not_after.isoformat(),
                         residual_s=r.residual.total_seconds(), ca=r.ca, nodes=list(r.nodes)) for r in page],
    )


class ExpirationResponder:
    def __init__(self, store: PkiStore, now: Callable[[], datetime]):
        self.store, self.now = store, now

    async def answer(self, data: bytes) -> bytes:
        try:
            req = GetExpiration.model_validate_json(data)
        except ValidationError as exc:
            return invalid_request(exc, "malformed expiration request", whole="request").to_bytes()
        now = self.now()
        try:
            rows = await check_expiration(req.cluster, self.store, now)
        except PkiNotReady as exc:
            return StatusError(reason="NotFound", cluster=req.cluster, message=str(exc)).to_bytes()
        except Exception as exc:  # noqa: BLE001 - an error reply, never a dead subscription
            log.exception("expiration not read", extra={"cluster": req.cluster})
            return StatusError(reason="Unavailable", cluster=req.cluster, message=f"{type(exc).__name__}: {exc}").to_bytes()
        return expiration_page(req.cluster, rows, now, req.offset, req.limit).to_bytes()
