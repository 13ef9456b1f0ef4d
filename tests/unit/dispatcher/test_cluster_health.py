"""Health of every node: the health phase's commands (each kubelet's /healthz), then, on a real
cluster, the API decisions on recorded objects (Node Ready, DaemonSet and Deployment status),
and the status summaries that show it at any size."""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

from bke.contracts.agent_steps import WaitHealth
from bke.contracts.status import GetStatus
from bke.core.plan import plan_spec_text
from bke_cli.status_cmd import summary_lines
from bke_dispatcher import decide
from bke_dispatcher.api_health import daemonset_ready, deployment_ready, health_doc, health_verdict, node_ready, workloads
from bke_dispatcher.phases import PHASES, phase_by_slug
from bke_dispatcher.status import build_status
from bke_dispatcher.status_summary import health_counts, label_sets

SEED = Path("examples/seed-3m1w.yaml").read_text()


def seed_plan(addons=None, **cluster):
    docs = list(yaml.safe_load_all(SEED))
    docs[0]["spec"]["clusterConfig"]["cluster"].update(cluster)
    if addons is not None:
        docs[0]["spec"]["clusterConfig"]["addons"] = addons
    out = plan_spec_text(yaml.safe_dump_all(docs))
    assert out.ok, out.errors
    return out.plan


def node(name, ready):
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]}}


# recorded `kubectl get ds calico-node -n kube-system -o json` status blocks
DS_ROLLING = {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 4,
                                                        "updatedNumberScheduled": 4, "numberAvailable": 2, "numberReady": 2}}
DS_READY = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "desiredNumberScheduled": 4,
                                                      "updatedNumberScheduled": 4, "numberAvailable": 4}}
DEP_READY = {"metadata": {"generation": 1}, "spec": {"replicas": 2},
             "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}}


def test_the_health_phase_asks_every_nodes_kubelet_workers_and_etcd_only_nodes_included():
    plan = plan_spec_text(Path("examples/split-etcd.yaml").read_text()).plan
    phase = phase_by_slug("health")
    assert [n.hostname for n in phase.targets(plan)] == [n.hostname for n in plan.nodes]
    for n in plan.nodes:
        steps = phase.build(plan, n, None)
        kubelet = [s for s in steps if s.id == "health:kubelet"]
        assert len(kubelet) == 1 and isinstance(kubelet[0], WaitHealth), n.hostname
        assert kubelet[0].url == "http://127.0.0.1:10248/healthz" and kubelet[0].expect_body == "ok"
    worker = phase.build(plan, plan.node("worker1"), None)
    assert [s.id for s in worker] == ["health:kubelet"]
    assert "kubelet" in phase.summary and "Ready" in phase.summary and "CoreDNS" in phase.summary


def test_node_labels_comes_after_addons_and_before_health():
    slugs = [p.slug for p in PHASES]
    assert slugs.index("addons") < slugs.index("node-labels") == slugs.index("health") - 1


def test_a_phase_with_local_work_runs_it_after_every_target_succeeded():
    seen = decide.Observed(agents=0, inputs={}, sealed=0, nodes=4, plan_digest="d")
    running = decide.PhaseRecord(status=decide.PhaseStatus.RUNNING, ok=3, cursor=4)
    assert isinstance(decide.decide_step((), "health", None, 4, running, seen), decide.Wait)
    done = decide.PhaseRecord(status=decide.PhaseStatus.RUNNING, ok=4, cursor=4)
    assert decide.decide_step((), "health", None, 4, done, seen) == decide.RunLocal("health")
    assert decide.decide_step((), None, None, 4, done, seen) == decide.Succeed()
    assert decide.decide_step((), "node-labels", None, 0, decide.PhaseRecord(), seen) == decide.RunLocal("node-labels")


def test_node_ready_reads_the_ready_condition_only():
    assert node_ready(node("a", "True"))
    assert not node_ready(node("a", "False")) and not node_ready(node("a", "Unknown"))
    assert not node_ready({"metadata": {"name": "a"}, "status": {}})  # just registered: no conditions yet


def test_daemonset_and_deployment_readiness_as_kubectl_rollout_status_decides():
    assert daemonset_ready(DS_READY) == (True, "4/4 pods available")
    assert daemonset_ready(DS_ROLLING) == (False, "2/4 pods available, 4/4 updated")
    stale = copy.deepcopy(DS_READY)
    stale["metadata"]["generation"] = 3
    assert daemonset_ready(stale)[0] is False  # a new spec not yet seen by its controller
    assert daemonset_ready({"metadata": {"generation": 1}, "status": {"observedGeneration": 1}})[1] == "no pod scheduled yet"
    assert deployment_ready(DEP_READY) == (True, "2/2 replicas available")
    surge = copy.deepcopy(DEP_READY)
    surge["status"]["replicas"] = 3
    assert deployment_ready(surge) == (False, "1 old replica(s) pending termination")
    short = copy.deepcopy(DEP_READY)
    short["status"]["availableReplicas"] = 1
    assert deployment_ready(short)[0] is False


def test_the_verdict_names_what_is_not_ready():
    plan = seed_plan(addons=[{"name": "kube-proxy", "version": "v1.33.2"}, {"name": "coredns", "version": "v1"}])
    assert [w.ref for w in workloads(plan)] == ["daemonset/kube-system/calico-node", "deployment/kube-system/coredns"]
    nodes = {h: node(h, "True") for h in ("master1", "master2", "master3", "node1")}
    objects = {"daemonset/kube-system/calico-node": DS_READY, "deployment/kube-system/coredns": DEP_READY}
    assert health_verdict(plan, nodes, objects).ready
    nodes["node1"] = node("node1", "False")
    v = health_verdict(plan, nodes, {**objects, "deployment/kube-system/coredns": None})
    assert not v.ready and v.not_ready_nodes == ["node1"]
    assert v.reason == "3/4 nodes Ready (not Ready: node1); deployment/kube-system/coredns: not found"
    del nodes["master2"]  # never registered
    assert health_verdict(plan, nodes, objects).not_ready_nodes == ["master2", "node1"]


def test_the_periodic_record_counts_ready_nodes_and_says_why_a_workload_is_not_ready():
    plan = seed_plan()
    nodes = {h: node(h, "True") for h in ("master1", "master2", "master3")}
    doc = health_doc(plan, nodes, {"daemonset/kube-system/calico-node": DS_ROLLING})
    assert doc == {"nodesReady": 3, "nodesRegistered": 4, "notReady": ["node1"], "workloads": {
        "daemonset/kube-system/calico-node": {"ready": False, "reason": "2/4 pods available, 4/4 updated"},
        "deployment/kube-system/coredns": {"ready": False, "reason": "not found"}}}


def test_no_cni_and_no_coredns_means_no_workload_to_wait_for():
    # CoreDNS is built in and on by default (bke.core.spec.addons): coreDNS.enabled turns it off
    assert [w.ref for w in workloads(seed_plan(cni="none", addons=[]))] == ["deployment/kube-system/coredns"]
    assert workloads(seed_plan(cni="none", coreDNS={"enabled": False}, addons=[])) == []


def test_status_rows_carry_labels_and_health_and_the_summaries_cover_every_node():
    order = [f"w{i}" for i in range(10_000)]
    role = {"labels": {"node-role.kubernetes.io/worker": "worker", "node-role.kubernetes.io/node": ""}, "taints": [],
            "status": "Recorded", "at": "t"}
    records = {h: role for h in order[:9_000]}
    records.update({h: {**role, "labels": {"rack": h}} for h in order[9_000:9_100]})  # 100 distinct sets
    health = {h: {"status": "Healthy", "failing": [], "at": "t"} for h in order[:9_990]}
    health["w5"] = {"status": "Unhealthy", "failing": ["health:kubelet"], "at": "t"}
    sets, labelled, more = label_sets(order, records)
    assert labelled == 9_100 and sets[0].nodes == 9_000 and len(sets) == 50 and more == 51
    counts = health_counts(order, health)
    assert (counts.healthy, counts.unhealthy, counts.unknown, counts.unhealthy_nodes) == (9_989, 1, 10, ["w5"])
    doc = build_status(GetStatus(cluster="c", nodes="all", limit=2), {"status": "Succeeded", "requestId": "r"}, {}, order,
                       {h: {"status": "Succeeded"} for h in order}, {}, health, None, node_labels=records,
                       cluster_health={"kube-system": {"pods": 3}})
    assert [n.hostname for n in doc.nodes] == ["w0", "w1"]
    assert doc.nodes[0].labels == role["labels"] and doc.nodes[0].taints == [] and doc.nodes[0].health.status == "Healthy"
    assert doc.health == {"kube-system": {"pods": 3}} and doc.node_health.unhealthy == 1
    assert len(doc.to_bytes()) < 20_000  # the summaries stay small however many nodes
    lines = summary_lines(doc)
    assert lines[0] == "health: 9989 healthy, 1 unhealthy, 10 not checked yet (unhealthy: w5)"
    assert lines[1] == "labels applied on 9100 node(s):"
    assert lines[2] == "    9000  role:node role:worker"
    assert lines[-1].startswith("  ... and 51 more distinct label set(s)")
