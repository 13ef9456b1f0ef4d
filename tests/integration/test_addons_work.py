"""The addons phase's work (bke.adapters.cluster_api.addons) on a real Redis: the table's order, one
record per addon, the credential per step, the CNI waited ready with a deadline, nothing applied
twice across runs; and the httpRepo source against a real loopback HTTP server."""
from __future__ import annotations

import hashlib
import http.server
import json
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import yaml
from redis.asyncio import Redis

from bke.lab.standins.calico_placeholder import lab_calico_manifest
from bke.core.errors import TemporaryError
from bke.core.plan import plan_spec_text
from bke.core.render import RenderInputs, render_cluster
from bke.core.spec.synth import synth_docs
from bke.adapters.state.keys.renderer import addon_manifests_key
from bke.adapters.state.keys.dispatcher import addons_key
from bke.adapters.cluster_api.addons import STALL_TIMEOUT_S, AddonApplied, AddonsWork
from bke.contracts.statuses import AddonStatus
from bke.lab.standins.addons import LabApplier
from bke.adapters.cluster_api.manifests import HttpRepoManifests, cni_artefact
from bke.lab.standins.manifests import LabManifests

pytestmark = pytest.mark.integration
ORDER = ["rbac", "kube-proxy", "calico", "coredns"]


def _plan(name: str, http_repo: str = "http://127.0.0.1:1", **cluster: Any):
    docs = synth_docs(4, name=name)
    docs[0]["spec"]["clusterConfig"]["cluster"].update({"httpRepo": http_repo, **cluster})
    out = plan_spec_text(yaml.safe_dump_all(docs))
    assert not out.errors, out.errors
    return out.plan


async def _store_rendered(r: Redis, plan) -> None:
    """What the renderer service stores for the addons phase (bke_renderer.store_redis)."""
    rendered = render_cluster(plan, RenderInputs())
    await r.hset(addon_manifests_key(plan.cluster),
                 mapping={f.path.removesuffix(".yaml"): f.content.decode() for f in rendered.addons})


async def _records(r: Redis, cluster: str) -> dict[str, dict]:
    return {k: json.loads(v) for k, v in (await r.hgetall(addons_key(cluster))).items()}


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 12, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.t


class CountingLab(LabApplier):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    async def apply(self, plan, name, objects, credential="admin"):
        self.calls.append((name, credential, len(objects)))
        return await super().apply(plan, name, objects, credential)


class FakeCluster:
    """Stands in for the apiserver (the dispatcher's Applier protocol): records what was applied
    with which credential, and reports calico-node's DaemonSet status as the test sets it."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, str, list[dict]]] = []
        self.ds_status: dict[str, Any] = {}

    async def apply(self, plan, name, objects, credential="admin"):
        self.applied.append((name, credential, objects))
        return AddonApplied(AddonStatus.APPLIED)

    async def workload(self, plan, kind, namespace, name):
        assert (kind, namespace, name) == ("DaemonSet", "kube-system", "calico-node")
        return {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, **self.ds_status}}


async def test_lab_applies_the_table_in_order_once_and_records_it(redis_url, redis_client):
    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        plan = _plan("labaddons")
        applier = CountingLab()
        work = AddonsWork(r, applier, Clock(), LabManifests())
        out = await work.run("addons", plan)
        assert out.status == "wait" and "rendered rbac" in out.reason  # the renderer has not stored them yet
        assert await _records(r, plan.cluster) == {}
        await _store_rendered(r, plan)
        assert (await work.run("addons", plan)).status == "done"
        assert [c[:2] for c in applier.calls] == [("rbac", "super-admin"), ("kube-proxy", "admin"),
                                                  ("calico", "admin"), ("coredns", "admin")]
        recs = await _records(r, plan.cluster)
        assert sorted(recs, key=lambda n: recs[n]["order"]) == ORDER
        assert {n: rec["status"] for n, rec in recs.items()} == dict.fromkeys(ORDER, "Validated")
        assert recs["calico"]["version"] == "3.31.3" and recs["calico"]["objects"] == 7
        assert (await work.run("addons", plan)).status == "done"  # a second run (a restart) applies nothing
        assert len(applier.calls) == 4
    finally:
        await r.aclose()


async def test_switched_off_built_ins_are_neither_applied_nor_recorded(redis_url, redis_client):
    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        plan = _plan("offaddons", cni="none", coreDNS={"enabled": False})
        await _store_rendered(r, plan)
        assert (await AddonsWork(r, LabApplier(), Clock(), LabManifests()).run("addons", plan)).status == "done"
        assert sorted(await _records(r, plan.cluster)) == ["kube-proxy", "rbac"]
    finally:
        await r.aclose()


async def test_real_mode_waits_for_calico_before_coredns_and_fails_at_the_deadline(redis_url, redis_client):
    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        plan = _plan("realaddons", kubeProxy={"mode": "nftables"}, networking={"podSubnet": "10.32.0.0/12"})
        await _store_rendered(r, plan)
        cluster, clock = FakeCluster(), Clock()
        work = AddonsWork(r, cluster, clock, LabManifests())
        cluster.ds_status = {"desiredNumberScheduled": 4, "numberAvailable": 1, "updatedNumberScheduled": 4}
        out = await work.run("addons", plan)
        assert out.status == "wait" and out.reason == "addon calico: DaemonSet kube-system/calico-node: 1/4 pods available, 4/4 updated"
        assert [(n, c) for n, c, _ in cluster.applied] == [("rbac", "super-admin"), ("kube-proxy", "admin"), ("calico", "admin")]
        calico = cluster.applied[2][2]  # what reached the cluster: wired and validated
        node = next(o for o in calico if o["kind"] == "DaemonSet")
        env = {e["name"]: e.get("value") for e in node["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["CALICO_IPV4POOL_CIDR"] == "10.32.0.0/12" and env["FELIX_NFTABLESMODE"] == "Enabled"
        assert (await _records(r, plan.cluster))["calico"]["status"] == "Applied"
        assert "coredns" not in await _records(r, plan.cluster)

        clock.t += timedelta(seconds=30)
        assert (await work.run("addons", plan)).status == "wait"
        assert len(cluster.applied) == 3  # waiting re-applies nothing
        cluster.ds_status["numberAvailable"] = 4
        assert (await work.run("addons", plan)).status == "done"
        recs = await _records(r, plan.cluster)
        assert recs["calico"]["status"] == "Ready" and recs["calico"]["ready"] == "4/4 pods available"
        assert recs["coredns"]["status"] == "Applied" and [n for n, _, _ in cluster.applied][-1] == "coredns"

        # a second cluster whose CNI never becomes ready fails the phase once it has made no
        # progress for the stall deadline...
        plan2 = _plan("stuckaddons")
        await _store_rendered(r, plan2)
        cluster.ds_status = {"desiredNumberScheduled": 4, "numberAvailable": 0, "updatedNumberScheduled": 4}
        assert (await work.run("addons", plan2)).status == "wait"
        clock.t += timedelta(seconds=STALL_TIMEOUT_S - 10)
        assert (await work.run("addons", plan2)).status == "wait"
        clock.t += timedelta(seconds=11)
        out = await work.run("addons", plan2)
        assert out.status == "failed" and "calico-node not ready, no progress for 601s" in out.reason
        assert "0/4 pods available" in out.reason

        # ...while a large cluster's rollout that keeps going waits well past it
        plan3 = _plan("slowaddons")
        await _store_rendered(r, plan3)
        cluster.ds_status = {"desiredNumberScheduled": 4, "numberAvailable": 0, "updatedNumberScheduled": 4}
        assert (await work.run("addons", plan3)).status == "wait"
        for available in (1, 2, 3):
            clock.t += timedelta(seconds=STALL_TIMEOUT_S - 1)
            cluster.ds_status["numberAvailable"] = available
            out = await work.run("addons", plan3)
            assert out.status == "wait" and f"{available}/4 pods available" in out.reason
        clock.t += timedelta(seconds=STALL_TIMEOUT_S - 1)
        cluster.ds_status["numberAvailable"] = 4
        assert (await work.run("addons", plan3)).status == "done"
    finally:
        await r.aclose()


async def test_a_manifest_that_is_not_calico_fails_the_phase_with_its_reason(redis_url, redis_client):
    class NotCalico:
        async def fetch(self, plan, art):
            return b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: kube-system}\n"

    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        plan = _plan("badcni")
        await _store_rendered(r, plan)
        out = await AddonsWork(r, LabApplier(), Clock(), NotCalico()).run("addons", plan)
        assert out.status == "failed" and out.reason.startswith("addon calico 3.31.3: no DaemonSet kube-system/calico-node")
        assert sorted(await _records(r, plan.cluster)) == ["kube-proxy", "rbac"]  # what came before stays recorded
    finally:
        await r.aclose()


class _Repo(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        data = self.files.get(self.path)
        self.send_response(200 if data is not None else 404)
        self.end_headers()
        if data is not None:
            self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def http_repo():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Repo)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Repo.files
    finally:
        server.shutdown()
        server.server_close()
        _Repo.files = {}


async def test_httprepo_source_checks_the_sha256_beside_the_manifest(http_repo):
    url, files = http_repo
    plan = _plan("repo", http_repo=url)
    art = cni_artefact(plan, "3.31.3")
    body = lab_calico_manifest("3.31.3")  # what the bundle's fake upstream serves
    files[f"/{art.path}"] = body
    files[f"/{art.path}.sha256"] = f"{hashlib.sha256(body).hexdigest()}  calico.yaml\n".encode()
    assert await HttpRepoManifests().fetch(plan, art) == body
    files[f"/{art.path}"] = body + b"# tampered\n"
    with pytest.raises(ValueError, match="does not match its .sha256"):
        await HttpRepoManifests().fetch(plan, art)
    del files[f"/{art.path}.sha256"]
    with pytest.raises(ValueError, match=r"calico\.yaml\.sha256 is not in the httpRepo \(404\)"):
        await HttpRepoManifests().fetch(plan, art)
    with pytest.raises(TemporaryError, match="cannot fetch"):  # nothing listens there: try again later
        await HttpRepoManifests().fetch(_plan("norepo", http_repo="http://127.0.0.1:9"), art)


async def test_real_applier_uses_super_admin_for_rbac_only_from_the_store_in_memory(redis_url, redis_client, operator_box,
                                                                                      tmp_path, monkeypatch, capsys):
    """KubernetesApplier's credentials are the ones the certs service writes from its PKI
    (bke.adapters.pki.api_credentials): admin.conf from the init node's bundle, super-admin.conf (on no
    node) from the cluster-wide instance, encrypted at rest; none until certs wrote them."""
    import asyncio

    from bke.core.pki import IssueOptions
    from bke.core.pki.operations import ensure_cluster_pki
    from bke.adapters.pki.store_redis import RedisPkiStore
    from bke_cli.main import main
    from bke.adapters.cluster_api.apply_k8s import KubernetesApplier
    from bke.adapters.pki.api_credentials import write_api_credentials
    from bke.adapters.state.keys.certs import api_credentials_key

    r = Redis.from_url(redis_url)
    try:
        plan = _plan("creds")
        await ensure_cluster_pki(plan, RedisPkiStore(r), datetime.now(timezone.utc), operator_box,
                                 IssueOptions(start_method="fork"))
        applier = KubernetesApplier(r)
        with pytest.raises(TemporaryError, match="no admin kubeconfig for cluster creds yet"):
            await applier._admin_kubeconfig(plan, "admin")  # the PKI alone is not read
        await write_api_credentials(r, plan, RedisPkiStore(r), operator_box, operator_box)
        stored = await r.hgetall(api_credentials_key("creds"))
        assert set(stored) == {b"admin", b"super-admin"}
        assert not any(b"client-key-data" in v or b"PRIVATE KEY" in v for v in stored.values())
        users = {}
        for cred in ("admin", "super-admin"):
            conf = await applier._admin_kubeconfig(plan, cred)
            users[cred] = conf["users"][0]["name"]
            assert conf["clusters"][0]["cluster"]["server"] == f"https://{plan.control_plane_endpoint}"
        assert users == {"admin": "kubernetes-admin", "super-admin": "kubernetes-super-admin"}

        # break-glass from the same store, as an operator with the state's access and the key
        out = tmp_path / "sa.conf"
        monkeypatch.setenv("BKE_REDIS_URL", redis_url)
        code = await asyncio.to_thread(main, ["certs", "kubeconfig", "--cluster", "creds", "--out", str(out)])
        assert code == 0, capsys.readouterr()[1]
        assert yaml.safe_load(out.read_text())["users"][0]["name"] == "kubernetes-super-admin"
        assert oct(out.stat().st_mode & 0o777) == "0o600"
    finally:
        await r.aclose()


@pytest.mark.parametrize("body", [
    b"- just\n- a list\n",
    b"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: calico-node, namespace: kube-system}\nspec: 3\n",
    b"{unclosed",
])
async def test_a_malformed_cni_manifest_fails_the_phase_and_never_raises(redis_url, redis_client, body):
    class Source:
        async def fetch(self, plan, art):
            return body

    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        plan = _plan("malformed")
        await _store_rendered(r, plan)
        out = await AddonsWork(r, LabApplier(), Clock(), Source()).run("addons", plan)
        assert out.status == "failed" and out.reason.startswith("addon calico 3.31.3: ")
    finally:
        await r.aclose()


async def test_the_upgraders_early_rbac_applies_that_addon_alone_and_the_full_run_skips_it(redis_url, redis_client):
    """An upgrade that re-issues a certificate with fewer groups applies the target's `rbac`
    first (bke.core.upgrade.certificates.rbac_before_renewal); the addons step at the end then finds
    it done at that version and applies the others only."""
    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        plan = _plan("earlyrbac", kubernetesVersion="v1.37.0", etcdVersion="v3.6.6")
        await _store_rendered(r, plan)
        applier = CountingLab()
        work = AddonsWork(r, applier, Clock(), LabManifests())
        assert (await work.run("addons", plan, only="rbac")).status == "done"
        assert [c[0] for c in applier.calls] == ["rbac"]
        assert list(await _records(r, plan.cluster)) == ["rbac"]
        assert (await work.run("addons", plan)).status == "done"
        assert [c[0] for c in applier.calls] == ORDER  # rbac once, then the rest
    finally:
        await r.aclose()


@pytest.mark.parametrize("pods,families", [("fd00:10:244::/56", (6,)), ("10.32.0.0/12,fd00:10:244::/56", (4, 6))])
async def test_the_lab_stand_in_goes_through_the_ipv6_wiring(redis_url, redis_client, pods, families):
    """The addons phase's calico step on an IPv6 or dual-stack pod subnet: the lab's stand-in
    fetched, wired (one pool per family, the CNI IPAM's families) and validated, as a real
    calico.yaml would be."""
    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        plan = _plan("v6addons" + str(len(families)), networking={"podSubnet": pods, "serviceSubnet": "10.96.0.0/12"})
        await _store_rendered(r, plan)
        cluster = FakeCluster()
        cluster.ds_status = {"desiredNumberScheduled": 4, "numberAvailable": 4, "updatedNumberScheduled": 4}
        assert (await AddonsWork(r, cluster, Clock(), LabManifests()).run("addons", plan)).status == "done"
        calico = next(objs for name, _, objs in cluster.applied if name == "calico")
        node = next(o for o in calico if o["kind"] == "DaemonSet")
        env = {e["name"]: e.get("value") for e in node["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["CALICO_IPV6POOL_CIDR"] == "fd00:10:244::/56" and env["FELIX_IPV6SUPPORT"] == "true"
        assert ("CALICO_IPV4POOL_CIDR" in env) == (4 in families) and (env.get("IP") == "none") == (4 not in families)
        cm = next(o for o in calico if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "calico-config")
        v4 = "true" if 4 in families else "false"
        assert f'"assign_ipv4": "{v4}", "assign_ipv6": "true"' in cm["data"]["cni_network_config"]
    finally:
        await r.aclose()
