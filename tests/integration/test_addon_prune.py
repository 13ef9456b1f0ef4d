"""An addon's ApplySet on a real kube-apiserver (tests/integration/kube_api.py): what a new
version no longer has is pruned, cluster-scoped and in another namespace than the parent's,
and nothing else is: not the other addons' objects, not an object BKE did not label, not one
labelled for another set. Re-running prunes nothing; an addon applied before BKE kept ApplySets
is adopted (labelled, its parent written) and nothing is pruned that round. Then the addons
phase itself (bke.adapters.cluster_api.addons) with a real Redis: the record names what was
pruned."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from redis.asyncio import Redis

from bke.adapters.cluster_api.addons import AddonsWork
from bke.adapters.cluster_api.apply_k8s import KubernetesApplier, apply_addon
from bke.adapters.state.keys.dispatcher import addons_key
from bke.core.applyset import (
    ADDITIONAL_NAMESPACES, CONTAINS_GROUP_KINDS, ID_LABEL, PART_OF_LABEL, TOOLING, ApplySetError, addon_set,
)
from bke.core.plan import plan_spec_text
from bke.core.render import RenderInputs, render_cluster
from bke.core.secrets import create_key_file, key_file_env
from bke.core.spec.synth import synth_docs
from bke.lab.standins.manifests import LabManifests

from .kube_api import KubeApi

pytestmark = pytest.mark.integration
NS = "addon-ns"  # not the parent's namespace (kube-system): recorded as an additional namespace


def _cm(name: str, ns: str = NS, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns,
                                                                  **({"labels": labels} if labels else {})},
            "data": {"k": name}}


def _cluster_role(name: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}


def _sa(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "kube-system"}}


class Api:
    """The test's own look at the cluster (the `kubernetes` client, as the adapter uses)."""

    def __init__(self, kube: KubeApi) -> None:
        from kubernetes import config, dynamic

        self.raw = config.new_client_from_config_dict(kube.kubeconfig)
        self.dyn = dynamic.DynamicClient(self.raw)

    def get(self, api_version: str, kind: str, name: str, ns: str | None = None) -> dict[str, Any] | None:
        from kubernetes.client import exceptions

        try:
            return self.dyn.resources.get(api_version=api_version, kind=kind).get(name=name, namespace=ns).to_dict()
        except exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def apply_unlabelled(self, obj: dict[str, Any]) -> None:
        resource = self.dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        self.dyn.server_side_apply(resource, body=obj, field_manager="someone-else", force_conflicts=True)

    def exists(self, obj: dict[str, Any]) -> bool:
        m = obj["metadata"]
        return self.get(obj["apiVersion"], obj["kind"], m["name"], m.get("namespace")) is not None


@pytest.fixture(scope="module")
def api(kube_api: KubeApi) -> Any:
    a = Api(kube_api)
    a.apply_unlabelled({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield a
    a.raw.close()


def test_what_version_b_no_longer_has_is_pruned_and_nothing_else(kube_api, api):
    kc = kube_api.kubeconfig
    demo = addon_set("demo")
    sa, settings, legacy_role = _sa("demo"), _cm("settings"), _cluster_role("demo-legacy")
    other_role = _cluster_role("other-reader")
    bystanders = [_cm("not-bkes"),  # no set label: BKE did not create it
                  _cm("elsewhere", labels={PART_OF_LABEL: addon_set("elsewhere").id})]  # another set's
    for b in bystanders:
        api.apply_unlabelled(b)
    assert apply_addon(kc, "other", [other_role]).adopted  # another addon, with a kind demo has too

    first = apply_addon(kc, "demo", [sa, settings, legacy_role])  # version A
    assert first.adopted and first.pruned == ()
    assert api.get("v1", "Secret", demo.name, "kube-system")["metadata"]["labels"][ID_LABEL] == demo.id
    assert api.get("v1", "ConfigMap", "settings", NS)["metadata"]["labels"][PART_OF_LABEL] == demo.id

    b = apply_addon(kc, "demo", [sa, settings])  # version B: the ClusterRole dropped
    assert b.pruned == ("ClusterRole.rbac.authorization.k8s.io/demo-legacy",) and not b.adopted
    assert not api.exists(legacy_role)
    assert all(api.exists(o) for o in [sa, settings, other_role, *bystanders])
    notes = api.get("v1", "Secret", demo.name, "kube-system")["metadata"]["annotations"]
    assert notes[CONTAINS_GROUP_KINDS] == "ConfigMap,ServiceAccount" and notes[ADDITIONAL_NAMESPACES] == NS
    assert notes[TOOLING].startswith("bke/v")

    assert apply_addon(kc, "demo", [sa, settings]).pruned == ()  # B again: nothing left to prune

    c = apply_addon(kc, "demo", [sa])  # and a namespaced one, in a namespace the set recorded
    assert c.pruned == (f"ConfigMap/{NS}/settings",)
    assert not api.exists(settings) and all(api.exists(o) for o in [sa, other_role, *bystanders])
    assert api.get("v1", "Secret", demo.name, "kube-system")["metadata"]["annotations"][ADDITIONAL_NAMESPACES] == ""


def test_an_addon_applied_before_applysets_is_adopted_then_pruned_the_next_time(kube_api, api):
    kc = kube_api.kubeconfig
    keep, dropped, later = _cm("adopt-keep"), _cluster_role("adopt-dropped"), _cm("adopt-later")
    for o in (keep, dropped, later):  # as an older BKE applied them: no label, no parent
        api.apply_unlabelled(o)
    assert api.get("v1", "Secret", addon_set("adopt").name, "kube-system") is None

    first = apply_addon(kc, "adopt", [keep, later])  # its new version has no ClusterRole
    assert first.adopted and first.pruned == ()
    assert api.exists(dropped)  # never labelled, so never the set's: it stays, as the docs say
    assert api.get("v1", "ConfigMap", "adopt-keep", NS)["metadata"]["labels"][PART_OF_LABEL] == addon_set("adopt").id

    again = apply_addon(kc, "adopt", [keep])
    assert not again.adopted and again.pruned == (f"ConfigMap/{NS}/adopt-later",)
    assert api.exists(keep) and api.exists(dropped) and not api.exists(later)


def test_a_parent_not_ours_stops_the_apply_before_anything_changes(kube_api, api):
    foreign = addon_set("foreign")
    api.apply_unlabelled({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": foreign.name, "namespace": "kube-system", "labels": {ID_LABEL: foreign.id},
        "annotations": {TOOLING: "kubectl/v1.36.3", CONTAINS_GROUP_KINDS: "ConfigMap"}}})
    with pytest.raises(ApplySetError, match="managed by 'kubectl/v1.36.3'"):
        apply_addon(kube_api.kubeconfig, "foreign", [_cm("foreign-cm")])
    assert not api.exists(_cm("foreign-cm"))


class _Applier(KubernetesApplier):
    """KubernetesApplier with the test apiserver's kubeconfig in place of the certs service's
    (read from Redis with the `api` at-rest key: tests/integration/test_addons_work.py)."""

    def __init__(self, redis: Redis, kubeconfig: dict[str, Any]) -> None:
        super().__init__(redis)
        self.kubeconfig = kubeconfig

    async def _admin_kubeconfig(self, plan: Any, credential: str = "admin") -> dict[str, Any]:
        return self.kubeconfig


def _plan(folder: Path, version: str) -> Any:
    docs = synth_docs(4, name="prunephase")
    cfg = docs[0]["spec"]["clusterConfig"]
    cfg["cluster"]["cni"] = "none"  # calico's DaemonSet would wait for nodes this apiserver has not
    cfg["addons"] = [{"name": "metrics", "version": version, "path": str(folder)}]
    out = plan_spec_text(yaml.safe_dump_all(docs))
    assert not out.errors, out.errors
    return out.plan


async def test_the_addons_phase_records_what_it_pruned(kube_api, api, redis_url, redis_client, tmp_path, monkeypatch):
    create_key_file(tmp_path / "api.key")
    monkeypatch.setenv(key_file_env("api"), str(tmp_path / "api.key"))
    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        folder = tmp_path / "metrics"
        folder.mkdir()
        (folder / "a.yaml").write_text(yaml.safe_dump_all([_cm("metrics-config"), _cm("metrics-v1-only")]))
        plan = _plan(folder, "1")
        rendered = {f.path.removesuffix(".yaml"): f.content.decode() for f in render_cluster(plan, RenderInputs()).addons}
        work = AddonsWork(r, _Applier(r, kube_api.kubeconfig), lambda: datetime(2026, 12, 1, tzinfo=timezone.utc),
                          LabManifests())
        first = await work.run("addons", plan, rendered)
        assert first.status == "done", first.reason
        recs = {k: json.loads(v) for k, v in (await r.hgetall(addons_key(plan.cluster))).items()}
        assert sorted(recs) == ["coredns", "kube-proxy", "metrics", "rbac"]
        assert all(rec["adopted"] is True and "pruned" not in rec for rec in recs.values())  # a first install
        # the rendered built-ins again: their sets listed kind by kind (DaemonSet.apps,
        # ClusterRoleBinding.rbac.authorization.k8s.io, ...) and nothing of theirs pruned
        for name in ("rbac", "kube-proxy", "coredns"):
            again = apply_addon(kube_api.kubeconfig, name, [d for d in yaml.safe_load_all(rendered[name]) if d])
            assert again.pruned == () and not again.adopted, name

        (folder / "a.yaml").write_text(yaml.safe_dump(_cm("metrics-config")))  # version 2 drops one
        out = await work.run("addons", _plan(folder, "2"), rendered)
        assert out.status == "done", out.reason
        rec = json.loads(await r.hget(addons_key(plan.cluster), "metrics"))
        assert rec["version"] == "2" and rec["pruned"] == [f"ConfigMap/{NS}/metrics-v1-only"] and "adopted" not in rec
        assert not api.exists(_cm("metrics-v1-only")) and api.exists(_cm("metrics-config"))
    finally:
        await r.aclose()


def test_an_object_the_apiserver_refuses_fails_naming_the_field(kube_api, api):
    with pytest.raises(ValueError, match=r"ConfigMap/Not_A_Name: 422 Unprocessable Entity: .*metadata.name: Invalid"):
        apply_addon(kube_api.kubeconfig, "refused", [_cm("Not_A_Name")])
