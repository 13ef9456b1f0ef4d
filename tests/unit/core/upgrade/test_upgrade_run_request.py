"""A run's request, typed (bke.core.upgrade.run_request), in the record's JSON: a record written when
the request was a plain dict loads into its model and saves to the same bytes, and a request the
upgrader makes now is the dict it made then, key for key and in the same order."""
from __future__ import annotations

import json

import pytest

from bke.contracts.upgrade import UpgradeCluster
from bke.core.upgrade.retry import RetryPlan, retry_run
from bke.core.upgrade.run import UpgradeRun
from bke.core.upgrade.run_request import ApplyRequest, UpgradeRequest, wire

from ...upgrade_helpers import SPLIT, plan_of

STEPS = '[{"name":"workers","group":"","drain":true,"batches":[["w1"]],"status":"Pending","batch":0,"stage":"drain",' \
        '"sent":false,"sent_at":0.0,"done":0,"message":""}]'
UPGRADE = ('{"requestId":"u1","cluster":"c1","kubernetesVersion":"1.34.1","etcdVersion":null,"containerdVersion":null,'
           '"ignoreChecks":["AgentsAlive"],"maxUnavailable":"20%","drainTimeoutS":120.0,"renewCertificates":true,'
           '"dryRun":false,"etcdClusters":null,"origin":"cli","planDigest":"' + "a" * 64 + '"}')
RETRY = UPGRADE[:-1] + ',"retryOf":"u0","nodes":["w1"],"addonsDone":true}'
APPLY = ('{"kind":"apply","requestId":"a1","cluster":"c1","spec":"kind: BKECluster\\n","planDigest":"' + "b" * 64
         + '","desiredDigest":"' + "c" * 64 + '","drainTimeoutS":300.0}')


def _record(request: str) -> str:
    """A record as the dict-era upgrader wrote it (json.dumps of the dataclasses' dicts)."""
    return ('{"request_id":"u1","cluster":"c1","current":{"kubernetes":"1.33.2","etcd":"3.5.1","containerd":"2.1.1"},'
            '"target":{"kubernetes":"1.34.1","etcd":"3.5.1","containerd":"2.1.1"},"steps":' + STEPS
            + ',"started_at":"t0","request":' + request + ',"left_out":[],"status":"Running","finished_at":"",'
            '"message":"","failed":[],"agent_version":"","schema_version":1}')


@pytest.mark.parametrize("request_json", [UPGRADE, RETRY, APPLY], ids=["upgrade", "retry", "apply"])
def test_a_stored_record_loads_and_saves_to_the_same_bytes(request_json: str) -> None:
    raw = _record(request_json)
    run = UpgradeRun.from_json(raw)
    assert run.to_json() == raw


def test_each_request_reads_as_its_kind() -> None:
    upgrade = UpgradeRun.from_json(_record(UPGRADE))
    assert isinstance(upgrade.request, UpgradeRequest) and not upgrade.is_apply
    assert upgrade.plan_digest == "a" * 64 and upgrade.drain_timeout_s == 120.0 and upgrade.retry_of == ""
    assert upgrade.request.max_unavailable == "20%" and upgrade.request.ignore_checks == ["AgentsAlive"]
    retry = UpgradeRun.from_json(_record(RETRY))
    assert isinstance(retry.request, UpgradeRequest) and retry.retry_of == "u0" and retry.request.nodes == ["w1"]
    apply = UpgradeRun.from_json(_record(APPLY))
    assert isinstance(apply.request, ApplyRequest) and apply.is_apply and apply.request.spec == "kind: BKECluster\n"
    assert apply.plan_digest == "b" * 64 and apply.request.desired_digest == "c" * 64
    # a record without a request: an older release's `{}`, or `null`
    for empty in ("{}", "null"):
        none = UpgradeRun.from_json(_record(empty))
        assert none.request is None and none.plan_digest == "" and none.drain_timeout_s == 300.0
        assert json.loads(none.to_json())["request"] is None


def test_an_accepted_request_and_its_retry_are_the_dicts_of_before() -> None:
    req = UpgradeCluster(request_id="u1", cluster="c1", kubernetes_version="1.34.1", max_unavailable="20%")
    accepted = UpgradeRequest.accepted(req, "d" * 64)
    dict_era = {**req.model_dump(mode="json", by_alias=True), "planDigest": "d" * 64}
    assert list(wire(accepted).items()) == list(dict_era.items())
    last = UpgradeRun.from_json(_record(json.dumps(dict_era, separators=(",", ":"))))
    assert last.request == accepted
    plan = plan_of(SPLIT)
    retry = RetryPlan(nodes=("w1",), current=last.current, target=last.target, addons=False, covers_all_behind=False)
    run = retry_run(last, plan, retry, "u2", "t1", plan_digest="e" * 64)
    # the retry's dict: the last request's, then what a retry sets, the digest read in place
    dict_era = {**dict_era, "requestId": "u2", "retryOf": "u1", "nodes": ["w1"], "addonsDone": False, "dryRun": False,
                "planDigest": "e" * 64}
    assert list(json.loads(run.to_json())["request"].items()) == list(dict_era.items())


def test_only_an_upgrade_s_run_is_retried() -> None:
    apply = UpgradeRun.from_json(_record(APPLY))
    retry = RetryPlan(nodes=("w1",), current=apply.current, target=apply.target, addons=False, covers_all_behind=False)
    with pytest.raises(ValueError, match="only an upgrade is retried"):
        retry_run(apply, plan_of(SPLIT), retry, "a2", "t1")
