"""bke.core.nodemap: a rendered static pod -> a command line runnable on a shared machine."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bke.core.nodemap import NotRunnable, localize_pod

from tests.unit.core.render.test_render_support import golden_spec, plan_of, pod, render

ROOT = Path("/lab/out/e1")


def _etcd() -> dict:
    return pod(render(plan_of(golden_spec("1.35"))), "e1", "etcd.yaml")


def test_paths_go_into_the_node_tree_and_loopback_onto_the_node_address() -> None:
    local = localize_pod(_etcd(), ROOT, "127.0.9.21")
    args = dict(a[2:].split("=", 1) for a in local.argv)
    assert local.binary == "etcd" and local.name == "etcd"
    assert args["cert-file"] == "/lab/out/e1/etc/kubernetes/pki/etcd/server.crt"
    assert args["data-dir"] == "/lab/out/e1/var/lib/etcd"
    # kubeadm-style loopback + node listener: the loopback one moves onto the node address
    # (here not the node's real IP 10.0.0.21, which stays as rendered).
    assert args["listen-client-urls"] == "https://127.0.9.21:2379,https://10.0.0.21:2379"
    assert args["listen-metrics-urls"] == "http://127.0.9.21:2381"
    assert local.health_url == "http://127.0.9.21:2381/readyz" and local.ready_url == "http://127.0.9.21:2381/readyz"
    assert {v.name: v.local_path for v in local.volumes}["etcd-data"] == Path("/lab/out/e1/var/lib/etcd")


def test_a_listener_list_that_collapses_onto_one_address_is_deduplicated() -> None:
    local = localize_pod(_etcd(), ROOT, "10.0.0.21")
    args = dict(a[2:].split("=", 1) for a in local.argv)
    assert args["listen-client-urls"] == "https://10.0.0.21:2379"


def test_the_rendered_manifest_is_not_modified() -> None:
    manifest = _etcd()
    before = yaml.safe_dump(manifest)
    localize_pod(manifest, ROOT, "127.0.9.21")
    assert yaml.safe_dump(manifest) == before


def test_non_path_values_are_left_alone() -> None:
    m = {"metadata": {"name": "x"}, "spec": {"volumes": [{"name": "v", "hostPath": {"path": "/srv/a"}}], "containers": [{
        "name": "x", "command": ["bin", "--o=/events#https://127.0.0.1:1;https://10.1.1.1:2,/pods#https://h:3",
                                 "--p=/etc/other/file", "--q=/data/b/c", "positional", "--ipv6=https://[::1]:5"],
        "volumeMounts": [{"name": "v", "mountPath": "/data"}],
        "livenessProbe": {"httpGet": {"port": "m", "path": "/healthz"}}, "ports": [{"name": "m", "containerPort": 99}]}]}}
    local = localize_pod(m, Path("/r"), "fd00::5")
    assert local.argv == ("--o=/events#https://[fd00::5]:1;https://10.1.1.1:2,/pods#https://h:3", "--p=/etc/other/file",
                          "--q=/r/srv/a/b/c", "positional", "--ipv6=https://[fd00::5]:5")
    assert local.health_url == "http://[fd00::5]:99/healthz"


def test_a_pod_without_a_command_is_not_runnable() -> None:
    haproxy = pod(render(plan_of(golden_spec("1.35"))), "m1", "haproxy.yaml")
    with pytest.raises(NotRunnable, match="haproxy"):
        localize_pod(haproxy, ROOT, "127.0.9.1")
