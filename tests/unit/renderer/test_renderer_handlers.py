"""The renderer's handlers as plain functions: a typed message in, the messages to publish out.
No broker; the stores are small in-memory stand-ins of their protocols."""
from __future__ import annotations

import json

from bke.adapters.bus.handler import Out, parse, typed
from bke.contracts import PlanCreated
from bke.contracts.membership import MembershipEtcdJoin
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_FAILED, ManifestsRendered, RenderFailed, RenderManifests
from bke.core.errors import MalformedMessage
from bke.core.plan import Plan, plan_spec_text
from bke.adapters.state import plan_digest
from bke_renderer.handlers import RendererHandlers

SPEC = open("examples/seed-3m1w.yaml").read()


class Plans:
    def __init__(self, plan):
        self.plan, self.digest = plan, plan_digest(plan.to_json()) if plan else None

    async def load(self, cluster):
        return self.plan

    async def meta(self, cluster):
        return type("Meta", (), {"digest": self.digest})() if self.plan else None


class Store:
    def __init__(self):
        self.saved, self.password = [], None

    async def digest(self, cluster):
        return self.saved[-1].digest if self.saved else None

    async def save(self, rendered):
        self.saved.append(rendered)

    async def load_node(self, cluster, hostname):
        return None

    async def vrrp_password(self, cluster, new):
        self.password = self.password or new()
        return self.password


def _handlers(spec: str = SPEC):
    plan = plan_spec_text(spec).plan
    return RendererHandlers(plans=Plans(plan), store=Store(), publish=None), plan  # type: ignore[arg-type]


async def test_a_plan_is_rendered_and_announced_once_per_digest():
    h, plan = _handlers()
    ev = PlanCreated(request_id="r1", cluster="seed", plan_key="k", plan_digest="pd", nodes=4, etcd_clusters=["etcd-data"])
    (out,) = await h.on_plan(ev)
    assert out.subject == MANIFESTS_RENDERED and isinstance(out.message, ManifestsRendered)
    assert out.message.plan_digest == "pd" and out.message.nodes == 4
    assert out.msg_id == f"rendered:r1:{out.message.digest}"
    (again,) = await h.on_plan(ev)  # a redelivery: same id, nothing stored twice
    assert again.msg_id == out.msg_id and len(h.store.saved) == 1


def _plan_with_etcd_args(args: dict) -> Plan:
    """A plan whose spec carries these etcd extraArgs, built around the planner's own checks (the
    renderer is the second line of defence)."""
    doc = json.loads(plan_spec_text(SPEC).plan.to_json())
    doc["spec"]["cluster"]["spec"]["clusterConfig"]["cluster"]["etcd"]["extraArgs"] = args
    return Plan.model_validate(doc)


async def test_a_refused_flag_is_a_failed_event_of_kind_invalid_with_its_field():
    h = RendererHandlers(plans=Plans(_plan_with_etcd_args({"client-cert-auth": "false"})), store=Store(), publish=None)  # type: ignore[arg-type]
    (out,) = await h.on_plan(PlanCreated(request_id="r2", cluster="seed", plan_key="k", plan_digest="pd", nodes=4,
                                         etcd_clusters=["etcd-data"]))
    assert out.subject == RENDER_FAILED and isinstance(out.message, RenderFailed)
    assert out.message.kind == "invalid" and any("client-cert-auth" in e for e in out.message.errors)


async def test_a_render_request_for_an_unknown_cluster_is_refused_not_raised():
    h = RendererHandlers(plans=Plans(None), store=Store(), publish=None)  # type: ignore[arg-type]
    (out,) = await h.on_render_manifests(RenderManifests(request_id="r3", cluster="ghost"))
    assert out.subject == RENDER_FAILED and "ghost" in out.message.errors[0]


async def test_a_render_request_with_etcd_joins_renders_those_members_as_joins_and_a_bad_list_fails():
    """A join's etcd-only members: rendered with --initial-cluster-state=existing and the given list
    (the seed's master3 stands in for a joining member); a list without the member itself is a
    failed event with the reason (bke.core.render.components.etcd_defaults), never a raise."""
    h, plan = _handlers()
    ec = plan.etcd_cluster("etcd-data")
    assert ec is not None
    initial = ",".join(f"{m.hostname}={m.peer_url}" for m in ec.members)
    join = MembershipEtcdJoin(etcd_cluster="etcd-data", member="master3", initial_cluster=initial)
    (out,) = await h.on_render_manifests(RenderManifests(request_id="join@j1", cluster="seed", etcd_joins=[join]))
    assert out.subject == MANIFESTS_RENDERED, out.message
    etcd = {n.hostname: n.file("/etc/kubernetes/manifests/etcd.yaml") for n in h.store.saved[-1].nodes}
    assert b"--initial-cluster-state=existing" in etcd["master3"].content
    assert b"--initial-cluster-state=new" in etcd["master1"].content  # only the joining member
    bad = join.model_copy(update={"initial_cluster": initial.split(",")[0]})
    (failed,) = await h.on_render_manifests(RenderManifests(request_id="join@j2", cluster="seed", etcd_joins=[bad]))
    assert failed.subject == RENDER_FAILED and "without itself (master3=" in failed.message.errors[0]


async def test_typed_wiring_parses_publishes_in_order_and_refuses_bytes_that_are_no_message():
    sent = []

    async def publish(payload, subject, headers):
        sent.append((subject, headers))

    async def handler(req: RenderManifests) -> list[Out]:
        return [Out(req, "a", "id-1"), Out(req, "b")]

    work = typed(RenderManifests, handler, publish)
    await work(RenderManifests(request_id="x", cluster="c").to_bytes())
    assert sent == [("a", {"Nats-Msg-Id": "id-1"}), ("b", {})]
    try:
        parse(RenderManifests, b'{"requestId": 1}')
    except MalformedMessage as exc:
        assert "malformed RenderManifests" in str(exc) and "cluster" in str(exc)
    else:
        raise AssertionError("bytes that are no message must be MalformedMessage")


async def test_giving_up_on_a_plan_or_a_render_request_is_a_failed_event_for_its_cluster():
    sent = []

    async def publish(payload, subject, headers):
        sent.append((subject, RenderFailed.model_validate_json(payload)))

    h = RendererHandlers(plans=Plans(None), store=Store(), publish=publish)  # type: ignore[arg-type]
    plan_ev = PlanCreated(request_id="r1", cluster="c", plan_key="k", plan_digest="pd", nodes=1, etcd_clusters=[])
    await h.gave_up(plan_ev.to_bytes(), "ConnectionError: store down")
    await h.gave_up(RenderManifests(request_id="r2", cluster="c").to_bytes(), "OSError: disk full")
    assert [(s, f.request_id, f.plan_digest, f.kind) for s, f in sent] == [
        (RENDER_FAILED, "r1", "pd", "operational"), (RENDER_FAILED, "r2", "", "operational")]
    assert sent[0][1].errors == ["the renderer gave up: ConnectionError: store down"]
