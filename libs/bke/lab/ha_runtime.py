"""The lab's runtime beyond one server: a NATS cluster (`--nats-cluster N`) and Redis with a
replica and Sentinel (`--redis-sentinel`), in place of the single nats-server and redis-server
of bke.adapters.runtime.embedded; everything else (operator mode, runtime.json, the reuse of live
servers, stopping by PID) is that runtime's.

The choice is remembered by the files the cluster and the sentinels keep in the runtime's
directory (bke.lab.nats_cluster, bke.lab.sentinel): a later `bke lab install` or `bke lab down`
on the same work directory finds them and runs, or stops, the same shape without the options.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bke.adapters.runtime import EmbeddedRuntime, RuntimeInfo
from .nats_cluster import CLUSTER_FILE, NatsCluster, stop_nats_cluster
from .sentinel import MASTER_NAME, SENTINEL_FILE, SentinelSet, stop_sentinel_set

__all__ = ["HaRuntime", "ha_env", "lab_runtime", "stop_ha", "stream_replicas"]

MAX_REPLICAS = 5  # JetStream's limit on a stream's replicas


class HaRuntime(EmbeddedRuntime):
    def __init__(self, workdir: Path, *, nats_cluster: int = 0, redis_sentinel: bool = False, **kw: Any) -> None:
        super().__init__(workdir, **kw)
        self.nats_cluster, self.redis_sentinel = nats_cluster, redis_sentinel

    def cluster(self) -> NatsCluster:
        return NatsCluster(self.workdir, self.nats_cluster, self.nats_auth, self.tls)

    def sentinel_set(self) -> SentinelSet:
        return SentinelSet(self.workdir)

    def _ensure_nats(self, old: RuntimeInfo | None) -> tuple[str, str, int]:
        if self.nats_cluster <= 1:
            return super()._ensure_nats(old)
        urls, monitor, pid = self.cluster().ensure()
        if self.tls:  # the nodes listen for TLS clients: the scheme they must use
            urls = urls.replace("nats://", "tls://")
        return urls, monitor, pid

    def _ensure_redis(self, old: RuntimeInfo | None) -> tuple[str, int]:
        if not self.redis_sentinel:
            return super()._ensure_redis(old)
        return self.sentinel_set().ensure()

    def _stream_replicas(self, info: RuntimeInfo) -> int | None:
        return stream_replicas(info)

    def _sentinel_info(self) -> tuple[str | None, str | None]:
        if not self.redis_sentinel:
            return None, None
        return ",".join(f"{h}:{p}" for h, p in self.sentinel_set().sentinels()), MASTER_NAME


def lab_runtime(runtime_dir: Path, *, nats_cluster: int = 0, redis_sentinel: bool = False,
                **kw: Any) -> EmbeddedRuntime:
    """The runtime a lab work directory asks for: the options, or what it ran with before."""
    runtime_dir = Path(runtime_dir).resolve()
    if not nats_cluster and (runtime_dir / CLUSTER_FILE).exists():
        nats_cluster = len(NatsCluster.read_nodes(runtime_dir))
    redis_sentinel = redis_sentinel or (runtime_dir / SENTINEL_FILE).exists()
    if nats_cluster > 1 or redis_sentinel:
        return HaRuntime(runtime_dir, nats_cluster=nats_cluster, redis_sentinel=redis_sentinel, **kw)
    return EmbeddedRuntime(runtime_dir, **kw)


def stream_replicas(info: RuntimeInfo) -> int | None:
    """As many replicas per stream as the lab has NATS nodes (None: a single server)."""
    nodes = len(info.nats_url.split(","))
    return min(nodes, MAX_REPLICAS) if nodes > 1 else None


def ha_env(info: RuntimeInfo) -> dict[str, str]:
    """The processes' settings for a cluster and for Sentinel (bke.adapters.settings): the NATS URLs are
    already a list in info.nats_url."""
    env = {}
    replicas = stream_replicas(info)
    if replicas:
        env["BKE_STREAM_REPLICAS"] = str(replicas)
    if info.redis_sentinels:
        env["BKE_REDIS_SENTINELS"] = info.redis_sentinels
        env["BKE_REDIS_SENTINEL_MASTER"] = str(info.redis_sentinel_master)
    return env


def stop_ha(runtime_dir: Path) -> list[int]:
    """Stop the cluster's nodes and the sentinels' set, whatever bke.adapters.runtime.embedded left."""
    return stop_sentinel_set(runtime_dir) + stop_nats_cluster(runtime_dir)
