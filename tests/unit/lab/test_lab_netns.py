"""A real-control-plane lab on 198.18.0.0/15: which nodes get a network namespace, the bridge's
address, the names of namespaces and veths; the keepalived.conf and haproxy.cfg copies the lab
runs there; and what the vip test counts as a failure the VIP move explains."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bke.core.plan import plan_spec_text
from bke.lab.netns import IFNAME, LabNetwork, LabNetworkError, in_lab_range, plan_lab_network
from bke_agent.kubelet.lab_haproxy import localize_haproxy_config
from bke_agent.kubelet.lab_keepalived import NETNS_IFNAME, localize_keepalived_config
from bke_agent.lab_netns import in_netns, lab_netns, socket_in_netns
from bke_cli.lab_cmd import lab_problems

ROOT = Path(__file__).resolve().parents[3]


def _plan(net: str = "198.18.40", vip: str | None = None):
    text = (ROOT / "examples/split-etcd.yaml").read_text().replace("127.0.20.", f"{net}.")
    if vip is not None:
        text = text.replace(f"{net}.250", vip)
    plan = plan_spec_text(text.encode()).plan
    assert plan is not None
    return plan


def test_every_control_plane_node_gets_a_namespace_and_workers_stay_on_the_bridge(tmp_path) -> None:
    net = plan_lab_network(_plan(), tmp_path)
    assert net is not None
    assert [h.hostname for h in net.hosts] == ["m1", "m2", "m3", "m4", "m5", "etcd1", "etcd2", "etcd3", "events1",
                                                "events2", "events3", "pods1", "pods2", "pods3"]
    assert net.root_addresses == ("198.18.40.101", "198.18.40.102", "198.18.40.103", "198.18.40.104")
    assert net.vip == "198.18.40.250" and net.gateway == "198.18.40.254" and net.prefix == 24
    m1 = net.hosts[0]
    assert m1.netns == f"bke-{net.tag}-m1" and m1.ip == "198.18.40.1" and m1.ifname == IFNAME == NETNS_IFNAME
    assert all(len(n) <= 15 for h in net.hosts for n in (h.root_veth, h.peer_veth)) and len(net.bridge) <= 15
    assert len({h.root_veth for h in net.hosts}) == len(net.hosts)
    assert net.netns_of("worker1") == "" and net.netns_of("etcd2") == f"bke-{net.tag}-etcd2"
    assert LabNetwork.from_json(net.to_json()) == net
    # another work directory: other names, so that two labs can run side by side
    other = plan_lab_network(_plan(), tmp_path / "other")
    assert other is not None and other.bridge != net.bridge and other.hosts[0].netns != m1.netns


def test_a_loopback_lab_has_no_network_and_a_mixed_or_scattered_one_is_refused_by_field(tmp_path) -> None:
    assert plan_lab_network(_plan("127.0.20"), tmp_path) is None
    with pytest.raises(LabNetworkError, match=r"cluster.spec.controlPlaneEndpoint: the VIP 198.18.41.250"):
        plan_lab_network(_plan(vip="198.18.41.250"), tmp_path)
    mixed = (ROOT / "examples/split-etcd.yaml").read_text().replace("127.0.20.1\n", "198.18.40.1\n")
    plan = plan_spec_text(mixed.encode()).plan
    assert plan is not None
    with pytest.raises(LabNetworkError, match=r"nodes\[1\].spec.ip: 127.0.20.2 is not in 198.18.0.0/15"):
        plan_lab_network(plan, tmp_path)
    assert in_lab_range("198.19.255.1") and not in_lab_range("198.20.0.1") and not in_lab_range("nonsense")


def test_the_simulated_lab_still_refuses_addresses_that_are_not_loopback() -> None:
    problems = lab_problems(_plan(), "simulated")
    assert problems and problems[0].startswith("nodes[0].spec.ip: 198.18.40.1 is not a loopback address")


KEEPALIVED = """vrrp_script check_apiserver {
    script "/etc/keepalived/check_apiserver.sh"
    interval 3
}
vrrp_instance VI_1 {
    state MASTER
    interface ens192
    unicast_src_ip 198.18.40.1
    virtual_ipaddress {
        198.18.40.250
    }
}
"""


def test_the_keepalived_copy_runs_the_nodes_check_script_on_the_namespaces_interface(tmp_path) -> None:
    out = localize_keepalived_config(KEEPALIVED, tmp_path / "m1")
    assert f'script "{tmp_path}/m1/etc/keepalived/check_apiserver.sh"' in out
    assert "    interface eth0\n" in out and "ens192" not in out
    # nothing else changes: addresses, state and the VIP are the rendered ones
    assert out.replace(f"{tmp_path}/m1/", "/").replace("eth0", "ens192") == KEEPALIVED


def test_haproxy_in_a_namespace_binds_every_address_as_rendered() -> None:
    cfg = "frontend healthz\n    bind 127.0.0.1:8404\nfrontend apiserver\n    bind *:36443\n"
    out = localize_haproxy_config(cfg, "198.18.40.1", "198.18.40.250", fd_limit=20000, netns=True)
    # the monitor moves onto the node's address: the kubelet stand-in asks it from the root namespace
    assert "bind 198.18.40.1:8404" in out and "bind *:36443" in out


def test_a_namespaced_nodes_processes_and_sockets_are_made_in_its_namespace() -> None:
    assert lab_netns({"BKE_LAB_NETNS": "bke-x-m1"}) == "bke-x-m1" and lab_netns({}) == ""
    assert in_netns("bke-x-m1", ["/usr/sbin/haproxy", "-W"]) == ["nsenter", "--net=/run/netns/bke-x-m1", "--",
                                                                  "/usr/sbin/haproxy", "-W"]
    assert in_netns("", ["etcd"]) == ["etcd"]
    with socket_in_netns("") as s:
        assert s.family == socket.AF_INET
    with pytest.raises(OSError):
        socket_in_netns("bke-no-such-namespace")


def test_each_vip_move_or_killed_apiserver_explains_at_most_one_failure() -> None:
    from tests.e2e.real_cp_vip import vip_failures_explained

    moves = [(100.0, ("m2",)), (110.0, ("m1",))]
    events = [(95.0, "SIGKILL keepalived on m1"), (104.0, "SIGKILL kube-apiserver on m1")]
    assert vip_failures_explained([(100.3, "reset"), (104.2, "disconnected"), (110.1, "reset")], moves, events) == []
    # a second failure at one move, and one long after every event, are not explained
    assert vip_failures_explained([(100.3, "a"), (100.9, "b")], moves, []) == [(100.9, "b")]
    assert vip_failures_explained([(130.0, "late")], moves, events) == [(130.0, "late")]
