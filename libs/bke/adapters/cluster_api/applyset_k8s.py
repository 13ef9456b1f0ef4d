"""An addon's objects applied as its ApplySet, and the members its new version no longer has
pruned: the apiserver side of bke.core.applyset (which says why and cites the spec).

Synchronous, on the `kubernetes` dynamic client, run in a thread by KubernetesApplier. The
steps, in kubectl's order (staging/src/k8s.io/kubectl/pkg/cmd/apply/applyset.go: BeforeApply,
then Prune):

1. read the parent and check it is ours and carries the id its name gives;
2. widen it to the recorded and the new group-kinds and namespaces (an interruption from here on
   leaves every member findable by the next apply);
3. server-side apply every object with the set's label, keeping the uids the apiserver returns;
4. when a parent was found (else the set is adopted: nothing was labelled before this round),
   list the members by label in the recorded group-kinds and namespaces, and delete those not
   just applied: propagation Background, a uid precondition (the object listed, never one
   re-created under its name since), 404 and a failed precondition counted as done;
5. narrow the parent to the new set.

Errors: an apiserver error >= 500 is a TemporaryError (tried again: every step is idempotent);
any other refusal, and a parent or manifest that breaks the ApplySet rules (ApplySetError), a
ValueError naming the object.
"""
from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from bke.core.applyset import (
    ADDITIONAL_NAMESPACES, CONTAINS_GROUP_KINDS, ID_LABEL, PART_OF_LABEL, TOOL_NAME, TOOLING, AddonSet, GroupKind,
    Member, ParentState, PruneReport, addon_set, format_group_kinds, format_namespaces, labelled, read_parent,
    to_prune,
)
from bke.core.errors import TemporaryError

if TYPE_CHECKING:  # the client is imported when used, as everywhere in this package (its import is slow)
    from kubernetes.client.exceptions import ApiException

__all__ = ["APPLYSET_FIELD_MANAGER", "FIELD_MANAGER", "apply_set"]

FIELD_MANAGER = TOOL_NAME  # what BKE applies to a cluster, members included
# the parent's own field manager, apart from the members', as kubectl keeps `kubectl-applyset`
# apart from `kubectl`
APPLYSET_FIELD_MANAGER = f"{TOOL_NAME}-applyset"


def _tooling() -> str:
    try:
        return f"{TOOL_NAME}/v{importlib.metadata.version('bke')}"
    except importlib.metadata.PackageNotFoundError:
        return f"{TOOL_NAME}/v0"


def _api_exception() -> type[ApiException]:
    from kubernetes.client.exceptions import ApiException

    return ApiException


def _refused(what: str, exc: ApiException) -> Exception:
    if exc.status and exc.status >= 500:
        return TemporaryError(f"{what}: {exc.reason}", delay=5.0)
    try:  # the apiserver's own words name the field it refused (a Status object)
        said = str(json.loads(exc.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        said = ""
    return ValueError(f"{what}: {exc.status} {exc.reason}" + (f": {said}" if said else ""))


def _served(client: Any, gk: GroupKind) -> Any | None:
    """The resource serving `gk` at its preferred version; None when the apiserver serves it no
    more (a CRD deleted since: none of its objects is left to prune)."""
    from kubernetes.dynamic.exceptions import ResourceNotFoundError
    from kubernetes.dynamic.resource import ResourceList

    try:
        found = [r for r in client.resources.search(group=gk.group, kind=gk.kind) if not isinstance(r, ResourceList)]
    except ResourceNotFoundError:
        return None
    found = [r for r in found if r.group == gk.group and r.kind == gk.kind and "/" not in r.name]  # no subresources
    return next((r for r in found if r.preferred), found[0] if found else None)


def _write_parent(client: Any, aset: AddonSet, gks: Iterable[GroupKind], namespaces: Iterable[str]) -> None:
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": aset.name, "namespace": aset.namespace, "labels": {ID_LABEL: aset.id},
        "annotations": {TOOLING: _tooling(), CONTAINS_GROUP_KINDS: format_group_kinds(gks),
                        ADDITIONAL_NAMESPACES: format_namespaces(namespaces, aset.namespace)}}}
    secrets = client.resources.get(api_version="v1", kind="Secret")
    try:
        client.server_side_apply(secrets, body=body, field_manager=APPLYSET_FIELD_MANAGER, force_conflicts=True)
    except _api_exception() as exc:
        raise _refused(f"ApplySet parent Secret {aset.namespace}/{aset.name}", exc) from exc


def _read_parent(client: Any, aset: AddonSet) -> ParentState | None:
    secrets = client.resources.get(api_version="v1", kind="Secret")
    try:
        live = secrets.get(name=aset.name, namespace=aset.namespace).to_dict()
    except _api_exception() as exc:
        if exc.status == 404:
            return None
        raise _refused(f"ApplySet parent Secret {aset.namespace}/{aset.name}", exc) from exc
    return read_parent(live, aset)


def _members(client: Any, aset: AddonSet, state: ParentState) -> list[Member]:
    """Every object labelled as the set's, in the group-kinds and namespaces its parent records."""
    out = []
    for gk in sorted(state.group_kinds):
        resource = _served(client, gk)
        if resource is None:
            continue
        for ns in sorted(state.namespaces) if resource.namespaced else [None]:
            try:
                items = client.get(resource, namespace=ns, label_selector=f"{PART_OF_LABEL}={aset.id}").items
            except _api_exception() as exc:
                raise _refused(f"listing {gk} of {aset.name}", exc) from exc
            out += [Member(gk, i.metadata.namespace or "", i.metadata.name, i.metadata.uid) for i in items]
    return out


def _delete(client: Any, m: Member) -> None:
    resource = _served(client, m.group_kind)
    if resource is None:
        return
    body = {"propagationPolicy": "Background", "preconditions": {"uid": m.uid}}
    try:
        client.delete(resource, name=m.name, namespace=m.namespace or None, body=body)
    except _api_exception() as exc:
        if exc.status in (404, 409):  # gone already, or another object under its name now: not ours to delete
            return
        raise _refused(f"pruning {m}", exc) from exc


def _apply(client: Any, obj: dict[str, Any]) -> tuple[str, str]:
    """Server-side apply one object; its uid and, when namespaced, its namespace."""
    what = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
    resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        done = client.server_side_apply(resource, body=obj, field_manager=FIELD_MANAGER, force_conflicts=True)
    except _api_exception() as exc:
        raise _refused(what, exc) from exc
    return str(done.metadata.uid), (str(done.metadata.namespace or "") if resource.namespaced else "")


def apply_set(client: Any, addon: str, objects: list[dict[str, Any]]) -> PruneReport:
    """Apply `objects` as the ApplySet of `addon` and prune what it no longer has."""
    aset = addon_set(addon)
    members = [labelled(o, aset) for o in objects]  # every manifest checked before anything changes
    state = _read_parent(client, aset)
    gks = {GroupKind.of(o) for o in members}
    wanted = {(o.get("metadata") or {}).get("namespace") or "" for o in members}
    recorded = state or ParentState(frozenset(), frozenset({aset.namespace}))
    _write_parent(client, aset, recorded.group_kinds | gks, recorded.namespaces | wanted)
    applied = [_apply(client, o) for o in members]
    pruned: list[str] = []
    if state is not None:
        for m in to_prune(_members(client, aset, state), (uid for uid, _ in applied)):
            _delete(client, m)
            pruned.append(str(m))
    _write_parent(client, aset, gks, {ns for _, ns in applied})
    return PruneReport(adopted=state is None, pruned=tuple(pruned))
