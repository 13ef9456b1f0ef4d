"""The upgrade's record in Redis, and the agents' answers beside it.

    bke:<c>:upgrade            string  the cluster's current (or last) upgrade, JSON (bke.core.upgrade.run)
    bke:<c>:upgrade:results    hash    command id -> {status, step, stderr} as the agent answered
    bke:<c>:upgrade:nodes      hash    node -> the versions it runs, and the target it is behind on
                                       (bke.core.upgrade.node_versions), written with the run's end
    bke:upgrades               set     clusters with an upgrade record (resumed after a restart)

An answer comes believed from the dispatcher (bke_upgrader.results says why this service does
not check its agent again). It is recorded only if, when it names one, it answers a command of
the cluster's current incarnation (plan-meta, as it is when the answer is recorded): a deleted
cluster's answer, replayed from an agent's journal or left in the commands' stream while this
service was down, is dropped and counted.

Only the reconcile pass (under the cluster's "upgrade" lease) and the start (a WATCH transaction
that refuses while another upgrade runs) write the record; results are recorded beside it and
folded in by the next pass, so a result that arrives twice counts once.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from bke.adapters.bus.other_incarnation import OtherIncarnation
from bke.adapters.coalesce import Coalesced
from bke.adapters.operation import RecordStore
from bke.contracts.agent import CommandResult
from bke.core.secrets.binding import result_refusal
from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.upgrader import upgrade_key, upgrade_nodes_key, upgrade_results_key, upgrades_index
from bke.adapters.state.plans import INCARNATION_READ, incarnation_of
from bke.core.upgrade.node_versions import NodeVersion
from bke.core.upgrade.run import UpgradeRun

__all__ = ["UpgradeStore"]


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


class UpgradeStore(RecordStore[UpgradeRun]):
    """The one loop's store of the upgrade record (bke.adapters.operation.RecordStore), which reads
    its answers by batch and keeps the record object it saved last."""

    def __init__(self, redis: Redis, other_incarnation: OtherIncarnation | None = None):
        super().__init__(redis, UpgradeRun.from_json, upgrade_key, upgrade_results_key, upgrades_index())
        self.r = redis
        # answers to a command of another incarnation of their cluster (bke.adapters.bus.other_incarnation)
        self.other_incarnation = other_incarnation or OtherIncarnation(None, "upgrader")
        # cluster -> answers of the run known here (recorded by this process or read): an answer,
        # once recorded, is that command's for good (fixed ids; a replay repeats it), so a pass
        # asks Redis only for the ones still missing (a 5,000-node batch read whole each time
        # was quadratic). Dropped when a run starts.
        self._local: dict[str, dict[str, dict[str, str]]] = {}
        self._read_at: dict[str, tuple[tuple[str, str, int] | None, float]] = {}  # cluster -> (batch, when)
        self._runs: dict[str, tuple[str, UpgradeRun]] = {}  # cluster -> (bytes saved or read, the record)
        # cluster -> the answers recorded in one turn, checked and written together
        self._recording: Coalesced[str, tuple[CommandResult, str], str] = Coalesced(self._record_batch)

    async def load(self, cluster: str, *, fresh: bool = False) -> UpgradeRun | None:
        """The record. The reconcile pass (the record's only writer) gets the object it saved
        last while Redis still holds those bytes: parsing a 5,000-node record on every pass
        cost more than the rest of the pass. `fresh`: a new object (readers that are not the
        pass). A pass that fails must `forget` the cluster: its object may hold unsaved facts."""
        raw = await self.r.get(upgrade_key(cluster))
        if raw is None:
            self._runs.pop(cluster, None)
            return None
        text = _s(raw)
        hit = self._runs.get(cluster)
        if not fresh and hit is not None and hit[0] == text:
            return hit[1]
        run = UpgradeRun.from_json(text)
        if not fresh:
            self._runs[cluster] = (text, run)
        return run

    def forget(self, cluster: str) -> None:
        self._runs.pop(cluster, None)

    async def save(self, run: UpgradeRun) -> bool:
        text = run.to_json()
        await self.r.set(upgrade_key(run.cluster), text)
        self._runs[run.cluster] = (text, run)
        return True

    async def save_end(self, run: UpgradeRun, nodes: dict[str, NodeVersion]) -> None:
        """The finished run and its nodes' versions, in one transaction: a crash never leaves
        one without the other."""
        self.forget(run.cluster)
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.set(upgrade_key(run.cluster), run.to_json())
            if nodes:
                pipe.hset(upgrade_nodes_key(run.cluster), mapping={h: v.to_json() for h, v in nodes.items()})
            await pipe.execute()

    async def node_versions(self, cluster: str, hosts: list[str] | None = None) -> dict[str, NodeVersion]:
        """The recorded nodes (all, or those of `hosts` that have an entry). The record's
        version is the upgrade record's header (bke.core.state.schema), checked by `load`."""
        if hosts is None:
            raw = {_s(k): v for k, v in (await self.r.hgetall(upgrade_nodes_key(cluster))).items()}
        else:
            raw = dict(zip(hosts, await self.r.hmget(upgrade_nodes_key(cluster), hosts))) if hosts else {}
        return {h: NodeVersion.from_json(v) for h, v in raw.items() if v is not None}

    async def start(self, run: UpgradeRun, check: Callable[[UpgradeRun | None], str]) -> str:
        """Store `run` unless `check(current)` refuses; the refusal ("" when stored). Atomic
        against another replica starting an upgrade of the same cluster at the same time; what
        is known here of the last run goes."""
        self.forget(run.cluster)
        self._local.pop(run.cluster, None)
        self._read_at.pop(run.cluster, None)
        return await super().start(run, check)

    async def record_result(self, res: CommandResult, step: str = "", stderr: str = "") -> None:
        doc = json.dumps({"status": res.status, "step": step, "stderr": stderr, "agentVersion": res.agent_version})
        await self.r.hset(upgrade_results_key(res.cluster), res.command_id, doc)

    async def record_if_current(self, res: CommandResult, step: str, stderr: str) -> str:
        """Record the answer unless it answers a command of another incarnation of its cluster;
        else why not. Concurrent calls (the answers of one message, and of the messages handled
        at once) share one recording per cluster (`_record_batch`, bke.adapters.coalesce): at most
        two round trips for a whole batch instead of some per result."""
        doc = json.dumps({"status": res.status, "step": step, "stderr": stderr, "agentVersion": res.agent_version})
        return await self._recording(res.cluster, (res, doc))

    async def _record_batch(self, cluster: str, items: list[tuple[CommandResult, str]]) -> list[str]:
        """Per (result, answer): "" when recorded (and then known to this process), else why not."""
        whys = await self.other_incarnations(cluster, [res for res, _ in items])
        answers = {res.command_id: doc for why, (res, doc) in zip(whys, items) if not why}
        if answers:
            await self.r.hset(upgrade_results_key(cluster), mapping=answers)
        local = self._local.setdefault(cluster, {})
        local.update((cid, json.loads(doc)) for cid, doc in answers.items())
        return whys

    async def other_incarnations(self, cluster: str, results: list[CommandResult]) -> list[str]:
        """Per result, why it answers a command of another incarnation of `cluster` ("" when it
        does not, or names none: an unbound command's), each such one counted
        (bke.core.secrets.binding.result_refusal). The incarnation is read once, only if one of the
        results carries one."""
        if all(res.incarnation is None for res in results):
            return [""] * len(results)
        current = incarnation_of(await self.r.hmget(plan_meta_key(cluster), INCARNATION_READ))
        whys = [result_refusal(res.incarnation, current) or "" for res in results]
        for why, res in zip(whys, results):
            if why:
                self.other_incarnation.dropped(res, why, log_it=False)  # its caller logs what it drops
        return whys

    async def results(  # type: ignore[override]  # by batch (the loop's `folded`), never the whole hash
            self, cluster: str, command_ids: list[str], read_every_s: float = 0.0) -> dict[str, dict[str, str]]:
        """The recorded answers among `command_ids` (a batch's: never the whole hash, which
        holds every answer of the run, 15,000 at 5,000 nodes, and is read on every pass).
        Answers this process recorded are known without asking; Redis is asked for the others
        (recorded by another replica, or before a restart) on a batch's first read and then at
        most every `read_every_s`: a pass runs after every few results, and a 5,000-node batch's
        missing answers asked for on each was most of the pass."""
        local = self._local.setdefault(cluster, {})
        seen = {k: local[k] for k in command_ids if k in local}
        missing = [k for k in command_ids if k not in seen]
        batch = (command_ids[0], command_ids[-1], len(command_ids)) if command_ids else None
        now = time.monotonic()
        last = self._read_at.get(cluster)
        if missing and (last is None or last[0] != batch or now - last[1] >= read_every_s):
            raw = await self.r.hmget(upgrade_results_key(cluster), missing)
            for k, v in zip(missing, raw):
                if v is not None:
                    local[k] = seen[k] = json.loads(v)
            self._read_at[cluster] = (batch, now)
        return seen

    def unanswered(self, cluster: str, command_ids: list[str]) -> set[str]:
        """Those of `command_ids` whose answer this process does not know (yet)."""
        local = self._local.get(cluster, {})
        return {k for k in command_ids if k not in local}

