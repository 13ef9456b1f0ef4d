"""The state's deploy step: `bke state init` as a one-shot container (`python -m bke.adapters.state.deploy_init`).

docker-compose's `state-init` service and the `bke-state-init` Job in deploy/kubernetes run it
before the services, which only read what it makes and wait until it exists
(bke.adapters.state.state_init). It is the one container given the Redis admin user: the
services' own users cannot write `bke:epoch` or the etcd snapshot key, by design.

Safe to run on every `up` and every apply: what exists is kept (SET NX), so a second run changes
nothing, and a store that already holds a state (another epoch, made by an earlier run, by
`bke state init` from the host or by a restore) keeps it. A stored key that the given at-rest keys
cannot open is refused (exit 2), never replaced.

Environment: BKE_REDIS_URL (the admin user's), and as for a service BKE_REDIS_TLS_CA,
BKE_REDIS_SENTINELS and BKE_REDIS_SENTINEL_MASTER; BKE_KEY_FILE_SNAPSHOT, BKE_KEY_FILE_SIGNING, BKE_KEY_FILE_PLAN and BKE_KEY_FILE_RENDER
(bke.core.secrets.key_kinds). It writes the command-signing key's public line on stdout, alone on
its line, for the agents' BKE_AGENT_COMMAND_KEY. Exit 0 when the state is complete, 1 when Redis
could not be reached or written (a Job retries), 2 when a setting or a key is wrong.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from redis.exceptions import RedisError

from bke.core.errors import PermanentError
from bke.core.secrets.key_kinds import box_for
from bke.core.secrets.record_signing import WRITERS

from .client import redact_url, store_access_from_env, sync_redis_client
from .state_init import StateInit, ensure_state

__all__ = ["main", "run"]

log = logging.getLogger(__name__)
EXIT_OK, EXIT_RETRY, EXIT_INVALID = 0, 1, 2


def _made(flag: bool) -> str:
    return "made now" if flag else "kept"


def run(environ: Mapping[str, str]) -> tuple[int, StateInit | None]:
    """Ensure the state; the exit code and what was found or made (None: nothing was done)."""
    try:
        access = store_access_from_env(environ, "admin")
        snapshot, signing = box_for("snapshot", environ), box_for("signing", environ)
        # the plan and render writers' signing keys (every reader checks those records with them)
        records = {w: box_for(w, environ) for w in WRITERS}
    except (ValueError, PermanentError) as exc:
        log.error("%s", exc)
        return EXIT_INVALID, None
    client = sync_redis_client(access)
    try:
        done = ensure_state(client, snapshot, signing_box=signing, record_boxes=records)
    except PermanentError as exc:  # a stored key these keys do not open: never replaced
        log.error("state of %s: %s", redact_url(access.url), exc)
        return EXIT_INVALID, None
    except (RedisError, OSError) as exc:
        log.error("Redis at %s: %s: %s", redact_url(access.url), type(exc).__name__, exc)
        return EXIT_RETRY, None
    finally:
        client.close()
    log.info("state of %s: epoch %s (%s), etcd snapshot key %s (%s), command-signing key %s (%s)",
             redact_url(access.url), done.epoch, _made(done.epoch_made), done.snapshot_key_id,
             _made(done.snapshot_key_made), done.command_key.fingerprint if done.command_key else None,
             _made(done.command_key_made))
    return EXIT_OK, done


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    code, done = run(os.environ)
    if done is not None and done.command_key is not None:
        print(done.command_key.public_line, flush=True)  # public: what the agents pin
    return code


if __name__ == "__main__":
    raise SystemExit(main())
