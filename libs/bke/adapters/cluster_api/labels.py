"""Node labels and taints: what BKE wants on each registered Node, and the patch that gets it
there. Pure: Node objects in (as the API serves them, JSON), patches and records out.

Why BKE applies them and not the kubelet: with the NodeRestriction admission plugin (which
every BKE apiserver enables, as kubeadm does) a kubelet may set on its own Node only the labels
of `kubeletapis.IsKubeletLabel` (kubernetes/kubernetes plugin/pkg/admission/noderestriction/
admission.go, pkg/kubelet/apis/well_known_labels.go); `node-role.kubernetes.io/*` is not one,
and the kubelet itself refuses such keys in `--node-labels` (cmd/kubelet/app/options/options.go,
"unknown 'kubernetes.io' or 'k8s.io' labels"; kubelet reference docs, --node-labels). So the
dispatcher patches them with the cluster's admin credentials after each Node registers.

Ownership: BKE touches only the keys it wants and the ones it applied before (the previous
record). A label the user set, or one BKE set that the user has since changed, is never
removed. Taints are replaced as one list by any patch (`NodeSpec.taints` carries no list-type
or patch-strategy marker: atomic for server-side apply, replaced by strategic merge;
k8s.io/api core/v1 types.go), so the patch is computed from the Node as read and carries its
`resourceVersion`: a concurrent change (the node lifecycle controller adding
`node.kubernetes.io/not-ready`) makes it fail with 409 and it is computed again, never lost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bke.core.plan import NodePlan

__all__ = ["Marks", "marks_from_record", "node_patch", "record", "wanted"]


@dataclass(frozen=True)
class Marks:
    """The labels and taints BKE wants on one Node (taints as (key, value, effect))."""

    labels: tuple[tuple[str, str], ...]
    taints: tuple[tuple[str, str, str], ...]

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def to_doc(self) -> dict[str, Any]:
        return {"labels": self.label_map, "taints": [{"key": k, "value": v, "effect": e} for k, v, e in self.taints]}


def wanted(node: NodePlan) -> Marks:
    """The plan's labels and taints of a registered node, in a stable order."""
    return Marks(
        labels=tuple(sorted(node.labels.items())),
        taints=tuple(sorted((t.key, t.value, t.effect) for t in node.taints)),
    )


def marks_from_record(doc: dict[str, Any] | None) -> Marks | None:
    """The marks a stored record says were applied (None: never applied)."""
    if not doc:
        return None
    return Marks(
        labels=tuple(sorted((str(k), str(v)) for k, v in (doc.get("labels") or {}).items())),
        taints=tuple(sorted((t["key"], t.get("value", ""), t["effect"]) for t in doc.get("taints") or [])),
    )


def record(marks: Marks, status: str, at: str) -> dict[str, Any]:
    """The record per node (`bke:<c>:node-labels`): what was applied, how, when."""
    return {**marks.to_doc(), "status": status, "at": at}


def _taint_tuple(t: dict[str, Any]) -> tuple[str, str, str]:
    return (t.get("key", ""), t.get("value") or "", t.get("effect", ""))


def node_patch(node: dict[str, Any], want: Marks, previous: Marks | None) -> dict[str, Any] | None:
    """The JSON merge patch that gives `node` BKE's labels and taints, or None if it has them.

    Labels: set the wanted ones that differ; remove (null) a label BKE applied before and no
    longer wants, only while it still has the value BKE gave it. Taints: the Node's list, less
    the taints BKE applied before and no longer wants, with each wanted taint added or, for
    the same key and effect (a taint's identity), its value corrected. Taints of others
    (controllers, users) stay as they are, `timeAdded` included."""
    meta = node.get("metadata") or {}
    have_labels: dict[str, str] = meta.get("labels") or {}
    labels: dict[str, str | None] = {k: v for k, v in want.labels if have_labels.get(k) != v}
    wanted_keys = want.label_map
    for k, v in previous.labels if previous else ():
        if k not in wanted_keys and have_labels.get(k) == v:
            labels[k] = None

    have_taints: list[dict[str, Any]] = (node.get("spec") or {}).get("taints") or []
    dropped = set(previous.taints if previous else ()) - set(want.taints)
    by_identity = {(k, e): v for k, v, e in want.taints}
    taints = [t for t in have_taints
              if _taint_tuple(t) not in dropped
              and by_identity.get((t.get("key", ""), t.get("effect", "")), t.get("value") or "") == (t.get("value") or "")]
    present = {_taint_tuple(t) for t in taints}
    for k, v, e in want.taints:
        if (k, v, e) not in present:
            taints.append({"key": k, "value": v, "effect": e} if v else {"key": k, "effect": e})

    patch: dict[str, Any] = {}
    if labels:
        patch.setdefault("metadata", {})["labels"] = labels
    if [_taint_tuple(t) for t in taints] != [_taint_tuple(t) for t in have_taints]:
        patch["spec"] = {"taints": taints}
    if not patch:
        return None
    # a precondition: the patch was computed from this version of the Node (409 otherwise)
    patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion", "")
    return patch
