"""Certificate rotation, the pure decisions (no Redis, no bus): the gate, the node order, one
node's steps from the reload table, and what comes next as results arrive."""
from __future__ import annotations

import pytest

from bke.contracts.agent_steps import RestartStaticPod, SystemdUnit, WaitHealth, WriteFile
from bke.contracts.certs import CertsRenewed, RenewedCertificate
from bke.core.pki import node_file_refs
from bke.core.pki.table import leaf_rows
from bke.core.plan import plan_spec_text
from bke.core.state.nodefiles import file_from_bytes
from bke_dispatcher.command_ids import parse_command_id
from bke_dispatcher.reload import RELOADS, reload_for
from bke_dispatcher.ops.rotation.decide import (
    Rotation, apply_result, new_rotation, next_step, node_steps, refusal, rotation_order,
)

SEED = plan_spec_text(open("examples/seed-3m1w.yaml").read()).plan
SPLIT = plan_spec_text(open("examples/split-etcd.yaml").read()).plan


def renewed(plan, *names: str, rid: str = "r1") -> CertsRenewed:
    """What the certs service would publish for these certificate rows (one instance per node)."""
    refs = node_file_refs(plan)
    certs = []
    for name in names:
        instances = sorted({r.instance for fs in refs.values() for r in fs if r.instance.split("@")[0] == name})
        for inst in instances:
            nodes = sorted(h for h, fs in refs.items() if any(r.instance == inst for r in fs))
            certs.append(RenewedCertificate(name=name, instance=inst, nodes=nodes, serial="1", not_after="x"))
    return CertsRenewed(request_id=rid, cluster=plan.cluster, certificates=certs, at="t")


def files_for(plan, host):
    return [file_from_bytes(r.path, r.path.encode(), r.mode) for r in node_file_refs(plan, [host])[host]]


def test_every_renewable_certificate_has_exactly_one_reload_row():
    assert {reload_for(r.name).cert for r in leaf_rows()} == {r.cert for r in RELOADS}
    assert all(r.source and r.how for r in RELOADS)
    assert reload_for("etcd-events-peer").action == "none"
    assert reload_for("scheduler.conf").action == "restart-pod" and reload_for("scheduler.conf").target == "kube-scheduler"
    assert reload_for("kubelet.conf").action == "restart-kubelet"
    with pytest.raises(KeyError):
        reload_for("ca")


@pytest.mark.parametrize("install, running, expect", [
    ("Succeeded", None, ""),
    ("Running", None, "the install of seed is Running"),
    (None, None, "the install of seed is not started"),
    ("Failed", None, "the install of seed is Failed"),
    ("Succeeded", "Running", "rotation old of seed is still running (0/3 nodes)"),
    ("Succeeded", "Failed", ""),
])
def test_one_operation_per_cluster(install, running, expect):
    current = None
    if running:
        current = new_rotation(renewed(SEED, "apiserver", rid="old"), SEED, "t0")
        current.status = running
    assert refusal("seed", install, current).startswith(expect) and bool(expect) == bool(refusal("seed", install, current))


def test_order_is_etcd_member_by_member_then_the_rest():
    assert rotation_order(SEED, {"node1", "master3", "master1"}) == ["master1", "master3", "node1"]
    every = {n.hostname for n in SPLIT.nodes}
    order = rotation_order(SPLIT, every)
    etcd = [f"etcd{i}" for i in (1, 2, 3)] + [f"events{i}" for i in (1, 2, 3)] + [f"pods{i}" for i in (1, 2, 3)]
    assert order[:9] == etcd and set(order[9:]) == every - set(etcd) and len(order) == len(every)


def test_a_rotation_names_exactly_the_nodes_holding_the_renewed_files():
    rot = new_rotation(renewed(SEED, "apiserver"), SEED, "t0")
    assert [n.hostname for n in rot.nodes] == ["master1", "master2", "master3"]
    assert rot.certificates == ["apiserver@master1", "apiserver@master2", "apiserver@master3"]
    assert [n.instances for n in rot.nodes] == [["apiserver@master1"], ["apiserver@master2"], ["apiserver@master3"]]
    # command ids are deterministic per (cluster, request, node), and parse like the install's
    assert rot.nodes[0].command_id == "seed/rotate@r1/master1/0"
    assert parse_command_id(rot.nodes[0].command_id) == ("seed", "rotate@r1", "master1", 0)
    assert new_rotation(renewed(SEED, "apiserver"), SEED, "t1").nodes[0].command_id == rot.nodes[0].command_id
    kubelets = new_rotation(renewed(SEED, "kubelet.conf"), SEED, "t0")
    assert [n.hostname for n in kubelets.nodes] == ["master1", "master2", "master3", "node1"]


def test_steps_write_only_the_renewed_files_then_apply_the_reload_table_then_wait_healthy():
    rot = new_rotation(renewed(SEED, "apiserver", "scheduler.conf", "kubelet.conf"), SEED, "t0")
    run = rot.nodes[0]
    steps = node_steps(SEED, SEED.node("master1"), run, files_for(SEED, "master1"))
    writes = [s.path for s in steps if isinstance(s, WriteFile)]
    assert writes == ["/etc/kubernetes/kubelet.conf", "/etc/kubernetes/pki/apiserver.crt",
                      "/etc/kubernetes/pki/apiserver.key", "/etc/kubernetes/scheduler.conf"]
    restarts = [s for s in steps if isinstance(s, RestartStaticPod)]
    assert [(s.manifest, s.health_url) for s in restarts] == [
        ("/etc/kubernetes/manifests/kube-scheduler.yaml", "https://127.0.0.1:10259/healthz")]
    assert [s.unit for s in steps if isinstance(s, SystemdUnit)] == ["kubelet.service"]
    health = [s.id for s in steps if isinstance(s, WaitHealth)]
    assert health == ["health:etcd-data", "health:kube-apiserver", "health:kube-controller-manager", "health:kube-scheduler"]
    # the order within the command: files, then what makes them take effect, then health
    kinds = [type(s).__name__ for s in steps]
    assert kinds.index("RestartStaticPod") > max(i for i, k in enumerate(kinds) if k == "WriteFile")
    assert min(i for i, k in enumerate(kinds) if k == "WaitHealth") > kinds.index("SystemdUnit")
    # the apiserver reloads its serving certificate itself: no restart for it
    alone = node_steps(SEED, SEED.node("master1"), new_rotation(renewed(SEED, "apiserver"), SEED, "t").nodes[0],
                       files_for(SEED, "master1"))
    assert not [s for s in alone if isinstance(s, (RestartStaticPod, SystemdUnit))]
    with pytest.raises(ValueError, match="no sealed file"):
        node_steps(SEED, SEED.node("master1"), run, [])


def test_one_node_at_a_time_until_done():
    rot = new_rotation(renewed(SEED, "apiserver"), SEED, "t0")
    assert next_step(rot).action == "send" and next_step(rot).nodes == ("master1",)
    rot.nodes[0].status = "Running"
    assert (next_step(rot).action, next_step(rot).reason) == ("wait", "waiting for master1")
    assert not apply_result(rot, "seed/rotate@other/master1/0", "Succeeded", "", "")  # not ours
    assert apply_result(rot, rot.nodes[0].command_id, "Succeeded", "", "")
    assert not apply_result(rot, rot.nodes[0].command_id, "Succeeded", "", "")  # a duplicate counts once
    assert (next_step(rot).action, next_step(rot).nodes) == ("send", ("master2",))
    for n in rot.nodes[1:]:
        n.status = "Running"
        apply_result(rot, n.command_id, "Succeeded", "", "")
    assert next_step(rot).action == "succeed" and rot.view().done == 3
    rot.status = "Succeeded"
    assert not rot.running  # ended: the loop decides nothing more (tests/integration/test_operation_loop.py)


def test_a_failed_node_stops_the_rotation_with_its_reason():
    rot = new_rotation(renewed(SEED, "apiserver"), SEED, "t0")
    rot.nodes[0].status = "Running"
    apply_result(rot, rot.nodes[0].command_id, "Failed", "health:kube-apiserver", "HTTP 500 unhealthy")
    d = next_step(rot)
    assert d.action == "fail" and d.node == "master1"
    assert d.reason == "node master1 step health:kube-apiserver: HTTP 500 unhealthy"
    assert [n.status for n in rot.nodes] == ["Failed", "Pending", "Pending"]  # the others untouched


def test_record_round_trips_and_its_view_has_exactly_the_status_fields():
    rot = new_rotation(renewed(SEED, "apiserver"), SEED, "t0")
    assert Rotation.from_json(rot.to_json()) == rot
    view = rot.view().model_dump(by_alias=True)
    assert set(view) == {"requestId", "status", "certificates", "done", "total", "startedAt", "finishedAt", "message", "nodes"}
    assert view["nodes"][0] == {"hostname": "master1", "status": "Pending"}


def test_nodes_outside_the_plan_are_refused():
    ev = renewed(SEED, "apiserver")
    bad = ev.model_copy(update={"certificates": [ev.certificates[0].model_copy(update={"nodes": ["ghost"]})]})
    with pytest.raises(ValueError, match="ghost"):
        new_rotation(bad, SEED, "t0")
