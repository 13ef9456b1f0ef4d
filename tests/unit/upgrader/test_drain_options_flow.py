"""The drain's options from the request to the drainer: left out of a message that names none
(a service of the previous release still reads it), kept in the run or removal record only when
named, handed to every drain; and a batch whose drain failed is uncordoned before its step fails."""
from __future__ import annotations

import json
from types import SimpleNamespace

from bke.contracts.apply import ApplyCluster
from bke.contracts.drain import DrainOptions
from bke.contracts.membership import RemoveNodes
from bke.contracts.upgrade import UpgradeCluster
from bke.contracts.statuses import RunStatus
from bke.core.upgrade.run import StepRun, UpgradeRun
from bke.core.upgrade.run_request import ApplyRequest, UpgradeRequest, wire
from bke_dispatcher.ops.removal.decide import Removal, drain_options, new_removal
from bke_upgrader.batches import drained

FORCED = DrainOptions(force=True, delete_emptydir_data=True)


def _messages(drain: DrainOptions | None) -> list[bytes]:
    return [UpgradeCluster(request_id="r", cluster="c", kubernetes_version="1.37.2", drain=drain).to_bytes(),
            ApplyCluster(request_id="r", cluster="c", spec="x", drain=drain).to_bytes(),
            RemoveNodes(request_id="r", cluster="c", nodes=["w1"], drain=drain).to_bytes()]


def test_a_request_naming_no_drain_options_carries_no_drain_field() -> None:
    for body in _messages(None):
        assert "drain" not in json.loads(body)


def test_named_options_travel_in_kubectls_words_and_read_back() -> None:
    for body in _messages(FORCED):
        assert json.loads(body)["drain"] == {"force": True, "deleteEmptyDirData": True}
    back = UpgradeCluster.model_validate_json(_messages(FORCED)[0])
    assert back.drain == FORCED


def test_an_upgrade_run_hands_its_requests_options_to_the_drain_and_kubectls_defaults_otherwise() -> None:
    def run(request) -> UpgradeRun:
        return UpgradeRun(request_id="r", cluster="c", current={}, target={}, steps=[], started_at="t", request=request)

    assert run(None).drain_options == DrainOptions()
    asked = UpgradeCluster(request_id="r", cluster="c", kubernetes_version="1.37.2", drain=FORCED)
    assert run(UpgradeRequest.accepted(asked, "d")).drain_options == FORCED
    plain = UpgradeCluster(request_id="r", cluster="c", kubernetes_version="1.37.2")
    assert "drain" not in wire(UpgradeRequest.accepted(plain, "d"))  # a record's form unchanged without them
    apply = ApplyRequest(kind="apply", request_id="r", cluster="c", spec="s", plan_digest="a", desired_digest="b",
                         drain_timeout_s=300.0)
    assert "drain" not in wire(apply) and run(apply).drain_options == DrainOptions()
    assert run(apply.model_copy(update={"drain": FORCED})).drain_options == FORCED


def test_a_removal_keeps_named_options_in_its_record_and_none_otherwise() -> None:
    named = new_removal(RemoveNodes(request_id="r", cluster="c", nodes=["w1"], drain=FORCED), "t", [])
    again = Removal.from_json(named.to_json())
    assert drain_options(again) == FORCED
    plain = new_removal(RemoveNodes(request_id="r", cluster="c", nodes=["w1"]), "t", [])
    assert plain.extra == {} and drain_options(plain) == DrainOptions()


class _Drainer:
    def __init__(self, why: str) -> None:
        self.why, self.calls = why, []

    async def cordon_and_drain(self, plan, hosts, timeout_s, options=DrainOptions()) -> str:
        self.calls.append(("drain", list(hosts), options))
        return self.why

    async def uncordon(self, plan, hosts) -> None:
        self.calls.append(("uncordon", list(hosts), None))


async def _drain_batch(why: str) -> tuple[_Drainer, StepRun, bool]:
    drainer = _Drainer(why)
    step = StepRun(name="workers", drain=True, batches=[["w1", "w2"]], status=RunStatus.RUNNING, stage="drain")
    asked = UpgradeCluster(request_id="r", cluster="c", kubernetes_version="1.37.2", drain=FORCED)
    run = UpgradeRun(request_id="r", cluster="c", current={}, target={}, steps=[step], started_at="t",
                     request=UpgradeRequest.accepted(asked, "d"))
    carry = SimpleNamespace(up=SimpleNamespace(api=SimpleNamespace(drainer=drainer)), run=run, old=None, new=None,
                            action="drain")
    ok = await drained(carry, step)  # type: ignore[arg-type]  # the carrier reads only these fields
    return drainer, step, ok


async def test_a_batch_whose_drain_failed_is_uncordoned_and_its_step_fails_naming_why() -> None:
    drainer, step, ok = await _drain_batch("node w1: drain refused, nothing evicted: 1 pod(s) ...")
    assert not ok and step.status == RunStatus.FAILED and "drain refused" in step.message
    assert drainer.calls == [("drain", ["w1", "w2"], FORCED), ("uncordon", ["w1", "w2"], None)]


async def test_a_batch_drained_stays_cordoned_for_its_step() -> None:
    drainer, step, ok = await _drain_batch("")
    assert ok and step.status == RunStatus.RUNNING
    assert drainer.calls == [("drain", ["w1", "w2"], FORCED)]
