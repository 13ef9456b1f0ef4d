"""A test-only bus identity that replays the events' stream, for the tests that count what the
services announced (each phase change once, each certificate issued once).

Why an identity of its own: no BKE identity may replay BKE_EVENTS. The services read it through
their own named consumers only, the operator and the dashboards not at all
(bke.adapters.auth.jetstream_grants), and none of them needs to. A live subscription is no
substitute: a handler that is redelivered publishes its event again under the same message id,
JetStream stores it once, but a subscriber sees both. So the test mints, with the lab's own NATS
authority, a user that may create an ordered (ephemeral) consumer on BKE_EVENTS and nothing else.
It is not a role (bke.adapters.auth.permissions.ROLES): no deployment can issue it.
"""
from __future__ import annotations

import time
from pathlib import Path

from bke.adapters.auth.authority import write_creds
from bke.adapters.auth.jetstream_grants import JS_API
from bke.adapters.auth.permissions import Permissions, inbox_prefix
from bke.adapters.bus.connect import BusAccess
from bke.lab.identities import creds_path

from .lab_helpers import Lab

__all__ = ["EVENTS_READER", "events_reader_access", "events_reader_permissions"]

EVENTS_READER = "test-events-reader"
STREAM = "BKE_EVENTS"
VALID_S = 6 * 3600  # longer than any test that uses it


def events_reader_permissions() -> Permissions:
    """Find the stream by subject, create an ordered consumer on it (the bare create: an ordered
    consumer has no name, its filter is in the payload), answer its flow control, read its inbox."""
    return Permissions(
        pub_allow=(f"{JS_API}.INFO", f"{JS_API}.STREAM.NAMES", f"{JS_API}.STREAM.INFO.{STREAM}",
                   f"{JS_API}.CONSUMER.CREATE.{STREAM}", f"$JS.FC.{STREAM}.>"),
        sub_allow=(f"{inbox_prefix(EVENTS_READER)}.>",),
    )


def events_reader_access(lab: Lab) -> BusAccess:
    """The reader's access to this lab's NATS; its creds file is written (again) on each call."""
    auth = lab.sup.runtime.nats_auth
    assert auth is not None, "the lab's NATS runs without authentication"
    now = int(time.time())
    user = auth.authority.user(EVENTS_READER, events_reader_permissions(), iat=now, expires=now + VALID_S)
    path = write_creds(creds_path(lab.sup.workdir, EVENTS_READER), user.creds)
    tls = lab.info.nats_tls_ca
    return BusAccess(lab.info.nats_url, path, inbox_prefix(EVENTS_READER), Path(tls) if tls else None)
