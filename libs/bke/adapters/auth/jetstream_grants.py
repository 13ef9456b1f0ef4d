"""What each identity may ask of JetStream, as data: which streams it declares, which consumers it
owns, which object buckets it reads or writes.

Why a table: JetStream's API is plain NATS subjects (`$JS.API.<VERB>.<stream>[.<consumer>…]`), so a
user's `pub.allow` decides which verbs it may use on which names. A wildcard over the verb
(`$JS.API.*.*.BKE_EVENTS`) used to give every service `STREAM.UPDATE` of every stream: enough to
add `BKE_AGENT` as a source of another stream and read every node's commands, add a subject
transform that turned a service's dead letters into a node's results, or seal `BKE_AGENT`. Now:

* Streams are declared by one deploy-time identity (`streams`, what `bke streams ensure` and the
  lab's start run as): `STREAM.INFO/CREATE/UPDATE` of the declared streams and buckets, nothing
  else (no delete, purge or message delete). A service only checks what it finds
  (bke.adapters.bus.streams.stream_problems) and refuses to start on a mismatch.
* A service uses the consumers it owns, named, with their filter in the subject (the form
  nats-server checks against the config: `server/jetstream_api.go` `jsConsumerCreateRequest`
  refuses a request whose config's filter differs from the subject's), and nobody else's:
  create, info, fetch (`CONSUMER.MSG.NEXT`) and ack (`$JS.ACK.<stream>.<durable>.>`).
  tests/unit/adapters/test_auth_permissions.py holds `SERVICE_CONSUMERS` against the services' wiring.
* An object bucket is written (chunks and meta published, old chunks purged) by its writers only.
  NATS permissions cannot look at headers, so a `Nats-Rollup: all` publish, which empties a
  whole bucket, is stopped by denying the publish itself to everyone else. Readers bind, read the
  meta (direct get) and read chunks through an ordered (ephemeral) consumer, whose creation
  carries its filter in the payload: a reader may read any object of a bucket it reads.
* A stream's stored messages are read one at a time (`STREAM.MSG.GET`, by sequence or subject)
  only where `MESSAGE_READERS` says so: the operator reads the dead letters (`bke deadletters`).
  The request carries the sequence or subject in its payload, so the grant is the whole stream.

Agents get their JetStream subjects in bke.adapters.auth.permissions.agent_permissions (their own consumer
and command subject only).
"""
from __future__ import annotations

from dataclasses import dataclass

from bke.adapters.bus.streams import AGENT_OUTPUT_INTEREST, AGENT_OUTPUT_STREAM, AGENT_STREAM, OBJECT_BUCKET, STREAMS
from bke.contracts.agent import AGENTS_ACCEPTED, AGENTS_REFUSED
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET
from bke.contracts.apply import APPLY_CLUSTER
from bke.contracts.certs import CERTS_FAILED, CERTS_ISSUED, CERTS_RENEWED, CERTS_SEALED, ISSUE_CERTS, RENEW_CERTS
from bke.contracts.cluster import INSTALL_CLUSTER, LEGACY_CLUSTER_REQUESTED, PLAN_CREATED
from bke.contracts.install import LEGACY_RETRY_REQUESTED, RETRY_INSTALL, install_subject
from bke.contracts.membership import JOIN_NODES, JOIN_NODES_FINISHED, REMOVE_NODES, REMOVE_NODES_FINISHED
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NODE_COMMANDS_SEND
from bke.contracts.pause import PAUSE_CLUSTER
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_FAILED, RENDER_MANIFESTS
from bke.contracts.reset import CLUSTER_DELETED, RESET_CLUSTER
from bke.contracts.restore import RESTORE_ETCD
from bke.contracts.rotation import rotation_subject
from bke.contracts.upgrade import RETRY_UPGRADE, UPGRADE_CLUSTER

__all__ = ["AGENT_OUTPUT_STREAM", "AGENT_STREAM", "BUCKET_ACCESS", "JS_API", "MESSAGE_READERS", "SERVICE_CONSUMERS", "BucketAccess", "Consumer",
           "bucket_subjects", "consumer_subjects", "declare_subjects", "message_read_subjects", "read_subjects"]

JS_API = "$JS.API"


@dataclass(frozen=True)
class Consumer:
    stream: str
    durable: str
    filter: str


def _c(stream: str, *pairs: tuple[str, str]) -> tuple[Consumer, ...]:
    return tuple(Consumer(stream, durable, filt) for durable, filt in pairs)


_INSTALL_FINISHED = install_subject("*", "finished")


def _outputs(*durables: str) -> tuple[Consumer, ...]:
    """Consumers of the agents' outputs, with the filters the deploy step creates them with."""
    filters = dict(AGENT_OUTPUT_INTEREST)
    return tuple(Consumer(AGENT_OUTPUT_STREAM, d, filters[d]) for d in durables)


def _deleted(service: str) -> Consumer:  # every service forgets a deleted cluster (bke.adapters.forgetting)
    return Consumer("BKE_EVENTS", f"{service}-deleted", CLUSTER_DELETED)


def _pause(service: str) -> Consumer:  # the two that run operations hold them (bke.adapters.pausing)
    return Consumer("BKE_EVENTS", f"{service}-pause", PAUSE_CLUSTER)


# Every durable consumer of every service: (stream, durable, filter). Kept in step with the
# services' `work_subscriber`/`fast_subscriber` calls by tests/unit/adapters/test_auth_permissions.py.
SERVICE_CONSUMERS: dict[str, tuple[Consumer, ...]] = {
    "planner": (
        _deleted("planner"),
        *_c("BKE_COMMANDS", ("planner", INSTALL_CLUSTER), ("planner-legacy", LEGACY_CLUSTER_REQUESTED)),
        *_c("BKE_EVENTS", ("planner-installs", _INSTALL_FINISHED)),
    ),
    "certs": (
        _deleted("certs"),
        *_c("BKE_EVENTS", ("certs-plans", PLAN_CREATED), ("certs-installs", _INSTALL_FINISHED),
            ("certs-rotations", rotation_subject("*")), ("certs-removals", REMOVE_NODES_FINISHED)),
        *_c("BKE_COMMANDS", ("certs-issue", ISSUE_CERTS), ("certs-renew", RENEW_CERTS)),
        *_outputs("certs-agents"),
    ),
    "renderer": (
        _deleted("renderer"),
        *_c("BKE_EVENTS", ("renderer-plans", PLAN_CREATED), ("renderer-removals", REMOVE_NODES_FINISHED)),
        *_c("BKE_COMMANDS", ("renderer-render", RENDER_MANIFESTS)),
    ),
    "dispatcher": (
        _deleted("dispatcher"), _pause("dispatcher"),
        *_c("BKE_EVENTS", ("dispatcher-plans", PLAN_CREATED), ("dispatcher-rendered", MANIFESTS_RENDERED),
            ("dispatcher-render-failed", RENDER_FAILED), ("dispatcher-certs-issued", CERTS_ISSUED),
            ("dispatcher-certs-failed", CERTS_FAILED), ("dispatcher-certs-sealed", CERTS_SEALED),
            ("dispatcher-agents-accepted", AGENTS_ACCEPTED), ("dispatcher-agents-refused", AGENTS_REFUSED),
            ("dispatcher-rotations", CERTS_RENEWED)),
        *_c("BKE_COMMANDS", ("dispatcher-retry", RETRY_INSTALL), ("dispatcher-retry-legacy", LEGACY_RETRY_REQUESTED),
            ("dispatcher-resets", RESET_CLUSTER), ("dispatcher-joins", JOIN_NODES),
            ("dispatcher-removals", REMOVE_NODES), ("dispatcher-node-commands", NODE_COMMANDS_SEND)),
        *_outputs("dispatcher-results", "dispatcher-refusals", "dispatcher-upgrader-results"),
    ),
    "upgrader": (
        _deleted("upgrader"), _pause("upgrader"),
        *_c("BKE_COMMANDS", ("upgrader-applies", APPLY_CLUSTER), ("upgrader-requests", UPGRADE_CLUSTER),
            ("upgrader-retries", RETRY_UPGRADE), ("upgrader-restores", RESTORE_ETCD)),
        *_c("BKE_EVENTS", ("upgrader-joins-finished", JOIN_NODES_FINISHED),
            ("upgrader-removals-finished", REMOVE_NODES_FINISHED), ("upgrader-certs-issued", CERTS_ISSUED),
            ("upgrader-certs-renewed", CERTS_RENEWED), ("upgrader-certs-failed", CERTS_FAILED)),
        *_c("BKE_COMMANDS", ("upgrader-node-results", NODE_COMMANDS_ANSWERED)),
    ),
}


@dataclass(frozen=True)
class BucketAccess:
    writers: tuple[str, ...]  # identities (roles) that add objects
    readers: tuple[str, ...]  # identities that read objects (writers read too)
    why: str


# Who writes and reads each object bucket. Agents add etcd snapshots with publishes only
# (bke.adapters.etcdsnap.upload); their grant is in bke.adapters.auth.permissions.agent_permissions.
BUCKET_ACCESS: dict[str, BucketAccess] = {
    OBJECT_BUCKET: BucketAccess(writers=("operator",), readers=("planner", "upgrader"),
                                why="specs sent by reference: the CLI stores them, the planner and the upgrader read them"),
    ETCD_SNAPSHOT_BUCKET: BucketAccess(writers=(), readers=("dispatcher", "upgrader", "operator"),
                                       why="etcd snapshots: agents add them, BKE lists and opens them"),
}


# Who may read a stream's messages one by one, by sequence or subject, without a consumer
# (`$JS.API.STREAM.MSG.GET.<stream>`): nothing is acked or removed. Dead letters carry the raw
# bytes of what a service gave up on (anything a sender put on the bus, up to 256 KiB), so only
# the operator reads them (`bke deadletters list|show`, what docs/troubleshooting.md sends the
# operator to); no service reads what another gave up on, and the read-only dashboard sees their
# count in the stream's info only.
MESSAGE_READERS: dict[str, tuple[str, ...]] = {
    "BKE_DEADLETTER": ("operator",),
}


def _obj(bucket: str) -> str:
    return f"OBJ_{bucket}"


def consumer_subjects(c: Consumer) -> tuple[str, ...]:
    """Create (filter in the subject), info, fetch and ack of one named consumer."""
    return (f"{JS_API}.CONSUMER.CREATE.{c.stream}.{c.durable}.{c.filter}",
            f"{JS_API}.CONSUMER.INFO.{c.stream}.{c.durable}",
            f"{JS_API}.CONSUMER.MSG.NEXT.{c.stream}.{c.durable}",
            f"$JS.ACK.{c.stream}.{c.durable}.>")


def bucket_subjects(role: str) -> tuple[str, ...]:
    """A role's subjects on the object buckets it reads or writes."""
    out: list[str] = []
    for bucket, access in BUCKET_ACCESS.items():
        stream = _obj(bucket)
        if role in access.readers or role in access.writers:
            out += [f"{JS_API}.STREAM.INFO.{stream}", f"{JS_API}.DIRECT.GET.{stream}.>", f"{JS_API}.STREAM.MSG.GET.{stream}",
                    f"{JS_API}.CONSUMER.CREATE.{stream}", f"{JS_API}.CONSUMER.CREATE.{stream}.>", f"$JS.FC.{stream}.>"]
        if role in access.writers:
            out += [f"$O.{bucket}.>", f"{JS_API}.STREAM.PURGE.{stream}"]
    return tuple(out)


def message_read_subjects(role: str) -> tuple[str, ...]:
    """A role's message gets (`MESSAGE_READERS`): one subject per stream it reads."""
    return tuple(f"{JS_API}.STREAM.MSG.GET.{stream}" for stream, readers in MESSAGE_READERS.items() if role in readers)


def _declared() -> tuple[str, ...]:
    return (*(d.name for d in STREAMS), *(_obj(b) for b in BUCKET_ACCESS))


def read_subjects() -> tuple[str, ...]:
    """What any BKE identity but an agent may read of JetStream: the account's and the declared
    streams' and consumers' info (a service checks its streams at start; the lab waits on the
    services' consumers)."""
    # STREAM.NAMES: nats-py's object store `get` finds the bucket's stream by subject with it
    return (f"{JS_API}.INFO", f"{JS_API}.STREAM.NAMES", *(f"{JS_API}.STREAM.INFO.{s}" for s in _declared()),
            *(f"{JS_API}.CONSUMER.INFO.{d.name}.*" for d in STREAMS))


def declare_subjects() -> tuple[str, ...]:
    """The deploy-time identity's: create and update the declared streams and buckets (object
    stores are created through `STREAM.CREATE.OBJ_<bucket>`), and create the consumers an
    interest stream is declared with (bke.adapters.bus.streams: named, filter in the subject;
    it never fetches or acks), nothing else."""
    return (f"{JS_API}.INFO",
            *(f"{JS_API}.STREAM.{verb}.{s}" for s in _declared() for verb in ("INFO", "CREATE", "UPDATE")),
            *(f"{JS_API}.CONSUMER.{verb}" for d in STREAMS for durable, filt in d.interest
              for verb in (f"CREATE.{d.name}.{durable}.{filt}", f"INFO.{d.name}.{durable}")),
            *(f"{JS_API}.CONSUMER.DELETE.{d.name}.{durable}" for d in STREAMS for durable in d.retired))
