"""The deploy step: declare BKE's streams and buckets, as the deploy-time `streams` identity.

`bke streams ensure`, the runtime of the lab and the tests (bke.adapters.runtime.declare), and the
one-shot container of a deployment (`python -m bke.adapters.bus.declare`: docker-compose's `streams`
service, the `bke-streams` Job in deploy/kubernetes) all run `declare`. No service declares: each
checks what it finds at start (bke.adapters.bus.streams).

Environment of `python -m bke.adapters.bus.declare`: BKE_NATS_URL, and as for a service BKE_NATS_CREDS,
BKE_NATS_INBOX_PREFIX, BKE_NATS_TLS_CA, BKE_STREAM_REPLICAS, and BKE_JETSTREAM_CLUSTERS (how many
clusters the streams are sized for, bke.adapters.bus.quotas). Exit 0 when every stream and bucket
is as declared afterwards, 1 (naming what is not) otherwise, 2 on a missing URL.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path

from nats.js.client import JetStreamContext
from nats.js.errors import APIError

from .connect import BusAccess, connect_nats
from .quotas import CLUSTERS_ENV
from .streams import check_streams, ensure_streams

__all__ = ["cluster_forming", "declare", "main"]

log = logging.getLogger(__name__)
DECLARE_TIMEOUT_S = 30.0
# nats-server's JSNotEnabledForAccountErr and JSClusterNoPeersErrF (server/errors.json)
FORMING_ERR_CODES = (10039, 10005)
FORMING_WAIT_S, FORMING_RETRY_S = 60.0, 0.5  # as long as a service waits for the streams at start


async def declare(access: BusAccess, replicas: int | None = None, change: bool = True,
                  clusters: int | None = None) -> list[str]:
    """Ensure (unless `change` is false) and then check, sized for `clusters` clusters
    (bke.adapters.bus.quotas); the problems left (empty: as declared)."""
    nc = await connect_nats(access)
    try:
        # a stream's creation on a NATS cluster is a meta-leader proposal: seconds under load,
        # past nats-py's 5 s default (seen in CI on a 3-node cluster)
        js = nc.jetstream(timeout=DECLARE_TIMEOUT_S)
        if change:
            await _ensure_once_formed(js, replicas, clusters)
        return await check_streams(js, replicas=replicas, clusters=clusters)
    finally:
        await nc.close()


def cluster_forming(exc: BaseException) -> bool:
    """An answer a NATS cluster gives for a few seconds after its nodes say healthy: a node that
    has not enabled JetStream for the account yet, or a meta leader that has not heard from every
    peer yet (it cannot place a replicated stream)."""
    return isinstance(exc, APIError) and exc.err_code in FORMING_ERR_CODES


async def _ensure_once_formed(js: JetStreamContext, replicas: int | None, clusters: int | None) -> None:
    """`ensure_streams`, from the start again while the cluster forms (it is idempotent), for up
    to FORMING_WAIT_S."""
    deadline = time.monotonic() + FORMING_WAIT_S
    while True:
        try:
            await ensure_streams(js, replicas=replicas, clusters=clusters)
            return
        except APIError as exc:
            if not cluster_forming(exc) or time.monotonic() > deadline:
                raise
            log.info("the NATS cluster is still forming (%s); declaring again", exc.description)
        await asyncio.sleep(FORMING_RETRY_S)  # the pace of the tries, not a wait for an event


def _path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _count(name: str, most: int | None) -> int | None:
    """A positive count from the environment (unset: None); ValueError naming the variable."""
    raw = os.environ.get(name)
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1 or (most is not None and int(raw) > most):
        raise ValueError(f"{name}={raw!r}: a whole number from 1" + (f" to {most}" if most else ""))
    return int(raw)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    url = os.environ.get("BKE_NATS_URL")
    if not url:
        log.error("BKE_NATS_URL: required (the NATS of the deployment)")
        return 2
    try:
        replicas, clusters = _count("BKE_STREAM_REPLICAS", 5), _count(CLUSTERS_ENV, None)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    access = BusAccess(url, _path("BKE_NATS_CREDS"), os.environ.get("BKE_NATS_INBOX_PREFIX") or None,
                       _path("BKE_NATS_TLS_CA"))
    problems = asyncio.run(declare(access, replicas, clusters=clusters))
    for p in problems:
        log.error("%s", p)
    if not problems:
        log.info("streams and buckets as declared")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
