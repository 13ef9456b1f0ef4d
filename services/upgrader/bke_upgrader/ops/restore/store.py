"""The etcd restore's record in Redis, and the agents' answers beside it (bke.adapters.operation.RecordStore):

    bke:<c>:etcd-restore            string  the cluster's current (or last) restore, JSON (bke.core.etcdsnap.restore_run)
    bke:<c>:etcd-restore:results    hash    command id -> {status, step, stderr} as the agent answered
    bke:etcd-restores               set     clusters with a restore record (resumed after a restart)
"""
from __future__ import annotations

from redis.asyncio import Redis

from bke.adapters.operation import RecordStore
from bke.adapters.state.keys.upgrader import etcd_restore_key, etcd_restore_results_key, etcd_restores_index
from bke.core.etcdsnap.restore_run import RestoreRun

__all__ = ["RestoreStore"]


class RestoreStore(RecordStore[RestoreRun]):
    def __init__(self, redis: Redis):
        super().__init__(redis, RestoreRun.from_json, etcd_restore_key, etcd_restore_results_key, etcd_restores_index())
