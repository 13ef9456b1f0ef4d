"""A stored install as the dispatcher leaves it, written straight into a real Redis (the
dispatcher's own record layout, through its own key functions): the dashboard's tests and its
5,000-node measurement read it back through a running dispatcher.

The install is Failed (so that a dispatcher started on it resumes nothing): every phase up to
`workers` Succeeded, `workers` Failed with `failed` nodes failed, `running` still in flight and
the rest of its batch never sent (Pending)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from redis.asyncio import Redis

from bke.core.plan import Plan
from bke.adapters.state import RedisPlanStore, plan_digest
from bke.adapters.state.keys.dispatcher import command_key, install_key, installs_index, node_status_key, phase_key
from bke_dispatcher.phases import PHASES
from bke_dispatcher.state import DispatcherState

HOSTILE_OUTPUT = '<script>alert("out")</script> & <img src=x onerror=alert(1)>'


@dataclass(frozen=True)
class Stored:
    cluster: str
    failed: list[str]
    running: list[str]
    pending: list[str]
    succeeded: int


async def store_install(r: Redis, plan: Plan, now: str, *, failed: int = 3, running: int = 5,
                        pending: int = 40) -> Stored:
    c = plan.cluster
    pj = plan.to_json()
    assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), f"req-{c}", now)
    st = DispatcherState(r)
    assert await st.start_install(c, f"req-{c}", now, plan_digest(pj))
    by_slug = {p.slug: p for p in PHASES}
    order = list(by_slug)
    stop = order.index("workers")
    workers = [n.hostname for n in by_slug["workers"].targets(plan)]
    bad, busy, never = workers[:failed], workers[failed:failed + running], workers[-pending:] if pending else []
    node_doc: dict[str, str] = {}
    async with r.pipeline(transaction=False) as pipe:
        for i, slug in enumerate(order):
            phase = by_slug[slug]
            targets = [n.hostname for n in phase.targets(plan)]
            if i < stop:
                status = "Succeeded"
            elif i == stop:
                status = "Failed"
            else:
                status = "Pending"
            fields = {"status": status, "total": str(len(targets)), "startedAt": now if i <= stop else "",
                      "finishedAt": now if i <= stop else "", "ok": "0", "failed": "0"}
            if status == "Failed":
                fields["message"] = f"{len(bad)} node(s) failed: {', '.join(bad)}"
            if i > stop or phase.build is None:
                pipe.hset(phase_key(c, slug), mapping=fields)
                continue
            cmds: dict[str, str] = {}
            ok = 0
            for h in targets:
                if i == stop and h in never:
                    continue
                s = "Failed" if i == stop and h in bad else "Sent" if i == stop and h in busy else "Succeeded"
                ok += s == "Succeeded"
                cmds[h] = json.dumps({"id": f"{c}/{slug}/{h}/0", "gen": 0, "status": s,
                                      "step": "systemd:kubelet" if s == "Failed" else "",
                                      "stderr": HOSTILE_OUTPUT if s == "Failed" else "", "at": now})
                node_doc[h] = json.dumps({"phase": slug, "status": "Running" if s == "Sent" else s,
                                          "step": "systemd:kubelet" if s == "Failed" else None})
            fields["ok"], fields["failed"] = str(ok), str(len(bad) if i == stop else 0)
            pipe.hset(phase_key(c, slug), mapping=fields)
            if cmds:
                pipe.hset(command_key(c, slug), mapping=cmds)
        for h in never:  # no node record: shown as Pending, as a node no command reached yet
            node_doc.pop(h, None)
        pipe.hset(node_status_key(c), mapping=node_doc)
        pipe.hset(install_key(c), mapping={"status": "Failed", "finishedAt": now, "phase": "workers",
                                           "message": f"phase workers failed: {', '.join(bad)}",
                                           "kind": "operational", "nodesChanged": "1"})
        pipe.sadd(installs_index(), c)
        await pipe.execute()
    succeeded = sum(1 for d in node_doc.values() if json.loads(d)["status"] == "Succeeded")
    return Stored(cluster=c, failed=bad, running=busy, pending=never, succeeded=succeeded)
