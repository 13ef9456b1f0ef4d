"""haproxy + keepalived on the masters when the endpoint is a VIP; nothing of it otherwise."""
from __future__ import annotations

import pytest

from bke.core.pki.instances import desired_instances
from bke.core.plan import plan_spec_text
from bke.core.render import MissingInputError, RenderedCluster, generate_vrrp_password
from bke.core.render.conf_parsers import parse_haproxy, parse_keepalived

from tests.unit.core.render.test_render_support import plan_of, render, spec_text

NODES = [("m1", "10.7.0.1", ["master", "apiserver"]), ("m2", "10.7.0.2", ["master", "apiserver"]),
         ("m3", "10.7.0.3", ["master", "controller-manager", "scheduler"]), ("e1", "10.7.0.9", ["etcd"]),
         ("w1", "10.7.0.20", ["node"])]


def test_every_master_gets_the_load_balancer_with_apiserver_backends_and_ranked_priorities() -> None:
    rendered = render(plan_of(spec_text(NODES, endpoint=("10.7.0.100", 8443))))
    confs = {}
    for host in ("m1", "m2", "m3"):
        cfg = parse_haproxy(rendered.node(host).file("/etc/haproxy/haproxy.cfg").content.decode())
        assert [(s.name, s.host, s.port) for s in cfg.servers("apiserver")] == [("m1", "10.7.0.1", 6443), ("m2", "10.7.0.2", 6443)]
        assert ("*", 8443) in cfg.bind_ports()
        ka = rendered.node(host).file("/etc/keepalived/keepalived.conf")
        assert ka.secret and ka.mode == 0o600
        confs[host] = parse_keepalived(ka.content.decode()).instances["VI_1"]
    assert [c["state"] for c in confs.values()] == [["MASTER"], ["BACKUP"], ["BACKUP"]]
    prios = [int(c["priority"][0]) for c in confs.values()]
    weight = int(parse_keepalived(rendered.node("m1").file("/etc/keepalived/keepalived.conf").content.decode())
                 .scripts["check_apiserver"]["weight"][0])
    assert prios == sorted(set(prios), reverse=True) and max(prios) + weight < min(prios)
    assert all(list(c["virtual_ipaddress"]) == ["10.7.0.100"] for c in confs.values())
    assert rendered.node("e1").file("/etc/haproxy/haproxy.cfg") is None
    assert rendered.node("w1").file("/etc/kubernetes/manifests/keepalived.yaml") is None


def test_a_node_address_endpoint_has_no_load_balancer() -> None:
    rendered = render(plan_of(spec_text(NODES, endpoint=None)), password=None)
    assert not [f for n in rendered.nodes for f in n.files if "haproxy" in f.path or "keepalived" in f.path]


def test_the_vrrp_password_is_an_input_not_made_up() -> None:
    plan = plan_of(spec_text(NODES))
    with pytest.raises(MissingInputError, match="VRRP password"):
        render(plan, password=None)
    with pytest.raises(MissingInputError):
        render(plan, password="has space")
    a, b = render(plan, password="Abcdefg2"), render(plan, password="Zbcdefg2")
    assert a.digest != b.digest
    assert b"auth_pass Zbcdefg2" in b.node("m2").file("/etc/keepalived/keepalived.conf").content


def test_generated_passwords_fit_keepalived_and_differ() -> None:
    seen = {generate_vrrp_password() for _ in range(50)}
    assert len(seen) == 50 and all(len(p) == 8 and p.isalnum() for p in seen)
    assert generate_vrrp_password(choice=lambda alphabet: alphabet[0]) == "AAAAAAAA"


# --- VRRP: unicast peers by default, multicast on request, per-node interface ----------------
def _instance(rendered: RenderedCluster, host: str) -> dict:
    return parse_keepalived(rendered.node(host).file("/etc/keepalived/keepalived.conf").content.decode()).instances["VI_1"]


def test_unicast_is_the_default_each_master_sends_from_its_address_to_the_others() -> None:
    rendered = render(plan_of(spec_text(NODES, endpoint=("10.7.0.100", 8443))))
    masters = {"m1": "10.7.0.1", "m2": "10.7.0.2", "m3": "10.7.0.3"}
    for host, ip in masters.items():
        inst = _instance(rendered, host)
        assert inst["unicast_src_ip"] == [ip]
        assert sorted(inst["unicast_peer"]) == sorted(v for h, v in masters.items() if h != host)


def test_multicast_on_request_renders_no_unicast_keywords() -> None:
    rendered = render(plan_of(spec_text(NODES, endpoint=("10.7.0.100", 8443), cluster={"loadBalancer": {"vrrp": "multicast"}})))
    for host in ("m1", "m2", "m3"):
        inst = _instance(rendered, host)
        assert "unicast_src_ip" not in inst and "unicast_peer" not in inst


def test_a_single_master_has_no_peer_so_no_unicast_block() -> None:
    # keepalived.conf(5): unicast mode without peers is not possible (it falls back to multicast).
    one = [("m1", "10.7.0.1", ["master"]), ("w1", "10.7.0.20", ["node"])]
    inst = _instance(render(plan_of(spec_text(one, endpoint=("10.7.0.100", 8443)))), "m1")
    assert "unicast_src_ip" not in inst and "unicast_peer" not in inst


def test_a_node_interface_overrides_the_clusters() -> None:
    text = spec_text(NODES, endpoint=("10.7.0.100", 8443), cluster={"loadBalancer": {"interface": "bond0"}},
                     node_extra={"m2": {"loadBalancer": {"interface": "ens192"}}})
    rendered = render(plan_of(text))
    assert [_instance(rendered, h)["interface"] for h in ("m1", "m2", "m3")] == [["bond0"], ["ens192"], ["bond0"]]


def _errors(text: str) -> tuple[dict[str, str], list[str]]:
    out = plan_spec_text(text, "test")
    return {e.path: e.message for e in out.errors}, list(out.warnings)


@pytest.mark.parametrize(("cluster", "node_extra", "path", "fragment"), [
    ({"loadBalancer": {"interface": "eth0 up"}}, {}, "cluster.spec.clusterConfig.cluster.loadBalancer.interface", "not a network interface name"),
    ({"loadBalancer": {"interface": "a-very-long-ifname"}}, {}, "cluster.spec.clusterConfig.cluster.loadBalancer.interface", "1-15"),
    ({}, {"m2": {"loadBalancer": {"interface": "eth{0}"}}}, "nodes[1].spec.loadBalancer.interface", "not a network interface name"),
])
def test_bad_interface_names_are_refused_with_their_field(cluster: dict, node_extra: dict, path: str, fragment: str) -> None:
    errors, _ = _errors(spec_text(NODES, endpoint=("10.7.0.100", 8443), cluster=cluster, node_extra=node_extra))
    assert path in errors and fragment in errors[path], errors


def test_unicast_needs_masters_in_the_vips_address_family() -> None:
    nodes = [("m1", "10.7.0.1", ["master"]), ("m2", "fd00::2", ["master"]), ("m3", "10.7.0.3", ["master"])]
    errors, _ = _errors(spec_text(nodes, endpoint=("10.7.0.100", 8443)))
    assert "not IPv4 like the VIP" in errors["nodes[1].spec.ip"]
    errors, _ = _errors(spec_text(nodes, endpoint=("10.7.0.100", 8443), cluster={"loadBalancer": {"vrrp": "multicast"}}))
    assert "nodes[1].spec.ip" not in errors


def test_an_unknown_vrrp_mode_is_refused_with_its_field() -> None:
    errors, _ = _errors(spec_text(NODES, endpoint=("10.7.0.100", 8443), cluster={"loadBalancer": {"vrrp": "broadcast"}}))
    assert any(p.endswith("loadBalancer.vrrp") for p in errors), errors


def test_an_interface_where_no_keepalived_runs_is_a_warning() -> None:
    errors, warnings = _errors(spec_text(NODES, endpoint=("10.7.0.100", 8443), node_extra={"w1": {"loadBalancer": {"interface": "eth1"}}}))
    assert not errors
    assert any(w.startswith("nodes[4].spec.loadBalancer.interface is ignored") for w in warnings), warnings


# --- no VIP: an external load balancer (a public cloud's) ------------------------------------
def test_a_dns_name_is_no_vip_and_the_error_points_at_type_external() -> None:
    errors, _ = _errors(spec_text(NODES, endpoint=("api.example.com", 8443)))
    assert "set cluster.spec.clusterConfig.cluster.loadBalancer.type: external" in errors["cluster.spec.controlPlaneEndpoint.host"]


def test_vrrp_settings_for_an_external_load_balancer_are_warned_about() -> None:
    errors, warnings = _errors(spec_text(NODES, endpoint=("api.example.com", 6443),
                                         cluster={"loadBalancer": {"type": "external", "vrrp": "multicast", "virtualRouterId": 9}}))
    assert not errors
    assert [w for w in warnings if "loadBalancer" in w] == [
        "cluster.spec.clusterConfig.cluster.loadBalancer.virtualRouterId is ignored: BKE runs no keepalived for this endpoint",
        "cluster.spec.clusterConfig.cluster.loadBalancer.vrrp is ignored: BKE runs no keepalived for this endpoint"]


def test_an_external_endpoint_is_not_a_node() -> None:
    errors, _ = _errors(spec_text(NODES, endpoint=("10.7.0.1", 6443), cluster={"loadBalancer": {"type": "external"}}))
    assert "is nodes[0] (m1)" in errors["cluster.spec.clusterConfig.cluster.loadBalancer.type"]


@pytest.mark.parametrize("host", ["api.example.com", "203.0.113.10"])
def test_an_external_load_balancer_endpoint_renders_no_vip_and_everything_points_at_it(host: str) -> None:
    plan = plan_of(spec_text(NODES, endpoint=(host, 6443), cluster={"loadBalancer": {"type": "external"}}))
    assert not plan.load_balancer
    rendered = render(plan, password=None)  # no VRRP password is asked for
    assert not [f.path for n in rendered.nodes for f in n.files if "haproxy" in f.path or "keepalived" in f.path]
    kube_proxy = next(f for f in rendered.addons if "kube-proxy" in f.path).content.decode()
    assert f'server: "https://{host}:6443"' in kube_proxy
    instances = {i.id: i for i in desired_instances(plan)}
    assert host in instances["apiserver@m1"].dns + instances["apiserver@m1"].ips
    assert instances["kubelet.conf@w1"].server == f"https://{host}:6443"
