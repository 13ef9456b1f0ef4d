"""The dispatcher's rotation adapter against the real Redis of the session fixture, called as
plain functions (the bus is the e2e tests' job): a rotation refused while the install is not
Succeeded, one node's command at a time with deterministic ids, results folded in once, a
redelivered `certs renewed` starting nothing new, and a failed node ending it with its reason."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.contracts.agent import AgentCommand, CommandResult, StepResult
from bke.contracts.certs import CertsRenewed, RenewedCertificate
from bke.contracts.rotation import RotationChanged
from bke.core.pki import node_file_refs
from bke.core.plan import plan_spec_text
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.core.state.nodefiles import file_from_bytes
from bke_dispatcher.ops.rotation.run import Rotations, RotationStore
from bke_dispatcher.state import DispatcherState
from tests.trust_helpers import signed, verifier

pytestmark = pytest.mark.integration
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
PLAN = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: rot")).plan


def renewed(rid: str) -> CertsRenewed:
    certs = [RenewedCertificate(name="apiserver", instance=f"apiserver@{h}", nodes=[h], serial="1", not_after="x")
             for h in ("master1", "master2", "master3")]
    return CertsRenewed(request_id=rid, cluster="rot", certificates=certs, at="t")


def result(cmd: AgentCommand, status: str = "Succeeded", stderr: str = "") -> CommandResult:
    step = StepResult(id=cmd.steps[-1].id, status=status, stderr=stderr)
    return CommandResult(command_id=cmd.command_id, cluster=cmd.cluster, node=cmd.node, agent_id="a", status=status,
                         steps=[step], started_at="t", finished_at="t")


@pytest.fixture
async def rotations(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    pj = PLAN.to_json()
    await RedisPlanStore(r).save(PLAN, pj, plan_digest(pj), "req", NOW.isoformat())
    refs = node_file_refs(PLAN)
    await RedisNodeFiles(r).put_many("rot", "certs", {h: [file_from_bytes(f.path, f.path.encode(), f.mode) for f in fs]
                                                       for h, fs in refs.items()})
    sent: list[tuple[str, bytes]] = []
    kicks: list[str] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body))

    state = DispatcherState(r)
    async def sign(cmd: AgentCommand) -> AgentCommand:
        return signed(cmd)

    rot = Rotations(RotationStore(r), state, PlanCache(r), RedisNodeFiles(r), publish, lambda: NOW, "me",
                    kick=kicks.append, sign=sign)
    try:
        yield rot, state, sent, kicks
    finally:
        await r.aclose()


def commands(sent):
    return [AgentCommand.model_validate_json(b) for s, b in sent if s.endswith(".command")]


def changes(sent):
    return [RotationChanged.model_validate_json(b).rotation for s, b in sent if s == "bke.v1.rotation.rot.changed"]


async def test_refused_until_the_install_succeeded(rotations):
    rot, state, sent, _ = rotations
    await state.start_install("rot", "req", NOW.isoformat())  # Running
    await rot.on_renewed(renewed("r1"))
    [view] = changes(sent)
    assert view.status == "Failed" and "the install of rot is Running" in view.message
    assert (await rot.store.rotation_view("rot"))["status"] == "Failed"
    assert (await rot.reconcile("rot")).status == "done" and not commands(sent)


async def test_one_node_at_a_time_then_succeeded_and_a_second_rotation_waits(rotations):
    rot, state, sent, kicks = rotations
    await state.start_install("rot", "req", NOW.isoformat())
    await state.set_install("rot", status="Succeeded")
    await rot.on_renewed(renewed("r1"))
    assert changes(sent)[-1].status == "Running" and kicks == ["rot"]
    await rot.on_renewed(renewed("r1"))  # redelivered: nothing new
    assert len(changes(sent)) == 1
    await rot.on_renewed(renewed("r2"))  # another rotation while r1 runs: refused, r1 untouched
    assert changes(sent)[-1].request_id == "r2" and changes(sent)[-1].message == (
        "certificate rotation r1 of rot is running: one operation per cluster")
    assert (await rot.store.rotation_view("rot"))["requestId"] == "r1"

    for i, host in enumerate(("master1", "master2", "master3")):
        outcome = await rot.reconcile("rot")
        assert outcome.status == "wait"
        cmd = commands(sent)[-1]
        assert (cmd.node, cmd.command_id, len(commands(sent))) == (host, f"rot/rotate@r1/{host}/0", i + 1)
        assert (await rot.reconcile("rot")).status == "wait" and len(commands(sent)) == i + 1  # waits for it
        await rot.on_result(result(cmd))
        await rot.on_result(result(cmd))  # a duplicate result counts once
    assert (await rot.reconcile("rot")).status == "done"
    view = await rot.store.rotation_view("rot")
    assert (view["status"], view["done"], view["total"]) == ("Succeeded", 3, 3) and view["finishedAt"]
    assert all(verifier("rot", c.node).authentic(c) is None for c in commands(sent))  # every one signed
    writes = [s.path for s in commands(sent)[0].steps if s.type == "write_file"]
    assert writes == ["/etc/kubernetes/pki/apiserver.crt", "/etc/kubernetes/pki/apiserver.key"]


async def test_a_failed_node_ends_the_rotation_with_its_reason(rotations):
    rot, state, sent, _ = rotations
    await state.start_install("rot", "req", NOW.isoformat())
    await state.set_install("rot", status="Succeeded")
    await rot.on_renewed(renewed("r1"))
    await rot.reconcile("rot")
    await rot.on_result(result(commands(sent)[-1], "Failed", "connection refused"))
    outcome = await rot.reconcile("rot")
    assert outcome.status == "failed" and "node master1 step health:kube-scheduler: connection refused" in outcome.reason
    view = await rot.store.rotation_view("rot")
    assert view["status"] == "Failed" and [n["status"] for n in view["nodes"]] == ["Failed", "Pending", "Pending"]
    assert len(commands(sent)) == 1
    assert json.loads(sent[-1][1])["rotation"]["message"] == view["message"]


async def test_an_upgrades_renewal_starts_no_rotation(rotations):
    """The upgrader delivers the files of its own renewal in its node steps."""
    rot, state, sent, kicks = rotations
    await state.start_install("rot", "req", NOW.isoformat())
    await state.set_install("rot", status="Succeeded")
    await rot.on_renewed(renewed("upgrade-u1").model_copy(update={"origin": "upgrade"}))
    assert not sent and not kicks and await rot.store.load("rot") is None
