"""The lab's deploy step: declare the streams and buckets before any service starts.

What `bke streams ensure` does on a deployment, run by the lab itself as the `streams` identity
(bke.auth.jetstream_grants): the services only check what they find (bke.bus.streams).
"""
from __future__ import annotations

from ..bus.connect import BusAccess, connect_nats
from ..bus.streams import check_streams, ensure_streams
from .trust import run_blocking

__all__ = ["declare_streams"]


def declare_streams(access: BusAccess, replicas: int | None = None) -> None:
    """Create or put back every declared stream and bucket; RuntimeError if they are not as
    declared afterwards (a sealed stream, say)."""

    async def declare() -> list[str]:
        nc = await connect_nats(access)
        try:
            js = nc.jetstream()
            await ensure_streams(js, replicas=replicas)
            return await check_streams(js, replicas=replicas)
        finally:
            await nc.close()

    problems = run_blocking(declare())
    if problems:
        raise RuntimeError("streams not as declared after `bke streams ensure`: " + "; ".join(problems))
