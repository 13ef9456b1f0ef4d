"""The etcd restore's record in Redis, and the agents' answers beside it.

    bke:<c>:etcd-restore            string  the cluster's current (or last) restore, JSON (bke.core.etcdsnap.restore_run)
    bke:<c>:etcd-restore:results    hash    command id -> {status, step, stderr} as the agent answered
    bke:etcd-restores               set     clusters with a restore record (resumed after a restart)

Only the reconcile pass (under the cluster's "upgrade" lease, the one an upgrade's passes take)
and the start (a WATCH transaction that refuses while another restore runs) write the record;
results are recorded beside it and folded in by the next pass, so a result that arrives twice
counts once.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from bke.contracts.agent import CommandResult
from bke.core.etcdsnap.restore_run import RestoreRun
from bke.adapters.state.exclusive import write_unless
from bke.adapters.state.keys.upgrader import etcd_restore_key, etcd_restore_results_key, etcd_restores_index

__all__ = ["RestoreStore"]


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


class RestoreStore:
    def __init__(self, redis: Redis):
        self.r = redis

    async def load(self, cluster: str) -> RestoreRun | None:
        raw = await self.r.get(etcd_restore_key(cluster))
        return None if raw is None else RestoreRun.from_json(raw)

    async def save(self, run: RestoreRun) -> None:
        await self.r.set(etcd_restore_key(run.cluster), run.to_json())

    async def start(self, run: RestoreRun, check: Callable[[RestoreRun | None], str]) -> str:
        """Store `run` unless `check(current)` refuses; the refusal ("" when stored)."""

        def write(pipe: Any) -> None:
            pipe.set(etcd_restore_key(run.cluster), run.to_json())
            pipe.delete(etcd_restore_results_key(run.cluster))
            pipe.sadd(etcd_restores_index(), run.cluster)

        return await write_unless(self.r, etcd_restore_key(run.cluster),
                                  lambda raw: check(None if raw is None else RestoreRun.from_json(raw)), write)

    async def record_result(self, res: CommandResult, step: str, stderr: str) -> None:
        doc = json.dumps({"status": res.status, "step": step, "stderr": stderr})
        await self.r.hset(etcd_restore_results_key(res.cluster), res.command_id, doc)

    async def results(self, cluster: str, command_ids: list[str]) -> dict[str, dict[str, str]]:
        if not command_ids:
            return {}
        raw = await self.r.hmget(etcd_restore_results_key(cluster), command_ids)
        return {k: json.loads(v) for k, v in zip(command_ids, raw) if v is not None}

    async def clusters(self) -> list[str]:
        return sorted(_s(c) for c in await self.r.smembers(etcd_restores_index()))
