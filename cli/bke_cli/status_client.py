"""The client side of `bke.v1.status.get`: ask the dispatcher for a cluster's status.

Every command that shows or checks an install goes through here, over NATS only: the CLI never
reads the services' Redis.
"""
from __future__ import annotations

from bke.contracts.status import STATUS_GET, ClusterStatus, NodeSelection, StatusError, GetStatus, parse_status_reply

from .ask import request

__all__ = ["StatusUnavailable", "get_status"]


class StatusUnavailable(Exception):
    """No dispatcher answered, or it could not read the cluster's state."""


async def get_status(
    nc, cluster: str, nodes: NodeSelection = "failed", timeout: float = 5.0, every_page: bool = True
) -> ClusterStatus | None:
    """The cluster's status, or None if it has no install. With many nodes the dispatcher pages
    the node list; the pages are read one after the other and joined into one document (unless
    `every_page` is False: then the first page only)."""
    offset, pages = 0, []
    while True:
        req = GetStatus(cluster=cluster, nodes=nodes, offset=offset)
        reply = parse_status_reply(await request(nc, STATUS_GET, req, timeout, "dispatcher", StatusUnavailable))
        if isinstance(reply, StatusError):
            if reply.reason == "NotFound":
                return None
            detail = "; ".join(f"{e.path}: {e.message}" for e in reply.errors)
            raise StatusUnavailable(f"status of {cluster}: {reply.reason}: {reply.message}" + (f" ({detail})" if detail else ""))
        pages.append(reply)
        if reply.next_offset is None or not every_page:
            break
        offset = reply.next_offset
    if len(pages) == 1:
        return pages[0]
    return pages[-1].model_copy(update={"nodes": [n for p in pages for n in p.nodes], "next_offset": None})
