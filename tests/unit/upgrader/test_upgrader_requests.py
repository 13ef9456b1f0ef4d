"""The upgrader's request decision (bke_upgrader.requests) and each step's node commands
(bke.core.upgrade.node_commands): pure functions of the plans, renders and facts."""
from __future__ import annotations

import base64
from datetime import datetime, timezone

import pytest

from bke.contracts.agent_steps import CheckHost, ReplaceFiles, WaitHealth
from bke.contracts.upgrade import UpgradeAccepted, UpgradeCluster, UpgradeRejected
from bke.core.render import RenderInputs, render_cluster
from bke.core.upgrade import Facts, resolve_target
from bke.core.upgrade.node_commands import changed_files, node_upgrade_steps
from bke.core.upgrade.target_plan import target_plan
from bke_upgrader.requests import decide_request, parse_request

from ..upgrade_helpers import SEED, SPLIT, plan_of

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def _facts(plan, healthy=True) -> Facts:
    return Facts(now=NOW, healthy=healthy, health_reason="" if healthy else "2 node(s) unhealthy",
                 agents_alive=frozenset(n.hostname for n in plan.nodes))


def _req(**kw) -> UpgradeCluster:
    return UpgradeCluster(**{"request_id": "r1", "cluster": "big", "kubernetes_version": "1.34.1", **kw})


def test_an_upgrade_one_minor_up_is_accepted_with_its_steps():
    p = plan_of(SPLIT)
    d = decide_request(_req(cluster=p.cluster, etcd_version="3.5.21"), p, _facts(p))
    assert isinstance(d.answer, UpgradeAccepted), d.answer
    assert d.answer.current.kubernetes == "1.33.2" and d.answer.target.kubernetes == "1.34.1"
    assert [s.name for s in d.answer.steps][:3] == ["pre-checks", "agents", "etcd-snapshots"]
    assert {s.group for s in d.answer.steps if s.name == "etcd"} == {c.name for c in p.etcd_clusters}
    assert d.new_plan is not None and d.new_plan.kubernetes_version == "v1.34.1"


@pytest.mark.parametrize("kw, check, words", [
    ({"kubernetes_version": "1.35.0"}, "KubernetesOneMinor", "minor"),
    ({"kubernetes_version": "1.32.5"}, "KubernetesNoDowngrade", "downgrade"),
    ({"etcd_clusters": ["etcd-data"]}, "SplitUnchanged", "never turns a non-split cluster into a split one"),
])
def test_refusals_name_their_check(kw, check, words):
    p = plan_of(SPLIT)
    d = decide_request(_req(cluster=p.cluster, **kw), p, _facts(p))
    assert isinstance(d.answer, UpgradeRejected)
    assert check in [f.name for f in d.answer.findings], d.answer
    assert words in d.answer.message


def test_non_split_to_split_is_refused():
    p = plan_of(SEED)
    d = decide_request(_req(cluster=p.cluster, etcd_clusters=["etcd-data", "etcd-events"]), p, _facts(p))
    assert isinstance(d.answer, UpgradeRejected) and "SplitUnchanged" in d.answer.message


def test_an_unhealthy_cluster_is_refused_and_the_reason_says_why():
    p = plan_of(SEED)
    d = decide_request(_req(cluster=p.cluster), p, _facts(p, healthy=False))
    assert isinstance(d.answer, UpgradeRejected) and "ClusterHealthy" in d.answer.message
    assert "2 node(s) unhealthy" in d.answer.message


def test_a_malformed_request_is_answered_naming_its_field():
    rej = parse_request(b'{"requestId": "r9", "cluster": "c", "kubernetesVersion": "one.two"}')
    assert isinstance(rej, UpgradeRejected) and rej.request_id == "r9" and rej.cluster == "c"
    assert rej.message.startswith("kubernetesVersion:"), rej.message
    assert isinstance(parse_request(b"[[[["), UpgradeRejected)


def _renders(p, to="1.34.1", etcd="3.5.21"):
    new = target_plan(p, resolve_target(p, to, etcd))
    inputs = RenderInputs(vrrp_password="x" * 8)
    old_r, new_r = render_cluster(p, inputs), render_cluster(new, inputs)
    old = {n.hostname: {f.path: f for f in n.files} for n in old_r.nodes}
    newf = {n.hostname: {f.path: f for f in n.files} for n in new_r.nodes}
    return new, old, newf


def test_each_step_replaces_only_its_components_files_with_a_probe():
    p = plan_of(SPLIT)
    new, old, newf = _renders(p, etcd="3.5.21")
    master = p.nodes_running("kube-apiserver")[0].hostname
    sums = {}

    def steps(step, group="", host=master):
        return node_upgrade_steps(step, group, p, new, host, old[host], newf[host], sums)

    (api,) = steps("kube-apiserver")
    assert isinstance(api, ReplaceFiles) and [f.path for f in api.files] == ["/etc/kubernetes/manifests/kube-apiserver.yaml"]
    assert base64.b64decode(api.files[0].content_b64 or "") == newf[master][api.files[0].path].content
    assert [pr.url for pr in api.probes] == ["https://127.0.0.1:6443/livez"] and api.rollback
    member = next(n for n in p.nodes if "etcd-events" in n.components)
    (ev,) = steps("etcd", "etcd-events", member.hostname)
    assert isinstance(ev, ReplaceFiles) and len(ev.files) == 1 and ev.files[0].path.endswith("etcd-events.yaml")
    assert ev.probes[0].url.endswith("/health") and ev.probes[0].expect_body == '"health":"true"'
    assert isinstance(steps("agents")[0], CheckHost)
    post = steps("post-checks")
    assert all(isinstance(s, WaitHealth) for s in post) and any("6443" in s.url for s in post)  # type: ignore[union-attr]


def test_a_component_that_does_not_change_is_only_checked_healthy():
    p = plan_of(SPLIT)
    new, old, newf = _renders(p, etcd="3.5.1")  # etcd unchanged
    member = next(n for n in p.nodes if "etcd-events" in n.components).hostname
    out = node_upgrade_steps("etcd", "etcd-events", p, new, member, old[member], newf[member], {})
    assert out and all(isinstance(s, WaitHealth) for s in out)
    assert changed_files(old[member], old[member]) == []


def test_the_runtime_step_carries_changed_binaries_and_configs_and_restarts_both_units():
    p = plan_of(SEED)
    new, old, newf = _renders(p)
    worker = next(n for n in p.nodes if "kube-apiserver" not in n.components).hostname
    from bke.adapters.checksums import artefact_urls

    sums = {u: "0" * 64 for u in artefact_urls(new)}
    (rt,) = node_upgrade_steps("workers", "", p, new, worker, old[worker], newf[worker], sums)
    assert isinstance(rt, ReplaceFiles) and rt.restart_units == ["containerd.service", "kubelet.service"]
    urls = [f.url for f in rt.files if f.url]
    assert any("/kubernetes/1.34.1/" in u and u.endswith("/kubelet") for u in urls), urls
    assert not any("containerd" in u for u in urls)  # containerd's version did not change
    assert all("/1.33.2/" not in u for u in urls)


def test_a_batchs_binaries_memo_gives_each_node_what_it_gets_without_one():
    """One memo per batch (operation._send): every node's runtime step is the one it gets alone,
    and the memo holds one entry per kind of node (arch, registers), not one per node."""
    p = plan_of(SEED)
    new, old, newf = _renders(p)
    from bke.adapters.checksums import artefact_urls

    sums = {u: "0" * 64 for u in artefact_urls(new)}
    memo: dict = {}
    for n in p.nodes:
        h = n.hostname
        alone = node_upgrade_steps("masters-runtime", "", p, new, h, old[h], newf[h], sums)
        shared = node_upgrade_steps("masters-runtime", "", p, new, h, old[h], newf[h], sums, binaries_memo=memo)
        assert shared == alone, h
    assert len(memo) == len({(n.arch, n.registers) for n in p.nodes})


def test_the_target_plan_spells_each_version_as_the_user_did():
    """After an upgrade the stored plan is compared with the user's spec (`bke apply`): each target
    version keeps the current one's "v", so the next apply of the same spec sees no version change."""
    p = plan_of(SPLIT)
    assert p.etcd_version.startswith("v") and p.containerd_version.startswith("v")
    new = target_plan(p, resolve_target(p, "1.34.1", "3.5.21"))
    assert (new.kubernetes_version, new.etcd_version) == ("v1.34.1", "v3.5.21")
    assert new.containerd_version == p.containerd_version
    # kube-proxy and CoreDNS were listed at the release's own versions: they move with it
    addons = {a.name: a.version for a in new.spec.cluster.spec.cluster_config.addons}
    assert addons == {"kube-proxy": "v1.34.1", "coredns": "v1.12.1"}, addons
