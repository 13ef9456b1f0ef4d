"""The pure parts of an addon's ApplySet (bke.core.applyset): the id as KEP-3659 and kubectl
compute it, the annotation texts, the checks of a live parent, the member label and diff."""
from __future__ import annotations

import pytest

from bke.core.applyset import (
    ADDITIONAL_NAMESPACES, CONTAINS_GROUP_KINDS, ID_LABEL, PART_OF_LABEL, TOOLING, ApplySetError, GroupKind, Member,
    ParentState, addon_set, applyset_id, format_group_kinds, format_namespaces, labelled, parse_group_kinds,
    parse_namespaces, read_parent, to_prune,
)


def test_the_id_is_kubectls_for_its_worked_examples():
    # kubernetes/kubernetes staging/src/k8s.io/kubectl/pkg/cmd/apply/apply_test.go: the parent
    # Secret test/my-set, and a cluster-scoped ApplySet my-set of group company.com
    assert applyset_id("my-set", "test", "Secret", "") == "applyset-0eFHV8ySqp7XoShsGvyWFQD3s96yqwHmzc4e0HR1dsY-v1"
    assert applyset_id("my-set", "", "ApplySet", "company.com") == \
        "applyset-rhp1a-HVAVT_dFgyEygyA1BEB82HPp2o10UiFTpqtAs-v1"


def test_one_set_per_addon_with_a_parent_secret_named_after_it():
    calico, coredns = addon_set("calico"), addon_set("coredns")
    assert (calico.name, calico.namespace) == ("bke-addon-calico", "kube-system")
    assert calico.id == applyset_id("bke-addon-calico", "kube-system", "Secret", "")
    assert calico.id != coredns.id
    assert len(calico.id) <= 63  # a label value
    with pytest.raises(ApplySetError, match="not a valid Secret name"):
        addon_set("My Addon")


def test_group_kinds_text_is_sorted_without_duplicates_and_reads_back():
    gks = [GroupKind("apps", "Deployment"), GroupKind("", "ConfigMap"), GroupKind("rbac.authorization.k8s.io",
           "ClusterRole"), GroupKind("apps", "Deployment")]
    text = format_group_kinds(gks)
    assert text == "ClusterRole.rbac.authorization.k8s.io,ConfigMap,Deployment.apps"
    assert parse_group_kinds(text) == frozenset(gks)
    assert parse_group_kinds("") == frozenset()
    assert GroupKind.of({"apiVersion": "v1", "kind": "Service"}) == GroupKind("", "Service")
    assert GroupKind.of({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}) == \
        GroupKind("networking.k8s.io", "Ingress")


def test_namespaces_text_leaves_out_the_parents_own():
    assert format_namespaces(["kube-system", "monitoring", "", "apps", "monitoring"], "kube-system") == "apps,monitoring"
    assert format_namespaces(["kube-system"], "kube-system") == ""
    assert parse_namespaces("apps,monitoring") == {"apps", "monitoring"}
    assert parse_namespaces("") == frozenset()


def _parent(aset, tooling="bke/v0.1.0", id_label=None, gks="ConfigMap,Deployment.apps", ns="apps"):
    notes = {CONTAINS_GROUP_KINDS: gks, ADDITIONAL_NAMESPACES: ns}
    if tooling is not None:
        notes[TOOLING] = tooling
    return {"metadata": {"labels": {ID_LABEL: id_label or aset.id}, "annotations": notes}}


def test_a_live_parent_is_read_with_its_own_namespace_in_scope():
    aset = addon_set("metrics")
    assert read_parent(None, aset) is None  # none yet: adopted this round
    assert read_parent(_parent(aset), aset) == ParentState(
        frozenset({GroupKind("", "ConfigMap"), GroupKind("apps", "Deployment")}), frozenset({"apps", "kube-system"}))


@pytest.mark.parametrize("kw,message", [
    ({"tooling": None}, "without the applyset.kubernetes.io/tooling annotation"),
    ({"tooling": "kubectl/v1.36.3"}, "managed by 'kubectl/v1.36.3'"),
    ({"tooling": "helm"}, "managed by 'helm'"),
    ({"id_label": addon_set("calico").id}, "not .* \\(the id its name gives\\)"),
])
def test_a_parent_of_another_tool_or_another_sets_id_is_refused(kw, message):
    aset = addon_set("metrics")
    with pytest.raises(ApplySetError, match=message):
        read_parent(_parent(aset, **kw), aset)


def test_members_are_labelled_on_a_copy_and_a_manifest_may_not_claim_membership():
    aset = addon_set("metrics")
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"app": "m"}}}
    out = labelled(obj, aset)
    assert out["metadata"]["labels"] == {"app": "m", PART_OF_LABEL: aset.id}
    assert obj["metadata"]["labels"] == {"app": "m"}  # the caller's object untouched
    assert labelled({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y"}}, aset)["metadata"]["labels"] \
        == {PART_OF_LABEL: aset.id}
    claims = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "z", "labels": {PART_OF_LABEL: "a"}}}
    with pytest.raises(ApplySetError, match="ConfigMap/z: the manifest sets applyset.kubernetes.io/part-of"):
        labelled(claims, aset)


def test_to_prune_is_what_was_listed_and_not_just_applied_namespaced_first():
    cm, crole = GroupKind("", "ConfigMap"), GroupKind("rbac.authorization.k8s.io", "ClusterRole")
    listed = [Member(crole, "", "old-reader", "u1"), Member(cm, "apps", "settings", "u2"),
              Member(cm, "kube-system", "legacy", "u3"), Member(cm, "apps", "settings", "u2")]
    pruned = to_prune(listed, ["u2"])
    assert [str(m) for m in pruned] == ["ConfigMap/kube-system/legacy", "ClusterRole.rbac.authorization.k8s.io/old-reader"]
    assert to_prune(listed, ["u1", "u2", "u3"]) == []
    assert to_prune([], []) == []
