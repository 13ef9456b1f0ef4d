"""Shared builders for the renderer tests (specs, plans, parsed pods), plus tests of the builders.

GOLDEN_NODES is the split-etcd node set every golden test renders: two masters behind a VIP,
one member each of etcd-data, etcd-events and etcd-pods, one worker.
"""
from __future__ import annotations

import copy
from typing import Any

import yaml

from bke.core.plan import Plan, build_plan, plan_spec_text
from bke.core.render import RenderedCluster, RenderInputs, render_cluster
from bke.core.spec import load_spec
from bke.core.versions import KUBERNETES

__all__ = ["GOLDEN_NODES", "PASSWORD", "flags", "golden_spec", "plan_of", "plan_unchecked", "pod", "render", "spec_text",
           "versions_for"]

PASSWORD = "g0ldenPw"
GOLDEN_NODES: list[tuple[str, str, list[str]]] = [
    ("m1", "10.0.0.11", ["master"]),
    ("m2", "10.0.0.12", ["master"]),
    ("e1", "10.0.0.21", ["etcd"]),
    ("ev1", "10.0.0.31", ["etcd-event"]),
    ("p1", "10.0.0.41", ["etcd-pod"]),
    ("w1", "10.0.0.51", ["node"]),
]


def spec_text(nodes: list[tuple[str, str, list[str]]], *, kubernetes: str = "v1.33.2", etcd: str = "v3.5.21",
              containerd: str = "v2.1.1", endpoint: tuple[str, int] | None = ("10.0.0.100", 36443),
              cluster: dict[str, Any] | None = None, node_extra: dict[str, dict[str, Any]] | None = None,
              addons: list[dict[str, Any]] | None = None) -> str:
    """A spec; endpoint None = the first node's address on 6443 (no VIP)."""
    host, port = endpoint or (nodes[0][1], 6443)
    cfg: dict[str, Any] = {"kubernetesVersion": kubernetes, "etcdVersion": etcd, "containerdVersion": containerd,
                           "certificates": {"keyAlgorithm": "ECDSA-P256"}}
    cfg.update(copy.deepcopy(cluster or {}))
    docs: list[dict[str, Any]] = [{
        "apiVersion": "bke.bocloud.com/v1beta1", "kind": "BKECluster", "metadata": {"name": "t"},
        "spec": {"controlPlaneEndpoint": {"host": host, "port": port},
                 "clusterConfig": {"cluster": cfg, **({"addons": addons} if addons is not None else {})}},
    }]
    for h, ip, roles in nodes:
        spec: dict[str, Any] = {"hostname": h, "ip": ip, "role": roles}
        spec.update(copy.deepcopy((node_extra or {}).get(h, {})))
        docs.append({"apiVersion": "bke.bocloud.com/v1beta1", "kind": "BKENode", "metadata": {"name": f"t-{h}"}, "spec": spec})
    return yaml.safe_dump_all(docs, sort_keys=False)


def plan_of(text: str) -> Plan:
    out = plan_spec_text(text, "test")
    assert out.plan is not None, [str(e) for e in out.errors]
    return out.plan


def plan_unchecked(text: str) -> Plan:
    """A plan built without semantic validation: what the renderer's own checks (its second line
    of defence behind `validate_spec`) must still refuse."""
    loaded = load_spec(text, "test")
    assert loaded.spec is not None, [str(e) for e in loaded.errors]
    return build_plan(loaded.spec)


def render(plan: Plan, password: str | None = PASSWORD) -> RenderedCluster:
    return render_cluster(plan, RenderInputs(vrrp_password=password if plan.load_balancer else None))


def versions_for(minor: str) -> dict[str, str]:
    """Upstream pairing for a minor: its etcd; containerd 1.7 up to 1.32, then 2.x."""
    containerd = "v1.7.22" if minor in ("1.31", "1.32") else "v2.1.1"
    return {"kubernetes": f"v{minor}.0", "etcd": f"v{KUBERNETES[minor].etcd}", "containerd": containerd}


def golden_spec(minor: str) -> str:
    runtime = {"registryMirrors": {"docker.io": ["https://mirror.example.com"]}, "insecureRegistries": ["registry.local:5000"]}
    return spec_text(GOLDEN_NODES, **versions_for(minor), cluster={"containerRuntime": runtime})


def pod(rendered: RenderedCluster, host: str, name: str) -> dict[str, Any]:
    f = rendered.node(host).file(f"/etc/kubernetes/manifests/{name}")
    assert f is not None, f"{host} has no {name}"
    return yaml.safe_load(f.content)


def flags(manifest: dict[str, Any]) -> dict[str, str]:
    out = {}
    for arg in manifest["spec"]["containers"][0]["command"][1:]:
        name, _, value = arg[2:].partition("=")
        assert name not in out, f"--{name} twice"
        out[name] = value
    return out


def test_golden_spec_places_every_component_once_per_role() -> None:
    plan = plan_of(golden_spec("1.33"))
    assert plan.load_balancer
    assert [c.name for c in plan.etcd_clusters] == ["etcd-data", "etcd-events", "etcd-pods"]
    assert [n.hostname for n in plan.nodes_running("kube-apiserver")] == ["m1", "m2"]
    assert not plan.node("e1").registers and plan.node("w1").registers


def test_versions_for_pairs_each_minor_with_its_etcd() -> None:
    assert versions_for("1.34")["etcd"].startswith("v3.6") and versions_for("1.31")["containerd"].startswith("v1.7")
