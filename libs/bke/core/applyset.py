"""One ApplySet per addon: what BKE applied for it, so that what a new version no longer has is
pruned, and nothing else.

The ApplySet specification is KEP-3659 (kubernetes/enhancements,
keps/sig-cli/3659-kubectl-apply-prune, "Design Details: ApplySet Specification"); kubectl's
`apply --prune --applyset` is its reference tooling (kubernetes/kubernetes,
staging/src/k8s.io/kubectl/pkg/cmd/apply/applyset.go and applyset_pruner.go). Its parts here:

- the parent: a Secret in kube-system named `bke-addon-<addon>`, as kubectl's default parent
  type (a Secret, whose read is more restricted than a ConfigMap's). It holds no data, only the
  `applyset.kubernetes.io/id` label and the tooling, group-kinds and namespaces annotations;
- the id: `applyset-<base64url(sha256(<name>.<namespace>.<kind>.<group>))>-v1` of the parent,
  unpadded, as kubectl computes it; checked on every apply, so a parent whose label was copied
  from another set is refused instead of pruning that set's objects (the KEP's "ID
  impersonation");
- members: every applied object labelled `applyset.kubernetes.io/part-of=<id>`. The label is the
  source of truth: pruning lists by it, only in the group-kinds and namespaces the parent
  records, and deletes what this apply did not just write (by uid, as kubectl's pruner);
- the order, kubectl's: the parent widened to the union of the recorded and the new
  group-kinds and namespaces before anything is applied (an interrupted apply leaks nothing),
  then the objects, then the prune, then the parent narrowed to the new set.

Pure: names, the id, the annotation texts, the checks of a live parent, the member diff. The
calls to the apiserver are bke.adapters.cluster_api.applyset_k8s.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ADDITIONAL_NAMESPACES", "CONTAINS_GROUP_KINDS", "ID_LABEL", "PARENT_NAMESPACE", "PART_OF_LABEL", "TOOLING",
    "TOOL_NAME", "AddonSet", "ApplySetError", "GroupKind", "Member", "ParentState", "PruneReport", "addon_set",
    "applyset_id", "format_group_kinds", "format_namespaces", "labelled", "parse_group_kinds", "parse_namespaces",
    "read_parent", "to_prune",
]

ID_LABEL = "applyset.kubernetes.io/id"
PART_OF_LABEL = "applyset.kubernetes.io/part-of"
TOOLING = "applyset.kubernetes.io/tooling"
CONTAINS_GROUP_KINDS = "applyset.kubernetes.io/contains-group-kinds"
ADDITIONAL_NAMESPACES = "applyset.kubernetes.io/additional-namespaces"
TOOL_NAME = "bke"
PARENT_NAMESPACE = "kube-system"
PARENT_PREFIX = "bke-addon-"
# a DNS-1123 subdomain, what a Secret's name must be (the addon name is checked at plan time,
# bke.core.spec.addons.check_addons, so this only guards a caller that skipped it)
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class ApplySetError(ValueError):
    """A parent or a manifest that breaks the ApplySet rules: nothing is applied or pruned, and
    trying again cannot help until someone fixes it (a permanent failure of the addon)."""


@dataclass(frozen=True, order=True)
class GroupKind:
    group: str  # "" for the core group
    kind: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> GroupKind:
        api_version = str(obj.get("apiVersion", ""))
        return cls(api_version.rpartition("/")[0], str(obj.get("kind", "")))

    def __str__(self) -> str:
        # kubectl's schema.GroupKind.String: "Kind" in the core group, else "Kind.group"
        return f"{self.kind}.{self.group}" if self.group else self.kind


@dataclass(frozen=True, order=True)
class Member:
    """An object as listed by the set's label."""

    group_kind: GroupKind
    namespace: str  # "" when cluster-scoped
    name: str
    uid: str = field(default="", compare=False)

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.group_kind}/{where}{self.name}"


@dataclass(frozen=True)
class AddonSet:
    """The ApplySet of one addon: its parent's name and namespace, and the id its members carry."""

    addon: str
    name: str
    namespace: str
    id: str


@dataclass(frozen=True)
class ParentState:
    """What a live parent records (None when there is none yet: the set is adopted this round)."""

    group_kinds: frozenset[GroupKind]
    namespaces: frozenset[str]  # the parent's own namespace included


@dataclass(frozen=True)
class PruneReport:
    """What one apply of an addon did to its set: `adopted` when it found no parent, so wrote
    it (a first install, or an addon applied before BKE kept ApplySets: its objects labelled,
    nothing pruned this round); `pruned`, the members deleted, as `Kind.group/namespace/name`."""

    adopted: bool = False
    pruned: tuple[str, ...] = ()


def applyset_id(name: str, namespace: str, kind: str, group: str) -> str:
    """The id of the set whose parent is this object (KEP-3659 "ApplySet Identification")."""
    digest = hashlib.sha256(".".join((name, namespace, kind, group)).encode()).digest()
    # label values must begin and end alphanumeric: kubectl wraps the hash as applyset-…-v1
    return f"applyset-{base64.urlsafe_b64encode(digest).decode().rstrip('=')}-v1"


def addon_set(addon: str) -> AddonSet:
    """The ApplySet of `addon`: one per addon, so pruning one never reaches another's objects."""
    name = PARENT_PREFIX + addon
    if not _SUBDOMAIN.match(name) or len(name) > 253:
        raise ApplySetError(f"addon {addon!r}: its ApplySet parent {name!r} is not a valid Secret name")
    return AddonSet(addon, name, PARENT_NAMESPACE, applyset_id(name, PARENT_NAMESPACE, "Secret", ""))


def format_group_kinds(gks: Iterable[GroupKind]) -> str:
    """The contains-group-kinds annotation: comma-separated, sorted, no duplicates."""
    return ",".join(sorted({str(gk) for gk in gks}))


def parse_group_kinds(text: str) -> frozenset[GroupKind]:
    out = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, group = part.partition(".")  # a Kind has no dot; everything after the first is the group
        out.add(GroupKind(group, kind))
    return frozenset(out)


def format_namespaces(namespaces: Iterable[str], parent_namespace: str) -> str:
    """The additional-namespaces annotation: the others than the parent's, sorted."""
    return ",".join(sorted({n for n in namespaces if n and n != parent_namespace}))


def parse_namespaces(text: str) -> frozenset[str]:
    return frozenset(filter(None, (p.strip() for p in text.split(","))))


def read_parent(live: Mapping[str, Any] | None, aset: AddonSet) -> ParentState | None:
    """The state a live parent records, after the checks the KEP asks of tooling before it
    mutates a set: ours (tooling `bke/…`) and labelled with the id its name gives. None: no
    parent yet."""
    if not live:
        return None
    meta = live.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    where = f"ApplySet parent Secret {aset.namespace}/{aset.name}"
    tooling = notes.get(TOOLING)
    if not tooling:
        raise ApplySetError(f"{where} exists without the {TOOLING} annotation: not created by BKE; "
                            "remove or rename it")
    if tooling.rpartition("/")[0] != TOOL_NAME:
        raise ApplySetError(f"{where} is managed by {tooling!r}, not {TOOL_NAME}: BKE does not change another "
                            "tool's ApplySet")
    if labels.get(ID_LABEL) != aset.id:
        raise ApplySetError(f"{where} has {ID_LABEL}={labels.get(ID_LABEL)!r}, not {aset.id!r} (the id its "
                            "name gives): refused, so that no other set's objects are pruned")
    return ParentState(parse_group_kinds(notes.get(CONTAINS_GROUP_KINDS, "")),
                       parse_namespaces(notes.get(ADDITIONAL_NAMESPACES, "")) | {aset.namespace})


def labelled(obj: Mapping[str, Any], aset: AddonSet) -> dict[str, Any]:
    """A copy of `obj` carrying the set's part-of label. A manifest that sets that label itself
    is refused, as the KEP asks (membership is the tool's to write)."""
    out = copy.deepcopy(dict(obj))
    meta = out.setdefault("metadata", {})
    labels = dict(meta.get("labels") or {})
    if PART_OF_LABEL in labels:
        raise ApplySetError(f"{obj.get('kind')}/{meta.get('name')}: the manifest sets {PART_OF_LABEL} itself; "
                            "BKE writes it (one ApplySet per addon)")
    labels[PART_OF_LABEL] = aset.id
    meta["labels"] = labels
    return out


def to_prune(listed: Iterable[Member], applied_uids: Iterable[str]) -> list[Member]:
    """The members to delete: those listed by the set's label that this apply did not write,
    in a stable order (cluster-scoped last, so namespaced objects go before, say, their CRD)."""
    kept = set(applied_uids)
    out = {m for m in listed if m.uid not in kept}
    return sorted(out, key=lambda m: (m.namespace == "", m.group_kind, m.namespace, m.name))
