"""Every example in examples/, rendered for every supported Kubernetes minor; every Kubernetes API
object in the output validated with kubernetes-validate itself (strict), not only our fast path."""
from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from bke.core.render import RenderInputs, render_cluster
from bke.core.plan import plan_spec_text

from tests.unit.core.render.test_render_support import PASSWORD, versions_for

EXAMPLES = sorted((Path(__file__).resolve().parents[4] / "examples").glob("*.yaml"))
MINORS = ["1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37"]


def _with_versions(text: str, minor: str) -> str:
    docs = list(yaml.safe_load_all(text))
    cfg = docs[0]["spec"]["clusterConfig"]["cluster"]
    v = versions_for(minor)
    cfg.update(kubernetesVersion=v["kubernetes"], etcdVersion=v["etcd"], containerdVersion=v["containerd"])
    for addon in docs[0]["spec"]["clusterConfig"].get("addons", []):
        if addon["name"] == "kube-proxy":
            addon["version"] = v["kubernetes"]
    return yaml.safe_dump_all(docs, sort_keys=False)


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_renders_and_every_api_object_validates_strict(example: Path, minor: str) -> None:
    outcome = plan_spec_text(_with_versions(example.read_text(), minor), str(example))
    assert outcome.plan is not None, outcome.errors
    rendered = render_cluster(outcome.plan, RenderInputs(vrrp_password=PASSWORD))
    objects = []
    for node in rendered.nodes:
        for f in node.files:
            if f.path.endswith(".yaml") and f.path.startswith("/etc/kubernetes/manifests/"):
                objects += [d for d in yaml.safe_load_all(f.content) if d]
    for f in rendered.addons:
        objects += [d for d in yaml.safe_load_all(f.content) if d]
    pods = [o for o in objects if o["kind"] == "Pod"]
    expected_pods = sum(len([c for c in n.components if c not in ("containerd", "kubelet", "kube-proxy")])
                        for n in outcome.plan.nodes)
    assert len(pods) == expected_pods
    assert {o["kind"] for o in objects} >= {"Pod", "DaemonSet", "Deployment", "Service", "ConfigMap", "ClusterRole"}
    for obj in objects:
        assert kubernetes_validate.validate(obj, minor, strict=True) == minor
