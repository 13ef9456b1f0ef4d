"""Output validation: our fast strict-schema path agrees with kubernetes-validate; our typed models
and checks catch what schemas miss; any finding fails the render."""
from __future__ import annotations

import copy
import random
from typing import Any

import jinja2
import kubernetes_validate
import pytest
import yaml

from bke.core.render import InvalidOutputError
from bke.core.render.gates import resolve_versions
from bke.core.render.checks import check_overrides, hostpath_problems, probe_problems
from bke.core.render.k8s_schema import strict_error, strict_valid
from bke.core.render.params import SchedulerPod
from bke.core.render.templates import template_set
from bke.core.render.validate import VALIDATORS, Expect

from tests.unit.core.render.test_render_support import golden_spec, plan_of, render, spec_text

EXPECT = Expect(k8s_minor="1.33", etcd_overrides=None, endpoint_port=36443, apiserver_ips=("10.0.0.11", "10.0.0.12"))


def _objects(minor: str) -> list[dict[str, Any]]:
    rendered = render(plan_of(golden_spec(minor)))
    objs = [yaml.safe_load(f.content) for n in rendered.nodes for f in n.files if f.path.startswith("/etc/kubernetes/manifests/")]
    return objs + [d for f in rendered.addons for d in yaml.safe_load_all(f.content) if d]


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


def _mutate(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    path = rng.choice(_paths(obj)[1:])
    parent = obj
    for p in path[:-1]:
        parent = parent[p]
    key, value = path[-1], parent[path[-1]]
    kind = rng.choice(["unknown-key", "retype", "delete", "wrap"])
    if kind == "unknown-key" and isinstance(value, dict):
        value["bogusField"] = 1
    elif kind == "delete" and isinstance(parent, dict):
        del parent[key]
    elif kind == "wrap":
        parent[key] = [value] if not isinstance(value, list) else {"x": value}
    else:
        parent[key] = {str: 7, int: "7", bool: "true", float: "1.5"}.get(type(value), 3.5 if isinstance(value, (dict, list)) else None)
    return obj


@pytest.mark.parametrize("minor", ["1.31", "1.37"])
def test_fast_strict_schema_agrees_with_kubernetes_validate(minor: str) -> None:
    rng = random.Random(20261129)
    objs = _objects(minor)
    cases = objs + [_mutate(rng.choice(objs), rng) for _ in range(250)]
    invalid = 0
    for obj in cases:
        try:
            kubernetes_validate.validate(obj, minor, strict=True)
            authority = True
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError):
            authority = False
        except (KeyError, TypeError, AttributeError):  # kind/apiVersion mutated away: no schema lookup possible
            authority = False
        assert strict_valid(obj, minor) == authority, obj
        invalid += not authority
    assert invalid > 100  # the mutations really produce invalid objects


def test_strict_error_reports_kubernetes_validates_message() -> None:
    pod = _objects("1.33")[0]
    pod["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    assert strict_error(pod, "1.33") == "spec.containers.0: Additional properties are not allowed ('imagePulPolicy' was unexpected)"


def test_a_flag_path_without_a_host_mount_fails_the_render() -> None:
    nodes = [("m1", "10.6.0.1", ["master", "etcd"])]
    text = spec_text(nodes, endpoint=None, cluster={"apiServer": {"extraArgs": {"audit-policy-file": "/etc/kubernetes/audit.yaml"}}})
    with pytest.raises(InvalidOutputError) as exc:
        render(plan_of(text))
    (finding,) = exc.value.findings
    assert (finding.node, finding.file) == ("m1", "/etc/kubernetes/manifests/kube-apiserver.yaml")
    assert "--audit-policy-file references /etc/kubernetes/audit.yaml" in finding.message


def test_an_endpoint_port_taken_by_etcd_fails_the_render() -> None:
    nodes = [("m1", "10.6.0.1", ["master", "etcd"])]
    with pytest.raises(InvalidOutputError) as exc:
        render(plan_of(spec_text(nodes, endpoint=("10.6.0.100", 2379))))
    assert [f.check for f in exc.value.findings] == ["ports-unique"]
    assert "port 2379/TCP is used by both pod etcd and pod haproxy" in exc.value.findings[0].message


@pytest.mark.parametrize(("value", "fragment"), [
    ("/registry/events#https://10.0.0.1:2379", "not 'group/resource'"),
    ("/events#https://10.0.0.1:2379,https://10.0.0.2:2379", "is not 'group/resource#url;url'"),
    ("/events#10.0.0.1:2379", "is not scheme://host:port"),
    ("/pods#https://a:1,/pods#https://b:2", "overridden twice"),
])
def test_override_syntax_mistakes(value: str, fragment: str) -> None:
    assert any(fragment in p for p in check_overrides(value))


def test_override_syntax_accepts_upstream_examples() -> None:
    assert check_overrides("/pods#http://etcd4:2379;http://etcd5:2379,/events#http://etcd6:2379") == []
    assert check_overrides("coordination.k8s.io/leases#https://[fd00::1]:2383") == []


def test_probe_on_an_undeclared_port_and_a_missing_volume_are_found() -> None:
    pod = {"spec": {"containers": [{"name": "c", "command": ["x", "--cert=/etc/k/a.crt"],
                                    "ports": [{"containerPort": 80, "name": "http"}],
                                    "livenessProbe": {"httpGet": {"port": 81}}, "readinessProbe": {"httpGet": {"port": "http"}},
                                    "volumeMounts": [{"name": "gone", "mountPath": "/etc/k"}]}]}}
    assert probe_problems(pod) == ["container c: livenessProbe port 81 is not a declared containerPort"]
    assert hostpath_problems(pod) == ["container c: --cert references /etc/k/a.crt, which no hostPath mount covers",
                                      "container c: volumeMount 'gone' has no volume"]


def _file(host: str, path: str) -> str:
    return render(plan_of(golden_spec("1.33"))).node(host).file(path).content.decode()


@pytest.mark.parametrize(("kind", "host", "path", "old", "new", "fragment"), [
    ("containerd-v3", "m1", "/etc/containerd/config.toml", "version = 3", "version = 2", "version"),
    ("containerd-v3", "m1", "/etc/containerd/config.toml", "SystemdCgroup = true", "SystemdCgroup = true\n        Bogus = 1", "Bogus"),
    ("kubelet-config", "m1", "/var/lib/kubelet/config.yaml", 'cgroupDriver: "systemd"', 'cgroupDriver: "sytemd"', "cgroupDriver"),
    ("kubelet-config", "e1", "/var/lib/kubelet/config.yaml", "address: 127.0.0.1", "address: 0.0.0.0", "loopback"),
    ("haproxy-cfg", "m1", "/etc/haproxy/haproxy.cfg", "balance roundrobin", "balance roundrobin\n    bogus 1", "bogus"),
    ("haproxy-cfg", "m1", "/etc/haproxy/haproxy.cfg", "    server m2 10.0.0.12:6443\n", "", "not the kube-apiserver nodes"),
    ("keepalived-conf", "m1", "/etc/keepalived/keepalived.conf", "auth_pass g0ldenPw", "auth_pass g0ldenPw9", "1-8 characters"),
    ("keepalived-conf", "m1", "/etc/keepalived/keepalived.conf", "state MASTER", "state LEADER", "MASTER or BACKUP"),
    ("keepalived-conf", "m1", "/etc/keepalived/keepalived.conf", "unicast_src_ip 10.0.0.11", "unicast_src_ip 10.0.0.12", "own address"),
    ("keepalived-conf", "m1", "/etc/keepalived/keepalived.conf", "        10.0.0.12\n", "        fd00::12\n", "one address family"),
    ("keepalived-conf", "m1", "/etc/keepalived/keepalived.conf", "        10.0.0.12\n", "", "needs a unicast_peer block"),
    ("systemd-unit", "w1", "/etc/systemd/system/kubelet.service", "--node-ip=10.0.0.51", "--node-ip=10.0.0.51 \\\n    --v=2 --v=3", "repeats"),
    ("hosts-toml", "m1", "/etc/containerd/certs.d/docker.io/hosts.toml", "https://mirror.example.com", "mirror.example.com", "URL"),
    ("pod", "m1", "/etc/kubernetes/manifests/kube-scheduler.yaml", "port: 10259", "port: 10258", "not a declared containerPort"),
])
def test_typed_models_reject_broken_files(kind: str, host: str, path: str, old: str, new: str, fragment: str) -> None:
    good = _file(host, path)
    assert VALIDATORS[kind](good, EXPECT)[0] == []
    assert old in good
    problems, _ = VALIDATORS[kind](good.replace(old, new, 1), EXPECT)
    assert any(fragment in p for p in problems), problems


def test_templates_are_strict_about_missing_parameters() -> None:
    ts = template_set(resolve_versions(plan_of(golden_spec("1.33"))))
    with pytest.raises(jinja2.UndefinedError, match="advertise_address"):
        ts.render("k8s/kube-apiserver.yaml.j2", SchedulerPod(image="x", flags=[], port=1, kubeconfig="/k", certificate_names="x"))
