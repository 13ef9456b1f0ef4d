"""Labels and taints per node kind, and the patch that puts them on a Node object as the API
serves it (recorded objects below): idempotent, never dropping what others own."""
from __future__ import annotations

from pathlib import Path

from bke.core.plan import plan_spec_text
from bke.adapters.cluster_api.labels import Marks, marks_from_record, node_patch, record, wanted

CP_TAINT = ("node-role.kubernetes.io/control-plane", "", "NoSchedule")

# A Node as a kubelet registers it (kubelet's own labels, the lifecycle controller's taint).
REGISTERED = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "m1",
        "resourceVersion": "4711",
        "labels": {"kubernetes.io/hostname": "m1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                   "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"},
    },
    "spec": {"podCIDR": "10.244.0.0/24",
             "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": "2026-12-01T00:00:00Z"}]},
    "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]},
}


def split_plan():
    return plan_spec_text(Path("examples/split-etcd.yaml").read_text()).plan


def test_split_roles_get_their_node_role_label_on_every_registered_node():
    plan = split_plan()
    expected = {
        "m1": {"apiserver"}, "m2": {"apiserver"}, "m3": {"apiserver"},
        "m4": {"controller-manager", "scheduler"}, "m5": {"controller-manager", "scheduler"},
    }
    for node in plan.nodes:
        roles = {k.removeprefix("node-role.kubernetes.io/") for k in node.labels if k.startswith("node-role.kubernetes.io/")}
        if not node.registers:  # etcd-only nodes: no Node object, no labels
            assert node.labels == {} and node.taints == []
            continue
        if node.hostname in expected:
            assert roles == {"control-plane", "master"} | expected[node.hostname], node.hostname
            assert [(t.key, t.value, t.effect) for t in node.taints] == [CP_TAINT]
        else:
            assert roles == {"worker", "node"} and node.taints == [], node.hostname


def test_a_fresh_node_gets_labels_and_taint_keeping_the_kubelets_and_the_controllers():
    node = split_plan().node("m1")
    want = wanted(node)
    patch = node_patch(REGISTERED, want, None)
    assert patch["metadata"]["resourceVersion"] == "4711"  # the precondition: 409 if it changed since
    assert patch["metadata"]["labels"] == dict(want.labels)
    assert "kubernetes.io/hostname" not in patch["metadata"]["labels"]  # never rewrites others' labels
    taints = patch["spec"]["taints"]
    assert taints[0] == REGISTERED["spec"]["taints"][0]  # the not-ready taint stays, timeAdded included
    assert taints[1:] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]


def after(node, patch):
    """The Node as a JSON merge patch leaves it (RFC 7386: maps merge, null deletes, lists replace)."""
    out = {**node, "metadata": dict(node["metadata"]), "spec": dict(node["spec"])}
    labels = dict(node["metadata"].get("labels") or {})
    for k, v in (patch.get("metadata") or {}).get("labels", {}).items():
        if v is None:
            labels.pop(k, None)
        else:
            labels[k] = v
    out["metadata"]["labels"] = labels
    if "spec" in patch:
        out["spec"]["taints"] = patch["spec"]["taints"]
    return out


def test_a_labelled_node_needs_no_patch():
    want = wanted(split_plan().node("m4"))
    labelled = after(REGISTERED, node_patch(REGISTERED, want, None))
    assert node_patch(labelled, want, want) is None
    assert node_patch(labelled, want, None) is None


def test_only_labels_bke_applied_and_nobody_changed_are_removed():
    before = Marks(labels=(("node-role.kubernetes.io/node", ""), ("team", "a"), ("zone", "z1")), taints=())
    node = {"metadata": {"resourceVersion": "9", "labels": {"node-role.kubernetes.io/node": "", "team": "b", "zone": "z1",
                                                            "user": "x"}}, "spec": {}}
    want = Marks(labels=(("node-role.kubernetes.io/node", ""),), taints=())
    patch = node_patch(node, want, before)
    # zone: BKE's and unchanged -> removed; team: the user changed it -> kept; user: never BKE's
    assert patch == {"metadata": {"labels": {"zone": None}, "resourceVersion": "9"}}


def test_taints_corrected_by_identity_and_dropped_only_when_bke_set_them():
    node = {"metadata": {"resourceVersion": "3", "labels": {}},
            "spec": {"taints": [{"key": "dedicated", "value": "old", "effect": "NoSchedule"},
                                {"key": "gone", "value": "", "effect": "NoExecute"},
                                {"key": "someone-elses", "effect": "NoSchedule"}]}}
    before = Marks(labels=(), taints=(("dedicated", "old", "NoSchedule"), ("gone", "", "NoExecute")))
    want = Marks(labels=(), taints=(("dedicated", "new", "NoSchedule"),))
    assert node_patch(node, want, before)["spec"]["taints"] == [
        {"key": "someone-elses", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "new", "effect": "NoSchedule"},
    ]


def test_record_round_trips_to_the_marks_it_was_made_from():
    want = wanted(split_plan().node("m1"))
    doc = record(want, "Recorded", "2026-12-01T00:00:00+00:00")
    assert doc["status"] == "Recorded" and doc["taints"] == [{"key": CP_TAINT[0], "value": "", "effect": "NoSchedule"}]
    assert marks_from_record(doc) == want and marks_from_record(None) is None


def test_a_label_the_apiserver_would_refuse_fails_the_plan_with_its_field_path():
    text = Path("examples/split-etcd.yaml").read_text().replace(
        "labels: {pool: general}", 'labels: {pool: general, "Example.com/x": y, "team/": a, ok: "bad value!"}', 1)
    out = plan_spec_text(text)
    assert not out.ok
    msgs = {(e.path, e.message) for e in out.errors}
    node = next(e.path for e in out.errors).split(".labels.")[0]
    assert (f"{node}.labels.Example.com/x",
            "label key 'Example.com/x': prefix 'Example.com' must be a lowercase DNS subdomain of at most 253 characters") in msgs
    assert (f"{node}.labels.team/", "label key 'team/': the name is empty") in msgs
    assert any(p == f"{node}.labels.ok" and m.startswith("label value 'bad value!'") for p, m in msgs)
    assert len(out.errors) == 3
    long_ok = "a" * 63
    assert plan_spec_text(Path("examples/split-etcd.yaml").read_text().replace(
        "labels: {pool: general}", f"labels: {{pool: general, example.com/{long_ok}: {long_ok}}}", 1)).ok
