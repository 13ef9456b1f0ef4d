"""What the upgrade benches share (bench/upgrade.py, bench/real_upgrade.py): one heartbeat per
in-process agent before the request, the request asked and followed to its end with the time each
upgrade event arrived, and the figures read from the answer and those arrivals.

The AgentsAlive check reads the dispatcher's heartbeat record: a fleet runs without periodic
heartbeats (thousands of timers), so each of its agents sends one after the install, as a live
agent would have, and the upgrade is asked for once the dispatcher has recorded them all.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bke.adapters.bus import EventWatch
from bke.adapters.state.client import redis_client
from bke.adapters.state.keys.dispatcher import heartbeat_key
from bke.contracts.agent import AgentHeartbeat, agent_subject
from bke.contracts.upgrade import UPGRADE_ACCEPTED, UPGRADE_CLUSTER, UPGRADE_REJECTED, UpgradeCluster, upgrade_subject
from bke.core.upgrade.run import LOCAL_STEPS

__all__ = ["Followed", "TimedWatch", "follow_upgrade", "heartbeats", "instrument_services", "step_times",
           "upgrade_figures", "upgrade_subjects"]

PROFILING = Path(__file__).resolve().parent / "profiling"


def instrument_services(env: dict[str, str]) -> None:
    """The lab processes started after this run under bench/profiling/sitecustomize.py, which
    `env` (set in this process's environment, which they inherit) tells what to do. They start
    as fresh interpreters (BKE_LAB_FORKSERVER=0): a sitecustomize runs when an interpreter starts,
    and a child of the lab's fork server (bke.lab.forkserver) starts none, so it was never hooked."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(PROFILING) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(PROFILING), *paths])
    os.environ.update(env)
    os.environ["BKE_LAB_FORKSERVER"] = "0"


async def heartbeats(lab: Any, timeout: float = 120.0) -> None:
    """One heartbeat per agent of `lab.fleet`, then poll (with a deadline) until the dispatcher
    recorded each of them. `lab`: bench/install.py's InstalledLab or bench/real_cp.py's RealLab."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    for node, loop in lab.fleet.loops.items():
        hb = AgentHeartbeat(cluster=lab.cluster, node=node, agent_id=loop.identity.agent_id, at=now)
        await lab.nc.publish(agent_subject(lab.cluster, node, "heartbeat"), hb.to_bytes())
    await lab.nc.flush()
    redis = redis_client(lab.info.redis_url)  # the lab's admin user
    try:
        deadline = time.monotonic() + timeout
        # by name: a real agent of the lab (a real master) has its own record beside the fleet's
        while set(lab.fleet.loops) - {k.decode() if isinstance(k, bytes) else k
                                      for k in await redis.hkeys(heartbeat_key(lab.cluster))}:
            if time.monotonic() > deadline:
                raise TimeoutError("the dispatcher did not record every heartbeat")
            await asyncio.sleep(0.05)  # polling under a deadline
    finally:
        await redis.aclose()


class TimedWatch(EventWatch):
    """An EventWatch that also notes when each event arrived (perf_counter)."""

    def __init__(self, nc, subjects: list[str]):  # type: ignore[no-untyped-def]
        super().__init__(nc, subjects)
        self.times: list[float] = []

    async def _on_msg(self, msg) -> None:  # type: ignore[no-untyped-def]
        self.times.append(time.perf_counter())
        await super()._on_msg(msg)


def step_times(arrived: list, subject: str) -> str:  # type: ignore[type-arg]
    """Seconds each step took, from the first event that shows it started (or the previous
    step's end) to the first that shows it Succeeded, per UpgradeChanged arrival times."""
    ends: dict[str, float] = {}
    for at, e in arrived:
        if e.subject != subject:
            continue
        for st in e.data["upgrade"]["steps"]:
            key = st["name"] + ("/" + st["group"] if st["group"] else "")
            if st["status"] == "Succeeded" and key not in ends:
                ends[key] = at
    out, last = [], 0.0
    for key, at in sorted(ends.items(), key=lambda kv: kv[1]):
        out.append(f"{key} {at - last:.1f}")
        last = at
    return ", ".join(out)


def upgrade_subjects(cluster: str) -> list[str]:
    """The request's answers, then the cluster's UpgradeChanged (what follow_upgrade watches)."""
    return [UPGRADE_ACCEPTED, UPGRADE_REJECTED, upgrade_subject(cluster)]


@dataclass
class Followed:
    answer: Any  # the UpgradeAccepted or UpgradeRejected event
    end: Any  # the UpgradeChanged that is no longer Running (None when rejected)
    accepted_s: float  # from the publish to the answer
    total_s: float  # from the publish to the end (to the answer when rejected)
    arrived: list[tuple[float, Any]]  # (seconds after the publish, event) of every event watched


async def follow_upgrade(watch: TimedWatch, js: Any, req: UpgradeCluster, answer_timeout: float,
                         timeout: float) -> Followed:
    """Publish `req` and wait, on `watch` (opened on upgrade_subjects), for its answer and then
    for the upgrade's end."""
    changed = upgrade_subject(req.cluster)
    t0 = time.perf_counter()
    await js.publish(UPGRADE_CLUSTER, req.to_bytes())
    answer = await watch.wait_for(lambda e: e.subject != changed and e.data.get("requestId") == req.request_id,
                                  timeout=answer_timeout)
    t1 = time.perf_counter()
    end = None
    if answer.subject != UPGRADE_REJECTED:
        end = await watch.wait_for(lambda e: e.subject == changed and e.data["upgrade"]["status"] != "Running",
                                   timeout=timeout)
    t2 = time.perf_counter()
    return Followed(answer, end, t1 - t0, t2 - t0, [(at - t0, e) for at, e in zip(watch.times, watch.seen)])


def upgrade_figures(f: Followed) -> dict[str, Any]:
    """status, accepted, total, commands, batches, node steps (nodes/batches) and step times."""
    if f.end is None:
        return {"status": f"rejected: {f.answer.data.get('message')}"}
    view, steps = f.end.data["upgrade"], f.answer.data["steps"]
    return {
        "status": view["status"] if view["status"] == "Succeeded" else f"{view['status']}: {view['message']}",
        "accepted": f.accepted_s,
        "total": f.total_s,
        "commands": sum(s["total"] for s in steps if s["name"] not in LOCAL_STEPS),
        "batches": sum(s["batches"] for s in steps),
        "steps": ", ".join(f"{s['name']}{'/' + s['group'] if s['group'] else ''} {s['total']}/{s['batches']}"
                           for s in steps if s["name"] not in LOCAL_STEPS),
        "step_times": step_times(f.arrived, f.end.subject),
    }
