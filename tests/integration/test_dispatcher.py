"""The dispatcher alone on real NATS + Redis: two replicas, a fleet of null agents, leases."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.certs import CERTS_ISSUED, CERTS_SEALED, CertsIssued, CertsSealed
from bke.contracts.render import MANIFESTS_RENDERED, ManifestsRendered
from bke.core.plan import plan_spec_text
from bke.core.secrets.binding import Served
from bke.adapters.state import RedisPlanStore, plan_digest
from bke.adapters.state.keys.renderer import addon_manifests_key
from bke.adapters.state.keys.dispatcher import addons_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.core.state.nodefiles import file_from_bytes
from bke_agent.fleet import Fleet
from bke_agent.settings import AgentSettings
from bke_dispatcher.app import create_service
from bke.adapters.state.lease import claim_lease, release_lease
from bke_dispatcher.settings import DispatcherSettings
from bke_dispatcher.state import DispatcherState
from tests.trust_helpers import deployment_key, provision

pytestmark = pytest.mark.integration


async def test_the_install_lease_is_exclusive_until_released(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    try:
        assert await claim_lease(r, "c", "install", "replica-a", 10_000)
        assert not await claim_lease(r, "c", "install", "replica-b", 10_000)
        assert await claim_lease(r, "c", "install", "replica-a", 10_000)  # the holder renews
        await release_lease(r, "c", "install", "replica-b")  # not the holder: no effect
        assert not await claim_lease(r, "c", "install", "replica-b", 10_000)
        await release_lease(r, "c", "install", "replica-a")
        assert await claim_lease(r, "c", "install", "replica-b", 10_000)
    finally:
        await r.aclose()


BUNDLE = [file_from_bytes("/etc/kubernetes/pki/ca.crt", b"x")]


async def _stored_cluster(r: Redis, name: str, sealed_but: tuple[str, ...] = ()):
    """What the planner, renderer and certs services store for a seed cluster named `name`
    (every node's bundle, except those in `sealed_but`); the plan and its digest."""
    plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", f"name: {name}")).plan
    pj = plan.to_json()
    assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), "req-1", datetime.now(timezone.utc).isoformat())
    files = RedisNodeFiles(r)
    tree = {n.hostname: [file_from_bytes("/etc/kubernetes/manifests/etcd.yaml", b"kind: Pod\n", 0o600)] for n in plan.nodes}
    await files.put_many(name, "render", tree)
    await files.put_many(name, "certs", {h: BUNDLE for h in tree if h not in sealed_but})
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {}, namespace: kube-system}}\ndata: {{}}\n"
    await r.hset(addon_manifests_key(name), mapping={n: cm.format(n) for n in ("rbac", "kube-proxy", "coredns")})
    return plan, plan_digest(pj)


async def _announce(js, name: str, digest: str, nodes: list[str], agents: dict[str, str] | None = None) -> None:
    """The plan event, then what the renderer and certs services say once their files are stored
    (`agents`: node -> the agent id certs sealed to, what the dispatcher believes results from)."""
    await js.publish(PLAN_CREATED, PlanCreated(request_id="req-1", cluster=name, plan_key="k", plan_digest=digest,
                                               nodes=len(nodes), etcd_clusters=["etcd-data"]).to_bytes())
    await js.publish(MANIFESTS_RENDERED, ManifestsRendered(
        request_id="req-1", cluster=name, digest="r", nodes=len(nodes), files=len(nodes), tier="small", template_sets=[],
        plan_digest=digest).to_bytes())
    await js.publish(CERTS_ISSUED, CertsIssued(request_id="req-1", cluster=name, issued=[], reissued=[], reused=0,
                                               changed_nodes=len(nodes), plan_digest=digest).to_bytes())
    await js.publish(CERTS_SEALED, CertsSealed(cluster=name, nodes=sorted(nodes), agents=agents or {}).to_bytes())


async def _null_fleet(nats_client, js, nats_url: str, cluster: str, plan, r: Redis, box) -> Fleet:
    """Null agents that run what the deployment's key signed (the key the dispatcher loads)."""
    base = AgentSettings(cluster=cluster, node="master1", backend="host", nats_url=nats_url, heartbeat_s=0)
    key = (await deployment_key(r, box)).verify_key
    return Fleet.null(nats_client, js, base, [n.hostname for n in plan.nodes], command_key=key)


def _ids(fleet: Fleet) -> dict[str, str]:
    return {n: i.agent_id for n, i in fleet.identities().items()}


async def test_two_replicas_install_once(nats_url, redis_url, redis_client, nats_client, operator_box):
    r = Redis.from_url(redis_url)
    js = nats_client.jetstream()
    await ensure_streams(js)
    replicas = []
    fleet = None
    try:
        plan, digest = await _stored_cluster(r, "twice")
        for owner in ("replica-a", "replica-b"):
            svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner=owner, mode="lab", health_interval_s=0))
            await svc.start()
            replicas.append(svc)
        fleet = await _null_fleet(nats_client, js, nats_url, "twice", plan, r, operator_box)
        await provision(r, "twice", fleet.identities())  # every command is then bound to its agent's key
        async with EventWatch(nats_client, ["bke.v1.install.twice.finished"]) as watch:
            await fleet.start()
            await _announce(js, "twice", digest, [n.hostname for n in plan.nodes], _ids(fleet))
            done = await watch.wait_for(lambda e: True, timeout=60)
        assert done.data["status"] == "Succeeded"
        # node-env x4, certs x4, etcd x3, init x1, join x2, workers x1, health x4: each ran once
        assert fleet.executed == 19 and fleet.replayed == 0
        incarnation = await RedisPlanStore(r).incarnation("twice")
        assert incarnation and {n: loop.served.load() for n, loop in fleet.loops.items()} == {
            n: Served(i.agent_id, incarnation) for n, i in fleet.identities().items()}
        recorded = await r.hgetall(addons_key("twice"))
        assert sorted(recorded) == [b"calico", b"coredns", b"kube-proxy", b"rbac"]  # calico: the lab stand-in
    finally:
        if fleet is not None:
            await fleet.stop(grace=1.0)
        for svc in replicas:
            await svc.stop()
        await r.aclose()


async def test_a_result_before_its_send_record_is_kept_for_later(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    try:
        st = DispatcherState(r)
        cid = "c/etcd/n1/0"
        # the agent answered before the dispatcher recorded the command: not dropped (-1: retry later)
        assert await st.finish_command("c", "etcd", "n1", cid, 0, "Succeeded", "", "", "t") == -1
        await st.mark_sent("c", "etcd", {"n1": {"id": cid, "gen": 0, "status": "Sent", "step": "", "stderr": "", "at": "t"}}, 1, "t")
        assert await st.finish_command("c", "etcd", "n1", cid, 0, "Succeeded", "", "", "t") == 1
        assert await st.finish_command("c", "etcd", "n1", cid, 0, "Succeeded", "", "", "t") == 0  # duplicate
        assert (await st.phase("c", "etcd"))["ok"] == "1"
        # a retry's result (gen 1) before the retry is recorded waits; an old generation is stale
        assert await st.finish_command("c", "etcd", "n1", "c/etcd/n1/1", 1, "Succeeded", "", "", "t") == -1
    finally:
        await r.aclose()


async def test_the_last_answer_of_a_phase_says_every_answer_is_in(redis_url, redis_client):
    """count_results tells, with the counts, whether the phase's answers now add up to its total
    (a failure counts as an answer): the install's loop then goes on at once (results.py)."""
    from bke_dispatcher.state import FinishedCommand

    r = Redis.from_url(redis_url)
    try:
        st = DispatcherState(r)
        await st.set_phase("c", "etcd", total=3)
        sent = {n: {"id": f"c/etcd/{n}/0", "gen": 0, "status": "Sent", "step": "", "stderr": "", "at": "t"}
                for n in ("n1", "n2", "n3")}
        await st.mark_sent("c", "etcd", sent, 3, "t")

        def done(n: str, status: str = "Succeeded") -> FinishedCommand:
            return FinishedCommand(n, f"c/etcd/{n}/0", 0, status, "", "", "t")

        assert await st.count_results("c", "etcd", [done("n1")]) == ([1], False)
        assert await st.count_results("c", "etcd", [done("n1")]) == ([0], False)  # a duplicate adds nothing
        assert await st.count_results("c", "etcd", [done("n2", "Failed"), done("n3")]) == ([1, 1], True)
        assert await st.count_results("c", "other", [done("n1")]) == ([-1], False)  # no total: never all in
    finally:
        await r.aclose()


async def test_malformed_agent_messages_are_dead_lettered_at_once_and_the_queue_goes_on(
        nats_url, redis_url, redis_client, nats_client, caplog):
    """Bytes that are no message of the contract: kept raw in the dead-letter stream with the
    reason, acked (never redelivered), and the next good message is handled."""
    import base64

    from bke.contracts import DeadLettered
    from bke.contracts.agent import CommandRefused, agent_subject

    js = nats_client.jetstream()
    await ensure_streams(js)
    caplog.set_level("WARNING", logger="bke.dispatcher")
    svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="dl", mode="lab", health_interval_s=0))
    await svc.start()
    try:
        async with EventWatch(nats_client, ["bke.v1.deadletter.dispatcher"]) as watch:
            bad_result = b'{"commandId": "x", "status": "Maybe"}'
            await js.publish(agent_subject("dl", "n1", "result"), bad_result)
            await js.publish(agent_subject("dl", "n1", "refused"), b"\xff not json")
            got = [await watch.wait_for(lambda e: e.data["payloadB64"] == base64.b64encode(bad_result).decode(), timeout=15),
                   await watch.wait_for(lambda e: e.data["subject"].endswith(".refused"), timeout=15)]
            for ev in got:
                dl = DeadLettered.model_validate(ev.data)
                assert dl.service == "dispatcher" and dl.deliveries == 1 and dl.reason.startswith("MalformedMessage: malformed")
            assert base64.b64decode(got[1].data["payloadB64"]) == b"\xff not json"
            good = CommandRefused(cluster="dl", node="n1", agent_id="a", command_id="dl/etcd/n1/0", reason="unsigned command",
                                  at=datetime.now(timezone.utc).isoformat())
            await js.publish(agent_subject("dl", "n1", "refused"), good.to_bytes())
            deadline = asyncio.get_running_loop().time() + 15
            while not any("refused command dl/etcd/n1/0: unsigned command" in r.getMessage() for r in caplog.records):
                assert asyncio.get_running_loop().time() < deadline, "the good message after the bad ones was not handled"
                await asyncio.sleep(0.05)  # polling the log with a deadline: a refusal changes no state
        assert len(watch.seen) == 2  # each malformed message once: acked, not redelivered
    finally:
        await svc.stop()


async def test_a_refused_render_fails_the_install_at_once_and_a_retry_asks_the_renderer_again(
        nats_url, redis_url, redis_client, nats_client):
    """No agent, no renderer: the dispatcher alone, told by events. The failure comes before the
    install record (the renderer can be faster than the dispatcher): it still fails the install."""
    from bke.contracts.install import RETRY_INSTALL, RetryInstall
    from bke.contracts.render import RENDER_FAILED, RENDER_MANIFESTS, RenderFailed

    plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: refused")).plan
    r = Redis.from_url(redis_url)
    js = nats_client.jetstream()
    await ensure_streams(js)
    pj = plan.to_json()
    digest = plan_digest(pj)
    assert await RedisPlanStore(r).save(plan, pj, digest, "req-9", datetime.now(timezone.utc).isoformat())
    svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="x", mode="lab", health_interval_s=0))
    await svc.start()
    try:
        async with EventWatch(nats_client, ["bke.v1.install.refused.finished", RENDER_MANIFESTS]) as watch:
            refused = RenderFailed(request_id="req-9", cluster="refused", kind="invalid", plan_digest=digest,
                                   errors=["cluster.spec.etcd.extraArgs.client-cert-auth: refused"])
            await js.publish(RENDER_FAILED, refused.to_bytes())
            done = await watch.wait_for(lambda e: e.subject.endswith(".finished"), timeout=15)
            assert done.data["status"] == "Failed" and done.data["kind"] == "invalid"
            assert done.data["nodesChanged"] is False  # nothing reached a node: the spec may be replaced
            assert done.data["message"] == "renderer: cluster.spec.etcd.extraArgs.client-cert-auth: refused"
            st = DispatcherState(r)
            assert (await st.install("refused"))["status"] == "Failed"
            assert (await st.phase("refused", "agents"))["status"] == "Failed"  # the phase it was in

            await js.publish(RETRY_INSTALL, RetryInstall(request_id="retry-1", cluster="refused").to_bytes())
            asked = await watch.wait_for(lambda e: e.subject == RENDER_MANIFESTS, timeout=15)
            assert asked.data == {"requestId": "retry-1", "cluster": "refused"}
            assert (await st.install("refused"))["status"] == "Running"
            assert (await st.inputs("refused"))["render"]["status"] == "Requested"
            # the renderer's new answer is what counts now
            await js.publish(MANIFESTS_RENDERED, ManifestsRendered(
                request_id="retry-1", cluster="refused", digest="r", nodes=4, files=4, tier="small", template_sets=[],
                plan_digest=digest).to_bytes())
            deadline = asyncio.get_running_loop().time() + 15
            while (await st.inputs("refused"))["render"]["status"] != "Ready":
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)  # polling Redis under a deadline
            assert (await st.install("refused"))["status"] == "Running"  # now waiting for its agents
    finally:
        await svc.stop()
        await r.aclose()


async def test_a_replaced_plan_restarts_an_install_that_failed_before_any_node_changed(
        nats_url, redis_url, redis_client, nats_client):
    from bke.contracts.render import RENDER_FAILED, RenderFailed

    text = open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: again")
    first, second = plan_spec_text(text).plan, plan_spec_text(text.replace("v1.33.2", "v1.33.3")).plan
    r = Redis.from_url(redis_url)
    js = nats_client.jetstream()
    await ensure_streams(js)
    d1, d2 = plan_digest(first.to_json()), plan_digest(second.to_json())
    assert d1 != d2
    await RedisPlanStore(r).save(first, first.to_json(), d1, "req-1", datetime.now(timezone.utc).isoformat())
    svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="x", mode="lab", health_interval_s=0))
    await svc.start()
    st = DispatcherState(r)
    try:
        async with EventWatch(nats_client, ["bke.v1.install.again.>"]) as watch:
            await js.publish(PLAN_CREATED, PlanCreated(request_id="req-1", cluster="again", plan_key="k", plan_digest=d1,
                                                       nodes=4, etcd_clusters=["etcd-data"]).to_bytes())
            await js.publish(RENDER_FAILED, RenderFailed(request_id="req-1", cluster="again", kind="invalid", plan_digest=d1,
                                                         errors=["x: refused"]).to_bytes())
            await watch.wait_for(lambda e: e.subject.endswith(".finished"), timeout=15)
            # the planner replaced the plan (it may: nothing reached a node); its event restarts the install
            store = RedisPlanStore(r)
            assert await store.mark_replaceable("again", d1)
            assert await store.replace(second, second.to_json(), d2, d1, "req-2", datetime.now(timezone.utc).isoformat())
            await js.publish(PLAN_CREATED, PlanCreated(request_id="req-2", cluster="again", plan_key="k", plan_digest=d2,
                                                       nodes=4, etcd_clusters=["etcd-data"]).to_bytes())
            await watch.wait_for(lambda e: e.subject.endswith(".phase") and e.data["requestId"] == "req-2", timeout=15)
        inst = await st.install("again")
        assert inst["requestId"] == "req-2" and inst["planDigest"] == d2 and inst["status"] == "Running"
        assert "render" not in await st.inputs("again")  # the first plan's refusal is forgotten
        # a stale failure about the first plan is ignored
        await js.publish(RENDER_FAILED, RenderFailed(request_id="req-1", cluster="again", kind="invalid", plan_digest=d1,
                                                     errors=["x: refused"]).to_bytes())
        await js.publish(MANIFESTS_RENDERED, ManifestsRendered(
            request_id="req-2", cluster="again", digest="r", nodes=4, files=4, tier="small", template_sets=[],
            plan_digest=d2).to_bytes())
        deadline = asyncio.get_running_loop().time() + 15
        while (await st.inputs("again")).get("render", {}).get("status") != "Ready":
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)  # polling Redis under a deadline
        assert (await st.install("again"))["status"] == "Running"
    finally:
        await svc.stop()
        await r.aclose()


async def test_a_record_about_another_plan_never_replaces_one_about_the_install_plan(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    try:
        st = DispatcherState(r)
        ready_new = {"status": "Ready", "digest": "new", "reason": "", "kind": "operational", "node": None}
        failed_old = {"status": "Failed", "digest": "old", "reason": "x", "kind": "invalid", "node": None}
        assert await st.record_input("c", "render", failed_old, "new")  # nothing stored yet: kept
        assert await st.record_input("c", "render", ready_new, "new")
        assert not await st.record_input("c", "render", failed_old, "new")  # late, about the old plan
        assert (await st.inputs("c"))["render"] == ready_new
        assert await st.record_input("c", "render", {**failed_old, "digest": ""}, "new")  # digest not said: current
    finally:
        await r.aclose()


async def test_a_node_said_sealed_without_a_stored_bundle_gets_no_certificates_command(
        nats_url, redis_url, redis_client, nats_client, caplog, operator_box):
    """`certs.sealed` is believed for the count, never for the files: a node whose bundle is not
    stored is sent nothing until it is (never an empty certificates command)."""
    r = Redis.from_url(redis_url)
    js = nats_client.jetstream()
    await ensure_streams(js)
    caplog.set_level("INFO", logger="bke.dispatcher")
    plan, digest = await _stored_cluster(r, "early", sealed_but=("node1",))
    svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="x", mode="lab", health_interval_s=0))
    await svc.start()
    fleet = await _null_fleet(nats_client, js, nats_url, "early", plan, r, operator_box)
    st = DispatcherState(r)
    nodes = [n.hostname for n in plan.nodes]
    try:
        async with EventWatch(nats_client, ["bke.v1.install.early.finished"]) as watch:
            await fleet.start()
            await _announce(js, "early", digest, nodes, _ids(fleet))  # certs.sealed names node1 too
            deadline = asyncio.get_running_loop().time() + 30
            while not any("no sealed bundle stored for node1" in rec.getMessage() for rec in caplog.records):
                assert asyncio.get_running_loop().time() < deadline, "the missing bundle was never noticed"
                await asyncio.sleep(0.05)  # polling the log under a deadline: the wait has no event
            assert await st.all_commands("early", "certs") == {}  # nobody got a certificates command
            await RedisNodeFiles(r).put_many("early", "certs", {"node1": BUNDLE})
            done = await watch.wait_for(lambda e: True, timeout=60)
        assert done.data["status"] == "Succeeded"
        assert set(await st.all_commands("early", "certs")) == set(nodes)
    finally:
        await fleet.stop(grace=1.0)
        await svc.stop()
        await r.aclose()
