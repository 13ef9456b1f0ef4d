"""JetStream streams as a table, and an idempotent `ensure_streams`.

Commands sit on a work-queue stream (a message is gone once one consumer acks it).
Events sit on a limits stream, because several services read the same event (a plan is
read by certs, renderer and dispatcher), each through its own durable consumer.

The agents' outputs (results, registrations, refusals) are not in the
commands' stream: BKE_AGENT_OUT keeps each until every consumer it is for has acknowledged it
(interest retention), a few per node subject (the node's own oldest go past that), none larger
than the largest real output, and refuses new messages when full instead of dropping old ones
(bke.adapters.bus.quotas). So one agent publishing as fast as it can holds at most its own
subjects' few messages, and never pushes out another node's (or another cluster's) commands,
which sat in the same stream and went first when it was full. Interest retention does not
store a message that no consumer's filter matches (nats-server acknowledges it and drops it:
an agent's registration published before the certs service ever started would be lost), so the
deploy step creates the stream's consumers with it (`StreamDef.interest`); each service then
brings its own to its settings (bke.adapters.bus.fast_consumer), and a service refuses to start
while one is missing.

`max_consumers`: nats-server 2.15 caps every stream at 1000 consumers unless the stream sets a
limit itself (and -1 no longer means "unlimited"). BKE_AGENT holds one durable consumer per node
agent, so it declares its own limit; the others keep the server default.

Who declares them: one deploy-time identity (`bke streams ensure`, the lab's start, the deploy
job), through `ensure_streams`. A service never creates or changes a stream: at start it checks
what it finds (`check_streams`, a report of `stream_problems`) and refuses to start on a missing
stream or a drifted config, naming it. A service that could update streams could add `BKE_AGENT`
as a source of another stream, or seal it (bke.adapters.auth.jetstream_grants).

Replicas (a NATS cluster): `ensure_streams(js, replicas=N)` creates each stream with N replicas
and brings an existing stream to N (nats-server moves a stream's replica count up or down by an
update), and makes the object buckets the same way (`ensure_buckets`): each bucket is a stream of
its own (`OBJ_<bucket>`). Without a count it creates with one and never changes an existing
stream's count. A service started with BKE_STREAM_REPLICAS checks that count too.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import (AckPolicy, ConsumerConfig, DeliverPolicy, DiscardPolicy, ObjectStoreConfig, RetentionPolicy,
                         StorageType, StreamConfig)
from nats.js.errors import NotFoundError

from bke.contracts import subjects as s
from bke.contracts.agent import UPGRADER_RESULT
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET
from bke.core.errors import PermanentError
from . import quotas

__all__ = ["AGENT_OUTPUT_STREAM", "AGENT_STREAM", "APPEND_ONLY_BUCKETS", "BUCKETS", "interest_config", "BUCKET_TTL_S", "STREAMS", "StreamDef", "StreamsNotDeclared", "bucket_config", "check_streams",
           "ensure_buckets", "ensure_streams", "require_streams", "stream_problems", "wait_declared", "OBJECT_BUCKET"]

log = logging.getLogger(__name__)
OBJECT_BUCKET = "bke-blobs"  # big payloads travel by reference (specRef)
# Every object bucket: the blobs, and the etcd snapshots (made here first when replicated, so
# that bke.adapters.etcdsnap.store finds it rather than making it with one replica).
BUCKETS: tuple[tuple[str, str], ...] = (
    (OBJECT_BUCKET, "payloads too large for one message (specRef)"),
    (ETCD_SNAPSHOT_BUCKET, "etcd snapshots, sealed to the deployment's snapshot key"),
)
# How long an object may stay, per bucket (seconds; absent: kept until deleted). A spec sent by
# reference is read once, when its request is taken (the planner stores the plan, the upgrader
# keeps the spec in its run's record), and the request itself leaves the streams after 7 days:
# its blob goes with it, rather than every install's and apply's spec staying for ever. The
# snapshots are kept for a month (bke.adapters.bus.quotas.SNAPSHOT_TTL_S): the bucket is append-only, so
# its age is what makes room.
BUCKET_TTL_S: dict[str, float] = {OBJECT_BUCKET: 7 * 86400.0, ETCD_SNAPSHOT_BUCKET: quotas.SNAPSHOT_TTL_S}
# Buckets whose objects are only ever added: their stream refuses rollup headers, message deletes
# and purges. Node agents publish into the snapshot bucket, and a publish with `Nats-Rollup: all`
# on any of its subjects would otherwise empty it (NATS permissions cannot look at headers); the
# agents' own upload needs no rollup (bke.adapters.etcdsnap.upload: a new meta subject per object).
APPEND_ONLY_BUCKETS: frozenset[str] = frozenset({ETCD_SNAPSHOT_BUCKET})


@dataclass(frozen=True)
class StreamDef:
    name: str
    subjects: tuple[str, ...]
    retention: RetentionPolicy
    max_age_s: float
    summary: str
    max_consumers: int | None = None  # None: the server's default (1000 on nats-server 2.15)
    max_msgs_per_subject: int = -1  # -1: no per-subject limit (bke.adapters.bus.quotas)
    discard: DiscardPolicy = DiscardPolicy.OLD  # when full: drop the oldest, or refuse the new
    max_msg_size: int = -1  # -1: the server's max_payload
    # (durable, filter) of the consumers the deploy step creates with the stream: an interest
    # stream keeps only what some consumer's filter matches (see the module docstring)
    interest: tuple[tuple[str, str], ...] = ()
    # consumers of an earlier release that the deploy step deletes: on an interest stream a
    # consumer nobody reads any more would keep every message its filter matches until the
    # stream, full, refused new ones
    retired: tuple[str, ...] = ()

    def config(self, replicas: int = 1, clusters: int = 1) -> StreamConfig:
        return StreamConfig(
            name=self.name,
            subjects=list(self.subjects),
            retention=self.retention,
            storage=StorageType.FILE,
            max_age=self.max_age_s,
            discard=self.discard,
            duplicate_window=120.0,
            max_consumers=self.max_consumers,
            num_replicas=replicas,
            max_bytes=quotas.max_bytes(self.name, clusters),
            max_msgs_per_subject=self.max_msgs_per_subject,
            max_msg_size=self.max_msg_size,
        )


def interest_config(durable: str, filter_subject: str) -> ConsumerConfig:
    """A consumer the deploy step creates, in the shape a service's own takes
    (bke.adapters.bus.fast_consumer, with ServiceSettings' defaults): the service's start then
    only updates it to its settings."""
    return ConsumerConfig(name=durable, durable_name=durable, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                          max_deliver=-1, ack_wait=10.0, filter_subject=filter_subject, max_ack_pending=20_000)


DAY = 86400.0
AGENT_MAX_CONSUMERS = 100_000  # one durable per node agent
AGENT_STREAM = "BKE_AGENT"
AGENT_OUTPUT_STREAM = "BKE_AGENT_OUT"
_OUT = "bke.v1.agent.*.*"
# Every consumer of the agents' outputs, by durable name (the services' own:
# bke.adapters.auth.jetstream_grants.SERVICE_CONSUMERS names them from here).
AGENT_OUTPUT_INTEREST: tuple[tuple[str, str], ...] = (
    ("certs-agents", f"{_OUT}.registered"),
    ("dispatcher-results", f"{_OUT}.result"),
    ("dispatcher-refusals", f"{_OUT}.refused"),
    # where agents of the previous release answer the upgrader's commands (deprecated)
    ("dispatcher-upgrader-results", f"{_OUT}.{UPGRADER_RESULT}"),
)
# The upgrader's, from when it read agents' results itself (the dispatcher sends them on now).
AGENT_OUTPUT_RETIRED: tuple[str, ...] = ("upgrader-results", "upgrader-answers")
# BKE_AGENT comes before BKE_AGENT_OUT: a deployment made with one agent stream has its
# subjects narrowed to the commands first, and only then can the outputs' stream take theirs
# (two streams' subjects may not overlap).
STREAMS: tuple[StreamDef, ...] = (
    StreamDef("BKE_COMMANDS", s.COMMAND_SUBJECTS, RetentionPolicy.WORK_QUEUE, 7 * DAY, "commands to the services"),
    StreamDef("BKE_EVENTS", s.EVENT_SUBJECTS, RetentionPolicy.LIMITS, 7 * DAY, "events, read by several services"),
    StreamDef(AGENT_STREAM, s.AGENT_COMMAND_SUBJECTS, RetentionPolicy.LIMITS, 7 * DAY, "node agent commands",
              max_consumers=AGENT_MAX_CONSUMERS, max_msgs_per_subject=quotas.AGENT_SUBJECT_MSGS),
    StreamDef(AGENT_OUTPUT_STREAM, s.AGENT_OUTPUT_SUBJECTS, RetentionPolicy.INTEREST, 7 * DAY,
              "node agent results, registrations and refusals, until their consumers took them",
              max_msgs_per_subject=quotas.AGENT_OUTPUT_SUBJECT_MSGS, discard=DiscardPolicy.NEW,
              max_msg_size=quotas.AGENT_OUTPUT_MAX_MSG, interest=AGENT_OUTPUT_INTEREST,
              retired=AGENT_OUTPUT_RETIRED),
    StreamDef("BKE_DEADLETTER", (s.DEADLETTER + ".>",), RetentionPolicy.LIMITS, 30 * DAY, "messages given up on"),
)


async def ensure_streams(js: JetStreamContext, streams: tuple[StreamDef, ...] = STREAMS,
                         replicas: int | None = None, clusters: int | None = None) -> None:
    """Create missing streams and buckets; bring existing ones back to the declared config (and,
    when `replicas` is given, to that many replicas; sized for `clusters` clusters, bke.adapters.bus.quotas,
    one if None and the stream has no size yet). Idempotent. Deploy time only: see the module
    docstring."""
    for d in streams:
        cfg = d.config(replicas or 1, clusters or 1)
        try:
            info = await js.stream_info(d.name)
        except NotFoundError:
            await js.add_stream(cfg)
            log.info("stream created", extra={"stream": d.name, "replicas": cfg.num_replicas})
            continue
        if replicas is None:
            cfg.num_replicas = info.config.num_replicas  # kept: see the module docstring
        if clusters is None and (info.config.max_bytes or -1) > 0:
            cfg.max_bytes = info.config.max_bytes  # sized by an earlier `--clusters`: kept
        problems = stream_problems(d, info.config, replicas, clusters)
        if problems:  # the declared config put back, whatever was changed (a sealed stream stays refused)
            await js.update_stream(cfg)
            log.info("stream updated", extra={"stream": d.name, "replicas": cfg.num_replicas, "problems": problems})
    for d in streams:
        await ensure_interest(js, d)
    await ensure_buckets(js, replicas, clusters)


async def ensure_interest(js: JetStreamContext, d: StreamDef) -> None:
    """Each consumer of `d.interest` that is missing, created (one that exists is left as its
    service set it); each of `d.retired` that exists, deleted."""
    for durable in d.retired:
        try:
            await js.delete_consumer(d.name, durable)
            log.info("retired consumer deleted", extra={"stream": d.name, "consumer": durable})
        except NotFoundError:
            pass
    for durable, filter_subject in d.interest:
        try:
            await js.consumer_info(d.name, durable)
        except NotFoundError:
            await js.add_consumer(d.name, interest_config(durable, filter_subject))
            log.info("consumer created", extra={"stream": d.name, "consumer": durable})


class StreamsNotDeclared(PermanentError):
    """A stream or bucket is missing or not as declared: the deploy step has not run (or ran
    with another release). Not retried by the service: the operator runs `bke streams ensure`."""


def stream_problems(d: StreamDef, found: StreamConfig | None, replicas: int | None = None,
                    clusters: int | None = None) -> list[str]:
    """What differs between a declared stream and the config the server has (empty: as declared).
    Only what BKE declares is compared, so a server's own defaults never count as drift. Without
    `clusters` (a service's check) any size will do, but a stream must have one."""
    if found is None:
        return [f"stream {d.name}: missing"]
    want = d.config(replicas or 1, clusters or 1)
    out = []
    if sorted(found.subjects or []) != sorted(want.subjects or []):
        out.append(f"stream {d.name}: subjects {sorted(found.subjects or [])} (declared {sorted(want.subjects or [])})")
    if found.retention != want.retention:
        out.append(f"stream {d.name}: retention {found.retention} (declared {want.retention})")
    if d.max_consumers is not None and found.max_consumers != d.max_consumers:
        out.append(f"stream {d.name}: max_consumers {found.max_consumers} (declared {d.max_consumers})")
    if replicas is not None and found.num_replicas != replicas:
        out.append(f"stream {d.name}: {found.num_replicas} replicas (this deployment wants {replicas})")
    out += _size_problems(f"stream {d.name}", found.max_bytes, want.max_bytes, clusters)
    if (found.max_msgs_per_subject or -1) != d.max_msgs_per_subject:
        out.append(f"stream {d.name}: {found.max_msgs_per_subject} messages per subject (declared {d.max_msgs_per_subject})")
    if (found.discard or DiscardPolicy.OLD) != d.discard or bool(found.discard_new_per_subject):
        out.append(f"stream {d.name}: discard {found.discard} (declared {d.discard}, not per subject)")
    if (found.max_msg_size or -1) != d.max_msg_size:
        out.append(f"stream {d.name}: max_msg_size {found.max_msg_size} (declared {d.max_msg_size})")
    # What a stream admin could add to turn the stream into something else: another stream's
    # messages copied in, its subjects rewritten, or writes refused for ever.
    if found.sources or found.mirror:
        out.append(f"stream {d.name}: has sources or a mirror (declared none)")
    if getattr(found, "subject_transform", None):
        out.append(f"stream {d.name}: has a subject transform (declared none)")
    if getattr(found, "sealed", False):
        out.append(f"stream {d.name}: sealed")
    return out


def _size_problems(what: str, found: int | None, want: int | None, clusters: int | None) -> list[str]:
    if clusters is None:
        return [] if (found or -1) > 0 else [f"{what}: no max_bytes (declared one)"]
    return [] if found == want else [f"{what}: max_bytes {found} (declared {want} for {clusters} clusters)"]


async def check_streams(js: JetStreamContext, replicas: int | None = None,
                        streams: tuple[StreamDef, ...] = STREAMS, clusters: int | None = None) -> list[str]:
    """Every problem with the declared streams and buckets as the server has them; reads only."""
    out: list[str] = []
    for d in streams:
        try:
            found: StreamConfig | None = (await js.stream_info(d.name)).config
        except NotFoundError:
            found = None
        out += stream_problems(d, found, replicas, clusters)
        if found is not None:
            out += await _interest_problems(js, d)
    for bucket, _ in BUCKETS:
        try:
            info = await js.stream_info(f"OBJ_{bucket}")
        except NotFoundError:
            out.append(f"bucket {bucket}: missing")
            continue
        if replicas is not None and info.config.num_replicas != replicas:
            out.append(f"bucket {bucket}: {info.config.num_replicas} replicas (this deployment wants {replicas})")
        if bucket in APPEND_ONLY_BUCKETS and not _append_only(info.config):
            out.append(f"bucket {bucket}: allows rollups, deletes or purges (declared append-only)")
        out += _size_problems(f"bucket {bucket}", info.config.max_bytes, quotas.max_bytes(f"OBJ_{bucket}", clusters or 1),
                              clusters)
    return out


async def _interest_problems(js: JetStreamContext, d: StreamDef) -> list[str]:
    out = []
    for durable, _ in d.interest:
        try:
            await js.consumer_info(d.name, durable)
        except NotFoundError:
            out.append(f"stream {d.name}: consumer {durable}: missing")
    return out


def _append_only(cfg: StreamConfig) -> bool:
    return not cfg.allow_rollup_hdrs and bool(cfg.deny_delete) and bool(cfg.deny_purge)


def bucket_config(bucket: str, replicas: int = 1, clusters: int = 1) -> ObjectStoreConfig:
    """An object bucket's configuration: its replicas, its objects' time to live (BUCKET_TTL_S)
    and its size (bke.adapters.bus.quotas)."""
    summary = dict(BUCKETS).get(bucket, "")
    return ObjectStoreConfig(bucket=bucket, description=summary, storage=StorageType.FILE, replicas=replicas,
                             ttl=BUCKET_TTL_S.get(bucket), max_bytes=quotas.max_bytes(f"OBJ_{bucket}", clusters))


async def ensure_buckets(js: JetStreamContext, replicas: int | None = None, clusters: int | None = None) -> None:
    """Each object bucket of BUCKETS, created with `replicas` (one if None) and its time to live,
    or brought to them (a bucket made before its time to live was declared gets it; None keeps
    an existing bucket's replicas)."""
    for bucket, _ in BUCKETS:
        try:
            info = await js.stream_info(f"OBJ_{bucket}")
        except NotFoundError:
            await js.create_object_store(bucket, config=bucket_config(bucket, replicas or 1, clusters or 1))
            log.info("object bucket created", extra={"bucket": bucket, "replicas": replicas or 1})
            info = await js.stream_info(f"OBJ_{bucket}")
            if bucket not in APPEND_ONLY_BUCKETS:
                continue
        ttl = BUCKET_TTL_S.get(bucket, 0.0)
        want = info.config.num_replicas if replicas is None else replicas
        as_declared = bucket not in APPEND_ONLY_BUCKETS or _append_only(info.config)
        found_size = info.config.max_bytes or -1
        # without `clusters`, a size set by an earlier `--clusters` is kept
        size = found_size if clusters is None and found_size > 0 else quotas.max_bytes(f"OBJ_{bucket}", clusters or 1)
        if (info.config.num_replicas != want or (info.config.max_age or 0.0) != ttl or not as_declared
                or info.config.max_bytes != size):
            info.config.num_replicas, info.config.max_age, info.config.max_bytes = want, ttl, size
            if bucket in APPEND_ONLY_BUCKETS:  # nats-server lets these be turned on, never off
                info.config.allow_rollup_hdrs, info.config.deny_delete, info.config.deny_purge = False, True, True
            await js.update_stream(info.config)
            log.info("object bucket updated", extra={"bucket": bucket, "replicas": replicas, "ttl_s": ttl})


async def wait_declared(js: JetStreamContext, replicas: int | None, wait_s: float) -> None:
    """A service's start: wait, for `wait_s`, until the streams and buckets are as declared (the
    deploy step may still be running, and a NATS cluster that is still forming answers JetStream
    requests with 503s). Then a missing or drifted stream stands as StreamsNotDeclared, and the
    service does not start: it never declares streams itself."""
    from bke.core.errors import is_unavailable

    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + wait_s, 0.25
    while True:
        try:
            problems = await check_streams(js, replicas=replicas)
        except Exception as exc:
            if not is_unavailable(exc) or loop.time() > deadline:
                raise
            log.warning("streams not readable yet (NATS: %s: %s); trying again", type(exc).__name__, exc)
        else:
            if not problems:
                return
            if loop.time() > deadline:
                raise StreamsNotDeclared("; ".join(problems) + " — run `bke streams ensure` (the deploy step) first")
            log.warning("streams not as declared yet: %s", "; ".join(problems))
        await asyncio.sleep(delay)  # backoff while the deploy step runs
        delay = min(2 * delay, 2.0)


async def require_streams(js: JetStreamContext) -> None:
    """For a client about to publish (the CLI): the streams exist, or StreamsNotDeclared saying
    what to run. It changes nothing (only the deploy step declares)."""
    missing = [p for p in await check_streams(js) if p.endswith(": missing")]
    if missing:
        raise StreamsNotDeclared("; ".join(missing) + " — run `bke streams ensure` (the deploy step) first")
