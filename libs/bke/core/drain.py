"""Which pods a drain evicts, leaves or refuses, by kubectl's rules; and how long it waits.

Pure: it judges pod facts the adapter read from the API (bke.adapters.drain) and returns
verdicts and messages; it never talks to a cluster.

The rules are `kubectl drain --ignore-daemonsets`'s, the flag kubeadm's upgrade guide uses
(k8s.io/kubectl/pkg/drain/filters.go, `makeFilters`: daemonSet, mirrorPod, localStorage,
unreplicated, in that order):

    a pod that finished (Succeeded, Failed)       evicted, whatever else it is
    a DaemonSet's pod                             left: its controller would put it back at once
    a mirror pod (a static pod's API copy)        left: the kubelet owns it, the API cannot delete it
    a pod with an emptyDir volume                 refused unless `delete_emptydir_data`: its data dies
    a pod no controller owns                      refused unless `force`: nothing brings it back
    any other pod                                 evicted through the Eviction API (budgets honoured)

As in kubectl, one refused pod refuses the node's whole drain before anything is evicted, and
the error names every refused pod with the option that would allow it.

A 429 from the Eviction API is a PodDisruptionBudget saying "not now": the eviction is tried
again with backoff until the drain's timeout, and the failure then names the budget from the
API's own answer (a `DisruptionBudget` cause, whose message names the budget:
kubernetes pkg/registry/core/pod/storage/eviction.go, `checkAndDecrement`).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from bke.contracts.drain import DrainOptions

__all__ = ["MIRROR_ANNOTATION", "DrainSelection", "PodFacts", "Verdict", "backoff_delays", "blocking_budget", "judge",
           "refusal_message", "select_pods", "timeout_message"]

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})  # Kubernetes' own pod phases, read from the API
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
NAMED_IN_MESSAGES = 10  # a drain of a node with hundreds of pods names the first ten, then counts


@dataclass(frozen=True)
class PodFacts:
    """What the rules read of one pod (bke.adapters.drain reads it from the API's Pod)."""

    namespace: str
    name: str
    uid: str = ""
    phase: str = "Running"
    mirror: bool = False
    controller_kind: str | None = None  # the kind of the ownerReference with controller: true
    emptydir: bool = False

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class Verdict(StrEnum):
    EVICT = "evict"
    LEAVE = "leave"
    REFUSE = "refuse"


def judge(pod: PodFacts, opts: DrainOptions) -> tuple[Verdict, str]:
    """One pod's verdict and, when it is not evicted, why (the option that would allow a refusal)."""
    if pod.phase in FINISHED_PHASES:
        return Verdict.EVICT, ""
    if pod.controller_kind == "DaemonSet":
        return Verdict.LEAVE, "a DaemonSet's pod"
    if pod.mirror:
        return Verdict.LEAVE, "a mirror pod"
    if pod.emptydir and not opts.delete_emptydir_data:
        return Verdict.REFUSE, "uses emptyDir (delete-emptydir-data)"
    if pod.controller_kind is None and not opts.force:
        return Verdict.REFUSE, "has no controller (force)"
    return Verdict.EVICT, ""


@dataclass
class DrainSelection:
    evict: list[PodFacts] = field(default_factory=list)
    left: list[tuple[PodFacts, str]] = field(default_factory=list)
    refused: list[tuple[PodFacts, str]] = field(default_factory=list)


def select_pods(pods: list[PodFacts], opts: DrainOptions) -> DrainSelection:
    out = DrainSelection()
    for pod in pods:
        verdict, why = judge(pod, opts)
        if verdict is Verdict.EVICT:
            out.evict.append(pod)
        elif verdict is Verdict.LEAVE:
            out.left.append((pod, why))
        else:
            out.refused.append((pod, why))
    return out


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:NAMED_IN_MESSAGES])
    return shown if len(items) <= NAMED_IN_MESSAGES else f"{shown} and {len(items) - NAMED_IN_MESSAGES} more"


def refusal_message(host: str, refused: list[tuple[PodFacts, str]]) -> str:
    """Why a node's drain evicted nothing: every refused pod, sorted, with the option allowing it."""
    pods = sorted(f"{p.ref} {why}" for p, why in refused)
    return f"node {host}: drain refused, nothing evicted: {len(pods)} pod(s) kubectl drain would refuse too: {_named(pods)}"


def timeout_message(host: str, timeout_s: float, remaining: list[str], budgets: dict[str, str]) -> str:
    """Why a node's drain did not end in time: the pods still there and the budgets that said no."""
    why = f"node {host}: drain not done within {timeout_s:.0f}s: {len(remaining)} pod(s) left: {_named(sorted(remaining))}"
    if budgets:
        why += "; blocked by " + "; ".join(f"{pod}: {msg}" for pod, msg in sorted(budgets.items())[:NAMED_IN_MESSAGES])
    return why


def blocking_budget(body: str | bytes | None) -> str:
    """The budget's own words from a 429 Eviction answer (the Status body), or its message, or ""."""
    try:
        status = json.loads(body or b"{}")
    except (ValueError, TypeError):
        return ""
    if not isinstance(status, dict):
        return ""
    causes = (status.get("details") or {}).get("causes") or []
    # a StatusCause's type is "reason" in JSON (k8s.io/apimachinery metav1.StatusCause)
    said = [c.get("message", "") for c in causes if isinstance(c, dict) and c.get("reason") == "DisruptionBudget"]
    return "; ".join(m for m in said if m) or str(status.get("message", ""))


def backoff_delays(first_s: float = 0.25, cap_s: float = 5.0) -> Iterator[float]:
    """Delays between a drain's rounds, without end: quick at first (most pods are gone within a
    second), then at the pace kubectl keeps for a budget that says no (5 s)."""
    delay = first_s
    while True:
        yield delay
        delay = min(delay * 2, cap_s)
