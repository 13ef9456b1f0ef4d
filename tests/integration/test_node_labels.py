"""Labels and health of every node, on real Redis and NATS: the node-labels phase's records
(idempotent across a restart, a changed plan re-applied, missing Node objects waited for then
reported), the whole dispatcher's install recording every registered node's labels and every
node's health, `bke.v1.status.get` showing them; and the lab kubelet's own /healthz."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.contracts.status import ClusterStatus
from bke.core.plan import plan_spec_text
from bke.adapters.state.keys.dispatcher import node_labels_key, phase_key
from bke_agent import KubeletStandIn, LabLayout
from bke_cli.status_client import get_status
from bke_dispatcher.app import create_service
from bke.adapters.cluster_api.labels import wanted
from bke.lab.standins.node_labels import LabNodes
from bke.adapters.cluster_api.node_labels import NodeLabelsWork, NodesApplied
from bke_dispatcher.settings import DispatcherSettings

from .agent_helpers import free_node_ip, stop_leftover_pods
from .test_dispatcher import _announce, _ids, _null_fleet, _stored_cluster

pytestmark = pytest.mark.integration
SPLIT = Path("examples/split-etcd.yaml").read_text()


class Clock:
    def __init__(self):
        self.t = datetime(2026, 12, 1, tzinfo=timezone.utc)

    def __call__(self):
        return self.t


class CountingMarker:
    """The lab's marker, counting calls, with nodes that have not registered yet."""

    def __init__(self, unregistered=()):
        self.calls: list[list[str]] = []
        self.unregistered = set(unregistered)

    async def mark(self, plan, batch):
        self.calls.append([n.hostname for n, _, _ in batch])
        got = await LabNodes().mark(plan, [b for b in batch if b[0].hostname not in self.unregistered])
        return NodesApplied(applied=got.applied, missing=sorted(n.hostname for n, _, _ in batch if n.hostname in self.unregistered))


async def test_every_registered_node_recorded_once_and_a_changed_plan_applied_again(redis_url, redis_client):
    plan = plan_spec_text(SPLIT.replace("name: big", "name: lbl")).plan
    r = Redis.from_url(redis_url)
    try:
        marker = CountingMarker()
        work = NodeLabelsWork(r, marker, Clock())
        assert (await work.run("node-labels", plan)).status == "done"
        stored = {k.decode(): json.loads(v) for k, v in (await r.hgetall(node_labels_key(plan.cluster))).items()}
        registered = [n for n in plan.nodes if n.registers]
        assert sorted(stored) == sorted(n.hostname for n in registered)  # etcd-only nodes: none
        assert stored["m4"]["labels"]["node-role.kubernetes.io/controller-manager"] == ""
        assert stored["m4"]["labels"]["node-role.kubernetes.io/scheduler"] == ""
        assert stored["m1"]["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}]
        assert stored["worker1"]["status"] == "Recorded"

        # a restarted dispatcher (a new work object, same Redis) touches nothing again
        again = CountingMarker()
        assert (await NodeLabelsWork(r, again, Clock()).run("node-labels", plan)).status == "done"
        assert again.calls == []

        # the plan changed one node's labels: only that node is applied again, with what was there
        changed = plan.model_copy(update={"nodes": [
            n.model_copy(update={"labels": {**n.labels, "zone": "z1"}}) if n.hostname == "worker2" else n for n in plan.nodes]})
        third = CountingMarker()
        assert (await NodeLabelsWork(r, third, Clock()).run("node-labels", changed)).status == "done"
        assert third.calls == [["worker2"]]
        doc = json.loads(await r.hget(node_labels_key(plan.cluster), "worker2"))
        assert doc["labels"]["zone"] == "z1" and wanted(changed.node("worker2")).label_map == doc["labels"]
    finally:
        await r.aclose()


async def test_missing_node_objects_are_waited_for_then_named_in_the_failure(redis_url, redis_client):
    plan = plan_spec_text(SPLIT.replace("name: big", "name: late")).plan
    r = Redis.from_url(redis_url)
    try:
        clock = Clock()
        marker = CountingMarker(unregistered={"worker3", "worker4"})
        work = NodeLabelsWork(r, marker, clock, register_timeout_s=60)
        out = await work.run("node-labels", plan)
        assert out.status == "wait" and out.reason == "7/9 nodes labelled; waiting for the Node objects of worker3, worker4"
        # the others are recorded already: the next round asks only for the missing two
        clock.t += timedelta(seconds=30)
        assert (await work.run("node-labels", plan)).status == "wait" and marker.calls[-1] == ["worker3", "worker4"]
        clock.t += timedelta(seconds=31)
        failed = await work.run("node-labels", plan)
        assert failed.status == "failed" and failed.node == "worker3"
        assert failed.reason.startswith("2 node(s) never registered within 60s: worker3, worker4")
        # the deadline starts again for a retry
        assert await r.hget(phase_key(plan.cluster, "node-labels"), "waitingSince") is None
        marker.unregistered.clear()
        assert (await work.run("node-labels", plan)).status == "done"
    finally:
        await r.aclose()


async def test_an_install_labels_every_registered_node_and_reports_every_nodes_health(
        nats_url, redis_url, redis_client, nats_client, operator_box):
    r = Redis.from_url(redis_url)
    js = nats_client.jetstream()
    await ensure_streams(js)
    svc = fleet = None
    try:
        plan, digest = await _stored_cluster(r, "labelled")
        svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="l", mode="lab", health_interval_s=0))
        await svc.start()
        fleet = await _null_fleet(nats_client, js, nats_url, "labelled", plan, r, operator_box)
        async with EventWatch(nats_client, ["bke.v1.install.labelled.finished"]) as watch:
            await fleet.start()
            await _announce(js, "labelled", digest, [n.hostname for n in plan.nodes], _ids(fleet))
            done = await watch.wait_for(lambda e: True, timeout=60)
        assert done.data["status"] == "Succeeded"
        doc = await get_status(nats_client, "labelled", "all")
        assert isinstance(doc, ClusterStatus)
        phases = {p.name: p.status for p in doc.phases}
        assert phases["node-labels"] == "Succeeded" and phases["health"] == "Succeeded"
        for n in doc.nodes:
            assert n.labels is not None and n.labels == plan.node(n.hostname).labels, n.hostname
            assert n.health is not None and n.health.status == "Healthy", n.hostname
        assert doc.nodes[-1].labels["node-role.kubernetes.io/worker"] == "worker"
        assert doc.node_health.healthy == len(plan.nodes) == doc.labelled
        assert sum(s.nodes for s in doc.label_sets) == len(plan.nodes)
    finally:
        if fleet is not None:
            await fleet.stop(grace=1.0)
        if svc is not None:
            await svc.stop()
        await r.aclose()


async def _get(url: str) -> httpx.Response | None:
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=2.0) as c:
            return await c.get(url)
    except httpx.HTTPError:
        return None


async def test_the_lab_kubelet_serves_healthz_where_its_config_says(tmp_path):
    root = tmp_path / "hosts" / "w1"
    ip, ports = free_node_ip(1)
    config = root / "var/lib/kubelet/config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(f"kind: KubeletConfiguration\nhealthzBindAddress: 127.0.0.1\nhealthzPort: {ports[0]}\n")
    kubelet = KubeletStandIn(root, ip, poll_s=0.05)
    await kubelet.start()
    try:
        ok = await _get(f"http://{ip}:{ports[0]}/healthz")  # loopback in the config is the node's own address
        assert ok is not None and (ok.status_code, ok.text) == (200, "ok")
        flag = LabLayout(root).unhealthy_file("kubelet")
        flag.write_text("broken on purpose\n")
        bad = await _get(f"http://{ip}:{ports[0]}/healthz")
        assert bad is not None and bad.status_code == 500 and "unhealthy" in bad.text
        flag.unlink()
    finally:
        await kubelet.stop()
        stop_leftover_pods(root)
    assert await _get(f"http://{ip}:{ports[0]}/healthz") is None  # a stopped kubelet answers nothing
    config.write_text("kind: KubeletConfiguration\nhealthzPort: 0\n")  # turned off, as the real kubelet allows
    kubelet = KubeletStandIn(root, ip, poll_s=0.05)
    await kubelet.start()
    try:
        assert kubelet.healthz._server is None
    finally:
        await kubelet.stop()


class RecordedApi:
    """The API's answers, as recorded objects (what k8s_nodes reads on a real cluster)."""

    def __init__(self, nodes, objects):
        self.node_objs, self.objects = nodes, objects

    async def nodes(self, plan):
        return self.node_objs

    async def workload(self, plan, w):
        return self.objects.get(w.ref)


def _node(name, ready):
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


async def test_the_health_phase_waits_for_ready_nodes_and_workloads_then_fails_at_its_deadline(redis_url, redis_client):
    from bke_dispatcher.api_health import ApiHealthWork

    plan = plan_spec_text(Path("examples/seed-3m1w.yaml").read_text()).plan
    ds = {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 4,
                                                    "updatedNumberScheduled": 4, "numberAvailable": 4}}
    dep = {"metadata": {"generation": 1}, "spec": {"replicas": 2},
           "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}}
    api = RecordedApi({h: _node(h, "True") for h in ("master1", "master2", "master3")} | {"node1": _node("node1", "False")},
                      {"daemonset/kube-system/calico-node": ds})
    r = Redis.from_url(redis_url)
    try:
        clock = Clock()
        work = ApiHealthWork(r, api, clock, timeout_s=60)
        out = await work.run("health", plan)
        assert out.status == "wait"
        assert out.reason == "3/4 nodes Ready (not Ready: node1); deployment/kube-system/coredns: not found"
        clock.t += timedelta(seconds=61)
        failed = await work.run("health", plan)
        assert failed.status == "failed" and failed.node == "node1" and failed.reason.startswith("not healthy after 60s: 3/4")
        api.node_objs["node1"] = _node("node1", "True")
        api.objects["deployment/kube-system/coredns"] = dep
        assert (await work.run("health", plan)).status == "done"  # a retry starts a new deadline and passes
        assert (await ApiHealthWork(r, None, clock).run("health", plan)).status == "done"  # the lab: no API to ask
    finally:
        await r.aclose()
