"""Read model of an install for `bke status` and the lab display (the dispatcher writes it;
key layout documented in services/dispatcher/bke_dispatcher/state.py)."""
from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis

from ..contracts.install import INSTALL_PHASES
from .keys import cluster_key

__all__ = ["install_status"]


def _s(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


async def install_status(redis: Redis, cluster: str) -> dict[str, Any] | None:
    """`{"cluster", "status", "requestId", "phases": [...], "nodes": [...], ...}` or None."""
    inst = {_s(k): _s(v) for k, v in (await redis.hgetall(cluster_key(cluster, "install"))).items()}
    if not inst:
        return None
    phases = []
    for slug, _summary in INSTALL_PHASES:
        ps = {_s(k): _s(v) for k, v in (await redis.hgetall(cluster_key(cluster, "phase", slug))).items()}
        phases.append(
            {
                "name": slug,
                "status": ps.get("status", "Pending"),
                "startedAt": ps.get("startedAt") or None,
                "finishedAt": ps.get("finishedAt") or None,
                "message": ps.get("message", ""),
                "done": int(ps.get("ok", 0) or 0),
                "total": int(ps.get("total", 0) or 0),
            }
        )
    raw_nodes = await redis.hgetall(cluster_key(cluster, "node"))
    plan_raw = await redis.get(cluster_key(cluster, "plan"))
    order = [n["hostname"] for n in json.loads(plan_raw)["nodes"]] if plan_raw else []
    states = {_s(k): json.loads(v) for k, v in raw_nodes.items()}
    nodes = []
    for h in order or sorted(states):
        st = states.get(h, {})
        status = st.get("status", "Pending")
        nodes.append({"hostname": h, "status": status, "step": st.get("phase") if status != "Failed" else f"{st.get('phase')}: {st.get('step')}"})
    health = {_s(k): json.loads(v) for k, v in (await redis.hgetall(cluster_key(cluster, "health"))).items()}
    addons = {_s(k): json.loads(v) for k, v in (await redis.hgetall(cluster_key(cluster, "addons"))).items()}
    pods_raw = await redis.get(cluster_key(cluster, "health-pods"))
    if pods_raw:
        health = {**health, "kube-system": json.loads(pods_raw)}
    return {
        "cluster": cluster,
        "status": inst.get("status"),
        "requestId": inst.get("requestId"),
        "startedAt": inst.get("startedAt"),
        "finishedAt": inst.get("finishedAt") or None,
        "message": inst.get("message", ""),
        "phases": phases,
        "nodes": nodes,
        "addons": addons,
        "health": health,
    }
