"""Who may publish and subscribe what on the bus: one row per role, as data.

Services, the CLI (the `operator` identity) and the dashboards get their subjects from
`bke.contracts.subjects.CHANNELS` (a channel's senders may publish it, its receivers may
subscribe it), so that a new channel is routed the day it is declared;
tests/unit/adapters/test_auth_permissions.py checks the two against each other. A dashboard publishes only
the requests that change nothing (`Channel.reads`). An agent's subjects are its own node's only
(`bke.contracts.agent.agent_subject`).

JetStream API: every identity's verbs and names come from bke.adapters.auth.jetstream_grants (streams
declared only by the deploy-time `streams` identity; each service's own named consumers; each
object bucket written by its writers only). An agent may use only the API subjects that name its
own consumer and its own subjects (nats-server's `server/jetstream_api.go`
`jsConsumerCreateRequest` refuses a request whose config's filter is not the filter named in
`$JS.API.CONSUMER.CREATE.<stream>.<consumer>.<filter>`; the direct-get form
`$JS.API.DIRECT.GET.<stream>.<subject>` answers only for that subject). The forms that carry the
subject or sequence in the payload (bare `CONSUMER.CREATE.<stream>`, `CONSUMER.DURABLE.CREATE`,
`STREAM.MSG.GET`, bare `DIRECT.GET.<stream>`) are never allowed to an agent, and denied by name as
well so that a future widening of the allow list cannot let them through.

Replies: a service answers core requests (`allow_responses`), bounded in the JWT to one message
within `RESPONSE_TTL_S`. nats-server lets a response through whatever the publish permissions
say, so a requester could name any subject as its reply; bke.adapters.bus.replies answers only to inboxes.

Every identity has its own inbox prefix (`_INBOX_<name>`): replies, pulled JetStream messages
and an agent's push deliveries come there, and nobody else may subscribe it (no `_INBOX.>`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from bke.adapters.bus import quotas
from bke.contracts.agent import UPGRADER_RESULT, agent_subject, node_token
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET
from bke.contracts.health import HEALTH_PREFIX
from bke.contracts.identity import renew_identity_subject
from bke.contracts.restore import restore_piece_subject
from bke.contracts.subjects import CHANNELS, DEADLETTER
from .jetstream_grants import (
    AGENT_STREAM,
    JS_API,
    SERVICE_CONSUMERS,
    bucket_subjects,
    consumer_subjects,
    declare_subjects,
    message_read_subjects,
    read_subjects,
)

__all__ = [
    "AGENT_STREAM",
    "IDENTITY_TTL_S",
    "JS_API",
    "RESPONSE_TTL_S",
    "ROLES",
    "SERVICE_ROLES",
    "Permissions",
    "RoleRow",
    "agent_consumer",
    "agent_deliver_subject",
    "agent_permissions",
    "identity_name",
    "inbox_prefix",
    "role_permissions",
]

SERVICE_ROLES = ("planner", "certs", "renderer", "dispatcher", "upgrader")
Kind = Literal["service", "cli", "dashboard", "agent", "deploy", "authority"]
RESPONSE_TTL_S = 60  # how long after a request its one answer may be published
DAY_S = 86400
# How long an issued identity's JWT is valid (its `exp`): nats-server refuses it afterwards and
# closes a connection that outlives it. Renewal (bke.adapters.auth.registry.IdentityRegistry.renew, `bke
# identities renew`, the lab at each start) issues a new one in the last third of this, without
# revoking the old one, which expires on its own. An agent's lasts longer; the agent itself asks for
# a new JWT for the same key in the last third (bke.contracts.identity, answered by the `renewer`
# identity: bke.adapters.auth.agent_renewal), and provisioning the node again still works.
IDENTITY_TTL_S: dict[str, int] = {
    "planner": 90 * DAY_S, "certs": 90 * DAY_S, "renderer": 90 * DAY_S, "dispatcher": 90 * DAY_S,
    "upgrader": 90 * DAY_S, "operator": 30 * DAY_S, "dashboard": 90 * DAY_S, "streams": 30 * DAY_S,
    "agent": 365 * DAY_S, "renewer": 30 * DAY_S,
}


@dataclass(frozen=True)
class RoleRow:
    """One role: where its subjects come from and what JetStream it needs beyond them."""

    kind: Kind
    component: str  # its name in CHANNELS senders/receivers
    summary: str
    js_api: tuple[str, ...] = ()  # JetStream API subjects it may call
    extra_pub: tuple[str, ...] = ()
    extra_sub: tuple[str, ...] = ()
    responses: bool = False  # answers core requests (nats `allow_responses`)


def _service_js(role: str) -> tuple[str, ...]:
    return (*read_subjects(), *(p for c in SERVICE_CONSUMERS.get(role, ()) for p in consumer_subjects(c)),
            *bucket_subjects(role), *message_read_subjects(role))


ROLES: dict[str, RoleRow] = {
    **{name: RoleRow("service", name, f"the {name} service", js_api=_service_js(name),
                     extra_pub=(f"{DEADLETTER}.{name}",), extra_sub=(f"{HEALTH_PREFIX}.{name}",), responses=True)
       for name in SERVICE_ROLES},
    # Health requests come from operators' tools, not from BKE's code, so the channel names no
    # sender (CHANNELS) and the two human-facing roles get them here.
    # The operator alone reads the dead letters' messages (`bke deadletters`): jetstream_grants.MESSAGE_READERS.
    "operator": RoleRow("cli", "cli", "the `bke` CLI of an operator (installs, retries, renewals, status, dead letters)",
                        js_api=_service_js("operator"), extra_pub=(f"{HEALTH_PREFIX}.*",)),
    "dashboard": RoleRow("dashboard", "cli", "read only: status and expiry requests, live events",
                         js_api=read_subjects(), extra_pub=(f"{HEALTH_PREFIX}.*",)),
    "streams": RoleRow("deploy", "deploy", "deploy time only (`bke streams ensure`): declares the streams and buckets",
                       js_api=declare_subjects()),
    "agent": RoleRow("agent", "agent", "one node's agent: its own commands, results, registration, heartbeats"),
    # The owner of the NATS authority, on the bus only to answer agents' renewals: it hears the
    # renewal requests and answers each once (`resp`). Its allow list names its own inbox alone:
    # an empty one would allow every subject (nats-server applies no allow list that is empty).
    "renewer": RoleRow("authority", "renewer", "answers agents' renewal requests with a JWT for the same key "
                       "(`bke identities serve-renewals`, where the authority's key is)",
                       extra_pub=("_INBOX_renewer.none",), responses=True),
}


@dataclass(frozen=True)
class Permissions:
    pub_allow: tuple[str, ...]
    sub_allow: tuple[str, ...]
    pub_deny: tuple[str, ...] = ()
    sub_deny: tuple[str, ...] = ()
    responses: bool = False
    # a user JWT's own limits, which nats-server enforces on the connection: the largest message
    # and the most subscriptions (-1: none; bke.adapters.bus.quotas)
    payload: int = -1
    subs: int = -1

    def claims(self) -> dict[str, Any]:
        """The permission part of a v2 user JWT's `nats` object (nats-io/jwt `v2/types.go`
        `Permissions`: `pub`/`sub` with `allow`/`deny`, `resp` with `max`/`ttl`)."""
        out: dict[str, Any] = {
            "pub": {"allow": list(self.pub_allow), **({"deny": list(self.pub_deny)} if self.pub_deny else {})},
            "sub": {"allow": list(self.sub_allow), **({"deny": list(self.sub_deny)} if self.sub_deny else {})},
        }
        if self.responses:
            # nats-io/jwt v2 `ResponsePermission`: ttl is a Go duration, in nanoseconds
            out["resp"] = {"max": 1, "ttl": RESPONSE_TTL_S * 1_000_000_000}
        return out


_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


def identity_name(role: str, cluster: str | None = None, node: str | None = None) -> str:
    """The stable name of an identity: `planner`, `operator`, `agent.<cluster>.<node token>`."""
    if role == "agent":
        if not cluster or not node:
            raise ValueError("role agent needs --cluster and --node")
        return f"agent.{cluster}.{node_token(node)}"
    if role not in ROLES:
        raise ValueError(f"role: unknown role {role!r}; known: {', '.join(sorted(ROLES))}")
    return role


def inbox_prefix(name: str) -> str:
    """`_INBOX_<name>` with dots made `__`: one subject token, so `_INBOX_a` never matches
    `_INBOX_ab.>` (permissions match whole tokens)."""
    token = name.replace(".", "__")
    if not _TOKEN.match(token):
        raise ValueError(f"identity name {name!r}: only letters, digits, '-', '_' and '.'")
    return f"_INBOX_{token}"


def agent_consumer(cluster: str, node: str) -> str:
    """The node's durable consumer name (same rule as bke_agent.loop.consumer_name)."""
    return f"agent__{node_token(cluster)}__{node_token(node)}"


def agent_deliver_subject(prefix: str, cluster: str, node: str) -> str:
    """Where the server pushes a node's commands: under the agent's own inbox prefix, so that
    only that identity may subscribe it (the old `_INBOX.bke-agent.<durable>` was readable by
    anyone allowed `_INBOX.>`)."""
    return f"{prefix}.{agent_consumer(cluster, node)}"


def _pattern(subject: str, component: str, *, receive: bool = False) -> str:
    """`bke.v1.install.{cluster}.phase` -> `bke.v1.install.*.phase`; a dead-letter channel's
    `{service}` is the component itself. A receiver may subscribe trailing placeholders as `>`
    (`bke.v1.heartbeat.>`, what the dispatcher subscribes): nats-server allows a wildcard
    subscription only under an allow pattern at least as wide, and the channel owns that space."""
    subject = subject.replace("{service}", component)
    if receive:
        subject = re.sub(r"(\.\{[a-z]+\})+$", ".>", subject)
    return re.sub(r"\{[a-z]+\}", "*", subject)


def role_permissions(role: str, name: str | None = None) -> Permissions:
    """Permissions of a service, the operator or a dashboard (agents: `agent_permissions`)."""
    row = ROLES.get(role)
    if row is None or row.kind == "agent":
        raise ValueError(f"role: {role!r} is not a service, operator or dashboard role")
    prefix = inbox_prefix(name or role)
    if row.kind == "dashboard":  # read only: the requests that change nothing, never commands or events
        pub = [_pattern(c.subject, row.component) for c in CHANNELS
               if row.component in c.senders and c.kind == "request" and c.reads]
    elif row.kind == "deploy":  # no channel: JetStream declarations only
        pub = []
    elif row.kind == "authority":  # it sends nothing: its answers go through `resp`
        pub = []
    else:
        pub = [_pattern(c.subject, row.component) for c in CHANNELS if row.component in c.senders]
    sub = [_pattern(c.subject, row.component, receive=True) for c in CHANNELS
           if row.component in c.receivers or (row.kind == "dashboard" and c.kind == "event")]
    return Permissions(
        pub_allow=tuple(dict.fromkeys([*pub, *row.extra_pub, *row.js_api])),
        sub_allow=tuple(dict.fromkeys([*sub, *row.extra_sub, f"{prefix}.>"])),
        responses=row.responses,
    )


def agent_permissions(cluster: str, node: str) -> Permissions:
    """Exactly what one node's agent needs (see bke_agent.loop): create-or-update its own durable
    push consumer (`CONSUMER.CREATE.<stream>.<own consumer>.<own command subject>`, the form
    nats-py 2.16's `add_consumer` uses when the config has a name and one filter), read its own
    consumer's info, ack its own deliveries, direct-get / pull its own subjects only, publish its
    own results (the dispatcher's and the upgrader's), registration, heartbeat and refusals
    (JetStream publishes get their PubAck on its inbox),
    and subscribe its own inbox (where the server pushes its commands) and command subject.

    etcd snapshots (the `EtcdSnapshot` step, bke.adapters.etcdsnap.upload): publish chunk and meta
    messages into the snapshot object store, nothing else of it: no JetStream API call on its
    stream (no reading, listing, purging or deleting). Object names are base64 in the meta
    subject, so the store cannot be narrowed to the node's own names by subject: an agent could
    add an object under any name. BKE opens a snapshot only if its record carries the MAC of the
    agent it provisioned for the record's node (bke.adapters.etcdsnap.store.check_author).

    etcd restores (the `RestoreEtcdMember` step): core requests on its own node's piece subject
    only; the replies come to its inbox, sealed to its own key.

    Its identity's renewal (bke.contracts.identity): core requests on its own node's renewal
    subject only; the new JWT comes to its inbox."""
    consumer = agent_consumer(cluster, node)
    command = agent_subject(cluster, node, "command")
    prefix = inbox_prefix(identity_name("agent", cluster, node))
    own = [agent_subject(cluster, node, k) for k in ("result", UPGRADER_RESULT, "registered", "heartbeat", "refused")]
    pub = [
        *own,
        renew_identity_subject(cluster, node),
        restore_piece_subject(cluster, node_token(node)),
        f"$O.{ETCD_SNAPSHOT_BUCKET}.C.*",
        f"$O.{ETCD_SNAPSHOT_BUCKET}.M.*",
        f"{JS_API}.INFO",
        f"{JS_API}.CONSUMER.CREATE.{AGENT_STREAM}.{consumer}.{command}",
        f"{JS_API}.CONSUMER.INFO.{AGENT_STREAM}.{consumer}",
        f"{JS_API}.CONSUMER.MSG.NEXT.{AGENT_STREAM}.{consumer}",
        f"{JS_API}.DIRECT.GET.{AGENT_STREAM}.{command}",
        f"$JS.ACK.{AGENT_STREAM}.{consumer}.>",
    ]
    deny = [  # payload-carrying forms: never, whatever the allow list becomes
        f"{JS_API}.CONSUMER.CREATE.{AGENT_STREAM}",
        f"{JS_API}.CONSUMER.DURABLE.CREATE.>",
        f"{JS_API}.STREAM.MSG.GET.>",
        f"{JS_API}.DIRECT.GET.{AGENT_STREAM}",
    ]
    return Permissions(pub_allow=tuple(pub), sub_allow=(f"{prefix}.>", command), pub_deny=tuple(deny),
                       payload=quotas.AGENT_MAX_PAYLOAD, subs=quotas.AGENT_MAX_SUBS)
