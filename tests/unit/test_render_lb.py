"""haproxy + keepalived on the masters when the endpoint is a VIP; nothing of it otherwise."""
from __future__ import annotations

import pytest

from bke.render import MissingInputError, generate_vrrp_password
from bke.render.conf_parsers import parse_haproxy, parse_keepalived

from .test_render_support import plan_of, render, spec_text

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
