"""`bke apply SPEC` on a running cluster: ask the planner what the spec would change
(`bke.v1.cluster.diff`) and print it; `--dry-run` stops there (nothing changes anywhere).

The output, like `kubectl diff` and `terraform plan`: the refusals first (each by rule name),
versions that are the upgrader's, etcd membership, nodes added and removed, certificates
re-issued, then every action in the order it would run, and the files that change per existing
node. Exit 0: there are changes and none is refused (or nothing changes); 2: refused.
"""
from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from rich.console import Console

from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.changes import CLUSTER_DIFF, ClusterChanges, DiffCluster, parse_changes_reply
from bke.contracts.status import StatusError

from .ask import request
from .output import quiet_bus_errors
from .spec_source import blob_put, spec_fields

__all__ = ["DIFF_TIMEOUT_S", "DiffUnavailable", "ask_changes", "print_changes", "run_diff"]

DIFF_TIMEOUT_S = 120.0  # placing and rendering two plans of 10,000 nodes takes the planner seconds
MAX_ACTIONS_SHOWN = 200  # beyond that, counted by kind (a 5,000-node scale-out is 5,000 joins)


class DiffUnavailable(Exception):
    pass


async def ask_changes(nats: BusAccess | str, spec: bytes, timeout: float = DIFF_TIMEOUT_S) -> ClusterChanges | StatusError:
    nc = await connect_nats(nats, error_cb=quiet_bus_errors)
    try:
        rid = str(uuid.uuid4())
        req = DiffCluster(request_id=rid, **await spec_fields(spec, blob_put(nc.jetstream(), f"specs/diff-{rid}.yaml")))
        return parse_changes_reply(await request(nc, CLUSTER_DIFF, req, timeout, "planner", DiffUnavailable))
    finally:
        await nc.close()


def print_changes(c: ClusterChanges, console: Console) -> None:
    p = console.print
    p(f"cluster {c.cluster}: stored plan {c.stored_digest[:12]} -> {c.desired_digest[:12]}", highlight=False)
    for r in c.refusals:
        p(f"REFUSED {r.path}: {r.message}", style="red", highlight=False)
    for what, (a, b) in c.versions.items():
        p(f"version  {what} {a} -> {b} (the upgrader's: bke upgrade apply)", highlight=False)
    for e in c.etcd:
        p(f"etcd     {e.cluster}: {', '.join(e.before)} -> {', '.join(e.after)}", highlight=False)
    if c.etcd:
        # the quorum rule above counted these members as down (or could not ask)
        if c.etcd_health == "checked":
            sick = "; ".join(f"{k}: {', '.join(v)}" for k, v in c.etcd_unhealthy.items()) or "none"
            p(f"etcd health (the latest health round): unhealthy members {sick}", highlight=False)
        else:
            p(f"etcd health not known ({c.etcd_health_message}): every member counted healthy", style="yellow",
              highlight=False)
    if c.nodes_added:
        p(f"add      {len(c.nodes_added)} node(s): {_some(c.nodes_added)}", highlight=False)
    if c.nodes_removed:
        p(f"remove   {len(c.nodes_removed)} node(s): {_some(c.nodes_removed)}", highlight=False)
    for h, (a, b) in c.roles_changed.items():
        p(f"roles    {h}: {','.join(a)} -> {','.join(b)}", highlight=False)
    for iid, what in c.certificates.items():
        p(f"cert     {iid}: {', '.join(what)} change (re-issued)", highlight=False)
    if c.actions:
        p("actions, in order:", highlight=False)
        for i, a in enumerate(c.actions[:MAX_ACTIONS_SHOWN], 1):
            p(f"  {i:>4}. {a.kind:<22} {a.host or '(cluster)'}" + (f"  {a.detail}" if a.detail else ""), highlight=False)
        if len(c.actions) > MAX_ACTIONS_SHOWN:
            rest = Counter(a.kind for a in c.actions[MAX_ACTIONS_SHOWN:])
            p("  ... and " + ", ".join(f"{n} {k}" for k, n in sorted(rest.items())), highlight=False)
    if c.files:
        p("files on existing nodes:", highlight=False)
        for f in c.files:
            p(f"  {f.host or '(addons)'}:", highlight=False)
            for label, paths in (("added", f.added), ("removed", f.removed), ("changed", f.changed)):
                for path in paths:
                    p(f"    {label:<8}{path}", highlight=False)
    touched = sorted({a.host for a in c.actions if a.host})
    if not (c.refusals or c.versions or c.actions):
        p("no change", highlight=False)
    else:
        p(f"{len(touched)} node(s) receive a command; every other node none", highlight=False)


def _some(hosts: list[str], n: int = 10) -> str:
    return ", ".join(hosts[:n]) + (f" and {len(hosts) - n} more" if len(hosts) > n else "")


def run_diff(nats: BusAccess | str, spec: bytes) -> ClusterChanges | StatusError:
    return asyncio.run(ask_changes(nats, spec))
