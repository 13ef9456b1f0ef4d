"""The status read model, served on `bke.v1.status.get`: clients ask the dispatcher, which
reads its own state, so that no client knows the Redis layout (`state.py` documents it).

    StatusResponder.answer(bytes) -> bytes     thin: parse, read, encode; never raises
      └── StatusReader.read(request)           the adapter: one Redis round trip + the plan
            └── build_status(...)              the pure core: records in, a ClusterStatus out
                  └── fit_reply(...)           pages the node list down to the payload budget

Errors become replies, never exceptions: an unknown cluster is `StatusError(NotFound)`, a
malformed request `StatusError(Invalid)` naming each field, a failed read
`StatusError(Unavailable)` (logged).
"""
from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable

from pydantic import ValidationError
from redis.asyncio import Redis

from bke.contracts.base import ErrorItem
from bke.contracts.status import (
    ClusterStatus,
    GetStatus,
    NodeCounts,
    OperationHolder,
    Refusals,
    RotationStatus,
    StatusError,
    StatusNode,
    StatusPhase,
)
from bke.contracts.membership import MembershipView
from bke.contracts.reset import ResetView
from bke.contracts.statuses import HealthStatus, RunStatus
from bke.core.errors import TemporaryError, is_unavailable
from bke.adapters.state import PlanCache
from bke.adapters.state.operation_slot import FIELDS as SLOT_FIELDS
from bke.adapters.state.operation_slot import Holder, holder_of
from bke.core.state.schema import SCHEMA_FIELD, check_readable
from bke.adapters.state.keys.dispatcher import (
    addons_key, health_key, health_pods_key, install_key, join_key, node_labels_key, node_status_key, phase_key,
    refusals_key, removal_key, reset_key,
)
from bke.adapters.state.keys.shared import operation_key

from .ops.join.decide import Join
from .phases import PHASES
from .ops.removal.decide import Removal
from .ops.reset.decide import Reset
from .status_summary import health_counts, label_sets, node_health, node_taints

__all__ = ["MAX_REPLY_BYTES", "RotationView", "StatusReader", "StatusResponder", "build_status", "fit_reply", "no_rotation"]

log = logging.getLogger("bke.dispatcher.status")
# NATS refuses payloads over max_payload (1 MiB by default); keep room for headers
MAX_REPLY_BYTES = 900 * 1024
RotationView = Callable[[str], Awaitable[dict | None]]
# the phase table is the one source of each phase's name and summary
PHASE_SUMMARIES: tuple[tuple[str, str], ...] = tuple((p.slug, p.summary) for p in PHASES)
_COUNTED = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED)
# the nodes a request's selection lists, by status ("unhealthy" lists by health: _select_nodes)
_SELECTED: dict[str, tuple[RunStatus, ...]] = {"none": (), "failed": (RunStatus.FAILED, RunStatus.RUNNING),
                                               "all": _COUNTED}


async def no_rotation(cluster: str) -> dict | None:
    """The default rotation view: no certificate rotation was ever run."""
    return None


def _unhealthy(answer: dict | None) -> bool:
    h = node_health(answer)
    return h is not None and h.status == HealthStatus.UNHEALTHY


def _opt(value: str | None) -> str | None:
    return value or None  # Redis stores "not yet" as ""


def build_status(
    req: GetStatus,
    install: dict[str, str],
    phases: dict[str, dict[str, str]],
    order: list[str],
    node_states: dict[str, dict],
    addons: dict[str, dict],
    health: dict[str, dict],
    rotation: dict | None,
    refusals: dict[str, str] | None = None,
    *,
    node_labels: dict[str, dict] | None = None,
    cluster_health: dict[str, dict] | None = None,
    reset: ResetView | None = None,
    operation: Holder | None = None,
    join: MembershipView | None = None,
    removal: MembershipView | None = None,
) -> ClusterStatus:
    """The reply for `req` from the dispatcher's records (decoded); `order` is the plan's node
    order (every node, including those no command reached yet). `health`: node -> its latest
    health answer; `node_labels`: node -> what the node-labels phase applied;
    `cluster_health`: the cluster-wide records ("kube-system")."""
    node_labels = node_labels or {}
    sets, labelled, sets_more = label_sets(order, node_labels)
    counts, rows = _select_nodes(req, order, node_states, health)
    page = rows[req.offset : req.offset + req.limit]
    end = req.offset + len(page)
    return ClusterStatus(
        cluster=req.cluster,
        **_install_fields(install),
        phases=[_phase(slug, summary, phases.get(slug, {})) for slug, summary in PHASE_SUMMARIES],
        node_counts=NodeCounts(total=len(order), pending=counts[RunStatus.PENDING], running=counts[RunStatus.RUNNING],
                               succeeded=counts[RunStatus.SUCCEEDED], failed=counts[RunStatus.FAILED]),
        node_selection=req.nodes,
        nodes=[_node(h, s, st, node_labels, health.get(h)) for h, s, st in page],
        nodes_matched=len(rows),
        next_offset=end if end < len(rows) else None,
        # in the order they were applied (the addon table's `order`), not Redis' hash order
        addons=dict(sorted(addons.items(), key=lambda kv: (kv[1].get("order", 1 << 30), kv[0]))),
        health=cluster_health or {},
        node_health=health_counts(order, health),
        label_sets=sets,
        labelled=labelled,
        label_sets_more=sets_more,
        rotation=RotationStatus.model_validate(rotation) if rotation else None,
        refusals=_refusals(refusals) if refusals else None,
        reset=reset,
        operation=_operation(operation) if operation else None,
        join=join,
        removal=removal,
    )


def _select_nodes(req: GetStatus, order: list[str], node_states: dict[str, dict],
                  health: dict[str, dict]) -> tuple[dict[str, int], list[tuple[str, str, dict]]]:
    """Every node counted by status, and the (hostname, status, record) of those the request
    selects, in plan order."""
    counts: dict[str, int] = dict.fromkeys(_COUNTED, 0)
    rows = []
    wanted = _SELECTED.get(req.nodes, ())
    for hostname in order:
        st = node_states.get(hostname, {})
        node_status = st.get("status") or RunStatus.PENDING
        counts[node_status] = counts.get(node_status, 0) + 1
        if node_status in wanted or (req.nodes == "unhealthy" and _unhealthy(health.get(hostname))):
            rows.append((hostname, node_status, st))
    return counts, rows


def _install_fields(install: dict[str, str]) -> dict[str, Any]:
    """The install record's part of the reply: a failure's kind only when it failed."""
    status = install.get("status") or RunStatus.PENDING
    return {
        "status": status,
        "request_id": install.get("requestId", ""),
        "started_at": _opt(install.get("startedAt")),
        "finished_at": _opt(install.get("finishedAt")),
        "message": install.get("message", ""),
        "kind": (install.get("kind") or None) if status == RunStatus.FAILED else None,
        "nodes_changed": install.get("nodesChanged") == "1",
    }


def _phase(slug: str, summary: str, record: dict[str, str]) -> StatusPhase:
    return StatusPhase(
        name=slug,
        summary=summary,
        status=record.get("status") or RunStatus.PENDING,
        started_at=_opt(record.get("startedAt")),
        finished_at=_opt(record.get("finishedAt")),
        message=record.get("message", ""),
        done=int(record.get("ok") or 0),
        total=int(record.get("total") or 0),
    )


def _node(hostname: str, status: str, st: dict, node_labels: dict[str, dict], health: dict | None) -> StatusNode:
    return StatusNode(hostname=hostname, status=status, phase=st.get("phase"), step=st.get("step") or None,
                      labels=(node_labels[hostname].get("labels") or {}) if hostname in node_labels else None,
                      taints=node_taints(node_labels.get(hostname)), health=node_health(health))


def _refusals(refusals: dict[str, str]) -> Refusals:
    return Refusals(count=int(refusals.get("count") or 0), last_node=refusals.get("lastNode", ""),
                    last_reason=refusals.get("lastReason", ""), last_at=_opt(refusals.get("lastAt")))


def _operation(operation: Holder) -> OperationHolder:
    return OperationHolder(kind=operation.kind, request_id=operation.request_id, since=operation.since,
                           detail=operation.detail)


def fit_reply(reply: ClusterStatus, max_bytes: int = MAX_REPLY_BYTES) -> bytes:
    """Encode `reply`, halving its page of nodes until it fits: a client follows `nextOffset`."""
    data = reply.to_bytes()
    while len(data) > max_bytes and reply.nodes:
        keep = len(reply.nodes) // 2
        offset = (reply.next_offset if reply.next_offset is not None else reply.nodes_matched) - len(reply.nodes)
        reply = reply.model_copy(update={"nodes": reply.nodes[:keep], "next_offset": offset + keep})
        data = reply.to_bytes()
    return data


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _hash(raw: dict) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


def _json_hash(raw: dict) -> dict[str, dict]:
    return {_text(k): json.loads(v) for k, v in raw.items()}


class StatusReader:
    """Reads a cluster's records in one Redis round trip; the plan comes from the plan cache
    (re-read only when its digest changes), so a poll of a 10,000-node cluster stays cheap."""

    def __init__(self, redis: Redis, plans: PlanCache, rotation: RotationView = no_rotation):
        # rotation: `async (cluster) -> dict | None` with the keys of `RotationStatus`; the
        # dispatcher's rotation store provides it (bke_dispatcher.ops.rotation.run; default: none ever ran)
        self.redis, self.plans, self.rotation = redis, plans, rotation

    async def read(self, req: GetStatus) -> ClusterStatus | StatusError:
        c = req.cluster
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(install_key(c))
            for slug, _ in PHASE_SUMMARIES:
                pipe.hgetall(phase_key(c, slug))
            pipe.hgetall(node_status_key(c)).hgetall(addons_key(c)).hgetall(health_key(c)).get(health_pods_key(c))
            pipe.hgetall(refusals_key(c)).hgetall(node_labels_key(c)).get(reset_key(c))
            pipe.hmget(operation_key(c), list(SLOT_FIELDS))
            pipe.get(join_key(c)).get(removal_key(c))
            got = await pipe.execute()
        install = _hash(got[0])
        if not install:
            return StatusError(reason="NotFound", cluster=c, message=f"cluster {c!r}: no install found")
        check_readable("install", install.get(SCHEMA_FIELD), f"the install record of {c}")  # never misread a newer form
        n = len(PHASE_SUMMARIES)
        phases = {slug: _hash(raw) for (slug, _), raw in zip(PHASE_SUMMARIES, got[1 : 1 + n])}
        node_states = _json_hash(got[1 + n])
        addons, health, pods = _json_hash(got[2 + n]), _json_hash(got[3 + n]), got[4 + n]
        cluster_health = {"kube-system": json.loads(pods)} if pods else {}
        try:
            order = [node.hostname for node in (await self.plans.load(c)).nodes]
        except TemporaryError:
            order = sorted(node_states)  # the install record came before the plan is visible
        reset = Reset.from_json(got[7 + n]).view() if got[7 + n] else None
        join = Join.from_json(got[9 + n]).view() if got[9 + n] else None
        removal = Removal.from_json(got[10 + n]).view() if got[10 + n] else None
        return build_status(req, install, phases, order, node_states, addons, health, await self.rotation(c),
                            _hash(got[5 + n]), node_labels=_json_hash(got[6 + n]), cluster_health=cluster_health,
                            reset=reset, operation=holder_of(c, got[8 + n]), join=join, removal=removal)


class StatusResponder:
    """The handler of `bke.v1.status.get`: bytes in, bytes out, and it never raises, so that a
    bad request or a Redis outage is an answer to the client, not a crashed subscription."""

    def __init__(self, reader: StatusReader, guard: Callable[[], None] = lambda: None):
        self.reader = reader
        self.guard = guard  # raises while the state is lost (bke.adapters.state.epoch): answer Unavailable

    async def answer(self, data: bytes) -> bytes:
        try:
            req = GetStatus.model_validate_json(data)
        except ValidationError as exc:
            errors = [ErrorItem(path=".".join(str(p) for p in e["loc"]) or "(request)", message=e["msg"]) for e in exc.errors(include_url=False)]
            return StatusError(reason="Invalid", message="invalid status request", errors=errors).to_bytes()
        try:
            self.guard()
        except TemporaryError as exc:
            return StatusError(reason="Unavailable", cluster=req.cluster, message=str(exc)[:500]).to_bytes()
        try:
            reply = await self.reader.read(req)
        except Exception as exc:  # noqa: BLE001 - an outage is reported to the client, not raised
            if is_unavailable(exc):  # the client keeps asking: one rate-limited line, no traceback
                log.warning("status read: store unavailable: %s: %s", type(exc).__name__, exc,
                            extra={"cluster": req.cluster, "rate_key": "status-unavailable"})
                message = f"store unavailable: {type(exc).__name__}: {exc}"
            else:
                log.exception("status read failed", extra={"cluster": req.cluster})
                message = f"{type(exc).__name__}: {exc}"
            return StatusError(reason="Unavailable", cluster=req.cluster, message=message[:500]).to_bytes()
        return fit_reply(reply) if isinstance(reply, ClusterStatus) else reply.to_bytes()
