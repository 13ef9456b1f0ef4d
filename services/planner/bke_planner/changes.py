"""`bke.v1.cluster.diff`: what applying a spec to a running cluster would change.

Pure: the spec placed (as an install request would be), compared with the stored plan by
`bke.core.lifecycle.diff`, both plans rendered to find the files that change. The handler in app.py
reads the stored plan and answers; nothing is written anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from bke.contracts.base import ErrorItem
from bke.contracts.changes import ChangeAction, ClusterChanges, EtcdMembership, NodeFileChanges
from bke.contracts.status import StatusError
from bke.core.lifecycle.apply_run import apply_order
from bke.core.lifecycle.diff import ClusterDiff, diff_plans, render_diff
from bke.core.plan import Plan, plan_spec_text
from bke.adapters.state import plan_digest

__all__ = ["EtcdHealth", "changes_of", "place", "to_contract"]


def to_contract(request_id: str, d: ClusterDiff, stored_digest: str, desired_digest: str) -> ClusterChanges:
    gone = set(d.nodes_added) | set(d.nodes_removed)
    return ClusterChanges(
        request_id=request_id, cluster=d.cluster, stored_digest=stored_digest, desired_digest=desired_digest,
        refusals=[ErrorItem(path=r.name, message=r.message) for r in d.refusals],
        versions={k: list(v) for k, v in d.versions.items()},
        nodes_added=list(d.nodes_added), nodes_removed=list(d.nodes_removed),
        roles_changed={h: [list(a), list(b)] for h, (a, b) in d.roles_changed.items()},
        etcd=[EtcdMembership(cluster=e.cluster, before=list(e.before), after=list(e.after)) for e in d.etcd],
        certificates={k: list(v) for k, v in d.certificates.items()},
        files=[NodeFileChanges(host=f.hostname, added=list(f.added), removed=list(f.removed), changed=list(f.changed))
               for f in d.files if f.hostname not in gone],
        actions=[ChangeAction(kind=a.kind, host=a.host, detail=a.detail) for a in d.actions],
    )


def place(spec_text: str | bytes) -> Plan | StatusError:
    """The spec placed as an install request would be, or why it cannot be (CPU-bound)."""
    outcome = plan_spec_text(spec_text, "spec")
    if not outcome.ok or outcome.plan is None:
        return StatusError(reason="Invalid", cluster=outcome.cluster, message="the spec is invalid",
                           errors=[ErrorItem(path=e.path, message=e.message) for e in outcome.errors])
    return outcome.plan


def changes_of(request_id: str, desired: Plan, stored: Plan | None, stored_digest: str,
               health: EtcdHealth | None = None) -> ClusterChanges | StatusError:
    """The answer to a diff request (CPU-bound: both plans are rendered). `health`: the
    unhealthy etcd members read from the dispatcher, or why they could not be (None: not asked)."""
    if stored is None:
        return StatusError(reason="NotFound", cluster=desired.cluster,
                           message=f"cluster {desired.cluster!r} is not installed: `bke apply` installs it")
    unhealthy = health.unhealthy if health is not None and health.unhealthy is not None else {}
    d = diff_plans(stored, desired, render_diff(stored, desired), unhealthy_etcd_members=unhealthy)
    if not d.refusals and d.actions:
        # what the apply's run cannot carry out (bke.core.lifecycle.apply_run: not built), shown by
        # the dry run as the upgrader would refuse it
        d = replace(d, refusals=apply_order(stored, desired, d).refusals)
    out = to_contract(request_id, d, stored_digest, plan_digest(desired.to_json()))
    if health is not None and health.unhealthy is not None:
        return out.model_copy(update={"etcd_health": "checked",
                                      "etcd_unhealthy": {k: sorted(v) for k, v in health.unhealthy.items()}})
    return out.model_copy(update={"etcd_health_message": health.message if health is not None else
                                  "not asked: no etcd membership changes"})


@dataclass(frozen=True)
class EtcdHealth:
    """What the dispatcher's latest health round says of the stored plan's etcd members:
    `unhealthy` per etcd cluster, or None with `message` saying why it is not known."""

    unhealthy: dict[str, frozenset[str]] | None
    message: str = ""
