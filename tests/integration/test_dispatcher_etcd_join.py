"""An etcd-only node joined to a running cluster through JoinNodes with `etcdJoins`: the
dispatcher's join adapter (its functions called as the dispatcher's handlers call them), the
renderer service on a real NATS and Redis, and real etcd 3.5.1 members run by the lab's kubelet
stand-ins, each node's commands run by the agent's executor on the node's lab backend.

What is real: the one-member etcd-data the install left on e1 (holding data); the caller's part
around each join (the member added as a learner through e1, promoted after the join: the steps
of `member_sequences`, run by e1's backend); the render requests on the bus and the renderer's
answers; every command a join sends its node (node-env, certs, etcd, health), run in full by the
node's lab backend. What the test plays: the certs service (the new members' certificates from `bke certs issue`, stored
in clear rather than sealed to an agent, and its answer) and the bus between the dispatcher and
the agent (commands handed to the executor, results back to the adapter).

Grown 1 -> 3 (etcd wants an odd size), one member per join, as etcd allows one learner at a
time. For each: the joining member's stored manifest is rendered `--initial-cluster-state=existing`
with exactly the request's `initialCluster`; it starts from it and its etcd phase's /health wait
passes while it is still a learner (see bke_dispatcher.ops.join.decide.phases_of); nothing is sent to any
other node; the join ends Succeeded with no labels to apply. At the end all three are voters and
the data written before is read through each new member."""
from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.lab.standins.checksums import LabChecksums
from bke.contracts.agent import AgentCommand
from bke.contracts.certs import CertsIssued
from bke.contracts.membership import JOIN_NODES_FINISHED, JoinNodes, JoinNodesFinished, MembershipEtcdJoin
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_FAILED, RENDER_MANIFESTS, ManifestsRendered
from bke.core.lifecycle.etcd_members import agent_step, etcd_joins, member_sequences
from bke.core.plan import Plan
from bke.core.render import EtcdJoin, RenderInputs, render_cluster
from bke.adapters.runtime import mtls_context, port_is_free
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.core.state.nodefiles import file_from_bytes
from bke_agent import AgentIdentity, Executor, LabBackend
from bke_cli.main import main as bke
from bke_dispatcher.ops.join.run import Joins, JoinStore
from bke.lab.standins.node_labels import LabNodes
from bke_dispatcher.state import DispatcherState
from bke_renderer.app import create_service
from bke_renderer.settings import RendererSettings
from tests.trust_helpers import signed

from tests.unit.core.render.test_render_support import flags, plan_of, spec_text
from .agent_helpers import stop_leftover_pods
from .test_etcd_members import until

pytestmark = pytest.mark.integration
PORTS = (2379, 2380, 2381, 10248)  # etcd-data's client, peer and metrics ports, the kubelet's healthz
MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
PKI = "/etc/kubernetes/pki/etcd"
KEYS = {f"/registry/configmaps/default/c{i}": f"before-the-join-{i}" for i in range(5)}


@dataclass
class Cluster:
    name: str
    net: int
    current: Plan  # e1 alone: what the install left
    desired: Plan  # e1, e2 and e3: the plan the caller swapped in
    roots: dict[str, Path]
    backends: dict[str, LabBackend]

    def ip(self, host: str) -> str:
        return f"127.0.{self.net}.{10 + int(host[1:])}"

    def url(self, host: str, etcd_cluster: str = "etcd-data") -> str:
        ec = self.desired.etcd_cluster(etcd_cluster)
        assert ec is not None
        return f"https://{self.ip(host)}:{ec.client_port}"

    def tls(self, cert_dir: str = PKI) -> tuple[str, str, str]:
        root = self.roots["e1"]
        return tuple(str(root / f"{cert_dir}/{f}".lstrip("/")) for f in ("ca.crt", "healthcheck-client.crt",
                                                                         "healthcheck-client.key"))  # type: ignore[return-value]


def _free_net(ports: tuple[int, ...] = PORTS) -> int:
    rng = random.Random()
    for _ in range(50):
        net = rng.randint(100, 250)
        if all(port_is_free(f"127.0.{net}.{11 + i}", p) for i in range(3) for p in ports):
            return net
    pytest.skip("no free 127.0.x.0/24 block for three etcd members")


def _cluster(tmp_path: Path, roles: list[str], ports: tuple[int, ...] = PORTS) -> Iterator[Cluster]:
    """e1 installed alone in each etcd cluster its `roles` make it a member of; e2 and e3 (the
    same roles) in the plan the caller swapped in; the three-member plan's PKI on disk."""
    net, name = _free_net(ports), f"j{uuid.uuid4().hex[:10]}"

    def text(hosts: tuple[str, ...]) -> str:
        nodes = [("m1", f"127.0.{net}.1", ["master"])] + [(h, f"127.0.{net}.{10 + int(h[1:])}", roles) for h in hosts]
        return spec_text(nodes, etcd="v3.5.1", endpoint=None).replace("\n  name: t\n", f"\n  name: {name}\n", 1)

    members = ("e1", "e2", "e3")
    (tmp_path / "spec.yaml").write_text(text(members))
    out = tmp_path / "hosts"
    # the PKI of the three-member plan (one CA): e1's serve the installed member, e2's and e3's
    # are what the certs service would issue for the joins
    assert bke(["certs", "issue", str(tmp_path / "spec.yaml"), "--out", str(out), "--procs", "1"]) == 0
    roots = {h: out / h for h in members}
    c = Cluster(name, net, plan_of(text(("e1",))), plan_of(text(members)), roots, {})
    c.backends = {h: LabBackend(roots[h], c.ip(h), kubelet_poll_s=0.1) for h in roots}
    try:
        yield c
    finally:
        for h in roots:
            stop_leftover_pods(roots[h])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from _cluster(tmp_path, ["etcd"])


@pytest.fixture
async def renderer(nats_url: str, redis_url: str, redis_client: Redis):
    svc = create_service(RendererSettings(nats_url=nats_url, redis_url=redis_url, max_deliver=3))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


async def _healthy(http: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await http.get(f"{url}/health")).json().get("health") == "true"
    except (httpx.HTTPError, ValueError):
        return False


async def test_etcd_only_nodes_join_one_learner_at_a_time_with_their_manifests_rendered_existing(
        cluster: Cluster, renderer, nats_client, redis_url: str) -> None:
    await _grow(cluster, nats_client, redis_url)


EVENTS_PORTS = (*PORTS, 2382, 2383, 2384)  # etcd-events' peer, client and metrics ports too


@pytest.fixture
def two_clusters(tmp_path: Path) -> Iterator[Cluster]:
    yield from _cluster(tmp_path, ["etcd", "etcd-event"], EVENTS_PORTS)


async def test_a_node_joins_two_etcd_clusters_in_one_join_started_existing_in_each(
        two_clusters: Cluster, renderer, nats_client, redis_url: str) -> None:
    """e2, then e3, each a member of etcd-data and etcd-events: added as a learner in both (as
    `bke apply` lays it out: bke.core.lifecycle.apply_run._member_steps), one JoinNodes naming its
    start in both, each manifest rendered `existing` with that cluster's list, both learners
    answering the etcd phase's /health wait, then promoted in each."""
    await _grow(two_clusters, nats_client, redis_url)


async def _grow(c: Cluster, nats_client: Any, redis_url: str) -> None:
    """e1 alone in each of its etcd clusters, holding data; e2 then e3 added to all of them,
    each by one join: a learner in each cluster first, the join, then promoted in each and
    every member healthy."""
    now = datetime.now(timezone.utc)
    e1 = c.backends["e1"]
    r = Redis.from_url(redis_url)
    ecs = {ec.name: ec for ec in c.desired.etcd_clusters}
    clients = {n: httpx.AsyncClient(verify=mtls_context(*c.tls(ec.cert_dir)), trust_env=False, timeout=3.0)
               for n, ec in ecs.items()}
    try:
        # the installed cluster: e1 alone in each etcd cluster, holding data
        installed = render_cluster(c.current, RenderInputs()).node("e1")
        for ec in ecs.values():
            first = installed.file(f"/etc/kubernetes/manifests/{ec.manifest}")
            assert first is not None
            dest = c.roots["e1"] / f"etc/kubernetes/manifests/{ec.manifest}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(first.content)
        await e1.kubelet.start()
        for n, http in clients.items():
            await until(lambda n=n, http=http: _healthy(http, c.url("e1", n)), 60, f"e1 healthy in {n}")
            for k, v in KEYS.items():
                resp = await http.post(f"{c.url('e1', n)}/v3/kv/put", json={"key": _b64(k), "value": _b64(v)})
                assert resp.status_code == 200, resp.text

        # the caller (bke apply's run) swapped in the plan that names e2 and e3
        pj = c.desired.to_json()
        digest = plan_digest(pj)
        await RedisPlanStore(r).save(c.desired, pj, digest, f"req-{c.name}", now.isoformat())
        state = DispatcherState(r)
        await state.start_install(c.name, f"req-{c.name}", now.isoformat(), digest)
        await state.set_install(c.name, status="Succeeded")
        seqs = {q.etcd_cluster: q for q in member_sequences(c.current, c.desired)}
        assert sorted(seqs) == sorted(ecs)
        for seq in seqs.values():
            assert [(s.kind, s.member) for s in seq.steps] == [
                (k, m) for m in ("e2", "e3") for k in ("add-learner", "start-member", "promote", "check-health")]
        joins_of: dict[str, list[EtcdJoin]] = {}
        for j in etcd_joins(c.current, c.desired):
            joins_of.setdefault(j.member, []).append(j)
        for j in joins_of["e3"]:
            port = ecs[j.etcd_cluster].peer_port
            assert j.initial_cluster == ",".join(f"{h}=https://{c.ip(h)}:{port}" for h in ("e1", "e2", "e3"))

        # the dispatcher: the render request goes on the bus, everything else is recorded
        sent: list[tuple[str, bytes]] = []
        js = nats_client.jetstream()

        async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
            sent.append((subject, body))
            if subject == RENDER_MANIFESTS:
                await js.publish(subject, body, headers=headers or None)

        async def idle(cluster: str) -> None:
            return None

        async def not_paused(cluster: str) -> bool:
            return False

        async def sign(cmd: AgentCommand) -> AgentCommand:
            return signed(cmd)

        store = JoinStore(r)
        joins = Joins(store, state, PlanCache(r), RedisNodeFiles(r), LabChecksums(), LabNodes(), idle, not_paused,
                      publish, lambda: now, "me", sign=sign)
        for i, member in enumerate(("e2", "e3"), 1):
            for n, ec in ecs.items():  # a learner in each etcd cluster (etcd allows one at a time in each)
                step = agent_step(seqs[n].steps[4 * (i - 1)], ec)
                assert step is not None and (await e1.execute(step, lambda: b"")).status == "Succeeded"
            await _join(c, joins, state, r, nats_client, sent, f"j{i}", digest, member, joins_of[member], clients)
            for n, ec in ecs.items():
                _, _, promote, check = seqs[n].steps[4 * (i - 1): 4 * i]
                step = agent_step(promote, ec, promote_timeout_s=60)
                assert step is not None and (await e1.execute(step, lambda: b"")).status == "Succeeded"
                for h in check.healthy:
                    await until(lambda h=h, n=n: _healthy(clients[n], c.url(h, n)), 60, f"{h} healthy in {n}")

        for n, http in clients.items():
            members = (await http.post(f"{c.url('e1', n)}/v3/cluster/member/list", json={})).json()["members"]
            assert sorted(m["name"] for m in members) == ["e1", "e2", "e3"] and not any(m.get("isLearner") for m in members)
            for h in ("e2", "e3"):  # the data written before, read through each new member (linearizable)
                for k, v in KEYS.items():
                    kvs = (await http.post(f"{c.url(h, n)}/v3/kv/range", json={"key": _b64(k)})).json().get("kvs") or []
                    assert kvs and base64.b64decode(kvs[0]["value"]).decode() == v, (n, h, k)
        # the joins sent commands to the joining nodes only, each its four phases
        nodes = [AgentCommand.model_validate_json(b).node for s, b in sent if s.endswith(".command")]
        assert nodes == ["e2"] * 4 + ["e3"] * 4
    finally:
        for http in clients.values():
            await http.aclose()
        for b in c.backends.values():
            await b.stop()
        await r.aclose()


async def _join(c: Cluster, joins: Joins, state: DispatcherState, r: Redis, nats_client: Any,
                sent: list[tuple[str, bytes]], rid: str, digest: str, member: str, etcd: list[EtcdJoin],
                clients: dict[str, httpx.AsyncClient]) -> None:
    """One JoinNodes for `member` (already a learner in each etcd cluster of `etcd`), run to its end."""
    req = JoinNodes(request_id=rid, cluster=c.name, plan_digest=digest, nodes=[member], etcd_joins=[
        MembershipEtcdJoin(etcd_cluster=j.etcd_cluster, member=member, initial_cluster=j.initial_cluster) for j in etcd])
    async with EventWatch(nats_client, [MANIFESTS_RENDERED, RENDER_FAILED]) as watch:
        assert await joins.on_request(req) == []
        assert (await joins.reconcile(c.name)).status == "wait"  # asked the renderer and the certs service
        ev = await watch.wait_for(lambda e: e.data.get("requestId") == f"join@{rid}", timeout=30)
    assert ev.subject == MANIFESTS_RENDERED, ev.data
    assert await joins.rendered(ManifestsRendered.model_validate(ev.data))  # as the dispatcher's handler does

    # what the renderer stored for the member: a join of each running cluster, with the request's list
    stored = {f.path: base64.b64decode(f.content_b64 or "") for f in await RedisNodeFiles(r).get(c.name, "render", member)}
    manifests = {}
    for j in etcd:
        ec = c.desired.etcd_cluster(j.etcd_cluster)
        assert ec is not None
        manifests[ec.manifest] = stored[f"/etc/kubernetes/manifests/{ec.manifest}"]
        etcd_flags = flags(yaml.safe_load(manifests[ec.manifest]))
        assert etcd_flags["initial-cluster-state"] == "existing"
        assert etcd_flags["initial-cluster"] == j.initial_cluster

    # the certs service's part: the member's bundle stored and said sealed
    root = c.roots[member]
    bundle = [file_from_bytes("/" + str(p.relative_to(root)), p.read_bytes(), 0o600)
              for p in sorted((root / "etc/kubernetes/pki").rglob("*")) if p.is_file()]
    await RedisNodeFiles(r).put_many(c.name, "certs", {member: bundle})
    assert await joins.certs_issued(CertsIssued(request_id=f"join@{rid}", cluster=c.name, issued=[], reissued=[],
                                                reused=len(bundle), changed_nodes=1, plan_digest=digest))
    await state.add_sealed(c.name, [member])

    # each command the join sends, run by the member's agent executor on its lab backend
    executor, done, phases = Executor(c.backends[member], AgentIdentity.ephemeral()), set(), []
    for _ in range(10):
        out = await joins.reconcile(c.name)
        new = [cmd for cmd in (AgentCommand.model_validate_json(b) for s, b in sent if s.endswith(".command"))
               if f"/join@{rid}/" in cmd.command_id and cmd.command_id not in done]
        if not new:
            break
        [cmd] = new
        done.add(cmd.command_id)
        phases.append(cmd.phase)
        if cmd.phase == "health":  # the etcd phase passed its /health waits while the members are learners
            for n in (j.etcd_cluster for j in etcd):
                members = (await clients[n].post(f"{c.url('e1', n)}/v3/cluster/member/list", json={})).json()["members"]
                assert {m["name"]: bool(m.get("isLearner")) for m in members}[member] is True, n
        result = await executor.run(cmd)
        assert result.status == "Succeeded", result.model_dump_json(indent=1)
        await joins.on_result(result)
    assert out.status == "done", out
    assert phases == ["node-env", "certs", "etcd", "health"]
    [fin] = [f for f in (JoinNodesFinished.model_validate_json(b) for s, b in sent if s == JOIN_NODES_FINISHED)
             if f.request_id == rid]
    assert fin.status == "Succeeded" and [(n.hostname, n.status) for n in fin.nodes] == [(member, "Succeeded")], fin
    assert not await r.hexists(f"bke:{c.name}:node-labels", member)  # registers no Node: nothing to label
    for name, manifest in manifests.items():  # what its kubelet runs is the stored manifest
        assert (root / f"etc/kubernetes/manifests/{name}").read_bytes() == manifest
