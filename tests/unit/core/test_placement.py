"""Every placement rule, on small specs."""
from __future__ import annotations

import json

from bke.core.plan import parse_overrides, plan_spec_text

from ..spec_helpers import docs_with_roles, to_text

M, N = ["master/node", "etcd"], ["node"]


def plan_of(*roles, **kw):
    out = plan_spec_text(to_text(docs_with_roles(*roles, **kw)))
    assert out.ok, out.errors
    return out.plan


def comps(plan):
    return {n.hostname: n.components for n in plan.nodes}


def test_seed_layout_everything_on_masters():
    p = plan_of(M, M, M, N)
    c = comps(p)
    for h in ("n0", "n1", "n2"):
        assert c[h] == ["containerd", "kubelet", "etcd-data", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"]
    assert c["n3"] == ["containerd", "kubelet", "kube-proxy"]
    assert [e.name for e in p.etcd_clusters] == ["etcd-data"]
    assert p.apiserver.etcd_servers_overrides == ""
    assert p.apiserver.etcd_servers == "https://127.100.0.1:2379,https://127.100.0.2:2379,https://127.100.0.3:2379"


def test_optional_roles_select_exactly_those_masters():
    p = plan_of(["master", "apiserver"], ["master", "controller-manager"], ["master", "scheduler", "etcd"], ["node"])
    running = {c: [n.hostname for n in p.nodes_running(c)] for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")}
    assert running == {"kube-apiserver": ["n0"], "kube-controller-manager": ["n1"], "kube-scheduler": ["n2"]}


def test_absent_optional_role_means_every_master():
    p = plan_of(["master", "apiserver"], ["master"], ["master/node"], ["node"])
    assert [n.hostname for n in p.nodes_running("kube-apiserver")] == ["n0"]
    assert [n.hostname for n in p.nodes_running("kube-scheduler")] == ["n0", "n1", "n2"]


def test_etcd_data_on_etcd_role_else_masters():
    p = plan_of(["master"], ["etcd"], ["etcd"], ["etcd"], ["node"])
    assert [m.hostname for m in p.etcd_cluster("etcd-data").members] == ["n1", "n2", "n3"]
    assert "etcd-data" not in p.node("n0").components
    p = plan_of(["master"], ["master"], ["master"])
    assert [m.hostname for m in p.etcd_cluster("etcd-data").members] == ["n0", "n1", "n2"]


def test_split_etcd_clusters_ports_and_overrides():
    p = plan_of(M, ["etcd-event"], ["etcd-pod"], ["node", "etcd-event", "etcd-pod"], ["etcd-event"], ["etcd-pod"])
    ev, pods = p.etcd_cluster("etcd-events"), p.etcd_cluster("etcd-pods")
    assert [m.hostname for m in ev.members] == ["n1", "n3", "n4"]
    assert (ev.client_port, ev.peer_port, ev.metrics_port) == (2383, 2382, 2384)
    assert (pods.client_port, pods.peer_port, pods.metrics_port) == (2385, 2386, 2387)
    d = p.etcd_cluster("etcd-data")
    assert (d.client_port, d.peer_port, d.metrics_port) == (2379, 2380, 2381)
    assert ev.resources == ["/events", "coordination.k8s.io/leases"] and pods.resources == ["/pods"] and d.resources == ["*"]
    ev_urls = "https://127.100.0.2:2383;https://127.100.0.4:2383;https://127.100.0.5:2383"
    pod_urls = "https://127.100.0.3:2385;https://127.100.0.4:2385;https://127.100.0.6:2385"
    assert p.apiserver.etcd_servers_overrides == (
        f"/events#{ev_urls},coordination.k8s.io/leases#{ev_urls},/pods#{pod_urls}"
    )
    assert parse_overrides(p.apiserver.etcd_servers_overrides)["/pods"] == pod_urls.split(";")
    assert p.node("n3").components == ["containerd", "kubelet", "etcd-events", "etcd-pods", "kube-proxy"]


def test_labels_and_taints():
    p = plan_of(["master/node", "etcd"], ["master", "node", "etcd"], ["master", "etcd", "apiserver"], ["node"], ["etcd-event"])
    mn = {
        "node-role.kubernetes.io/control-plane": "control-plane",
        "node-role.kubernetes.io/master": "",
        "node-role.kubernetes.io/worker": "worker",
        "node-role.kubernetes.io/node": "",
    }
    assert p.node("n0").labels == mn and p.node("n0").taints == []
    assert p.node("n1").labels == mn  # master + node means master/node
    assert p.node("n2").labels == {
        "node-role.kubernetes.io/control-plane": "control-plane",
        "node-role.kubernetes.io/master": "",
        "node-role.kubernetes.io/apiserver": "",
    }
    assert [(t.key, t.effect) for t in p.node("n2").taints] == [("node-role.kubernetes.io/control-plane", "NoSchedule")]
    assert p.node("n3").labels == {"node-role.kubernetes.io/worker": "worker", "node-role.kubernetes.io/node": ""}
    etcd_only = p.node("n4")
    assert etcd_only.labels == {} and not etcd_only.registers and "kube-proxy" not in etcd_only.components


def test_vip_places_haproxy_and_keepalived_on_masters():
    p = plan_of(M, M, M, N, endpoint=("127.100.9.9", 36443))
    assert p.load_balancer
    assert [n.hostname for n in p.nodes_running("haproxy")] == ["n0", "n1", "n2"]
    assert [n.hostname for n in p.nodes_running("keepalived")] == ["n0", "n1", "n2"]
    assert not plan_of(M).load_balancer


def test_plan_json_shape_is_the_documented_contract():
    p = plan_spec_text(open("examples/split-etcd.yaml").read()).plan
    doc = json.loads(json.dumps(p.public_view()))
    assert doc["cluster"] == "big" and doc["kubernetesVersion"] == "v1.33.2"
    assert set(doc["nodes"][0]) >= {"hostname", "ip", "components", "labels", "taints"}
    assert [c["name"] for c in doc["etcdClusters"]] == ["etcd-data", "etcd-events", "etcd-pods"]
    assert set(doc["etcdClusters"][0]["members"][0]) >= {"hostname", "ip", "clientURL", "peerURL"}
    assert doc["etcdClusters"][1]["resources"] == ["/events", "coordination.k8s.io/leases"]
    assert doc["apiserver"]["etcdServersOverrides"].startswith("/events#")
    assert "spec" not in doc
