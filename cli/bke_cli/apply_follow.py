"""`bke apply SPEC` / `bke lab apply SPEC` on an installed cluster: send the changed spec to the
upgrader and follow its run (the upgrade's follow loop, `upgrade_follow.send_and_follow`).

    ApplyCluster -> upgrader: ApplyAccepted (or ApplyRejected: every refusal by rule)
                    -> UpgradeChanged ... until Succeeded or Failed

Exit codes: 0 applied (or nothing to run), 2 refused (the reasons are printed), 1 failed (a node
rolled back, say: the cluster keeps serving on the old files) or no answer before the deadline.
"""
from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from rich.console import Console

from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.drain import DrainOptions
from bke.contracts.apply import APPLY_ACCEPTED, APPLY_CLUSTER, APPLY_REJECTED, ApplyCluster

from .output import quiet_bus_errors
from .spec_source import blob_put, spec_fields
from .upgrade_follow import send_and_follow

__all__ = ["accepted_lines", "apply_and_follow", "rejected_lines"]


def accepted_lines(doc: dict[str, Any]) -> list[str]:
    steps = [s for s in doc.get("steps") or [] if s["name"] != "pre-checks"]
    out = [f"{doc['cluster']}: the changed spec is accepted: {len(doc.get('actions') or [])} action(s) in "
           f"{len(steps)} step(s)" + (" (dry run: nothing started)" if doc.get("dryRun") else "")]
    for s in steps:
        group = f"/{s['group']}" if s.get("group") else ""
        out.append(f"  {s['name']}{group}: {s['total']} node(s) in {s['batches']} batch(es)" if s["batches"] else f"  {s['name']}")
    return out


def rejected_lines(doc: dict[str, Any]) -> list[str]:
    refusals = doc.get("refusals") or []
    if not refusals:
        return [f"apply to {doc.get('cluster')} refused: {doc.get('message')}"]
    return [f"apply to {doc.get('cluster')} refused:"] + [f"  {r['path']}: {r['message']}" for r in refusals]


async def _put_blob(nats_url: BusAccess | str, key: str, data: bytes) -> str:
    # a connection of its own: only a spec too large for one message needs it
    nc = await connect_nats(nats_url, error_cb=quiet_bus_errors)
    try:
        return await blob_put(nc.jetstream(), key)(data)
    finally:
        await nc.close()


async def apply_and_follow(nats_url: BusAccess | str, spec: bytes, cluster: str, timeout: float, console: Console,
                           *, dry_run: bool = False, drain_timeout: float = 300.0, drain: DrainOptions | None = None) -> int:
    rid = str(uuid.uuid4())
    req = ApplyCluster(request_id=rid, cluster=cluster, dry_run=dry_run, drain_timeout_s=drain_timeout, drain=drain,
                       **await spec_fields(spec, partial(_put_blob, nats_url, f"specs/apply-{rid}.yaml")))
    return await send_and_follow(
        nats_url, APPLY_CLUSTER, req.to_bytes(), f"apply:{cluster}:{rid}", cluster, rid, timeout, console,
        accepted=APPLY_ACCEPTED, rejected=APPLY_REJECTED, what="apply", accepted_lines=accepted_lines,
        rejected_lines=rejected_lines, ends_at_accept=lambda d: bool(d.get("dryRun")) or not d.get("steps"))
