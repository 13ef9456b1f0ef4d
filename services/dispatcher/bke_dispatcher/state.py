"""The dispatcher's state in Redis: install, phases, per-node commands, agents.

    bke:<c>:install              hash  requestId planDigest status startedAt finishedAt phase message
                                       kind nodesChanged node endSent (ops/install/store.py)
    bke:<c>:inputs               hash  render|certs -> JSON {status, digest, reason, kind, node}: what
                                       the renderer and certs services said (their events)
    bke:<c>:sealed               set   nodes whose bundles certs said are sealed (`certs.sealed`)
    bke:<c>:phase:<slug>         hash  status startedAt finishedAt message total cursor ok failed gen
    bke:<c>:cmd:<slug>           hash  <node> -> JSON {id, gen, status, step, stderr, at}
    bke:<c>:node                 hash  <node> -> JSON {phase, status, step}
    bke:<c>:lease:install        string owner (PX ttl)   claimed before a pass of the install's loop
    bke:<c>:agents:accepted      hash  <node> -> agent id certs sealed the bundle to
    (read) bke:<c>:plan-meta     the planner's: the cluster's incarnation, which a result must answer
    bke:installs                 set   clusters with an install record

The install hash's `schemaVersion` is the version of all of these (bke.core.state.schema).

Transitions that must count once (a result that arrives twice) are Lua scripts.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from redis.asyncio import Redis

from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.dispatcher import (
    accepted_agents_key, command_key, inputs_key, install_key, installs_index, node_status_key, phase_key,
    refusals_key, sealed_key,
)
from bke.adapters.state.keys.shared import operation_key
from bke.adapters.state.plans import INCARNATION_READ, incarnation_of
from bke.contracts.statuses import InstallStatus, NodeStatus, PhaseStatus
from bke.core.state.schema import SCHEMA_FIELD, check_readable, record_kind

__all__ = ["DispatcherState", "FinishedCommand"]


class FinishedCommand(NamedTuple):
    """One result to count (`DispatcherState.finish_commands`)."""

    node: str
    command_id: str
    gen: int
    status: str
    step: str
    stderr: str
    at: str

INSTALL_VERSION = str(record_kind("install").current)

_FINISH_CMD = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return -1 end
local c = cjson.decode(cur)
if c['id'] ~= ARGV[2] then
  if tonumber(c['gen']) < tonumber(ARGV[8]) then return -1 end
  return 0
end
if c['status'] ~= 'Sent' then return 0 end
c['status'] = ARGV[3]; c['step'] = ARGV[4]; c['stderr'] = ARGV[5]; c['at'] = ARGV[6]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(c))
if ARGV[3] == 'Succeeded' then redis.call('HINCRBY', KEYS[2], 'ok', 1)
else redis.call('HINCRBY', KEYS[2], 'failed', 1) end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[7])
return 1
"""
_RECORD_INPUT = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local plan, said = ARGV[3], ARGV[4]
if cur and plan ~= '' and said ~= '' and said ~= plan then
  if cjson.decode(cur)['digest'] == plan then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


# Compare-and-set of the install's end (DispatcherState.finish_install); in the same step the
# install's operation slot goes (KEYS[2], bke.adapters.state.operation_slot: only the install's own
# claim), so that whoever sees the install finished may start the next operation at once.
_FINISH_INSTALL = """
if redis.call('HGET', KEYS[1], 'status') ~= 'Running' or redis.call('HGET', KEYS[1], 'requestId') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
local slot = redis.call('HMGET', KEYS[2], 'kind', 'requestId')
if slot[1] == 'install' and slot[2] == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
"""


class DispatcherState:
    def __init__(self, redis: Redis):
        self.r = redis

    # install -----------------------------------------------------------------
    async def start_install(self, cluster: str, request_id: str, now: str, plan_digest: str = "") -> bool:
        """Create the install record once; False if it already exists (resume)."""
        key = install_key(cluster)
        created = await self.r.hsetnx(key, "requestId", request_id)
        if created:
            await self.r.hset(key, mapping={"status": InstallStatus.RUNNING, "startedAt": now, "phase": "", "message": "",
                                            "planDigest": plan_digest, "kind": "", "nodesChanged": "0",
                                            SCHEMA_FIELD: INSTALL_VERSION})
            await self.r.sadd(installs_index(), cluster)
        return bool(created)

    async def reset_install(self, cluster: str, slugs: list[str], plan_digest: str) -> None:
        """Forget an install that failed before any node changed, so that a replaced plan starts
        from the beginning. What the services said about the new plan (it may have come first)
        stays, and so does the sealed set: bundles that did not change stay sealed."""
        stale = [k for k, v in (await self.inputs(cluster)).items() if v.get("digest") != plan_digest]
        keys = [install_key(cluster), node_status_key(cluster)]
        keys += [phase_key(cluster, s) for s in slugs] + [command_key(cluster, s) for s in slugs]
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.delete(*keys)
            if stale:
                pipe.hdel(inputs_key(cluster), *stale)
            await pipe.execute()

    # inputs from the other services ---------------------------------------------
    async def inputs(self, cluster: str) -> dict[str, dict]:
        raw = await self.r.hgetall(inputs_key(cluster))
        return {_s(k): json.loads(v) for k, v in raw.items()}

    async def record_input(self, cluster: str, name: str, doc: dict, plan_digest: str) -> bool:
        """Store what a service said, unless it is about another plan than `plan_digest` and the
        stored record is about this one (False then). One script: two consumers write here."""
        return bool(await self.r.eval(_RECORD_INPUT, 1, inputs_key(cluster), name, json.dumps(doc), plan_digest,
                                      doc.get("digest", "")))

    async def set_input(self, cluster: str, name: str, doc: dict) -> None:
        await self.r.hset(inputs_key(cluster), name, json.dumps(doc))

    async def add_sealed(self, cluster: str, nodes: list[str]) -> None:
        if nodes:
            await self.r.sadd(sealed_key(cluster), *nodes)

    async def sealed_count(self, cluster: str, nodes: list[str]) -> int:
        """How many of these nodes have a sealed bundle (only the plan's nodes count)."""
        if not nodes:
            return 0
        return sum(await self.r.smismember(sealed_key(cluster), nodes))

    async def install(self, cluster: str) -> dict[str, str]:
        rec = {_s(k): _s(v) for k, v in (await self.r.hgetall(install_key(cluster))).items()}
        if rec:  # the phase state's version is the install record's (bke.core.state.schema)
            check_readable("install", rec.get(SCHEMA_FIELD), f"the install record of {cluster}")
        return rec

    async def set_install(self, cluster: str, **fields: str) -> None:
        await self.r.hset(install_key(cluster), mapping=fields)

    async def finish_install(self, cluster: str, request_id: str, **fields: str) -> bool:
        """Write the install's end (`fields`, with its status) only if it is still the Running
        install of `request_id`: whether this call ended it (one of two replicas does)."""
        return bool(await self.r.eval(_FINISH_INSTALL, 2, install_key(cluster), operation_key(cluster), request_id,
                                      *[x for kv in fields.items() for x in kv]))

    async def installs(self) -> list[str]:
        return sorted(_s(c) for c in await self.r.smembers(installs_index()))

    # phases ------------------------------------------------------------------
    async def phase(self, cluster: str, slug: str) -> dict[str, str]:
        return {_s(k): _s(v) for k, v in (await self.r.hgetall(phase_key(cluster, slug))).items()}

    async def set_phase(self, cluster: str, slug: str, **fields: Any) -> None:
        await self.r.hset(phase_key(cluster, slug), mapping={k: str(v) for k, v in fields.items()})

    async def retry_nodes(self, cluster: str, slug: str, cmds: dict[str, dict]) -> None:
        """Put failed nodes back in flight with a new generation (a new command id), and the
        phase and install back to Running, in one transaction."""
        async with self.r.pipeline(transaction=True) as pipe:
            if cmds:
                pipe.hset(command_key(cluster, slug), mapping={n: json.dumps(c) for n, c in cmds.items()})
                pipe.hincrby(phase_key(cluster, slug), "failed", -len(cmds))
            pipe.hset(phase_key(cluster, slug), mapping={"status": PhaseStatus.RUNNING, "retry": "1", "message": "", "finishedAt": ""})
            pipe.hset(install_key(cluster), mapping={"status": InstallStatus.RUNNING, "message": "", "finishedAt": ""})
            await pipe.execute()

    # commands ----------------------------------------------------------------
    async def commands(self, cluster: str, slug: str, nodes: list[str]) -> dict[str, dict | None]:
        if not nodes:
            return {}
        raws = await self.r.hmget(command_key(cluster, slug), nodes)
        return {n: None if r is None else json.loads(r) for n, r in zip(nodes, raws)}

    async def all_commands(self, cluster: str, slug: str) -> dict[str, dict]:
        raw = await self.r.hgetall(command_key(cluster, slug))
        return {_s(k): json.loads(v) for k, v in raw.items()}

    async def mark_sent(self, cluster: str, slug: str, sent: dict[str, dict], cursor: int | None, now: str) -> None:
        """Record a batch of published commands and advance the phase cursor, in one round trip."""
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.hset(command_key(cluster, slug), mapping={n: json.dumps(c) for n, c in sent.items()})
            pipe.hset(
                node_status_key(cluster),
                mapping={n: json.dumps({"phase": slug, "status": NodeStatus.RUNNING, "step": None}) for n in sent},
            )
            if cursor is not None:
                pipe.hset(phase_key(cluster, slug), "cursor", cursor)
            # from now on the nodes have changed: a corrected spec must go through apply, not replace
            pipe.hset(install_key(cluster), "nodesChanged", "1")
            await pipe.execute()

    async def finish_command(
        self, cluster: str, slug: str, node: str, command_id: str, gen: int, status: str, step: str, stderr: str, now: str
    ) -> int:
        """Count a result once: 1 counted, 0 a stale or duplicate result, -1 the command is not
        recorded as sent yet (a dispatcher died between publishing and recording it)."""
        [counted] = await self.finish_commands(cluster, slug, [FinishedCommand(node, command_id, gen, status, step,
                                                                               stderr, now)])
        return counted

    async def finish_commands(self, cluster: str, slug: str, results: Sequence[FinishedCommand]) -> list[int]:
        """`finish_command` for several results of one phase in one round trip (each counted by
        its own script run, as alone)."""
        return (await self.count_results(cluster, slug, results))[0]

    async def count_results(self, cluster: str, slug: str,
                            results: Sequence[FinishedCommand]) -> tuple[list[int], bool]:
        """`finish_commands`, and whether every command of the phase has its answer now (its
        `ok` and `failed` add up to its `total`), read in the same round trip: the install's
        next pass then need not wait for more answers to come together."""
        keys = [command_key(cluster, slug), phase_key(cluster, slug), node_status_key(cluster)]
        async with self.r.pipeline(transaction=False) as pipe:
            for f in results:
                node_doc = json.dumps({"phase": slug, "status": f.status, "step": f.step or None})
                pipe.eval(_FINISH_CMD, 3, *keys, f.node, f.command_id, f.status, f.step, f.stderr, f.at, node_doc, f.gen)
            pipe.hmget(keys[1], ["ok", "failed", "total"])
            *counted, (ok, failed, total) = await pipe.execute()
        answered = int(ok or 0) + int(failed or 0)
        return [int(n) for n in counted], total is not None and answered >= int(total)

    async def nodes(self, cluster: str) -> dict[str, dict]:
        raw = await self.r.hgetall(node_status_key(cluster))
        return {_s(k): json.loads(v) for k, v in raw.items()}

    # agents ------------------------------------------------------------------
    # Learned from `certs.sealed` only (the certs service sealed to the key BKE provisioned),
    # never from an agent's own registration: a node's agent is the one its bundle is sealed to.
    async def accept_agents(self, cluster: str, agents: dict[str, str]) -> None:
        if agents:
            await self.r.hset(accepted_agents_key(cluster), mapping=agents)

    async def record_refusal(self, cluster: str, node: str, reason: str, at: str) -> bool:
        """Count a refusal for `bke status`, for a cluster with an install record only (one of
        an unknown cluster creates nothing); whether it was recorded."""
        if not await self.r.exists(install_key(cluster)):
            return False
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.hincrby(refusals_key(cluster), "count", 1)
            pipe.hset(refusals_key(cluster), mapping={"lastNode": node, "lastReason": reason[:500], "lastAt": at})
            await pipe.execute()
        return True

    async def accepted_agent(self, cluster: str, node: str) -> str | None:
        v = await self.r.hget(accepted_agents_key(cluster), node)
        return None if v is None else _s(v)

    async def results_checks(self, cluster: str, nodes: list[str],
                             incarnation: bool) -> tuple[list[str | None], str | None]:
        """What results of one cluster are checked against, in one round trip: each node's
        accepted agent, and if `incarnation` the cluster's current incarnation (the planner's
        plan-meta: None without a plan, bke.adapters.state.plans.incarnation_of), else None."""
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.hmget(accepted_agents_key(cluster), nodes)
            if incarnation:
                pipe.hmget(plan_meta_key(cluster), INCARNATION_READ)
            accepted, *meta = await pipe.execute()
        return [None if a is None else _s(a) for a in accepted], (incarnation_of(meta[0]) if meta else None)

    async def agent_count(self, cluster: str, nodes: list[str]) -> int:
        """How many of `nodes` have an accepted agent."""
        if not nodes:
            return 0
        return sum(v is not None for v in await self.r.hmget(accepted_agents_key(cluster), nodes))
