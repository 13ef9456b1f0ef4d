"""`bke retry NAME --nodes a,b` for an upgrade: finish it on nodes it left behind. Pure.

An upgrade that ended with nodes behind (bke.core.upgrade.node_versions: left out, failed, rolled
back, not reached) is completed for the named nodes by a new run of the same core
(bke.core.upgrade.run): a new request id, only those nodes in its batches, the same order table and
batch rules (`expand_order` with every other node left out), the same ReplaceFiles rollback.
Nothing is sent to any other node.

    decide_retry(last, versions, nodes, known, alive) -> RetryPlan | refusal (reason)

Refused, each with its reason: no upgrade of the cluster; one still running; an unknown node;
a node that is not behind (it names what the node runs); nodes behind on different targets or
from different versions (retry them separately); a named node whose agent is not alive (it
would only time out: start the agent first). Without `nodes`, every node behind is retried.

Cluster-wide work: the addons step (the new version's kube-proxy, CoreDNS, CNI) runs in a retry
only when no earlier run of the upgrade applied it and the retry covers every node still behind
(kube-proxy must not be newer than the kubelets it runs beside); `replaces_plan` says whether
the retry's success makes the target plan the stored one (it does when the stored plan is not
at the target yet and the retry leaves no node behind).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

from bke.contracts.statuses import RunStatus

from .node_versions import NodeVersion
from .order import Change, expand_order
from .run import UpgradeRun, new_run
from .run_request import UpgradeRequest

__all__ = ["RetryPlan", "decide_retry", "retry_run", "versions_line"]

NAMES_SHOWN = 10


@dataclass(frozen=True)
class RetryPlan:
    nodes: tuple[str, ...]
    current: dict[str, str]  # what they run
    target: dict[str, str]
    addons: bool  # the retry applies the addons (module docstring)
    covers_all_behind: bool


def versions_line(v: Mapping[str, str]) -> str:
    return f"kubernetes {v.get('kubernetes')}, etcd {v.get('etcd')}, containerd {v.get('containerd')}"


def _names(hosts: Sequence[str]) -> str:
    more = f" and {len(hosts) - NAMES_SHOWN} more" if len(hosts) > NAMES_SHOWN else ""
    return ", ".join(hosts[:NAMES_SHOWN]) + more


def _addons_done(last: UpgradeRun) -> bool:
    """Whether the upgrade (this run, or an earlier run it retried) applied the addons."""
    if isinstance(last.request, UpgradeRequest) and last.request.addons_done:
        return True
    return any(s.name == "addons" and s.status == RunStatus.SUCCEEDED for s in last.steps)


def decide_retry(last: UpgradeRun | None, versions: Mapping[str, NodeVersion], nodes: Sequence[str],
                 known: Collection[str], alive: Collection[str], cluster: str) -> RetryPlan | str:
    """The retry of `nodes` (all behind when empty), or why not (module docstring)."""
    if last is None:
        return f"cluster {cluster!r}: no upgrade to retry"
    if last.running:
        step = last.step_now()
        return f"upgrade {last.request_id} of {cluster} is still running (step {step.name if step else '-'})"
    unknown = [h for h in nodes if h not in known]
    if unknown:
        return f"--nodes: unknown node(s) {_names(unknown)} in cluster {cluster}"
    behind = sorted(h for h, v in versions.items() if v.behind and h in known)
    wanted = list(dict.fromkeys(nodes)) or behind
    if not wanted:
        return f"no node of {cluster} is behind: the last upgrade ({last.request_id}) left every node on its target"
    ahead = [h for h in wanted if h not in behind]
    if ahead:
        lines = []
        for h in ahead[:NAMES_SHOWN]:
            v = versions.get(h)
            lines.append(f"{h} runs {versions_line(v.version)}" if v is not None else f"{h} was never upgraded")
        return (f"--nodes: {len(ahead)} node(s) not behind, nothing to retry on them: " + "; ".join(lines)
                + ("" if len(ahead) <= NAMES_SHOWN else f" and {len(ahead) - NAMES_SHOWN} more"))
    first = versions[wanted[0]]
    differ = [h for h in wanted if versions[h].target != first.target or versions[h].version != first.version]
    if differ:
        return (f"--nodes: {wanted[0]} ({versions_line(first.version)} -> {versions_line(first.target or {})}) and "
                f"{_names(differ)} are behind from or on other versions: retry them separately")
    dead = [h for h in wanted if h not in alive]
    if dead:
        return f"--nodes: no live agent on {_names(dead)}: start it, then retry (its commands would only time out)"
    covers = set(wanted) >= set(behind)
    assert first.target is not None
    return RetryPlan(nodes=tuple(wanted), current=dict(first.version), target=dict(first.target),
                     addons=covers and not _addons_done(last), covers_all_behind=covers)


def retry_run(last: UpgradeRun, plan_of_cluster: Any, retry: RetryPlan, request_id: str, now: str,
              agent_version: str = "", plan_digest: str = "") -> UpgradeRun:
    """The new run: the last run's request (its batch size, drain timeout) for the named nodes
    only. `plan_of_cluster` is the stored plan (its nodes and etcd clusters: the same in every
    version), `plan_digest` its digest. Only an upgrade's run is retried (a changed spec's run
    is completed by applying the spec again: the upgrader refuses it first)."""
    if not isinstance(last.request, UpgradeRequest):
        raise ValueError(f"run {last.request_id} is no upgrade's: only an upgrade is retried")
    change = Change(kubernetes=retry.current["kubernetes"] != retry.target["kubernetes"],
                    etcd=retry.current["etcd"] != retry.target["etcd"],
                    containerd=retry.current["containerd"] != retry.target["containerd"])
    others = [n.hostname for n in plan_of_cluster.nodes if n.hostname not in retry.nodes]
    expanded = expand_order(plan_of_cluster, change, last.request.max_unavailable, others)
    if not retry.addons:
        expanded = [e for e in expanded if e.step != "addons"]
    # the fields a retry sets after the last run's (the record keeps that order: run_request.wire)
    request = last.request.model_copy(update={
        "request_id": request_id, "plan_digest": plan_digest, "retry_of": last.request_id,
        "nodes": list(retry.nodes), "addons_done": _addons_done(last), "dry_run": False})
    return new_run(request_id, last.cluster, retry.current, retry.target, expanded, list(retry.nodes), now,
                   request=request, agent_version=agent_version)

