"""The agents' renewer as a long-running process (`python -m bke.adapters.auth.serve_renewals`).

docker-compose's `renewer` service, the `bke-renewer` Deployment in deploy/kubernetes and the
lab's supervisor run it; `bke identities serve-renewals` is the same loop from an operator
machine. It answers agents' own renewal requests (bke.adapters.auth.agent_renewal) until
SIGTERM or SIGINT, and holds only what that needs: the `renewer` bus identity, the `authority`
at-rest key (the stored authority signs the new JWT) and the `bke-renewer` Redis user (reads the
stored authority, writes the identity registry; bke.adapters.runtime.redis_acl).

Replicas are safe but not needed: the requests go to a queue group (each is answered once), an
answer is a new JWT for the key the agent already holds, and an agent that gets none asks again
an hour later while its old JWT still serves.

Environment: BKE_NATS_URL, BKE_NATS_CREDS (the renewer's), BKE_NATS_TLS_CA; BKE_REDIS_URL (the
`bke-renewer` user's), BKE_REDIS_TLS_CA, BKE_REDIS_SENTINELS, BKE_REDIS_SENTINEL_MASTER;
BKE_KEY_FILE_AUTHORITY. Exit 0 when stopped, 1 when Redis could not be reached (restarted), 2
when a setting or the key is wrong (the stored authority does not open with it).
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from redis.exceptions import RedisError

from bke.adapters.logs import setup_logging
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.state.client import redact_url, store_access_from_env, sync_redis_client
from bke.core.errors import PermanentError
from bke.core.secrets.at_rest import DecryptError
from bke.core.secrets.key_kinds import box_for

from .agent_renewal import RENEW_ALL, AgentRenewalResponder
from .permissions import identity_name, inbox_prefix
from .registry import IdentityRegistry

__all__ = ["EXIT_INVALID", "EXIT_RETRY", "bus_access_from_env", "main", "serve"]

log = logging.getLogger(__name__)
EXIT_OK, EXIT_RETRY, EXIT_INVALID = 0, 1, 2


def bus_access_from_env(environ: Mapping[str, str]) -> BusAccess:
    """The renewer's NATS access; ValueError naming what is missing."""
    url, creds, ca = environ.get("BKE_NATS_URL"), environ.get("BKE_NATS_CREDS"), environ.get("BKE_NATS_TLS_CA")
    if not url or not creds:
        raise ValueError("BKE_NATS_URL and BKE_NATS_CREDS (the renewer identity's creds file): required")
    return BusAccess(url, Path(creds), inbox_prefix(identity_name("renewer")), Path(ca) if ca else None)


async def serve(access: BusAccess, registry: IdentityRegistry, say: Callable[[str], None]) -> None:
    """Answer renewal requests until SIGTERM (or cancelled: Ctrl-C); `say` gets the line that
    says it listens and, at the end, how many it renewed and refused."""
    nc = await connect_nats(access, name="bke-renewer", wait=True)
    responder = AgentRenewalResponder(nc, registry, lambda: int(time.time()))
    await responder.start()
    say(f"answering agents' renewal requests on {RENEW_ALL}")
    stop = asyncio.Event()
    # a container's and the lab's stop is SIGTERM (PID 1 in a container has no default for it)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        await responder.stop()
        await nc.close()
        say(f"renewed {responder.answered}, refused {responder.refused}")


def run(environ: Mapping[str, str]) -> int:
    """Check the settings and the key against the stored authority, then serve; the exit code."""
    try:
        access, store = bus_access_from_env(environ), store_access_from_env(environ, "bke-renewer")
        box = box_for("authority", environ)
    except (ValueError, PermanentError) as exc:
        log.error("%s", exc)
        return EXIT_INVALID
    registry = IdentityRegistry(sync_redis_client(store), box, lambda: int(time.time()))
    try:
        if registry.load_authority() is None:
            log.error("Redis at %s holds no NATS authority: run `bke identities init` first", redact_url(store.url))
            return EXIT_INVALID
    except DecryptError as exc:
        log.error("BKE_KEY_FILE_AUTHORITY: cannot open the stored NATS authority: %s", exc)
        return EXIT_INVALID
    except (RedisError, OSError) as exc:
        log.error("Redis at %s: %s: %s", redact_url(store.url), type(exc).__name__, exc)
        return EXIT_RETRY
    try:
        asyncio.run(serve(access, registry, log.info))
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def main() -> int:
    setup_logging("renewer")  # one JSON object a line, as every other long-running process of BKE
    return run(os.environ)


if __name__ == "__main__":
    raise SystemExit(main())
